"""`nmtkit train --tensorboard DIR`: the event files hold what metrics.jsonl holds, across a resume."""
from __future__ import annotations

import shutil
import sys

import pytest

from nmtkit.train.config import TrainOptions
from tests.conftest import records as _records
from tests.conftest import tiny_options, tiny_overrides, train_run


def _scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] as TensorBoard itself reads the folder (orphaned steps purged)."""
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="tensorboard is not installed (pip install 'nmtkit[tensorboard]')")
    acc = event_accumulator.EventAccumulator(str(log_dir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _expected(run, kind: str, key: str) -> list[tuple[int, float]]:
    return [(r["update"], r[key]) for r in _records(run, kind) if r.get(key) is not None]


def _same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    assert [s for s, _ in got] == [s for s, _ in want]
    assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6)  # stored as float32


def test_event_files_hold_the_metrics_jsonl_records(data_dir, tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'nmtkit[tensorboard]')")
    run, tb = tmp_path / "run", tmp_path / "tb"
    train_run(data_dir, run, tiny_options(max_updates=6, log_every=2, valid_every=3, valid_bleu_samples=8,
                                             tensorboard=str(tb)), tiny_overrides())
    got = _scalars(tb)
    for key in ("loss", "ppl", "lr", "grad_norm", "tgt_tokens_per_s"):
        _same(got[f"train/{key}"], _expected(run, "train", key))
    for key in ("loss", "ppl", "bleu", "best_score"):
        _same(got[f"valid/{key}"], _expected(run, "valid", key))
    assert [s for s, _ in got["train/loss"]] == [2, 4, 6]
    assert [s for s, _ in got["valid/bleu"]] == [3, 6]


def test_events_in_the_run_folder_are_written_there_after_the_new_runs_first_checkpoint(data_dir, tmp_path):
    """--tensorboard RUN/tensorboard: a new run's events go to its staging folder, moved into RUN at its
    first checkpoint, where the writer, which opens its file by name at each write, lost it (a traceback)."""
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'nmtkit[tensorboard]')")
    run = tmp_path / "run"
    train_run(data_dir, run, tiny_options(max_updates=6, log_every=2, valid_every=3, valid_bleu_samples=0,
                                             tensorboard=str(run / "tensorboard")), tiny_overrides())
    got = _scalars(run / "tensorboard")
    _same(got["train/loss"], _expected(run, "train", "loss"))
    assert [s for s, _ in got["valid/loss"]] == [3, 6]
    # a run moved, then resumed: its events follow it (they went to its old place, which they recreated)
    moved = tmp_path / "moved"
    run.rename(moved)
    train_run(data_dir, moved, TrainOptions(max_updates=8), tiny_overrides(), resume=True)
    assert not run.exists()
    assert [s for s, _ in _scalars(moved / "tensorboard")["train/loss"]] == [2, 4, 6, 8]


def test_a_resumed_run_appends_to_the_same_run_without_the_killed_sessions_extra_steps(data_dir, tmp_path):
    """A session killed after its last checkpoint logged steps that the resumed session logs
    again: TensorBoard (like metrics.jsonl) shows each step once, the resumed session's value."""
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'nmtkit[tensorboard]')")
    run, tb = tmp_path / "run", tmp_path / "tb"
    opts = tiny_options(max_updates=4, log_every=1, valid_every=2, save_every=2, valid_bleu_samples=0,
                        tensorboard=str(tb))
    train_run(data_dir, run, opts, tiny_overrides())
    saved = tmp_path / "at4.pt"
    shutil.copy(run / "checkpoint_last.pt", saved)
    train_run(data_dir, run, opts.replace(max_updates=6), tiny_overrides(), resume=True)  # logs 5, 6
    shutil.copy(saved, run / "checkpoint_last.pt")  # as if killed after logging 5 and 6 past the update-4 checkpoint
    train_run(data_dir, run, TrainOptions(max_updates=8), tiny_overrides(), resume=True)  # --tensorboard comes from the checkpoint
    assert len(list(tb.glob("events.out.tfevents.*"))) == 3
    got = _scalars(tb)
    _same(got["train/loss"], _expected(run, "train", "loss"))
    assert [s for s, _ in got["train/loss"]] == list(range(1, 9))
    _same(got["valid/loss"], _expected(run, "valid", "loss"))


def test_missing_tensorboard_fails_at_start_with_one_line_saying_how_to_install(data_dir, tmp_path, monkeypatch,
                                                                                 capsys):
    from nmtkit.cli import main

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # `import` raises ImportError
    run, tb = tmp_path / "run", tmp_path / "tb"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["train", "--data", str(data_dir), "--save-dir", str(run), "--arch", "rnnsearch", "--emb-dim", "8",
              "--max-updates", "2", "--device", "cpu", "--threads", "1", "--tensorboard", str(tb)])
    err = capsys.readouterr().err
    assert exc.value.code != 0 and "Traceback" not in err
    assert err.strip().splitlines() == [
        "nmtkit: error: --tensorboard needs the tensorboard package: pip install 'nmtkit[tensorboard]' "
        "(or pip install tensorboard)"]
    assert not run.exists() and not tb.exists()


def test_tensorboard_events_are_never_written_into_the_data_directory(data_dir, tmp_path):
    """--save-dir DATA was refused, --tensorboard DATA wrote its events among the corpus files."""
    from nmtkit.errors import OutputError

    before = sorted(p.name for p in data_dir.iterdir())
    with pytest.raises(OutputError, match="the --tensorboard output is the --data input"):
        train_run(data_dir, tmp_path / "run", tiny_options(max_updates=2, tensorboard=str(data_dir)),
                     tiny_overrides())
    assert sorted(p.name for p in data_dir.iterdir()) == before and not (tmp_path / "run").exists()


def test_a_tensorboard_path_that_is_a_file_is_refused_before_the_run_folder_is_made(data_dir, tmp_path):
    from nmtkit.errors import OutputError

    (tmp_path / "file").write_text("mine\n")
    with pytest.raises(OutputError, match="the --tensorboard folder exists and is not a directory"):
        train_run(data_dir, tmp_path / "run", tiny_options(max_updates=2, tensorboard=str(tmp_path / "file")),
                     tiny_overrides())
    assert not (tmp_path / "run").exists() and (tmp_path / "file").read_text() == "mine\n"


def test_a_new_run_with_force_hides_the_old_runs_events(data_dir, tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'nmtkit[tensorboard]')")
    run, tb = tmp_path / "run", tmp_path / "tb"
    opts = tiny_options(max_updates=4, log_every=1, valid_every=4, valid_bleu_samples=0, tensorboard=str(tb))
    train_run(data_dir, run, opts, tiny_overrides())
    train_run(data_dir, run, opts.replace(max_updates=2, lr=0.001), tiny_overrides(), force=True)
    got = _scalars(tb)
    _same(got["train/loss"], _expected(run, "train", "loss"))
    assert [s for s, _ in got["train/loss"]] == [1, 2]


def test_only_rank_0_writes_tensorboard_events(data_dir, tmp_path, monkeypatch):
    """The trainer of rank 1 in a two-rank job gets the caller's callbacks, no TensorBoard writer,
    and no event folder is made; rank 0's trainer gets the writer."""
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'nmtkit[tensorboard]')")
    from nmtkit.train import context as context_module
    from nmtkit.train import distributed as ddp
    from nmtkit.train import trainer as trainer_module
    from nmtkit.train.events import Callbacks, TrainResult
    from nmtkit.train.metrics import TensorBoardCallbacks

    given = []

    class FakeContext:  # records the callbacks nmtkit.train.run builds the context with; builds nothing
        def __init__(self, *args, callbacks=None, **kwargs):
            given.append(callbacks)

    class FakeTrainer:  # trains nothing
        def __init__(self, ctx, commit=None):
            assert isinstance(ctx, FakeContext)

        def train(self):
            return TrainResult("max-updates", 0, 1, None, None, None)

        def close(self):
            pass

    monkeypatch.setattr(context_module, "TrainContext", FakeContext)
    monkeypatch.setattr(trainer_module, "Trainer", FakeTrainer)
    mine = Callbacks()
    for rank in (1, 0):
        monkeypatch.setattr(ddp, "env_info", lambda rank=rank: ddp.DistInfo(rank=rank, local_rank=rank, world_size=2,
                                                                             local_world_size=2))
        tb = tmp_path / f"tb{rank}"
        train_run(data_dir, tmp_path / f"run{rank}", tiny_options(max_updates=2, tensorboard=str(tb)), tiny_overrides(),
                     callbacks=mine)
    assert given[0] is mine and not (tmp_path / "tb1").exists()
    assert isinstance(given[1], TensorBoardCallbacks) and given[1].inner is mine
    assert list((tmp_path / "tb0").glob("events.out.tfevents.*"))


def test_a_non_finite_value_is_left_out_of_the_event_files(tmp_path):
    """A NaN or infinite loss (a diverged log interval) is no scalar: TensorBoard would draw the
    whole curve on a useless scale; the finite values of the same event are still written."""
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'nmtkit[tensorboard]')")
    from nmtkit.train.events import LogEvent
    from nmtkit.train.metrics import TensorBoardCallbacks

    cb = TensorBoardCallbacks(tmp_path / "tb")
    for update, loss in ((1, float("nan")), (2, float("inf")), (3, 2.5)):
        cb.on_log(LogEvent(update=update, epoch=1, loss=loss, ppl=loss, objective=loss, grad_norm=1.0, lr=0.1,
                           tgt_tokens_per_s=1.0, sents_per_s=1.0, updates_per_s=1.0, elapsed=1.0, skipped=0))
    cb.close()
    got = _scalars(tmp_path / "tb")
    assert got["train/loss"] == [(3, 2.5)] and [s for s, _ in got["train/lr"]] == [1, 2, 3]
