"""fp16 autocast with loss scaling (GradScaler), exercised on the CPU, where torch runs it too.

These cover the trainer's fp16 logic (scaled backward, unscale before clipping, overflow
handling, the scaler's state in checkpoints and exact resume); only the CUDA kernels differ
on a GPU.
"""
from __future__ import annotations

import torch

from nmtkit.checkpoint import load_checkpoint
from nmtkit.models import build_model
from tests.conftest import records as _records
from tests.conftest import tiny_options, tiny_overrides, train_run


def test_fp16_training_lowers_the_loss_and_resumes_exactly(data_dir, tmp_path, caplog):
    opts = tiny_options(precision="fp16", max_updates=12, valid_every=6, save_every=6, valid_bleu_samples=0)
    full, half = tmp_path / "full", tmp_path / "half"
    train_run(data_dir, full, opts, tiny_overrides())
    assert "emulated and slow" in caplog.text  # fp16 on the CPU says it is meant for GPUs
    train_run(data_dir, half, opts.replace(max_updates=6), tiny_overrides())
    train_run(data_dir, half, opts, tiny_overrides(), resume=True)
    a, b = load_checkpoint(full / "checkpoint_last.pt"), load_checkpoint(half / "checkpoint_last.pt")
    assert a["scaler_state"] is not None and a["scaler_state"] == b["scaler_state"]
    for name, t in a["model_state"].items():
        assert torch.equal(t, b["model_state"][name]), name
    losses = [r["loss"] for r in _records(full, "train")]
    assert losses[-1] < losses[0]


def test_fp16_overflow_skips_the_step_and_halves_the_scale(data_dir, tmp_path):
    """A loss whose scaled gradients overflow: the scaler skips the optimiser step (the weights
    do not move) and halves the scale; this is not a NaN stop."""
    opts = tiny_options(precision="fp16", max_updates=1, valid_every=1, valid_bleu_samples=0, on_nan="stop")
    run = tmp_path / "run"
    # finite in fp32, but times the initial scale 65536 the backward pass overflows
    train_run(data_dir, run, opts, tiny_overrides(), loss_hook=lambda update, loss: loss * 1e34)
    ckpt = load_checkpoint(run / "checkpoint_last.pt")
    assert ckpt["scaler_state"]["scale"] == 65536.0 / 2
    torch.manual_seed(opts.seed)
    init = build_model(ckpt["arch"], ckpt["model_config"]).state_dict()
    for name, t in ckpt["model_state"].items():
        assert torch.equal(t, init[name]), name


def test_an_fp16_overflow_leaves_the_logged_gradient_norm_finite(data_dir, tmp_path):
    """The scaler's overflows (its first updates, and each time it tries a larger scale) made the
    interval's logged grad_norm nan in metrics.jsonl (not valid JSON) and TensorBoard."""
    opts = tiny_options(precision="fp16", max_updates=2, log_every=2, valid_every=2, save_every=2, valid_bleu_samples=0)
    train_run(data_dir, tmp_path / "run", opts, tiny_overrides(),
              loss_hook=lambda update, loss: loss * 1e34 if update == 0 else loss)  # the first update overflows
    (rec,) = _records(tmp_path / "run", "train")
    assert rec["update"] == 2 and 0 < rec["grad_norm"] < 1e3  # the other update's norm, halved
