"""`nmtkit train` as a plain function: resolve the model and train configs, open or resume a run.

A run directory holds one run. Starting a new run where one already is (checkpoint_last.pt or
checkpoint_best.pt present) is refused unless `resume` (continue it exactly from
checkpoint_last.pt) or `force` (delete the old run's files and start over). The files of a run
that stopped before its first checkpoint (metrics.jsonl, train.log) hold nothing to continue:
a fresh start replaces them, with a warning.

One process at a time trains in a run directory: train and --resume hold an flock on
`train.lock` there (`nmtkit.outputs.DirLock`) and a second process is refused, naming the
first's PID. Everything is checked before the directory is created, so a refused start leaves
nothing behind.

On resume the checkpoint's configs are used; only the options in `RESUME_OVERRIDABLE` (stopping
criteria, reporting, hardware) may be changed, and a different value for any other is an error
(it would silently make the run a different experiment).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import shutil
from pathlib import Path
from typing import Any, Callable

from nmtkit.errors import CheckpointError, ConfigError, OutputExistsError
from nmtkit.outputs import DirLock, check_output_dir, check_outputs_vs_inputs
from nmtkit.train.config import PAPER_PRESETS, TrainConfig
from nmtkit.train.tensorboard import TensorBoardCallbacks, require_tensorboard, tensorboard_dir

log = logging.getLogger(__name__)

RUN_FILES = ("checkpoint_last.pt", "checkpoint_best.pt", "metrics.jsonl", "curves.png", "train.log")
RESUME_OVERRIDABLE = frozenset({
    "max_updates", "max_epochs", "max_time", "patience", "valid_every", "valid_bleu_samples", "valid_beam",
    "valid_batch_size", "save_every", "keep_every", "log_every", "on_nan", "tensorboard", "device", "threads", "precision", "fuse", "tf32",
})


def train_defaults(arch: str, preset: str | None) -> dict[str, Any]:
    """TrainConfig defaults implied by the model preset (the paper's procedure for its presets)."""
    from nmtkit.models import presets

    name = preset if preset is not None else (arch if arch in presets.TRAIN_DEFAULTS else None)
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    if name is None:
        d = dict(presets.TRAIN_DEFAULTS.get("rnnsearch-50", {}))
    else:
        d = presets.train_defaults(name)
    out = {k: v for k, v in d.items() if k in fields}
    if "sort_batches" in d:
        out["sort_pool"] = int(d["sort_batches"]) * int(d.get("batch_size", 80))
    paper = name is None or name in PAPER_PRESETS
    out["normalize_loss"] = "sentences" if paper else "tokens"
    return out


def resolve_model(
    arch: str | None, preset: str | None, overrides: dict[str, Any], src_vocab: int, tgt_vocab: int
) -> tuple[str, dict[str, Any]]:
    """(arch, model config dict) from a preset and/or an arch, size overrides and the vocab sizes."""
    from nmtkit.models import ARCHS, config_class, make_config, presets

    if preset is not None:
        p_arch, cfg = presets.preset(preset)
        if arch is not None and arch != p_arch:
            raise ConfigError(f"--arch {arch} contradicts --preset {preset} (a {p_arch} preset)")
        arch = p_arch
    else:
        arch = arch or "rnnsearch"
        if arch not in ARCHS:
            raise ConfigError(f"unknown architecture '{arch}' (choose from {', '.join(ARCHS)})")
        cfg = presets.preset(arch)[1] if arch in presets.PRESETS else {}
    valid = {f.name for f in dataclasses.fields(config_class(arch))}
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in valid:
            raise ConfigError(f"--{key.replace('_', '-')} does not apply to {arch}")
        cfg[key] = value
    cfg["src_vocab_size"], cfg["tgt_vocab_size"] = src_vocab, tgt_vocab
    try:
        model_config = make_config(arch, {k: v for k, v in cfg.items() if k in valid})
    except ConfigError as err:  # "RNNSearchConfig.dropout must be ..." -> "--dropout must be ..."
        raise ConfigError(re.sub(r"\b\w+Config\.(\w+)", lambda m: "--" + m[1].replace("_", "-"), str(err))) from None
    return arch, dataclasses.asdict(model_config)


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
        if not (save_dir / "checkpoint_last.pt").exists():
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


def kept_checkpoints(save_dir: Path) -> list[Path]:
    """The checkpoint_<update>.pt files of --keep-every in a run directory."""
    return [p for p in save_dir.glob("checkpoint_*.pt") if p.stem.split("_", 1)[1].isdigit()]


def is_run_file(name: str) -> bool:
    """Whether a file of this name in a run directory is one the run writes (and --force deletes)."""
    return name in RUN_FILES or name == "tensorboard" or (
        name.startswith("checkpoint_") and name.endswith(".pt") and name[11:-3].isdigit())


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
    changes = {}
    for key, value in given.items():
        if getattr(old, key) == value:
            continue
        if key not in RESUME_OVERRIDABLE:
            raise ConfigError(f"--{key.replace('_', '-')} {value} differs from the run being resumed "
                              f"({getattr(old, key)}); start a new run to change it")
        changes[key] = value
    return old.replace(**changes)


def run_training(
    data_dir: str | Path,
    save_dir: str | Path,
    train_options: dict[str, Any],
    model_overrides: dict[str, Any] | None = None,
    *,
    resume: bool = False,
    force: bool = False,
    callbacks: Any = None,
    loss_hook: Callable | None = None,
):
    """Train (or resume) a model; returns the `TrainResult`.

    `train_options`: TrainConfig fields given explicitly (others come from the preset's
    defaults, then TrainConfig's). `model_overrides`: model config fields (emb_dim, ...).
    """
    from nmtkit.checkpoint import load_checkpoint
    from nmtkit.train import distributed as ddp
    from nmtkit.train.data import DataDir
    from nmtkit.train.trainer import LAST

    save_dir = Path(save_dir)
    model_overrides = {k: v for k, v in (model_overrides or {}).items() if v is not None}
    info = ddp.env_info()
    # everything is checked before anything is written: a refused start leaves nothing behind
    check_outputs_vs_inputs([("--data", data_dir)], folders=[("--save-dir", save_dir, is_run_file)])
    if info.is_main:
        run_lock(save_dir).check()
    if train_options.get("tensorboard"):  # before the run folder is made (a resumed run's is checked below)
        require_tensorboard()
    check_run_dir(save_dir, resume, force)
    data = DataDir.open(data_dir)
    ckpt = None
    if resume:
        ckpt = load_checkpoint(save_dir / LAST)
        cfg = resume_config(ckpt, train_options)
        arch, model_config = ckpt["arch"], dict(ckpt["model_config"])
        for key, value in model_overrides.items():
            if model_config.get(key) != value:
                raise ConfigError(f"--{key.replace('_', '-')} {value} differs from the run being resumed "
                                  f"({model_config.get(key)})")
        if ckpt["src_vocab"] != data.src_vocab.to_list() or ckpt["tgt_vocab"] != data.tgt_vocab.to_list():
            raise CheckpointError(f"the vocabularies of {data_dir} differ from the run's: resume with the "
                                  "data directory the run was started with", str(save_dir / LAST))
    else:
        arch_opt = train_options.get("arch")
        preset = train_options.get("preset")
        arch, model_config = resolve_model(arch_opt, preset, model_overrides, len(data.src_vocab),
                                           len(data.tgt_vocab))
        values = train_defaults(arch, preset)
        values.update({k: v for k, v in train_options.items() if v is not None})
        values["arch"], values["preset"] = arch, preset
        if values.get("max_tokens") is not None and "batch_size" not in train_options:
            values["batch_size"] = None  # a token budget replaces the preset's pair count
        cfg = TrainConfig.from_dict(values)
    tb_dir = tensorboard_dir(cfg.tensorboard, save_dir)
    if tb_dir is not None:  # a missing package fails before the run writes anything
        require_tensorboard()
    lock = None
    if info.is_main:  # a read-only or uncreatable run folder fails now, not at the first checkpoint
        check_output_dir(save_dir, "--save-dir run folder")
        lock = run_lock(save_dir).acquire()
    try:
        if lock is not None:
            check_run_dir(save_dir, resume, force)  # again, now that no other process can change it
        if tb_dir is not None and info.is_main:  # an unwritable folder fails before the run writes anything
            check_output_dir(tb_dir, "--tensorboard folder")
        if not resume and info.is_main:
            if not force and stale_run_files(save_dir):
                log.warning("%s: replacing %s of a run that saved no checkpoint", save_dir,
                            ", ".join(stale_run_files(save_dir)))
                clear_run_dir(save_dir)
            if force:
                clear_run_dir(save_dir)
        return _train(cfg, data, save_dir, arch, model_config, ckpt, callbacks, info, loss_hook, tb_dir)
    finally:
        if lock is not None:
            lock.release()


def _train(cfg, data, save_dir, arch, model_config, ckpt, callbacks, info, loss_hook, tb_dir):
    """Build the Trainer and run it, closing it (its log and metrics files) and the
    TensorBoard writer either way."""
    from nmtkit.train.trainer import Trainer

    tb = None
    if tb_dir is not None and info.is_main:
        start = int(ckpt["trainer"]["update"]) if ckpt is not None else 0
        callbacks = tb = TensorBoardCallbacks(tb_dir, callbacks, start_update=start)
    try:
        trainer = Trainer(cfg, data, save_dir, arch, model_config, resume=ckpt, callbacks=callbacks,
                          dist_info=info, loss_hook=loss_hook)
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
