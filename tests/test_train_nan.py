"""Non-finite losses: stop with a message or skip, and never a NaN best checkpoint."""
from __future__ import annotations

import math

import pytest
import torch

from nmtkit.checkpoint import load_checkpoint
from nmtkit.errors import TrainingError
from tests.conftest import records as _records
from tests.conftest import tiny_options, tiny_overrides, train_run


def _nan_at(*steps):
    """A loss hook that turns the loss of the given training steps (1-based calls) into NaN."""
    calls = [0]

    def hook(update, loss):
        calls[0] += 1
        return loss * float("nan") if calls[0] in steps else loss

    return hook


def test_nan_loss_stops_with_message_and_keeps_best_checkpoint(data_dir, tmp_path):
    run = tmp_path / "run"
    opts = tiny_options(max_updates=30, valid_every=5, save_every=5, valid_bleu_samples=0)
    # the advice is what train accepts: a resumed run cannot change its --lr
    with pytest.raises(TrainingError, match=r"non-finite loss.*update 8.*checkpoint_last.pt\) is untouched: resume "
                                            r"it with --on-nan skip .*, or start a new run with a lower --lr$"):
        train_run(data_dir, run, opts, tiny_overrides(), loss_hook=_nan_at(8))
    best = load_checkpoint(run / "checkpoint_best.pt")
    last = load_checkpoint(run / "checkpoint_last.pt")
    assert best["trainer"]["update"] == 5 and last["trainer"]["update"] == 5
    assert all(torch.isfinite(t).all() for t in best["model_state"].values())
    # train.log says why the run ended, as its last line
    assert " ERROR stopped by an error after update 7: TrainingError: non-finite loss" in \
        (run / "train.log").read_text().splitlines()[-1]


def test_nan_loss_skipped_with_on_nan_skip(data_dir, tmp_path):
    run = tmp_path / "run"
    opts = tiny_options(max_updates=12, valid_every=4, on_nan="skip", valid_bleu_samples=0)
    res = train_run(data_dir, run, opts, tiny_overrides(), loss_hook=_nan_at(3, 7))
    assert res.update == 12
    last = load_checkpoint(run / "checkpoint_last.pt")
    assert last["trainer"]["skipped_batches"] == 2
    assert all(torch.isfinite(t).all() for t in last["model_state"].values())
    assert all(math.isfinite(r["loss"]) for r in _records(run, "valid"))


def test_diverged_model_never_becomes_best(data_dir, tmp_path, monkeypatch):
    """Parameters turned to NaN: every minibatch is skipped until the run gives up; the best
    checkpoint stays the last finite one."""
    import nmtkit.train.context as context_mod

    run = tmp_path / "run"
    opts = tiny_options(max_updates=60, valid_every=2, on_nan="skip", valid_bleu_samples=0)
    poisoned = {"done": False}

    def hook(update, loss):
        if update == 4 and not poisoned["done"]:
            poisoned["done"] = True
            return loss * float("inf")
        return loss if update < 4 else loss * float("nan")

    monkeypatch.setattr(context_mod, "MAX_CONSECUTIVE_SKIPS", 5)
    with pytest.raises(TrainingError, match="in a row"):
        train_run(data_dir, run, opts, tiny_overrides(), loss_hook=hook)
    assert load_checkpoint(run / "checkpoint_best.pt")["trainer"]["update"] == 4


def test_weights_that_overflow_stop_the_run_in_one_line_not_a_crash_of_dev_bleu(data_dir, tmp_path):
    """Plain SGD at lr 30 without clipping: the weights overflow within a few updates, so that
    every score of the dev set's greedy decoding is nan, it finds no hypothesis, and validation
    crashed (IndexError) where the run should stop as a diverged one."""
    opts = tiny_options(max_updates=40, valid_every=1, optimizer="sgd", lr=30.0, clip_norm=0.0, valid_bleu_samples=5)
    with pytest.raises(TrainingError, match=r"dev loss is nan at update \d+: the model has diverged; start a new "
                                            r"run with a lower --lr; checkpoint_best.pt \(update \d+\) is the best"):
        train_run(data_dir, tmp_path / "run", opts, tiny_overrides())


def test_a_nan_dev_loss_stops_the_run_after_recording_the_validation(data_dir, tmp_path, monkeypatch):
    """With --on-nan skip too: every later minibatch of a model whose dev loss is nan would be
    skipped until the run gave up."""
    import nmtkit.train.trainer as trainer_mod

    real = trainer_mod.dev_scores
    monkeypatch.setattr(trainer_mod, "dev_scores",
                        lambda ctx, stop=None: (float("nan"), float("nan")) if ctx.state.update >= 6 else real(ctx, stop))
    run = tmp_path / "run"
    opts = tiny_options(max_updates=20, valid_every=3, on_nan="skip", valid_bleu_samples=0)
    with pytest.raises(TrainingError, match=r"dev loss is nan at update 6: .* checkpoint_best.pt \(update 3\)"):
        train_run(data_dir, run, opts, tiny_overrides())
    assert [r["update"] for r in _records(run, "valid")] == [3, 6]
