"""Fused (compiled) recurrence steps compute what the eager reference computes (models/fast/fusion.py)."""
from __future__ import annotations

import pytest
import torch

from devtools.launches import count_launches, enable_inductor_kernel_profile
from nmtkit.errors import ConfigError
from nmtkit.models import build_model
from nmtkit.models.fast import fusion
from nmtkit.train.config import TrainConfig
from tests.conftest import TINY, random_batch

# at collection, before any test compiles: generated kernels then show up in the profiler
enable_inductor_kernel_profile()

needs_compiler = pytest.mark.skipif(not fusion.fusion_available("cpu")[0],
                                    reason="no C++ compiler: torch.compile cannot fuse on this CPU")


@pytest.mark.slow  # compiles the training step bodies: ~40 s on a cold cache
@needs_compiler
def test_fused_rnnsearch_step_gives_the_eager_loss_and_gradients():
    """One compilation (dynamic shapes) serves several batch and sentence sizes, T = 1 included,
    and equals the eager step bodies in float32 to rounding."""
    torch.manual_seed(0)
    model = build_model("rnnsearch", dict(TINY["rnnsearch"], init="default")).float()
    for tgt_lens in [(4, 1, 3, 2), (0, 0, 0, 0), (6, 2, 5, 3)]:
        src, src_lens, tgt_in, tgt_out, _ = random_batch(tgt_lens=tgt_lens)
        results = []
        for fuse in (False, True):
            m = model.with_fused_steps(fuse)
            loss, _, _ = m.loss(src, src_lens, tgt_in, tgt_out)
            loss.backward()
            results.append((loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters()
                                            if p.grad is not None}))
        (l0, g0), (l1, g1) = results
        torch.testing.assert_close(l1, l0, rtol=1e-5, atol=1e-5)
        assert g0.keys() == g1.keys() and len(g0) > 10
        for name in g0:
            torch.testing.assert_close(g1[name], g0[name], rtol=1e-4, atol=1e-5, msg=name)


def test_fuse_auto_and_off_mean_unfused_and_on_means_fused(monkeypatch):
    assert fusion.resolve_fuse("off", torch.device("cpu")) is False
    assert fusion.resolve_fuse("auto", torch.device("cpu")) is False
    monkeypatch.setattr(fusion, "fusion_available", lambda device_type: (True, ""))
    cuda = torch.device("cuda")  # only its type is read
    assert fusion.resolve_fuse("auto", cuda) is False  # measured: no faster on a GPU, and it compiles
    assert fusion.resolve_fuse("on", cuda) is True
    assert fusion.resolve_fuse("on", torch.device("cpu")) is True
    assert fusion.resolve_fuse("off", cuda) is False


def test_fuse_on_without_a_compiler_is_a_one_line_config_error(monkeypatch):
    monkeypatch.setattr(fusion.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="--fuse on: no C\\+\\+ compiler"):
        fusion.resolve_fuse("on", torch.device("cpu"))


def test_unknown_fuse_mode_is_rejected_by_the_train_config():
    with pytest.raises(ConfigError, match="--fuse must be one of auto, on, off"):
        TrainConfig(fuse="always", max_updates=1)


@pytest.mark.slow  # compiles the training step bodies: ~40 s on a cold cache
@needs_compiler
def test_fused_training_step_launches_a_fraction_of_the_eager_ops():
    """docs/design.md, section 10: with fused step bodies a training step launches at most a quarter of the
    eager step's ops (counted as devtools/launches.py counts them)."""
    torch.manual_seed(0)
    model = build_model("rnnsearch", dict(TINY["rnnsearch"], init="default")).float()
    src, src_lens, tgt_in, tgt_out, _ = random_batch(src_lens=(7, 5, 6, 3), tgt_lens=(9, 4, 8, 6))

    def step(m):
        m.zero_grad(set_to_none=True)
        loss, _, _ = m.loss(src, src_lens, tgt_in, tgt_out)
        loss.backward()

    counts = {}
    for fuse in (False, True):
        m = model.with_fused_steps(fuse)
        step(m)  # compiles (fused) before counting
        counts[fuse] = count_launches(step, m)[0].total
    assert counts[True] * 4 <= counts[False], counts
    assert counts[True] > 20, counts  # the generated kernels are counted too


@pytest.mark.slow  # compiles the decoding step: ~100 s on a cold cache
@needs_compiler
def test_fused_beam_search_finds_the_eager_hypotheses():
    """The whole decoding step compiled (Seq2Seq.step with fuse_steps, the deep output's body
    inlined into it) finds the same hypotheses as the eager step."""
    from nmtkit.decode.search import beam_search

    torch.manual_seed(0)
    model = build_model("rnnsearch", dict(TINY["rnnsearch"], init="default")).float().eval()
    src, src_lens, _, _, _ = random_batch()
    hyps = {}
    for fuse in (False, True):
        with torch.no_grad():
            hyps[fuse] = beam_search(model.with_fused_steps(fuse), src, src_lens, beam=3, max_len_a=1.0,
                                     max_len_b=4)
    for a, b in zip(hyps[False], hyps[True]):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert a[0].score == pytest.approx(b[0].score, rel=1e-4, abs=1e-5)


def test_translate_and_serve_refuse_an_unknown_fuse_mode():
    from nmtkit.translate import TranslateConfig

    with pytest.raises(ConfigError, match="--fuse must be one of auto, on, off"):
        TranslateConfig(models=("m.pt",), fuse="sometimes").validate()


@pytest.mark.slow  # compiles the bf16 training step bodies: ~25 s on a cold cache
@needs_compiler
def test_fused_step_under_bf16_autocast_keeps_every_gradient_finite():
    """bf16 makes ties in the maxout frequent; the compiled deep output's backward must still be
    sound (inductor's amax backward gave NaN there) and agree with the eager bf16 step."""
    torch.manual_seed(0)
    cfg = dict(TINY["rnnsearch"], src_vocab_size=300, tgt_vocab_size=300, emb_dim=32, enc_hidden=32,
               dec_hidden=32, att_hidden=32, maxout=16, init="paper")
    model = build_model("rnnsearch", cfg)
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(4, 300, (8, 9), generator=g), torch.randint(4, 300, (8, 7), generator=g)
    grads = {}
    for fuse in (False, True):
        m = model.with_fused_steps(fuse)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _, _ = m.loss(src, torch.full((8,), 9), tgt, tgt)
        loss.backward()
        grads[fuse] = {n: p.grad for n, p in m.named_parameters() if p.grad is not None}
        assert all(torch.isfinite(t).all() for t in grads[fuse].values()), fuse
    for name, t in grads[False].items():
        torch.testing.assert_close(grads[True][name], t, rtol=0.1, atol=1e-3, msg=name)


@pytest.mark.slow  # about 100 s of CPU, nearly all of it compiling the ~30 graphs
@needs_compiler
def test_fused_training_over_every_shape_case_stays_within_the_graph_bound(tmp_path):
    """200 fused updates over batches of every size (one-pair batches of over-budget pairs, the
    epoch's short last batches), T == S and T != S, two loss chunks or more per batch and dev loss
    plus dev BLEU (beam) every 50 updates: the run completes, and no step body compiles more than
    fusion.MAX_GRAPHS_PER_BODY graphs (dynamo's cache entries per body; its limit is 8)."""
    import torch._dynamo

    from tests.conftest import (
        make_data_dir,
        make_varied_pairs,
        records,
        tiny_options,
        tiny_overrides,
        train_run,
    )

    torch._dynamo.reset()  # count this run's graphs only
    pairs = {"train": make_varied_pairs(200, 1, n_long=3), "valid": make_varied_pairs(13, 2)}
    data = make_data_dir(tmp_path / "data", pairs=pairs)
    opts = tiny_options(max_updates=200, valid_every=50, save_every=1000, log_every=50, max_tokens=40,
                        batch_size=None, loss_chunk_tokens=24, fuse="on", max_len=30, valid_bleu_samples=13,
                        valid_batch_size=4, valid_beam=2)
    result = train_run(data, tmp_path / "run", opts, tiny_overrides())
    assert result.update == 200
    assert [r["update"] for r in records(tmp_path / "run", "valid")] == [50, 100, 150, 200]
    graphs = {body.__qualname__: fusion.graphs_compiled(body) for body in fusion.compiled_bodies()}
    assert {"_fwd_step", "_bwd_step", "_forward_step", "_backward_step", "_lce_rows"} <= graphs.keys(), graphs
    assert max(graphs.values()) <= fusion.MAX_GRAPHS_PER_BODY, graphs


@needs_compiler
def test_a_body_at_the_recompile_limit_runs_eager_with_one_warning(caplog):
    import torch._dynamo

    def body(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.tanh(a) * b + 1

    fused = fusion.step_fn(body, True)
    outs = []
    # config.patch, not monkeypatch: undoing a monkeypatch deletes the option from dynamo's
    # config module (torch 2.13), and every later compile in the process then fails
    with caplog.at_level("WARNING"), torch._dynamo.config.patch(recompile_limit=1):
        for rows in (3, 1, 5, 1, 2, 1, 1):  # a one-row batch specialises: a second graph, over the limit
            a, b = torch.randn(rows, 4), torch.randn(rows, 4)
            outs.append((fused(a, b), body(a, b)))
    for got, want in outs:
        torch.testing.assert_close(got, want)
    warnings = [r for r in caplog.records if "recompile limit" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    # nor does dynamo warn again at each later call over the limit (a run on a GPU logged
    # its recompile-limit warning 12,000 times)
    dynamo = [r for r in caplog.records if r.name.startswith("torch._dynamo") and "recompile_limit" in r.getMessage()]
    assert len(dynamo) <= 1, [r.getMessage() for r in dynamo]
    assert fusion.graphs_compiled(body) == 1


@needs_compiler
def test_host_reads_are_counted_through_fused_bodies_without_breaking_them(caplog):
    # a TorchFunctionMode routes Tensor methods through Python under dynamo: the counting mode
    # of the host-read tests must not make a body untraceable (Tensor.unflatten was)
    import torch._dynamo

    from devtools.launches import HostReads
    from nmtkit.models.fast.rnnsearch import maxout_of_sum

    torch._dynamo.reset()  # graphs of earlier tests would count towards the recompile limit
    a, b, c = (torch.randn(3, 5, 8) for _ in range(3))
    with caplog.at_level("WARNING", logger="nmtkit.models.fast.fusion"), HostReads() as reads:
        got = fusion.step_fn(maxout_of_sum, True)(a, b, c)
    torch.testing.assert_close(got, maxout_of_sum(a, b, c))
    assert reads.count == 0
    assert not [r for r in caplog.records if "cannot be compiled" in r.getMessage()]
    assert fusion.graphs_compiled(maxout_of_sum) >= 1


def _data_dependent(a: torch.Tensor) -> torch.Tensor:
    return a * 2 if a.sum().item() > 0 else a - 1  # control flow on a value: no single graph


def _python_method_under_a_mode(a: torch.Tensor) -> torch.Tensor:
    return a.unflatten(-1, (-1, 1)).squeeze(-1) + 1  # Tensor.unflatten's super() call, under HostReads


@needs_compiler
@pytest.mark.parametrize("body", [_data_dependent, _python_method_under_a_mode])
def test_a_body_that_cannot_be_compiled_runs_eager_with_one_warning(body, caplog):
    from devtools.launches import HostReads

    fused = fusion.step_fn(body, True)
    with caplog.at_level("WARNING", logger="nmtkit.models.fast.fusion"), HostReads():
        for x in (torch.ones(3), -torch.ones(2), torch.ones(4)):
            torch.testing.assert_close(fused(x), body(x))
    warnings = [r.getMessage() for r in caplog.records if "cannot be compiled" in r.getMessage()]
    assert len(warnings) == 1 and body.__name__ in warnings[0], [r.getMessage() for r in caplog.records]
