"""`nmtkit train` as a plain function: `run(RunConfig, callbacks) -> TrainResult`, and from Python
`nmtkit.train(data_dir, run_dir, preset=..., **options)` (this package, callable: `train`).

A run directory holds one run: a new start over one is refused unless `resume` (continue exactly
from checkpoint_last.pt) or `force` (start over). A new run is built in a staging folder inside
RUN and committed at its first checkpoint (`nmtkit.io.dirs.commit_run`). One process at a time
trains in a folder (an flock on train.lock); a refused start leaves no run file (a folder it made
keeps its train.lock: see `DirLock`). Every run writes its
resolved configuration to RUN/config.json and hands the same text to `on_config`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import shutil
import sys
import threading
import types
from pathlib import Path
from typing import Any, Sequence

from nmtkit import signals
from nmtkit.devices import resolve_device, threads_restored
from nmtkit.errors import CheckpointError, ConfigError, OutputExistsError
from nmtkit.io.checks import check_outputs_vs_inputs, real_path
from nmtkit.io.dirs import (
    CONFIG_FILE,
    LAST,
    STAGING,
    TB_EVENTS,
    DirLock,
    check_run_files_are_files,
    clean_stale_temp_dirs,
    commit_run,
    has_checkpoint,
    is_run_file,
    make_temp_dir,
    new_folders,
    remove_folders,
    run_files_present,
    run_lock,
)
from nmtkit.io.files import check_output_dir, write_text
from nmtkit.options import off_default, refuse_without
from nmtkit.train.config import RunConfig, TrainConfig, TrainOptions, training_defaults
from nmtkit.train.events import CALLBACK_METHODS, Callbacks, FanOut, TrainInterrupted, TrainResult
from nmtkit.train.metrics import TensorBoardCallbacks, keep_early_records, require_tensorboard
from nmtkit.train.presets import ModelOverrides, resolve_model
from nmtkit.train.resume import config_text, resumed_configs

__all__ = ["RunConfig", "TrainInterrupted", "TrainOptions", "TrainResult", "run", "train"]

log = logging.getLogger(__name__)


def train(data_dir: str | os.PathLike, run_dir: str | os.PathLike, *, preset: str | None = None,
          resume: bool = False, force: bool = False, callbacks: Callbacks | Sequence[Callbacks] = (),
          **options: Any) -> TrainResult:
    """`nmtkit train --data DATA_DIR --save-dir RUN_DIR ...` from Python: `options` are its options by
    their long names (`TrainOptions`'s and `ModelOverrides`' fields). Ctrl-C, SIGTERM or SIGHUP saves
    checkpoint_last.pt, then raises `TrainInterrupted` (a KeyboardInterrupt) holding the `TrainResult`."""
    train_names = {f.name for f in dataclasses.fields(TrainOptions)}
    model_names = {f.name for f in dataclasses.fields(ModelOverrides)}
    unknown = sorted(set(options) - train_names - model_names)
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)} for nmtkit.train; valid ones: "
                          f"{', '.join(sorted(train_names | model_names))}")
    given = TrainOptions(preset=preset, **{k: v for k, v in options.items() if k in train_names})
    model = ModelOverrides(**{k: v for k, v in options.items() if k in model_names})
    return run(RunConfig(data_dir, run_dir, given, model, resume=resume, force=force), callbacks)


class _CallableModule(types.ModuleType):
    """This package's type: `nmtkit.train(...)` calls `train` (the package shadows the function)."""

    def __call__(self, *args: Any, **kwargs: Any) -> TrainResult:
        return train(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule


def check_run_dir(save_dir: Path, resume: bool, force: bool, main: bool = True) -> None:
    """Refuse to mix two runs in one directory. `main`: this process writes the run (rank 0)."""
    if save_dir.exists() and not save_dir.is_dir():
        raise ConfigError(f"--save-dir {save_dir} exists and is not a directory")
    check_run_files_are_files(save_dir)
    present = run_files_present(save_dir)
    if resume:
        if not (save_dir / LAST).exists():
            if not present:
                start = "start a new run without --resume"
            elif has_checkpoint(present):
                start = "its other checkpoints hold no training state: start the run again with --force"
            else:
                start = f"the run that wrote its {', '.join(present)} saved no checkpoint: start it again with --force"
            raise CheckpointError(f"nothing to resume: no checkpoint_last.pt ({start})", str(save_dir))
        return
    if present and has_checkpoint(present) and not force:
        raise OutputExistsError(f"already holds a run ({', '.join(present)}): pass --resume to continue it "
                                "or --force to start over", str(save_dir))
    if present and not force and main:
        raise OutputExistsError(f"holds the files of a run that saved no checkpoint ({', '.join(present)}): pass "
                                "--force to replace them", str(save_dir))


def _checked_callbacks(callbacks: Any) -> Callbacks | None:
    """One Callbacks of `callbacks` (one, or a sequence), each checked for every method of `Callbacks`."""
    many = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    for one in many:
        missing = [m for m in CALLBACK_METHODS if not callable(getattr(one, m, None))]
        if missing:
            raise TypeError(f"nmtkit.train.run's callbacks lack {', '.join(missing)}: pass nmtkit.train.events."
                            "Callbacks (its methods do nothing unless overridden)")
    return None if not many else many[0] if len(many) == 1 else FanOut(many)


def _new_configs(data: Any, options: TrainOptions, model: ModelOverrides) -> tuple[TrainConfig, str, dict[str, Any]]:
    """A new run's configs: the given options over the preset's defaults over TrainConfig's."""
    arch, model_config = resolve_model(options.arch, options.preset, model.given(), len(data.src_vocab),
                                       len(data.tgt_vocab))
    values = training_defaults(arch, options.preset)
    if options.optimizer not in (None, values["optimizer"]) and options.lr is None:  # --lr's default for it
        values["lr"] = {"adadelta": 1.0, "adam": 1e-3}.get(options.optimizer, values["lr"])
    values.update(options.given())
    values.update(arch=arch, preset=options.preset)
    if options.max_tokens is not None and options.batch_size is None:
        values["batch_size"] = None  # a token budget replaces the preset's pair count
    if options.max_tokens is not None and options.sort_pool is None:
        values["sort_pool"] = 0  # and batches the whole corpus sorted (docs/experiments.md)
    cfg = TrainConfig.from_dict(values)
    # options another option leaves unused: refused here, not in TrainConfig, so that a stored config stays resumable
    for used, names, needed in ((cfg.lr_schedule == "plateau", ("lr_decay", "lr_patience", "min_lr"), "--lr-schedule plateau"),
                                (cfg.optimizer == "adam", ("adam_beta1", "adam_beta2", "adam_eps"), "--optimizer adam"),
                                (cfg.optimizer == "adadelta", ("adadelta_rho", "adadelta_eps"), "--optimizer adadelta"),
                                (cfg.valid_bleu_samples > 0, ("valid_beam",), "--valid-bleu-samples above 0")):
        if not used:
            refuse_without(off_default(cfg, names), needed)
    return cfg, arch, model_config


_ONE_RUN = threading.Lock()  # held by the process's training run: its RNGs, torch threads and logger are the process's
os.register_at_fork(after_in_child=lambda: globals().update(_ONE_RUN=threading.Lock()))  # a child is another process


def run(config: RunConfig, callbacks: Callbacks | Sequence[Callbacks] = ()) -> TrainResult:
    """Train (or resume) as `config` says, `callbacks` getting rank 0's events; a stop signal: as in `train`."""
    if not _ONE_RUN.acquire(blocking=False):
        raise ConfigError("another training run is in progress in this process (a run seeds the process's random "
                          "generators and sets its torch threads and nmtkit logger): train one run at a time, or "
                          "each in its own process")
    try:
        return _run(config, callbacks)
    finally:
        _ONE_RUN.release()


def _run(config: RunConfig, callbacks: Any) -> TrainResult:
    from nmtkit.checkpoint import load_checkpoint
    from nmtkit.train import distributed as ddp
    from nmtkit.train.data import DataDir

    if not isinstance(config, RunConfig):
        raise TypeError(f"nmtkit.train.run takes a RunConfig, not {type(config).__name__}")
    callbacks = _checked_callbacks(callbacks)
    data_dir, resume, force, save_dir = config.data_dir, config.resume, config.force, Path(config.save_dir)
    info = ddp.env_info()
    check_outputs_vs_inputs([("--data", data_dir)], folders=[("--save-dir", save_dir, is_run_file)])
    if info.is_main:
        run_lock(save_dir).check()
    check_run_dir(save_dir, resume, force, info.is_main)
    created = new_folders(save_dir) if info.is_main else []  # removed on a failure while empty (umask 777)
    lock = staging = None
    early = keep_early_records() if info.is_main else None  # warnings before train.log opens, for it
    level = logging.getLogger("nmtkit").level  # train.log lowers it to INFO while the run writes
    try:
        if info.is_main and resume:  # before checkpoint_last.pt is read: no other run replaces it meanwhile
            lock = _lock_run(save_dir)
        data = DataDir.open(data_dir)
        data.valid_split()  # a dev set to validate on, before anything is written
        ckpt = load_checkpoint(save_dir / LAST) if resume else None
        cfg, arch, model_config = (_new_configs(data, config.options, config.model) if ckpt is None else
                                   resumed_configs(ckpt, data, data_dir, save_dir, config.options, config.model,
                                                   info.world_size))
        cfg, tb_dir = _checked_tensorboard_dir(cfg, data_dir, save_dir, config.options.tensorboard is not None)
        data.check_bleu_samples(cfg.valid_bleu_samples)  # dev BLEU of nothing: nan, never shown, never a best
        _check_hardware(cfg, arch, resolve_device(cfg.device, info.local_rank))  # before anything is written
        if info.is_main and lock is None:
            lock = _lock_run(save_dir)
        if lock is not None:
            staging = _stage_run(save_dir, tb_dir, resume, force)
            text = config_text(cfg, arch, model_config)  # config.json in the folder the run writes, and the callbacks
            write_text((staging or save_dir) / CONFIG_FILE, text)
            if callbacks is not None:
                callbacks.on_config(text)
        commit = None if staging is None else functools.partial(commit_run, staging, save_dir, force)
        if staging is not None and tb_dir is not None and real_path(tb_dir) == real_path(save_dir / "tensorboard"):
            tb_dir = staging / "tensorboard"  # committed with the run's files
        result = _train(cfg, data, staging or save_dir, commit, arch, model_config, ckpt, callbacks, info, tb_dir)
    except BaseException:
        # a new run that failed before its first checkpoint: its staging folder goes, with torchrun's
        # SIGTERM (sent to every rank once one has failed) held off, not half deleted
        if staging is not None:
            with signals.held(), contextlib.suppress(OSError):  # the error that stopped the run is the one to report
                shutil.rmtree(staging)
        remove_folders(created)  # once its lock file is in, the folder stays (see DirLock)
        raise
    finally:
        logging.getLogger("nmtkit").removeHandler(early)
        logging.getLogger("nmtkit").setLevel(level)
        if lock is not None:
            lock.release()
    if result.interrupted:
        raise TrainInterrupted(result)
    return result


def _lock_run(save_dir: Path) -> DirLock:
    """The run's lock, taken by rank 0; a read-only or uncreatable run folder fails now."""
    check_output_dir(save_dir, "--save-dir run folder")
    return run_lock(save_dir).acquire()


def _checked_tensorboard_dir(cfg: TrainConfig, data_dir: str | Path, save_dir: Path,
                            given: bool) -> tuple[TrainConfig, Path | None]:
    """--tensorboard's folder (None without it), checked, with the package, before the run writes; and
    `cfg` recording a folder inside the run relative to it, so that it moves with the run, and any
    other absolute. A relative folder `given` (the Python API's) is the current directory's, a
    recorded one the run's."""
    if cfg.tensorboard is None:
        return cfg, None
    tb_dir = Path(os.path.abspath(os.path.join("" if given else save_dir, cfg.tensorboard)))
    check_outputs_vs_inputs([("--data", data_dir)],
                            folders=[("--tensorboard", tb_dir, lambda name: name.startswith(TB_EVENTS))])
    if tb_dir.exists():
        check_output_dir(tb_dir, "--tensorboard folder", create=False)
    require_tensorboard()
    inside = os.path.relpath(tb_dir, os.path.abspath(save_dir))
    return dataclasses.replace(cfg, tensorboard=str(tb_dir) if inside.split(os.sep)[0] == ".." else inside), tb_dir


def _check_hardware(cfg: TrainConfig, arch: str, device) -> None:
    """A GPU that is not there, or --fuse on / --cuda-graphs on where they cannot run: refused
    before the run folder is written (TrainContext resolves both again for its model)."""
    from nmtkit.models import model_class
    from nmtkit.models.fast.fusion import resolve_cuda_graphs, resolve_fuse

    resolve_fuse(cfg.fuse, device)
    resolve_cuda_graphs(cfg.cuda_graphs, device, model_class(arch))


def _stage_run(save_dir: Path, tb_dir: Path | None, resume: bool, force: bool) -> Path | None:
    """On rank 0, holding the run's lock: check the run directory again, remove a killed start's
    staging folder, and stage a new run (its folder returned; None for a resumed run)."""
    check_run_dir(save_dir, resume, force)
    if tb_dir is not None:  # an unwritable folder fails before the run writes anything
        check_output_dir(tb_dir, "--tensorboard folder")
    clean_stale_temp_dirs(save_dir / STAGING, log.warning, locked=True)  # a killed start's pid may be another's now
    return None if resume else make_temp_dir(save_dir / STAGING)


def _train(cfg, data, run_dir, commit, arch, model_config, ckpt, callbacks, info, tb_dir):
    """Build the Trainer and run it, closing it and the TensorBoard writer either way."""
    from nmtkit.models.precision import tf32_restored
    from nmtkit.train import distributed as ddp
    from nmtkit.train.context import TrainContext, rng_state, set_rng_state
    from nmtkit.train.trainer import Trainer

    tb, rngs = None, rng_state()  # the caller's random, numpy and torch generators, which the run seeds
    start = int(ckpt["trainer"]["update"]) if ckpt is not None else 0
    if tb_dir is not None and info.is_main:
        callbacks = tb = TensorBoardCallbacks(tb_dir, callbacks, start_update=start)
        if commit is not None and tb_dir == run_dir / "tensorboard":  # staged with the run's files
            commit = functools.partial(tb.reopened_after, commit)
    try:
        with threads_restored(), tf32_restored():  # the run sets torch's threads (--threads) and TF32 (--tf32)
            try:
                ctx = TrainContext(cfg, data, run_dir, arch, model_config, resume=ckpt, callbacks=callbacks,
                                   dist_info=info)
            except RuntimeError as err:  # another rank stopped on its own input (a damaged checkpoint)
                lost = ddp.lost_process_error(err, start, None if ckpt is None else start) if info.enabled else None
                if lost is None:
                    raise
                raise lost from None
            trainer = Trainer(ctx, commit)
            try:
                result = trainer.train()
            except BaseException:
                with signals.held(), contextlib.suppress(OSError):  # e.g. a full disk: the first error is the one to report
                    trainer.close()
                raise
            trainer.close()
    finally:
        set_rng_state(rngs)
        if tb is not None:
            tb.close()
    return result
