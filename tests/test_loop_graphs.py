"""--cuda-graphs: the recurrence's loops through models/fast/fusion.py, checked on the CPU.

On a CPU `LoopGraphs` replays a loop by calling it on the arena's views instead of a CUDA graph,
so everything but the capture itself runs here: the padding of batch, target and source to
buckets, the arena shared by all shapes, the copies in and out. tests/test_cuda.py checks real
graphs against eager training on a GPU.
"""
from __future__ import annotations

import pytest
import torch

from nmtkit.errors import ConfigError
from nmtkit.models import build_model
from nmtkit.models.fast.fusion import BUCKET, LoopGraphs, bucket, loop_graphs, resolve_cuda_graphs
from nmtkit.models.fast.recurrence import bahdanau_recurrence
from tests.conftest import TINY, random_batch


def _inputs(B, T, S, lens, d=4, na=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    leaf = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_()  # noqa: E731
    mask = torch.zeros(B, S, dtype=torch.bool)
    for b, n in enumerate(lens):
        mask[b, :n] = True
    return (leaf(B, T, 3 * d), leaf(B, d), leaf(B, S, na), leaf(B, S, 3 * d), mask, leaf(na + 2 * d, d),
            leaf(na), leaf(d, d))


def _run(graphs, uses, B=3, T=5, S=7, lens=(7, 4, 2)):
    args = _inputs(B, T, S, lens)
    states, alphas = bahdanau_recurrence(*args, graphs=graphs)
    g = torch.Generator().manual_seed(2)
    loss = 0
    if "states" in uses:
        loss = loss + (states * torch.randn(states.shape, generator=g, dtype=states.dtype)).sum()
    if "alphas" in uses:
        loss = loss + (alphas * torch.randn(alphas.shape, generator=g, dtype=alphas.dtype)).sum()
    loss.backward()
    return states.detach(), alphas.detach(), [a.grad for a in args if a.dtype != torch.bool]


@pytest.mark.parametrize("uses", [("states", "alphas"), ("states",), ("alphas",)])
def test_graphed_recurrence_over_padded_shapes_gives_the_eager_outputs_and_gradients(uses):
    # B = 3, T = 5, S = 7 all pad up to 8: padded rows, steps and source positions must change
    # nothing, and a loss that reads only the states or only the weights leaves the other's
    # gradient None (the padding then feeds zeros)
    eager, graphed = _run(False, uses), _run(True, uses)
    assert graphed[0].shape == eager[0].shape == (3, 6, 4) and graphed[1].shape == eager[1].shape == (3, 5, 7)
    for a, b in zip(eager[:2], graphed[:2]):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
    for a, b in zip(eager[2], graphed[2]):
        assert b.shape == a.shape
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)


def test_an_rnnsearch_model_with_graph_loops_has_the_eager_loss_and_gradients():
    torch.manual_seed(0)
    model = build_model("rnnsearch", dict(TINY["rnnsearch"], dropout=0.0)).double()
    src, src_lens, tgt_in, tgt_out, _ = random_batch()
    grads = []
    for graphs in (False, True):
        model.zero_grad()
        model.graph_loops = graphs
        loss, _, _ = model.loss(src, src_lens, tgt_in, tgt_out)
        loss.backward()
        grads.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-12, atol=0)
    for name, g in grads[0][1].items():
        torch.testing.assert_close(grads[1][1][name], g, rtol=1e-10, atol=1e-12, msg=name)


def _double(x, y):
    return (x * 2, y + 1)


def test_loop_graphs_capture_once_per_shape_and_share_one_arena_that_grows():
    runner = LoopGraphs(torch.device("cpu"))
    a, b = torch.arange(6.0).reshape(2, 3), torch.ones(4, dtype=torch.float64)
    out1 = runner.run("double", _double, (a, b))
    out2 = runner.run("double", _double, (a + 1, b))
    assert runner.captures == 1 and len(runner.entries) == 1
    torch.testing.assert_close(out2[0], (a + 1) * 2)
    # the results are the caller's: the next call, which rewrites the arena, leaves them alone
    runner.run("double", _double, (a * 0, b * 0))
    torch.testing.assert_close(out1[0], a * 2)
    torch.testing.assert_close(out2[1], b + 1)
    assert all(o.untyped_storage().data_ptr() != runner.arena.untyped_storage().data_ptr() for o in out2)
    # another key or another shape: another graph, in the same arena
    runner.run("other", _double, (a, b))
    assert runner.captures == 2 and len(runner.entries) == 2
    # a shape larger than the arena grows it and drops the graphs made for the old one
    small = runner.arena.numel()
    big = torch.ones(64, 64)
    out = runner.run("double", _double, (big, b))
    assert runner.arena.numel() > small and len(runner.entries) == 1
    torch.testing.assert_close(out[0], big * 2)
    out = runner.run("double", _double, (a, b))  # captured again for the new arena
    torch.testing.assert_close(out[0], a * 2)
    assert runner.captures == 4


def test_padding_buckets_bound_the_graphs_of_a_run_with_varied_lengths():
    runner = loop_graphs(torch.device("cpu"))
    runner.clear()
    lengths = range(1, 2 * BUCKET + 1)  # 16 target lengths, 2 buckets
    for T in lengths:  # the arena grows to the largest shape (dropping the graphs made before)
        _run(True, ("states", "alphas"), B=3, T=T, S=7)
    counts = []
    for _ in range(2):
        before = runner.captures
        for T in reversed(lengths):
            _run(True, ("states", "alphas"), B=3, T=T, S=7)
        counts.append(runner.captures - before)
    assert len(runner.entries) == 2 * 2  # forward and backward per bucket
    assert counts[1] == 0, "a pass over lengths seen before captured new graphs"
    assert [bucket(n) for n in (1, 8, 9, 16, 17)] == [8, 8, 16, 16, 24]


def test_cuda_graphs_on_is_refused_where_it_cannot_run_and_auto_is_off_there():
    search = build_model("rnnsearch", TINY["rnnsearch"])
    encdec = build_model("rnnencdec", TINY["rnnencdec"])
    cpu = torch.device("cpu")
    with pytest.raises(ConfigError, match="--cuda-graphs on: needs a CUDA device"):
        resolve_cuda_graphs("on", cpu, search)
    with pytest.raises(ConfigError, match="RNNEncDec has no graphed loop"):
        resolve_cuda_graphs("on", torch.device("cuda"), encdec)
    assert not resolve_cuda_graphs("auto", cpu, search)
    assert not resolve_cuda_graphs("auto", torch.device("cuda"), encdec)
    assert resolve_cuda_graphs("auto", torch.device("cuda"), search)
    assert not resolve_cuda_graphs("off", torch.device("cuda"), search)


def test_train_with_cuda_graphs_on_a_cpu_is_one_error_line_and_writes_nothing(data_dir, tmp_path):
    from tests.conftest import run_cli, tiny_train_args

    run = tmp_path / "run"
    res = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *tiny_train_args(), "--max-updates", "2",
                   "--cuda-graphs", "on"])
    assert res.code != 0 and "Traceback" not in res.err
    errors = [ln for ln in res.err.splitlines() if "error" in ln]
    assert errors == ["nmtkit: error: --cuda-graphs on: needs a CUDA device (training runs on cpu)"], res.err
    assert not run.exists() or not any(run.iterdir()), sorted(p.name for p in run.iterdir())


def test_a_capture_that_fails_leaves_the_loops_eager_with_one_warning(caplog):
    runner = LoopGraphs(torch.device("cpu"))
    runner.eager = False  # as on CUDA, with the capture itself failing (an out-of-memory error)
    runner._eager_first = lambda fn, inputs: tuple(fn(*inputs))

    def capture_fails(fn, ins, outv):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    runner._record = capture_fails
    a, b = torch.arange(6.0).reshape(2, 3), torch.ones(4)
    with caplog.at_level("WARNING", logger="nmtkit.models.fast.fusion"):
        outs = [runner.run("double", _double, (a * k, b)) for k in range(3)]
    for k, out in enumerate(outs):
        torch.testing.assert_close(out[0], a * k * 2)
        torch.testing.assert_close(out[1], b + 1)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "OutOfMemoryError: CUDA out of memory" in warnings[0], warnings
    assert runner.entries == {} and runner.arena is None and runner.captures == 0


@pytest.mark.parametrize("update_freq", [1, 2])
def test_training_with_graph_loops_gives_the_eager_runs_weights(data_dir, tmp_path, monkeypatch, update_freq):
    # the whole training path (padding, chunked loss, gradient accumulation, a validation between
    # updates) with the CPU stand-in for the graphs: the same weights as the eager run, up to
    # rounding (padded batches change the products' shapes)
    from nmtkit.checkpoint import load_checkpoint
    from nmtkit.train import context
    from nmtkit.train.presets import ModelOverrides
    from tests.conftest import TINY_MODEL, tiny_options, train_run

    runner = loop_graphs(torch.device("cpu"))
    runner.clear()  # graphs of earlier tests would serve this run without a capture
    opts = tiny_options(max_updates=8, valid_every=4, save_every=4, valid_bleu_samples=0, optimizer="sgd", lr=0.5,
                        update_freq=update_freq)
    sizes = ModelOverrides(**dict(TINY_MODEL, dropout=0.0))
    train_run(data_dir, tmp_path / "eager", opts, sizes)
    before = runner.captures
    monkeypatch.setattr(context, "resolve_cuda_graphs", lambda mode, device, model: True)
    train_run(data_dir, tmp_path / "graphs", opts, sizes)
    assert runner.captures > before, "the run did not go through the graph loops"
    a = load_checkpoint(tmp_path / "eager" / "checkpoint_last.pt")["model_state"]
    b = load_checkpoint(tmp_path / "graphs" / "checkpoint_last.pt")["model_state"]
    for name, tensor in a.items():
        torch.testing.assert_close(b[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
