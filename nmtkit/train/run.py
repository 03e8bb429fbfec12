"""`nmtkit train` as a plain function: resolve the model and train configs, open or resume a run.

A run directory holds one run. Starting a new run where one already is (checkpoint_last.pt or
checkpoint_best.pt present) is refused unless `resume` (continue it exactly from
checkpoint_last.pt) or `force` (delete the old run's files and start over). The files of a run
that stopped before its first checkpoint (metrics.jsonl, train.log) hold nothing to continue:
a fresh start replaces them, with a warning.

One process at a time trains in a run directory: train and --resume hold an flock on
`train.lock` there (`nmtkit.output_dirs.DirLock`) and a second process is refused, naming the
first's PID. Everything is checked before the directory is created, so a refused start leaves
nothing behind.

On resume the checkpoint's configs are used; only the TrainConfig fields marked `resume` (stopping
criteria, reporting, hardware) may be changed, and a different value for any other is an error
(it would silently make the run a different experiment).

Every run writes its resolved configuration (architecture, model config, train config) to
RUN/config.json, readable and complete, and hands the same text to `show_config` at the start.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shutil
from pathlib import Path
from typing import Any, Callable

from nmtkit.errors import CheckpointError, ConfigError, OutputExistsError
from nmtkit.models.presets import ModelOverrides, resolve_model, training_defaults
from nmtkit.options import option_name, resume_overridable
from nmtkit.output_dirs import DirLock
from nmtkit.outputs import check_output_dir, check_outputs_vs_inputs, write_text
from nmtkit.train.config import TrainConfig
from nmtkit.train.run_files import BEST, LAST, kept_checkpoints, kept_update
from nmtkit.train.tensorboard import TensorBoardCallbacks, require_tensorboard, tensorboard_dir

log = logging.getLogger(__name__)

RUN_FILES = (LAST, BEST, "metrics.jsonl", "curves.png", "train.log", "config.json")
CONFIG_FILE = "config.json"


LOCK_FILE = "train.lock"


def run_lock(save_dir: Path) -> DirLock:
    """The lock of `save_dir` (one training process per run directory): `acquire` or `check`
    raise an OutputError naming the holder's PID when another live `nmtkit train` holds it."""
    return DirLock(save_dir, LOCK_FILE, "run directory (one training run at a time)")


def check_run_dir(save_dir: Path, resume: bool, force: bool) -> None:
    """Refuse to mix two runs in one directory (see the module docstring)."""
    if resume and force:
        raise ConfigError("--resume and --force exclude each other")
    if save_dir.exists() and not save_dir.is_dir():
        raise ConfigError(f"--save-dir {save_dir} exists and is not a directory")
    present = run_files_present(save_dir)
    if resume:
        if not (save_dir / LAST).exists():
            raise CheckpointError("nothing to resume: no checkpoint_last.pt (start a new run without --resume)",
                                  str(save_dir))
        return
    has_checkpoint = any(f.startswith("checkpoint_") for f in present)
    if present and has_checkpoint and not force:
        raise OutputExistsError(f"already holds a run ({', '.join(present)}): pass --resume to continue it "
                                "or --force to start over", str(save_dir))


def stale_run_files(save_dir: Path) -> list[str]:
    """The files of a run that stopped before its first checkpoint: nothing in them can be
    continued, so a fresh start replaces them (instead of demanding --force)."""
    present = run_files_present(save_dir)
    return [] if any(f.startswith("checkpoint_") for f in present) else present


def is_run_file(name: str) -> bool:
    """Whether a file of this name in a run directory is one the run writes (and --force deletes)."""
    return name in RUN_FILES or name == "tensorboard" or kept_update(name) is not None


def run_files_present(save_dir: Path) -> list[str]:
    """The names of a run's files (RUN_FILES and kept checkpoints) present in `save_dir`."""
    return [f for f in RUN_FILES if (save_dir / f).exists()] + [p.name for p in kept_checkpoints(save_dir)]


def clear_run_dir(save_dir: Path) -> None:
    for f in RUN_FILES:
        (save_dir / f).unlink(missing_ok=True)
    for p in kept_checkpoints(save_dir):
        p.unlink(missing_ok=True)
    shutil.rmtree(save_dir / "tensorboard", ignore_errors=True)


def resume_config(ckpt: dict[str, Any], given: dict[str, Any]) -> TrainConfig:
    """The checkpoint's TrainConfig with the overridable options the user gave changed."""
    old = TrainConfig.from_dict(ckpt["train_config"])
    overridable = resume_overridable(TrainConfig)
    changes = {}
    for key, value in given.items():
        if getattr(old, key) == value:
            continue
        if key not in overridable:
            raise ConfigError(f"{option_name(key)} {value} differs from the run being resumed "
                              f"({getattr(old, key)}); start a new run to change it")
        changes[key] = value
    return old.replace(**changes)


def _check_given(train_options: dict[str, Any], model_overrides: Any) -> ModelOverrides:
    """Unknown option names are an error that lists the valid ones; the model overrides as a
    `ModelOverrides` (a dict of its fields is accepted)."""
    valid = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(train_options) - valid)
    if unknown:
        raise ConfigError(f"unknown train options {unknown}; valid: {sorted(valid)}")
    if isinstance(model_overrides, ModelOverrides):
        return model_overrides
    model_fields = {f.name for f in dataclasses.fields(ModelOverrides)}
    unknown = sorted(set(model_overrides or {}) - model_fields)
    if unknown:
        raise ConfigError(f"unknown model options {unknown}; valid: {sorted(model_fields)}")
    return ModelOverrides(**(model_overrides or {}))


def _resumed_configs(ckpt: dict[str, Any], data: Any, data_dir: Any, save_dir: Path, train_options: dict[str, Any],
                     overrides: dict[str, Any]) -> tuple[TrainConfig, str, dict[str, Any]]:
    """The run's configs from its checkpoint, with the options that may change on resume changed."""
    cfg = resume_config(ckpt, train_options)
    arch, model_config = ckpt["arch"], dict(ckpt["model_config"])
    for key, value in overrides.items():
        if model_config.get(key) != value:
            raise ConfigError(f"{option_name(key)} {value} differs from the run being resumed "
                              f"({model_config.get(key)})")
    if ckpt["src_vocab"] != data.src_vocab.to_list() or ckpt["tgt_vocab"] != data.tgt_vocab.to_list():
        raise CheckpointError(f"the vocabularies of {data_dir} differ from the run's: resume with the "
                              "data directory the run was started with", str(save_dir / LAST))
    return cfg, arch, model_config


def _new_configs(data: Any, train_options: dict[str, Any], overrides: dict[str, Any]
                 ) -> tuple[TrainConfig, str, dict[str, Any]]:
    """A new run's configs: the given options over the preset's defaults over TrainConfig's."""
    preset = train_options.get("preset")
    arch, model_config = resolve_model(train_options.get("arch"), preset, overrides, len(data.src_vocab),
                                       len(data.tgt_vocab))
    values = training_defaults(arch, preset)
    values.update({k: v for k, v in train_options.items() if v is not None})
    values["arch"], values["preset"] = arch, preset
    if values.get("max_tokens") is not None and "batch_size" not in train_options:
        values["batch_size"] = None  # a token budget replaces the preset's pair count
    return TrainConfig.from_dict(values), arch, model_config


def config_text(cfg: TrainConfig, arch: str, model_config: dict[str, Any]) -> str:
    """A run's resolved configuration as indented JSON (RUN/config.json)."""
    return json.dumps({"arch": arch, "model_config": model_config, "train_config": cfg.to_dict()},
                      indent=2, sort_keys=False) + "\n"


def run_training(
    data_dir: str | Path,
    save_dir: str | Path,
    train_options: dict[str, Any],
    model_overrides: ModelOverrides | dict[str, Any] | None = None,
    *,
    resume: bool = False,
    force: bool = False,
    callbacks: Any = None,
    loss_hook: Callable | None = None,
    show_config: Callable[[str], None] | None = None,
):
    """Train (or resume) a model; returns the `TrainResult`.

    `train_options`: the TrainConfig fields given explicitly (the others come from the preset's
    defaults, then TrainConfig's). `model_overrides`: the model fields given (`ModelOverrides`).
    `show_config` receives the resolved configuration's text (rank 0 only).
    """
    from nmtkit.checkpoint import load_checkpoint
    from nmtkit.train import distributed as ddp
    from nmtkit.train.data import DataDir

    save_dir = Path(save_dir)
    overrides = _check_given(train_options, model_overrides).given()
    info = ddp.env_info()
    # everything is checked before anything is written: a refused start leaves nothing behind
    check_outputs_vs_inputs([("--data", data_dir)], folders=[("--save-dir", save_dir, is_run_file)])
    if info.is_main:
        run_lock(save_dir).check()
    check_run_dir(save_dir, resume, force)
    data = DataDir.open(data_dir)
    ckpt = load_checkpoint(save_dir / LAST) if resume else None
    if ckpt is not None:
        cfg, arch, model_config = _resumed_configs(ckpt, data, data_dir, save_dir, train_options, overrides)
    else:
        cfg, arch, model_config = _new_configs(data, train_options, overrides)
    tb_dir = tensorboard_dir(cfg.tensorboard, save_dir)
    if tb_dir is not None:  # a missing package fails before the run writes anything (new or resumed)
        require_tensorboard()
    lock = None
    if info.is_main:  # a read-only or uncreatable run folder fails now, not at the first checkpoint
        check_output_dir(save_dir, "--save-dir run folder")
        lock = run_lock(save_dir).acquire()
    try:
        if lock is not None:
            _start_run(save_dir, cfg, arch, model_config, tb_dir, resume, force, show_config)
        return _train(cfg, data, save_dir, arch, model_config, ckpt, callbacks, info, loss_hook, tb_dir)
    finally:
        if lock is not None:
            lock.release()


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
            clear_run_dir(save_dir)
    text = config_text(cfg, arch, model_config)
    write_text(save_dir / CONFIG_FILE, text)
    if show_config is not None:
        show_config(text)


def _train(cfg, data, save_dir, arch, model_config, ckpt, callbacks, info, loss_hook, tb_dir):
    """Build the Trainer and run it, closing it (its log and metrics files) and the
    TensorBoard writer either way."""
    from nmtkit.train.context import TrainContext
    from nmtkit.train.trainer import Trainer

    tb = None
    if tb_dir is not None and info.is_main:
        start = int(ckpt["trainer"]["update"]) if ckpt is not None else 0
        callbacks = tb = TensorBoardCallbacks(tb_dir, callbacks, start_update=start)
    try:
        ctx = TrainContext(cfg, data, save_dir, arch, model_config, resume=ckpt, callbacks=callbacks,
                           dist_info=info, loss_hook=loss_hook)
        trainer = Trainer(ctx)
        try:
            result = trainer.train()
        except BaseException:
            with contextlib.suppress(OSError):  # e.g. a full disk: the first error is the one to report
                trainer.close()
            raise
        trainer.close()
    finally:
        if tb is not None:
            tb.close()
    return result
