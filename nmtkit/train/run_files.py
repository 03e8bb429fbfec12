"""The names of the checkpoints in a run directory, and the one parser of the kept ones'
(`checkpoint_<update>.pt`, written every --keep-every updates). Torch-free, so that the run
directory's checks and `nmtkit average --last N` read them without loading torch."""
from __future__ import annotations

import re
from pathlib import Path

__all__ = ["BEST", "LAST", "REPLACED", "discard_replaced", "kept_checkpoints", "kept_name", "kept_update"]

LAST = "checkpoint_last.pt"
BEST = "checkpoint_best.pt"
# `train --force` moves the run it replaces here, until the new run saves its first checkpoint
# (then it is deleted) or fails before it (then it is put back): nmtkit.train.run
REPLACED = ".replaced-run"

_KEPT = re.compile(r"checkpoint_([0-9]+)\.pt")


def kept_name(update: int) -> str:
    """The file name of the model kept at `update`."""
    return f"checkpoint_{update}.pt"


def kept_update(name: str) -> int | None:
    """The update of a kept checkpoint's file name; None for any other name."""
    m = _KEPT.fullmatch(name)
    return int(m[1]) if m else None


def kept_checkpoints(save_dir: str | Path) -> list[Path]:
    """The kept checkpoints of a run directory, oldest update first."""
    kept = [(kept_update(p.name), p) for p in Path(save_dir).glob("checkpoint_*.pt")]
    return [p for update, p in sorted((u, p) for u, p in kept if u is not None)]


def discard_replaced(save_dir: str | Path) -> None:
    """Delete the run that `train --force` set aside, once the new run has a checkpoint."""
    import shutil

    shutil.rmtree(Path(save_dir) / REPLACED, ignore_errors=True)
