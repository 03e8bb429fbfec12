"""`nmtkit train --tensorboard DIR`: the run's metrics.jsonl records as TensorBoard scalars.

A trainer callback (`nmtkit.train.events.Callbacks`) that writes each training log event and
each validation event with `torch.utils.tensorboard.SummaryWriter`, at the event's update:
  train/loss, train/ppl, train/objective, train/grad_norm, train/lr, train/tgt_tokens_per_s,
  train/sents_per_s, train/updates_per_s, train/skipped
  valid/loss, valid/ppl, valid/bleu (when dev BLEU is computed), valid/best_score
and passes every callback on to the caller's own callbacks (the CLI's progress display).

Only rank 0 makes one (the trainer reports records on rank 0 only). A resumed run writes a new
event file into the same folder, opened with `purge_step` = the resumed update + 1, so
TensorBoard drops what a killed session logged after the checkpoint being resumed and shows one
continuous run, as metrics.jsonl does. A fresh run (or `--force`) purges from update 1, hiding
an earlier run's events in the same folder.

tensorboard is an optional dependency (`pip install nmtkit[tensorboard]`); `require_tensorboard`
checks for it before a run writes anything.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from nmtkit.errors import ConfigError
from nmtkit.train.events import Callbacks, LogEvent, StartEvent, ValidationEvent

INSTALL = "pip install 'nmtkit[tensorboard]' (or pip install tensorboard)"
TRAIN_SCALARS = ("loss", "ppl", "objective", "grad_norm", "lr", "tgt_tokens_per_s", "sents_per_s", "updates_per_s",
                 "skipped")
VALID_SCALARS = ("loss", "ppl", "bleu", "best_score")


def require_tensorboard() -> Any:
    """torch's SummaryWriter class, or a one-line ConfigError saying how to install tensorboard."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(f"--tensorboard needs the tensorboard package: {INSTALL}") from None
    return SummaryWriter


class TensorBoardCallbacks(Callbacks):
    """Writes log and validation events as scalars; forwards every callback to `inner`."""

    def __init__(self, log_dir: str | Path, inner: Callbacks | None = None, start_update: int = 0):
        writer_class = require_tensorboard()
        self.inner = inner or Callbacks()
        self.log_dir = Path(log_dir)
        self.writer = writer_class(log_dir=str(self.log_dir), purge_step=start_update + 1)

    def _scalars(self, prefix: str, names: tuple[str, ...], event: LogEvent | ValidationEvent) -> None:
        step = int(event.update)
        for name in names:
            value = getattr(event, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(f"{prefix}/{name}", value, step)
        self.writer.flush()

    def on_start(self, event: StartEvent) -> None:
        self.inner.on_start(event)

    def on_update(self, update: int, epoch: int) -> None:
        self.inner.on_update(update, epoch)

    def on_log(self, event: LogEvent) -> None:
        self._scalars("train", TRAIN_SCALARS, event)
        self.inner.on_log(event)

    def on_validation(self, event: ValidationEvent) -> None:
        self._scalars("valid", VALID_SCALARS, event)
        self.inner.on_validation(event)

    def on_message(self, msg: str) -> None:
        self.inner.on_message(msg)

    def on_config(self, text: str) -> None:
        self.inner.on_config(text)

    def close(self) -> None:
        self.writer.close()
