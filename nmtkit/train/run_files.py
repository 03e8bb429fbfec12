"""The files of a run directory: the names of its checkpoints and the one parser of the kept
ones' (`checkpoint_<update>.pt`, written every --keep-every updates), and what a start does
with an earlier run's files (`--force` sets them aside and puts them back; a new run that fails
before its first checkpoint removes what it added). Torch-free, so that the run directory's
checks and `nmtkit average --last N` read them without loading torch."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtkit.output_dirs import DirLock

if TYPE_CHECKING:
    from nmtkit.train.config import TrainConfig

log = logging.getLogger(__name__)

LAST = "checkpoint_last.pt"
CONFIG_FILE = "config.json"  # the run's resolved configuration, written at its start (`config_text`)
BEST = "checkpoint_best.pt"
# `train --force` moves the run it replaces here, until the new run saves its first checkpoint
# (then it is deleted) or fails before it (then it is put back): nmtkit.train.run
REPLACED = ".replaced-run"
RUN_LOG = "train.log"  # nmtkit.train.metrics
RUN_FILES = (LAST, BEST, "metrics.jsonl", "curves.png", RUN_LOG, CONFIG_FILE)

LOCK_FILE = "train.lock"


def run_lock(save_dir: str | Path) -> DirLock:
    """The lock of `save_dir` (one training process per run directory): `acquire` or `check`
    raise an OutputError naming the holder's PID when another live `nmtkit train` holds it."""
    return DirLock(save_dir, LOCK_FILE, "run directory (one training run at a time)")


_KEPT = re.compile(r"checkpoint_([0-9]+)\.pt")


def config_text(cfg: TrainConfig, arch: str, model_config: dict[str, Any]) -> str:
    """A run's resolved configuration as indented JSON (RUN/config.json)."""
    return json.dumps({"arch": arch, "model_config": model_config, "train_config": cfg.to_dict()},
                      indent=2, sort_keys=False) + "\n"


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


def stale_run_files(save_dir: Path) -> list[str]:
    """The files of a run that stopped before its first checkpoint: nothing in them can be
    continued, so a fresh start replaces them (instead of demanding --force)."""
    present = run_files_present(save_dir)
    return [] if any(f.startswith("checkpoint_") for f in present) else present


def is_run_file(name: str) -> bool:
    """Whether a file of this name in a run directory is one the run writes (and --force deletes)."""
    return name in RUN_FILES or name in ("tensorboard", REPLACED) or kept_update(name) is not None


def run_files_present(save_dir: Path) -> list[str]:
    """The names of a run's files (RUN_FILES and kept checkpoints) present in `save_dir`."""
    return [f for f in RUN_FILES if (save_dir / f).exists()] + [p.name for p in kept_checkpoints(save_dir)]


def clear_run_dir(save_dir: Path) -> None:
    for f in RUN_FILES:
        (save_dir / f).unlink(missing_ok=True)
    for p in kept_checkpoints(save_dir):
        p.unlink(missing_ok=True)
    shutil.rmtree(save_dir / "tensorboard", ignore_errors=True)


def set_aside_run(save_dir: Path) -> None:
    """`--force`: move the old run's files into RUN/.replaced-run (see the module docstring). A
    run already set aside by a start that never saved a checkpoint (killed) stays the one kept."""
    aside = save_dir / REPLACED
    names = run_files_present(save_dir) + (["tensorboard"] if (save_dir / "tensorboard").exists() else [])
    if aside.is_dir() and not any(f.startswith("checkpoint_") for f in names):
        clear_run_dir(save_dir)
        return
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir()
    for name in names:
        os.replace(save_dir / name, aside / name)


def restore_replaced_run(save_dir: Path, why: str = "the --force start saved no checkpoint") -> None:
    """Put back the run `--force` set aside when the new run failed before its first checkpoint
    (`why`: for the warning)."""
    aside = save_dir / REPLACED
    if not aside.is_dir() or (save_dir / LAST).exists():
        return
    clear_run_dir(save_dir)
    for p in aside.iterdir():
        os.replace(p, save_dir / p.name)
    aside.rmdir()
    log.warning("%s: the run --force was to replace is back in place (%s)", save_dir, why)


def killed_force_start(save_dir: Path) -> bool:
    """Whether RUN/.replaced-run holds a run that a `--force` start set aside and then died
    (SIGKILL, a lost machine) before saving a checkpoint of its own: a start that fails puts the
    run back itself, and one that saves a checkpoint deletes it."""
    return (save_dir / REPLACED).is_dir() and not any(f.startswith("checkpoint_") for f in run_files_present(save_dir))


def undo_failed_start(save_dir: Path, resume: bool, force: bool, before: set[str]) -> None:
    """After a run that failed: the run --force was to replace back in place, or a new run's
    files gone, when no checkpoint was saved (see the two functions). `before`: the names in
    the folder before the run started."""
    with contextlib.suppress(OSError):  # the error that stopped the run is the one to report
        if force:
            restore_replaced_run(save_dir)
        else:
            discard_unstarted_run(save_dir, resume, before)


def discard_unstarted_run(save_dir: Path, resume: bool, before: set[str]) -> None:
    """A new run that failed before its first checkpoint (a model too large for memory, data that
    --max-len leaves empty): the run files it wrote (config.json, train.log, ...) go, so that the
    folder does not look like a run's; what was there before it started (`before`: names) stays.
    The lock file stays too (see DirLock)."""
    if resume or (save_dir / LAST).exists() or kept_checkpoints(save_dir):
        return
    for name in sorted(run_dir_names(save_dir) - before, reverse=True):
        path = save_dir / name
        if name in RUN_FILES or name.startswith("tensorboard"):
            if path.is_dir():
                path.rmdir()  # its new files, named after it, went first
            else:
                path.unlink(missing_ok=True)


def run_dir_names(save_dir: Path) -> set[str]:
    """The names in a run folder, and those in its tensorboard/ folder as tensorboard/NAME."""
    tb = save_dir / "tensorboard"
    return set(os.listdir(save_dir)) | ({f"tensorboard/{n}" for n in os.listdir(tb)} if tb.is_dir() else set())
