"""`nmtkit train` as a plain function: resolve the model and train configs, open or resume a run.

A run directory holds one run. Starting a new run where one already is (checkpoint_last.pt or
checkpoint_best.pt present) is refused unless `resume` (continue it exactly from
checkpoint_last.pt) or `force` (start over, replacing the old run). `force` moves the old run's
files into RUN/.replaced-run, deleted when the new run saves its first checkpoint and put back
when it fails before that: a start that fails (bad data, an option that breaks the model) never
loses the run it was to replace. The files of a run that stopped before its first checkpoint
(metrics.jsonl, train.log) hold nothing to continue: a fresh start replaces them, with a warning.

One process at a time trains in a run directory: train and --resume hold an flock on
`train.lock` there (`nmtkit.io.dirs.DirLock`) and a second process is refused, naming the
first's PID. Everything is checked before the directory is created, so a refused start leaves
nothing behind.

On resume the checkpoint's configs are used, checked first as `nmtkit.train.resume` says: only
the TrainConfig fields marked `resume` (stopping criteria, reporting, hardware) may be changed,
and --update-freq where the number of processes changes so that an update sums as many
minibatches as before; a different value for any other is an error (it would silently make the
run a different experiment). The data directory must be the run's.

Every run writes its resolved configuration (architecture, model config, train config) to
RUN/config.json, readable and complete, and hands the same text to `show_config` at the start.
A resume checks checkpoint_last.pt against it, so that another run's checkpoint copied in is
refused instead of continuing that run over this one's files.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

from nmtkit.devices import resolve_device
from nmtkit.errors import CheckpointError, ConfigError, OutputExistsError
from nmtkit.io.checks import check_outputs_vs_inputs
from nmtkit.io.dirs import (
    CONFIG_FILE,
    LAST,
    REPLACED,
    clear_run_dir,
    has_checkpoint,
    is_run_file,
    killed_force_start,
    restore_replaced_run,
    run_dir_names,
    run_files_present,
    run_lock,
    set_aside_run,
    stale_run_files,
    undo_failed_start,
)
from nmtkit.io.files import check_output_dir, write_text
from nmtkit.options import empty_path_message, is_empty_path
from nmtkit.train.config import TrainConfig, TrainOptions, training_defaults
from nmtkit.train.events import CALLBACK_METHODS
from nmtkit.train.presets import ModelOverrides, resolve_model
from nmtkit.train.resume import config_text, resumed_configs
from nmtkit.train.tensorboard import TensorBoardCallbacks, require_tensorboard

log = logging.getLogger(__name__)

def _put_back_killed_force_start(save_dir: Path, main: bool, wait_s: float = 10.0) -> None:
    """The run that a killed `--force` start set aside back in RUN, before any check reads RUN:
    `--resume` continues it, a new start is refused as over any run, `--force` sets it aside
    again. Without this a new start deleted it at its first checkpoint. Rank 0 moves the files,
    holding the run's lock; the other ranks wait for it (they read RUN next). Rank 0 first
    refuses a folder that a live `nmtkit train` holds."""
    if main:
        run_lock(save_dir).check()
    if not killed_force_start(save_dir):
        return
    if not main:  # until rank 0 has moved the last file back (it removes the folder last)
        deadline = time.monotonic() + wait_s
        while (save_dir / REPLACED).is_dir() and time.monotonic() < deadline:
            time.sleep(0.05)
        return
    lock = run_lock(save_dir).acquire()
    try:
        if killed_force_start(save_dir):  # again, holding the lock
            restore_replaced_run(save_dir, "a --force start that was killed before its first checkpoint had set "
                                           "it aside; that start's files are removed")
    finally:
        lock.release()


def check_run_dir(save_dir: Path, resume: bool, force: bool) -> None:
    """Refuse to mix two runs in one directory (see the module docstring)."""
    if save_dir.exists() and not save_dir.is_dir():
        raise ConfigError(f"--save-dir {save_dir} exists and is not a directory")
    present = run_files_present(save_dir)
    if resume:
        if not (save_dir / LAST).exists():
            raise CheckpointError("nothing to resume: no checkpoint_last.pt (start a new run without --resume)",
                                  str(save_dir))
        return
    if present and has_checkpoint(present) and not force:
        raise OutputExistsError(f"already holds a run ({', '.join(present)}): pass --resume to continue it "
                                "or --force to start over", str(save_dir))


def _check_arguments(data_dir: str | Path, save_dir: str | Path, resume: Any, force: Any, hooks: dict[str, Any],
                     callbacks: Any) -> None:
    """run_training's arguments that are no config fields: paths for the two folders (an empty
    one refused as the command line refuses it: Path("") is the current directory), true or
    false for resume and force (a string was taken as true; both together refused), functions
    for the hooks, and callbacks with every method of `Callbacks` (found missing only once the
    run had started)."""
    for name, value in (("resume", resume), ("force", force)):
        if not isinstance(value, bool):
            raise TypeError(f"run_training's {name} is True or False, not {value!r}")
    if resume and force:
        raise ConfigError("--resume and --force exclude each other")
    for name, value in hooks.items():
        if value is not None and not callable(value):
            raise TypeError(f"run_training's {name} is a function or None, not {value!r}")
    missing = [m for m in CALLBACK_METHODS if not callable(getattr(callbacks, m, None))] if callbacks is not None else []
    if missing:
        raise TypeError(f"run_training's callbacks lack {', '.join(missing)}: pass a nmtkit.train.events.Callbacks "
                        "(its methods do nothing unless overridden) or None")
    for opt, path in (("--data", data_dir), ("--save-dir", save_dir)):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"run_training's folder for {opt} is a path, not {type(path).__name__}")
        if is_empty_path(path):
            raise ConfigError(empty_path_message(opt, "directory"))


def _new_configs(data: Any, options: TrainOptions, model: ModelOverrides) -> tuple[TrainConfig, str, dict[str, Any]]:
    """A new run's configs: the given options over the preset's defaults over TrainConfig's."""
    arch, model_config = resolve_model(options.arch, options.preset, model.given(), len(data.src_vocab),
                                       len(data.tgt_vocab))
    values = training_defaults(arch, options.preset)
    values.update(options.given())
    values.update(arch=arch, preset=options.preset)
    if options.max_tokens is not None and options.batch_size is None:
        values["batch_size"] = None  # a token budget replaces the preset's pair count
    return TrainConfig.from_dict(values), arch, model_config


def run_training(
    data_dir: str | Path,
    save_dir: str | Path,
    options: TrainOptions | None = None,
    model: ModelOverrides | None = None,
    *,
    resume: bool = False,
    force: bool = False,
    callbacks: Any = None,
    loss_hook: Callable | None = None,
    show_config: Callable[[str], None] | None = None,
):
    """Train (or resume) a model; returns the `TrainResult`.

    `options`: the TrainConfig fields given (`TrainOptions`; the others come from the preset's
    defaults, then TrainConfig's, or on `resume` from the run's checkpoint). `model`: the model
    fields given (`ModelOverrides`). `show_config` receives the resolved configuration's text
    (rank 0 only).
    """
    from nmtkit.checkpoint import load_checkpoint
    from nmtkit.train import distributed as ddp
    from nmtkit.train.data import DataDir

    options = TrainOptions() if options is None else options
    model = ModelOverrides() if model is None else model
    if not isinstance(options, TrainOptions) or not isinstance(model, ModelOverrides):
        raise TypeError("run_training takes a TrainOptions and a ModelOverrides")
    _check_arguments(data_dir, save_dir, resume, force, {"loss_hook": loss_hook, "show_config": show_config}, callbacks)
    save_dir = Path(save_dir)
    info = ddp.env_info()
    # everything is checked before anything is written: a refused start leaves nothing behind
    check_outputs_vs_inputs([("--data", data_dir)], folders=[("--save-dir", save_dir, is_run_file)])
    _put_back_killed_force_start(save_dir, info.is_main)
    check_run_dir(save_dir, resume, force)
    data = DataDir.open(data_dir)
    data.valid_split()  # a dev set to validate on, before anything is written
    ckpt = load_checkpoint(save_dir / LAST) if resume else None
    if ckpt is not None:
        cfg, arch, model_config = resumed_configs(ckpt, data, data_dir, save_dir, options, model, info.world_size)
    else:
        cfg, arch, model_config = _new_configs(data, options, model)
    tb_dir = _checked_tensorboard_dir(cfg, data_dir)
    _check_hardware(cfg, arch, resolve_device(cfg.device, info.local_rank))  # before anything is written
    lock = None
    if info.is_main:  # a read-only or uncreatable run folder fails now, not at the first checkpoint
        check_output_dir(save_dir, "--save-dir run folder")
        lock = run_lock(save_dir).acquire()
    before = run_dir_names(save_dir) if lock is not None else set()
    try:
        if lock is not None:
            _start_run(save_dir, cfg, arch, model_config, tb_dir, resume, force, show_config)
        return _train(cfg, data, save_dir, arch, model_config, ckpt, callbacks, info, loss_hook, tb_dir)
    except BaseException:
        if lock is not None:
            _undo_failed_start(save_dir, resume, force, before)
        raise
    finally:
        if lock is not None:
            lock.release()


def _undo_failed_start(save_dir: Path, resume: bool, force: bool, before: set[str]) -> None:
    """`nmtkit.io.dirs.undo_failed_start`, with SIGTERM held off (`nmtkit.signals.held`): torchrun's,
    sent to every rank once one has failed, must not cut a --force run's putting back short."""
    from nmtkit import signals

    with signals.held():
        undo_failed_start(save_dir, resume, force, before)


def _checked_tensorboard_dir(cfg: TrainConfig, data_dir: str | Path) -> Path | None:
    """--tensorboard's folder (None without it), refused inside the data directory as --save-dir
    is, and when it exists, unless a writable folder; and the package there: all fail before the
    run writes anything (new or resumed). A folder to create is created under the run's lock."""
    tb_dir = None if cfg.tensorboard is None else Path(cfg.tensorboard)
    if tb_dir is not None:
        check_outputs_vs_inputs([("--data", data_dir)],
                                folders=[("--tensorboard", tb_dir, lambda name: name.startswith("events.out.tfevents"))])
        if tb_dir.exists():
            check_output_dir(tb_dir, "--tensorboard folder", create=False)
        require_tensorboard()
    return tb_dir


def _check_hardware(cfg: TrainConfig, arch: str, device) -> None:
    """A GPU that is not there, or --fuse on / --cuda-graphs on where they cannot run: refused,
    before the run folder is written. Only a check: TrainContext resolves both again, from the
    same config and device, for the model it builds, as it is also built without run_training
    (`Trainer(TrainContext(...))`, the tests)."""
    from nmtkit.models import model_class
    from nmtkit.models.fast.fusion import resolve_cuda_graphs, resolve_fuse

    resolve_fuse(cfg.fuse, device)
    resolve_cuda_graphs(cfg.cuda_graphs, device, model_class(arch))


def _start_run(save_dir: Path, cfg: TrainConfig, arch: str, model_config: dict[str, Any], tb_dir: Path | None,
               resume: bool, force: bool, show_config: Callable[[str], None] | None) -> None:
    """On rank 0, holding the run's lock: check the run directory again (no other process can
    change it now) and the TensorBoard folder, clear an old run's files (a new run), write
    config.json and show it."""
    check_run_dir(save_dir, resume, force)
    if tb_dir is not None:  # an unwritable folder fails before the run writes anything
        check_output_dir(tb_dir, "--tensorboard folder")
    if not resume:
        if not force and stale_run_files(save_dir):
            log.warning("%s: replacing %s of a run that saved no checkpoint", save_dir,
                        ", ".join(stale_run_files(save_dir)))
            clear_run_dir(save_dir)
        if force:
            set_aside_run(save_dir)
    text = config_text(cfg, arch, model_config)
    write_text(save_dir / CONFIG_FILE, text)
    if show_config is not None:
        show_config(text)


def _train(cfg, data, save_dir, arch, model_config, ckpt, callbacks, info, loss_hook, tb_dir):
    """Build the Trainer and run it, closing it (its log and metrics files) and the
    TensorBoard writer either way."""
    from nmtkit import signals
    from nmtkit.devices import threads_restored
    from nmtkit.train.context import TrainContext
    from nmtkit.train.trainer import Trainer

    tb = None
    if tb_dir is not None and info.is_main:
        start = int(ckpt["trainer"]["update"]) if ckpt is not None else 0
        callbacks = tb = TensorBoardCallbacks(tb_dir, callbacks, start_update=start)
    try:
        with threads_restored():  # the run sets torch's threads (its --threads) for the process
            ctx = TrainContext(cfg, data, save_dir, arch, model_config, resume=ckpt, callbacks=callbacks,
                               dist_info=info, loss_hook=loss_hook)
            trainer = Trainer(ctx)
            try:
                result = trainer.train()
            except BaseException:
                with signals.held(), contextlib.suppress(OSError):  # e.g. a full disk: the first error is the one to report
                    trainer.close()
                raise
            trainer.close()
    finally:
        if tb is not None:
            tb.close()
    return result
