"""When training stops: the budgets (--max-updates, --patience, --max-time) and SIGINT / SIGTERM,
which are noted so that the loop saves a checkpoint after the current update and stops; a second
Ctrl-C aborts at once (the checkpoints on disk stay intact). Distributed ranks agree on the
update they stop at."""
from __future__ import annotations

import signal
from typing import Any, Callable

import torch

from nmtkit.train import distributed as ddp
from nmtkit.train.config import TrainConfig
from nmtkit.train.events import TrainState


class StopSignals:
    """The stop signal received (`received`, None until one arrives), and `handle`, the handler
    that notes it (installed with `nmtkit.signals.handled_by`)."""

    def __init__(self, on_message: Callable[[str], None]):
        self.on_message = on_message
        self.received: int | None = None

    def handle(self, signum: int, frame: Any) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C aborts at once (checkpoints stay intact)
        self.received = signum
        self.on_message(f"{signal.Signals(signum).name}: saving a checkpoint after this update "
                        "(Ctrl-C again to abort at once)")


def count_patience(state: TrainState, improved: bool) -> None:
    """The early-stopping count (--patience) after a scheduled validation: validations in a row
    without a new best dev score."""
    state.bad_validations = 0 if improved else state.bad_validations + 1


def stop_reason(cfg: TrainConfig, state: TrainState, received: int | None, elapsed: float,
                dist_info: ddp.DistInfo, device: torch.device, check_collective: bool) -> str | None:
    """Why training stops after this update (max-updates, patience, SIGINT, SIGTERM, max-time;
    max-epochs where the run is past it, as a resume with a lower --max-epochs finds it: the
    loop stops at the end of the last epoch itself), or None. Signals and time are checked only
    where `check_collective` (in DDP a collective every few updates, so that every rank stops
    at the same update)."""
    if cfg.max_updates is not None and state.update >= cfg.max_updates:
        return "max-updates"
    if cfg.max_epochs is not None and state.epoch > cfg.max_epochs:  # a run resumed with a lower --max-epochs
        return "max-epochs"
    if cfg.patience is not None and state.bad_validations >= cfg.patience:
        return "patience"
    if not check_collective:
        return None
    sig = received
    timed_out = cfg.max_time is not None and elapsed >= cfg.max_time
    if dist_info.enabled:  # every rank must stop at the same update
        code = (sig or 0) * 2 + (1 if timed_out else 0)
        t = torch.tensor([float(code)], device=device)
        import torch.distributed as dist

        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        code = int(t.item())
        sig, timed_out = (code // 2) or None, bool(code % 2)
    if sig is not None:
        return signal.Signals(sig).name
    if timed_out:
        return "max-time"
    return None
