"""Two CPU processes with gloo (as torchrun would start them) stay in sync and match one process."""
from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp

from tests.conftest import TINY_MODEL, child_pids, make_data_dir, tiny_options, tiny_overrides

UPDATES = 6


RANKS_DEADLINE_S = 300


def _start_ranks(fn, args) -> None:
    """Run `fn(rank, *args)` in two fresh interpreters, as torchrun would start them: each rank has
    its own process state, RNGs and gloo group. Fresh interpreters, not forks of a process that has
    imported torch: a fork inherits torch's thread pools mid-state and can hang on a lock that no
    thread will release. Ranks still running after RANKS_DEADLINE_S are killed and fail the test.
    """
    import time

    ctx = mp.start_processes(fn, args=args, nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + RANKS_DEADLINE_S
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"the two ranks were still running after {RANKS_DEADLINE_S} s")


def _as_rank(rank: int, world: int, port: int) -> None:
    """Make this process rank `rank` of `world`, as torchrun's variables would. A collective that
    waits longer than 5 minutes fails the test instead of holding it for the real 2-hour timeout."""
    import datetime
    import os

    from nmtkit.train import distributed as ddp

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    ddp.PROCESS_GROUP_TIMEOUT = datetime.timedelta(minutes=5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(data_dir, run_dir, out_path, opts):
    from nmtkit.train import distributed as ddp
    from nmtkit.train.config import TrainConfig
    from nmtkit.train.context import TrainContext
    from nmtkit.train.data import DataDir
    from nmtkit.train.presets import resolve_model
    from nmtkit.train.trainer import Trainer

    torch.set_num_threads(1)
    data = DataDir.open(data_dir)
    arch, mcfg = resolve_model("rnnsearch", None, TINY_MODEL, len(data.src_vocab), len(data.tgt_vocab))
    trainer = Trainer(TrainContext(TrainConfig.from_dict(opts.given()), data, run_dir, arch, mcfg,
                                   dist_info=ddp.env_info()))
    try:
        result = trainer.train()
        torch.save({"state": trainer.ctx.model.state_dict(), "update": result.update}, out_path)
    finally:
        trainer.close()


def _worker(rank, world, port, data_dir, run_dir, out_dir, opts):
    _as_rank(rank, world, port)
    _train(data_dir, run_dir, out_dir / f"rank{rank}.pt", opts)


@pytest.mark.slow  # ranks in processes of their own, each importing torch: 3-6 s
def test_two_gloo_ranks_stay_identical_and_match_a_single_process(tmp_path):
    data_dir = make_data_dir(tmp_path / "data")
    # plain SGD: the update is linear in the gradient, so the two-rank run (each rank its own
    # minibatch, gradients averaged) must equal one process summing the same two minibatches'
    # gradients (--update-freq 2), up to float summation order
    opts = tiny_options(max_updates=UPDATES, valid_every=3, save_every=3, optimizer="sgd", lr=0.5,
                        valid_bleu_samples=4)
    _start_ranks(_worker, (2, _free_port(), data_dir, tmp_path / "run2", tmp_path, opts))
    r0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    assert r0["update"] == r1["update"] == UPDATES
    for name, t in r0["state"].items():
        assert torch.equal(t, r1["state"][name]), name
    _train(data_dir, tmp_path / "run1", tmp_path / "single.pt", opts.replace(update_freq=2))
    single = torch.load(tmp_path / "single.pt", weights_only=True)
    for name, t in single["state"].items():
        assert torch.allclose(t, r0["state"][name], atol=1e-5, rtol=1e-4), name
    # training moved the weights: the comparison is not between two initial models
    from nmtkit.models import build_model

    ckpt = torch.load(tmp_path / "run1" / "checkpoint_last.pt", weights_only=True)
    torch.manual_seed(opts.seed)
    init = build_model(ckpt["arch"], ckpt["model_config"]).state_dict()
    assert max(float((init[n] - t).abs().max()) for n, t in single["state"].items()) > 1e-3
    # rank 0 wrote the run directory, with validation records
    assert (tmp_path / "run2" / "checkpoint_last.pt").exists()
    assert '"kind": "valid"' in (tmp_path / "run2" / "metrics.jsonl").read_text()


def _one_update(data_dir, run_dir, batch_size, update_freq, halves):
    """The weights after one plain-SGD update on the first 80-pair minibatch of the plan at batch
    80, given as one minibatch or (halves) as its two halves of 40: one per rank under torchrun,
    else both summed by --update-freq."""
    from nmtkit.train import distributed as ddp
    from nmtkit.train.config import TrainConfig
    from nmtkit.train.context import TrainContext, train_step
    from nmtkit.train.data import DataDir
    from nmtkit.train.presets import resolve_model

    torch.set_num_threads(1)
    data = DataDir.open(data_dir)
    arch, mcfg = resolve_model("rnnsearch", None, TINY_MODEL, len(data.src_vocab), len(data.tgt_vocab))
    opts = tiny_options(optimizer="sgd", lr=1.0, sort_pool=240, valid_bleu_samples=0)
    plan_80 = TrainContext(TrainConfig.from_dict(opts.replace(batch_size=80).given()), data, run_dir / "plan", arch, mcfg)
    batch = max(plan_80.epoch_plan(1), key=len)
    plan_80.close()
    assert len(batch) == 80
    cfg = TrainConfig.from_dict(opts.replace(batch_size=batch_size, update_freq=update_freq).given())
    ctx = TrainContext(cfg, data, run_dir, arch, mcfg, dist_info=ddp.env_info())
    try:
        assert train_step(ctx, [batch[:40], batch[40:]] if halves else [batch])
        return {n: p.detach().clone() for n, p in ctx.model.named_parameters()}
    finally:
        ctx.close()
        # the DDP wrapper (whose reducer holds the process group) is gone before the group: freed
        # after it, it deadlocked with gloo's worker thread in about one run in five
        assert not hasattr(ctx.loss_module, "reducer")


def _one_update_worker(rank, world, port, data_dir, out_dir):
    _as_rank(rank, world, port)
    torch.save(_one_update(data_dir, out_dir / f"run{rank}", 40, 1, True), out_dir / f"step{rank}.pt")


@pytest.mark.slow  # ranks in processes of their own, each importing torch: 3-6 s
def test_update_freq_2_at_batch_40_and_two_gloo_ranks_at_40_each_equal_one_update_at_batch_80(tmp_path):
    data_dir = make_data_dir(tmp_path / "data")
    whole = _one_update(data_dir, tmp_path / "whole", 80, 1, False)
    accumulated = _one_update(data_dir, tmp_path / "accumulated", 40, 2, True)
    _start_ranks(_one_update_worker, (2, _free_port(), data_dir, tmp_path))
    ranks = [torch.load(tmp_path / f"step{r}.pt", weights_only=True) for r in (0, 1)]
    for name, t in whole.items():
        torch.testing.assert_close(accumulated[name], t, rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(ranks[0][name], t, rtol=1e-5, atol=1e-6, msg=name)
        assert torch.equal(ranks[0][name], ranks[1][name]), name


def _run_worker(rank, world, port, data_dir, run_dir, opts, resume):
    from nmtkit.train.presets import ModelOverrides
    from tests.conftest import train_run

    _as_rank(rank, world, port)
    torch.set_num_threads(1)
    train_run(data_dir, run_dir, opts, ModelOverrides(**TINY_MODEL, dropout=0.2), resume=resume)


@pytest.mark.slow  # three two-rank runs, six interpreters importing torch: 13-40 s
def test_two_rank_run_resumed_halfway_equals_the_uninterrupted_two_rank_run(tmp_path):
    # dropout draws from each rank's own RNG, and the data order from the shared one: the
    # checkpoint must carry both ranks' RNG states and the position in the data exactly
    data_dir = make_data_dir(tmp_path / "data")
    opts = tiny_options(max_updates=8, valid_every=4, save_every=4, valid_bleu_samples=0)
    full, half = tmp_path / "full", tmp_path / "half"
    _start_ranks(_run_worker, (2, _free_port(), data_dir, full, opts, False))
    _start_ranks(_run_worker, (2, _free_port(), data_dir, half, opts.replace(max_updates=4), False))
    _start_ranks(_run_worker, (2, _free_port(), data_dir, half, opts, True))
    a = torch.load(full / "checkpoint_last.pt", weights_only=True)
    b = torch.load(half / "checkpoint_last.pt", weights_only=True)
    assert a["trainer"]["update"] == b["trainer"]["update"] == 8
    assert len(b["rng"]["ranks"]) == 2
    for name, t in a["model_state"].items():
        assert torch.equal(t, b["model_state"][name]), name


def test_torchrun_variables_give_the_process_its_place_and_its_share_of_cores(monkeypatch):
    from nmtkit.errors import ConfigError
    from nmtkit.train import distributed as ddp

    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert ddp.env_info() == ddp.DistInfo(rank=3, local_rank=1, world_size=4, local_world_size=2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "two")
    with pytest.raises(ConfigError, match="LOCAL_WORLD_SIZE"):
        ddp.env_info()
    monkeypatch.setenv("WORLD_SIZE", "1")  # a single process ignores the local count
    monkeypatch.setenv("RANK", "0")
    assert ddp.env_info().local_world_size == 1


@pytest.mark.parametrize("env, needle", [
    ({"WORLD_SIZE": "-1"}, "WORLD_SIZE=-1: it counts the job's processes"),  # trained nothing, forever
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0: it counts"),  # a ZeroDivisionError
    ({"RANK": "1"}, "RANK=1 outside WORLD_SIZE=1"),  # an AssertionError: rank 1 of 1 got no minibatches
    ({"WORLD_SIZE": "2", "RANK": "-1"}, "RANK=-1 outside WORLD_SIZE=2"),  # a second "rank 0": no rank 1 joins
])
def test_impossible_torchrun_variables_are_one_line_errors(monkeypatch, env, needle):
    from nmtkit.errors import ConfigError
    from nmtkit.train import distributed as ddp

    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=needle):
        ddp.env_info()


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_the_process_group_waits_longer_than_a_validation(monkeypatch):
    """Rank 0 validates alone while the others wait in a collective: the group's timeout must be
    well above NCCL's default 10 minutes."""
    import datetime

    from nmtkit.train import distributed as ddp

    seen = {}
    monkeypatch.setattr(ddp.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(ddp.dist, "init_process_group", lambda **kw: seen.update(kw))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    ddp.init(ddp.DistInfo(rank=1, local_rank=1, world_size=2), torch.device("cpu"))
    assert seen["timeout"] >= datetime.timedelta(hours=1)
    assert seen["backend"] == "gloo" and seen["rank"] == 1 and seen["world_size"] == 2


@pytest.mark.parametrize("n_train, batch_size", [(1, 16), (10, 16)])
def test_fewer_minibatches_an_epoch_than_processes_is_one_line_error(monkeypatch, tmp_path, n_train, batch_size):
    """1 pair (or 10 pairs in one minibatch of 16) on 2 ranks: no update could ever be made, and
    the loop went from epoch to epoch forever, a hang that SIGTERM did not end."""
    from nmtkit.errors import InputError
    from nmtkit.train import distributed as ddp
    from nmtkit.train.config import TrainConfig
    from nmtkit.train.context import TrainContext
    from nmtkit.train.data import DataDir
    from nmtkit.train.presets import resolve_model

    monkeypatch.setattr(ddp, "init", lambda info, device: None)  # no process group: the check comes before any use
    monkeypatch.setattr(ddp, "rank0_choice", lambda value, *a: value)
    data = DataDir.open(make_data_dir(tmp_path / "data", n_train=n_train))
    arch, mcfg = resolve_model("rnnsearch", None, TINY_MODEL, len(data.src_vocab), len(data.tgt_vocab))
    cfg = TrainConfig.from_dict(dict(max_updates=2, batch_size=batch_size, device="cpu", precision="fp32"))
    with pytest.raises(InputError, match=r"make 1 minibatch\(es\) an epoch, fewer than the 2 processes") as err:
        TrainContext(cfg, data, tmp_path / "run", arch, mcfg, dist_info=ddp.DistInfo(rank=0, world_size=2))
    assert "\n" not in str(err.value) and str(err.value).startswith(str(tmp_path / "data"))


def _precision_worker(rank, world, port, data_dir, run_dir, out_dir):
    """A rank whose own timing says bf16 pays off on rank 0 only; writes the precision it trains in."""
    import nmtkit.models.precision as prec
    from nmtkit.train import distributed as ddp
    from nmtkit.train.config import TrainConfig
    from nmtkit.train.context import TrainContext
    from nmtkit.train.data import DataDir
    from nmtkit.train.presets import resolve_model

    _as_rank(rank, world, port)
    prec.cpu_bf16_pays_off = lambda: rank == 0
    torch.set_num_threads(1)
    data = DataDir.open(data_dir)
    arch, mcfg = resolve_model("rnnsearch", None, TINY_MODEL, len(data.src_vocab), len(data.tgt_vocab))
    ctx = TrainContext(TrainConfig.from_dict(dict(max_updates=1, precision="auto", device="cpu")), data,
                       run_dir / f"rank{rank}", arch, mcfg, dist_info=ddp.env_info())
    try:
        (out_dir / f"rank{rank}.txt").write_text(ctx.precision)
    finally:
        ctx.close()


@pytest.mark.slow  # ranks in processes of their own, each importing torch: 3-6 s
def test_ranks_whose_auto_precision_timings_disagree_all_train_in_rank_0s_precision(tmp_path):
    data_dir = make_data_dir(tmp_path / "data")
    _start_ranks(_precision_worker, (2, _free_port(), data_dir, tmp_path, tmp_path))
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)] == ["bf16", "bf16"]


def _plain_run_worker(rank, world, port, data_dir, run_dir, opts):
    from tests.conftest import train_run

    _as_rank(rank, world, port)
    torch.set_num_threads(1)
    train_run(data_dir, run_dir, opts, tiny_overrides(dropout=0.0))


@pytest.mark.slow  # ranks in processes of their own, each importing torch: 3-6 s
def test_a_two_rank_run_resumes_in_one_process_only_with_the_update_freq_that_keeps_its_updates(tmp_path):
    from nmtkit.errors import ConfigError
    from tests.conftest import train_run

    data_dir = make_data_dir(tmp_path / "data")
    # plain SGD without dropout: 2 ranks x 1 minibatch and 1 process x --update-freq 2 make the same update
    opts = tiny_options(max_updates=6, valid_every=3, save_every=3, optimizer="sgd", lr=0.5, valid_bleu_samples=0)
    run = tmp_path / "run"
    _start_ranks(_plain_run_worker, (2, _free_port(), data_dir, run, opts.replace(max_updates=3)))
    saved = (run / "checkpoint_last.pt").read_bytes()
    with pytest.raises(ConfigError, match=r"1 process\(es\) x --update-freq 1 = 1 minibatch\(es\) per update; the run "
                                          r"being resumed made 2 \(2 x --update-freq 1\): resume with --update-freq 2"):
        train_run(data_dir, run, opts, tiny_overrides(dropout=0.0), resume=True)
    assert (run / "checkpoint_last.pt").read_bytes() == saved  # refused before anything was written
    train_run(data_dir, run, opts.replace(update_freq=2), tiny_overrides(dropout=0.0), resume=True)
    single = tmp_path / "single"  # one process at --update-freq 2 from the start
    train_run(data_dir, single, opts.replace(update_freq=2), tiny_overrides(dropout=0.0))
    a = torch.load(run / "checkpoint_last.pt", weights_only=True)
    b = torch.load(single / "checkpoint_last.pt", weights_only=True)
    assert a["trainer"]["update"] == b["trainer"]["update"] == 6
    assert a["trainer"]["world_size"] == 1 and a["train_config"]["update_freq"] == 2
    for name, t in b["model_state"].items():
        torch.testing.assert_close(a["model_state"][name], t, rtol=1e-4, atol=1e-5, msg=name)


def _losing_worker(rank, world, port, data_dir, run_dir, out_dir, opts, dying):
    """Rank `dying` dies (as kill -9 or the OOM killer would end it) in its 6th update; the
    other writes down the error it stops with."""
    import os

    from tests.conftest import train_run

    def die(update, loss):
        if rank == dying and update == 5:
            os._exit(0)
        return loss

    _as_rank(rank, world, port)
    torch.set_num_threads(1)
    try:
        train_run(data_dir, run_dir, opts, tiny_overrides(dropout=0.0), loss_hook=die)
    except Exception as err:  # noqa: BLE001 - what the survivor reports is the result
        (out_dir / f"rank{rank}.txt").write_text(f"{type(err).__name__}: {err}")


@pytest.mark.slow  # ranks in processes of their own, each importing torch: 3-6 s
@pytest.mark.parametrize("dying", [1, 0], ids=["a worker", "rank 0 the writer"])
def test_a_process_of_the_job_that_dies_stops_the_others_with_one_line_and_a_train_log_record(tmp_path, dying):
    data_dir = make_data_dir(tmp_path / "data")
    opts = tiny_options(max_updates=1000, valid_every=3, save_every=3, valid_bleu_samples=0)
    run = tmp_path / "run"
    _start_ranks(_losing_worker, (2, _free_port(), data_dir, run, tmp_path, opts, dying))
    survivor = 1 - dying
    said = (tmp_path / f"rank{survivor}.txt").read_text()
    assert said.startswith("TrainingError: a collective of the job failed after update 5 ("), said
    assert said.endswith("another process stopped or lost its connection; the run continues from "
                         "checkpoint_last.pt (update 3) with --resume") and "\n" not in said
    last = (run / "train.log").read_text().splitlines()[-1]
    by = " (written by rank 1: rank 0 had stopped)" if dying == 0 else ""
    assert f" ERROR stopped by an error after update 5{by}: {said}" in last, last


def _mismatched_worker(rank, world, port, data_dirs, run_dir, out_dir, opts):
    """Rank `rank` trains on data_dirs[rank] with opts[rank]; writes down how its run ended."""
    from tests.conftest import train_run

    _as_rank(rank, world, port)
    torch.set_num_threads(1)
    try:
        train_run(data_dirs[rank], run_dir, opts[rank], tiny_overrides(dropout=0.0))
        said = "trained"
    except Exception as err:  # noqa: BLE001 - what each rank reports is the result
        said = f"{type(err).__name__}: {err}"
    (out_dir / f"rank{rank}.txt").write_text(said)


@pytest.mark.slow  # ranks in processes of their own, each importing torch: 3-6 s
@pytest.mark.parametrize("differ", ["seed", "data"])
def test_processes_started_with_other_options_or_data_are_refused_on_every_rank(tmp_path, differ):
    """A rank given another --seed (or --batch-size) trained on an epoch plan of its own, some
    pairs twice and others never, without a word; another --valid-every hung in collectives that
    did not match; a --data of other vocabularies failed in DDP's traceback on every rank."""
    opts = tiny_options(max_updates=4, valid_every=2, save_every=2, valid_bleu_samples=0)
    data = [make_data_dir(tmp_path / "data")] * 2
    opts = [opts, opts.replace(seed=opts.seed + 1) if differ == "seed" else opts]
    if differ == "data":
        data[1] = make_data_dir(tmp_path / "data1", n_train=200)
    _start_ranks(_mismatched_worker, (2, _free_port(), data, tmp_path / "run", tmp_path, opts))
    said = [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)]
    what = "--seed (4)" if differ == "seed" else "data (200 pairs of "
    assert said[1].startswith(f"ConfigError: rank 1's {what}"), said
    assert said[0] == ("ConfigError: another process of the job has other options or data: start every process of "
                       "the job with the same options and data")
    assert said[1].endswith(") is not rank 0's: start every process of the job with the same options and data")
    assert not (tmp_path / "run" / "checkpoint_last.pt").exists()


@pytest.mark.slow  # ranks in processes of their own, each importing torch: 3-6 s
def test_a_rank_refused_before_training_stops_the_others_with_one_line(tmp_path):
    """A rank that stopped on its own input after joining the group (a damaged checkpoint to
    resume, a data directory too small for the job) left the others a gloo traceback."""
    opts = tiny_options(max_updates=4, valid_every=2, save_every=2, valid_bleu_samples=0)
    data = [make_data_dir(tmp_path / "data"), make_data_dir(tmp_path / "data1", n_train=10)]
    _start_ranks(_mismatched_worker, (2, _free_port(), data, tmp_path / "run", tmp_path, [opts, opts]))
    said = [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)]
    assert said[1].startswith("InputError: ") and "fewer than the 2 processes" in said[1], said
    assert said[0].startswith("TrainingError: a collective of the job failed after update 0 ("), said
    assert said[0].endswith("another process stopped or lost its connection; the run had saved no checkpoint: start "
                            "it again") and "\n" not in said[0]


def test_train_log_gets_a_lost_writers_record_only_from_one_rank_and_only_once_rank_0_is_gone(tmp_path):
    """Rank 0 holds the run's lock while it lives (and writes its own record); once it is gone,
    the first other rank writes the record and the next finds it there."""
    from nmtkit.io.dirs import run_lock
    from nmtkit.train.metrics import record_for_a_lost_writer

    (tmp_path / "train.log").write_text("2026-11-27 00:00:00 INFO update 5\n")
    rank0 = run_lock(tmp_path).acquire()
    assert not record_for_a_lost_writer(tmp_path, "stopped by an error after update 5 (by rank 1): E: x", wait_s=0.2)
    rank0.release()  # the kernel's doing when rank 0 dies
    assert record_for_a_lost_writer(tmp_path, "stopped by an error after update 5 (by rank 1): E: x")
    assert not record_for_a_lost_writer(tmp_path, "stopped by an error after update 5 (by rank 2): E: x")
    lines = (tmp_path / "train.log").read_text().splitlines()
    assert len(lines) == 2 and lines[1].endswith(" ERROR stopped by an error after update 5 (by rank 1): E: x")
    assert not record_for_a_lost_writer(tmp_path / "elsewhere", "x")  # a machine without the run folder


def test_only_a_failed_collective_is_taken_for_a_lost_process():
    from nmtkit.train.distributed import lost_process_error

    gloo = RuntimeError("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
                        "[127.0.0.1]:26775: Connection reset by peer. This is typically caused by a remote worker "
                        "hanging or bugs in the app")
    err = lost_process_error(gloo, 12, 10)
    assert str(err) == ("a collective of the job failed after update 12 (Read error [127.0.0.1]:26775: Connection "
                        "reset by peer): another process stopped or lost its connection; the run continues from "
                        "checkpoint_last.pt (update 10) with --resume")
    assert str(lost_process_error(gloo, 12, None)).endswith("; the run had saved no checkpoint: start it again")
    assert lost_process_error(RuntimeError("CUDA out of memory"), 12, 10) is None
    assert lost_process_error(ValueError("Connection reset by peer"), 12, 10) is None


@pytest.mark.slow  # ranks in processes of their own, each importing torch: 3-6 s
def test_sigterm_ends_a_rank_still_waiting_for_the_others_to_join(tmp_path):
    """torchrun stops the other ranks with SIGTERM when one rank's start is refused (a run folder
    in use, say); a rank waiting in the group's join heard it only at torchrun's SIGKILL, 30 s on."""
    import datetime
    import os
    import signal
    import subprocess
    import sys
    import time

    import torch.distributed as dist

    port = _free_port()
    store = dist.TCPStore("127.0.0.1", port, 2, True, timeout=datetime.timedelta(seconds=60),
                          wait_for_workers=False)  # torchrun's store, rank 0 never joining
    code = ("import torch; from nmtkit.cli.common import sigterm_unwinds; from nmtkit.train import distributed as "
            "ddp\nwith sigterm_unwinds():\n    print('joining', flush=True)\n"
            "    ddp.init(ddp.env_info(), torch.device('cpu'))\n")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="1", LOCAL_RANK="1", WORLD_SIZE="2",
               LOCAL_WORLD_SIZE="2")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "joining\n"
        time.sleep(2)  # inside the join
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
        del store


@pytest.mark.slow  # a process of its own, importing torch: 3-6 s
def test_a_rank_started_by_hand_says_it_waits_for_the_others(tmp_path):
    """WORLD_SIZE=2 RANK=0 ... nmtkit train, no other rank started: it waited for up to the group's
    2-hour timeout after printing its config, without a word."""
    import os
    import subprocess
    import sys
    import threading

    from tests.conftest import tiny_train_args

    port = _free_port()
    cmd = [sys.executable, "-m", "nmtkit", "train", "--data", str(make_data_dir(tmp_path / "data")), "--save-dir",
           str(tmp_path / "run"), *tiny_train_args(), "--max-updates", "2"]
    env = dict(os.environ, WORLD_SIZE="2", RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(60, proc.kill)  # the line never came: end the wait, the test fails
    timer.start()
    try:
        waits = next((line for line in proc.stderr if "waits" in line), "")
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
    assert waits == (f"nmtkit: note: rank 0 waits for the job's 1 other process(es) to join at 127.0.0.1:{port} "
                     "(for up to 2:00:00)\n")


def _alive(pid: int) -> bool:
    """A process that runs (not ended, nor a zombie waiting for whoever adopted it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # ranks in processes of their own, each importing torch: 3-6 s
@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("nproc", [1, 2])
def test_the_ranks_save_and_exit_when_torchrun_is_killed(tmp_path, nproc):
    """kill -9 of torchrun left its ranks (each in a session of its own) training on, orphaned,
    holding the run's lock; now they stop as on SIGTERM: checkpoint_last.pt saved, then exit."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import tiny_train_args

    data_dir = make_data_dir(tmp_path / "data")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port",
           str(_free_port()), "-m", "nmtkit", "train", "--data", str(data_dir), "--save-dir", str(run), *tiny_train_args(),
           "--max-updates", "1000000", "--valid-every", "1000000", "--save-every", "1000000", "--log-every", "1"]
    launcher = subprocess.Popen(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    ranks: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and launcher.poll() is None:
            # a new run's metrics.jsonl is in its staging folder until its first checkpoint
            if any(p.read_text().count("\n") >= 3 for p in run.glob(".run.tmp-*/metrics.jsonl")):
                break
            time.sleep(0.1)
        ranks = child_pids(launcher.pid)
        assert len(ranks) == nproc and not (run / "checkpoint_last.pt").exists()
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 60
        while any(map(_alive, ranks)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(_alive, ranks)), "the ranks outlived torchrun"
        from nmtkit.checkpoint import load_checkpoint

        assert load_checkpoint(run / "checkpoint_last.pt")["trainer"]["update"] >= 3
        assert "SIGTERM" in (run / "train.log").read_text()
    finally:
        launcher.kill()
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_joining_leaves_an_ignored_signal_ignored_and_restores_the_handlers():
    import signal

    from nmtkit.signals import handled_by

    def handler(signum, frame):
        pass

    before = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, handler)
    try:
        with handled_by(signal.SIG_DFL):  # as ddp.init joins the group
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # nohup's: a background job stays so
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


def test_sigterm_while_a_failed_run_cleans_up_is_held_off():
    import os
    import signal

    from nmtkit.signals import held

    def handler(signum, frame):
        raise AssertionError("SIGTERM reached the command's handler during the cleanup")

    before = signal.signal(signal.SIGTERM, handler)
    try:
        with held():
            os.kill(os.getpid(), signal.SIGTERM)  # torchrun's, as soon as another rank failed
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_sigterm_that_lands_while_an_error_unwinds_the_command_reports_the_error(monkeypatch, tmp_path):
    """torchrun SIGTERMs every rank when one fails; landing in a rank's cleanup after its own
    error (a collective that lost that rank), it printed only "nmtkit: terminated"."""
    import nmtkit.train
    from nmtkit.errors import TrainingError
    from nmtkit.signals import Terminated
    from tests.conftest import run_cli

    def failing(*args, **kwargs):
        try:
            raise TrainingError("a collective of the job failed after update 5 (Connection reset by peer)")
        finally:
            raise Terminated()  # the SIGTERM handler's, raised inside the cleanup

    monkeypatch.setattr(nmtkit.train, "run", failing)
    data_dir = make_data_dir(tmp_path / "data")
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(tmp_path / "run")])
    assert err.strip().splitlines()[-1] == ("nmtkit: error: a collective of the job failed after update 5 "
                                            "(Connection reset by peer)"), err
    assert code == TrainingError.exit_code


@pytest.mark.slow  # ranks in processes of their own, each importing torch: 3-6 s
def test_a_torchrun_job_warns_once_not_once_per_rank(tmp_path):
    """A one-process run continued by two processes under torchrun: the warning that says so
    came from every rank."""
    import os
    import subprocess
    import sys

    from tests.conftest import run_cli, tiny_train_args

    data_dir = make_data_dir(tmp_path / "data")
    run = tmp_path / "run"
    common = ["--data", str(data_dir), "--save-dir", str(run), "--valid-bleu-samples", "0"]
    code, _, err = run_cli(["train", *common, *tiny_train_args(), "--max-updates", "2", "--update-freq", "2"])
    assert code == 0, err
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
           "-m", "nmtkit", "train", *common, "--resume", "--max-updates", "3", "--update-freq", "1"]
    done = subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("resuming a run of 1 process(es) with 2: --update-freq 1 keeps its 2 minibatch(es)") == 1
