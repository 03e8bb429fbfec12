"""What a resumed run takes from its checkpoint, and what it checks first: the configs (only the
TrainConfig fields marked `resume` may change), the data directory (the one the checkpoint
records) and the run's record of itself. Nothing here writes: `nmtkit.train.run` resumes."""
from __future__ import annotations

import json
import logging
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from nmtkit.data.manifest import recorded_digests
from nmtkit.errors import CheckpointError, ConfigError
from nmtkit.io.dirs import BEST, CONFIG_FILE, LAST, kept_checkpoints, kept_update
from nmtkit.options import option_name, resume_overridable
from nmtkit.text.pipeline import pipeline_differences
from nmtkit.train.config import TrainConfig, TrainOptions
from nmtkit.train.events import TrainState
from nmtkit.train.presets import ModelOverrides

log = logging.getLogger(__name__)


def config_text(cfg: TrainConfig, arch: str, model_config: dict[str, Any]) -> str:
    """A run's resolved configuration as indented JSON (RUN/config.json)."""
    return json.dumps({"arch": arch, "model_config": model_config, "train_config": cfg.to_dict()},
                      indent=2, sort_keys=False) + "\n"


def resume_config(ckpt: dict[str, Any], options: TrainOptions, world_size: int = 1) -> TrainConfig:
    """The checkpoint's TrainConfig with the overridable options the user gave changed."""
    old = TrainConfig.from_dict(ckpt["train_config"])
    overridable = resume_overridable(TrainConfig)
    changes = {"update_freq": resumed_update_freq(old.update_freq, ckpt["trainer"]["world_size"], world_size,
                                                  options.update_freq)}
    for name, value in options.given().items():
        was = getattr(old, name)
        if was == value or name == "update_freq" or name == "ema_decay" and not was and not value:  # 0, None: none
            continue
        scores = old.best_metric == "bleu" and name in ("valid_bleu_samples", "valid_beam")  # not only reported
        if name not in overridable or scores:
            why = "with --best-metric bleu it decides checkpoint_best.pt: " if scores else ""
            raise ConfigError(f"{option_name(name)} {value} differs from the run being resumed "
                              f"({'not given' if was is None else was}); {why}start a new run to change it")
        changes[name] = value
    return replace(old, **changes)


def resumed_update_freq(was: int, was_world: int, world: int, given: int | None) -> int:
    """--update-freq of a run resumed with `world` processes: one that keeps the minibatches per
    update (`world` x --update-freq) of the run saved by `was_world` processes at `was`; a product
    that changes is refused (it would make the run another experiment)."""
    now = was if given is None else given
    per_update = was_world * was
    if world * now == per_update:
        if world != was_world:
            log.warning("resuming a run of %d process(es) with %d: --update-freq %d keeps its %d minibatch(es) per "
                        "update; the run continues with the same updates within each epoch, not bit for bit",
                        was_world, world, now, per_update)
        return now
    hint = (f"resume with --update-freq {per_update // world}" if per_update % world == 0 else
            f"resume with a number of processes that divides {per_update}, or start a new run")
    raise ConfigError(f"{world} process(es) x --update-freq {now} = {world * now} minibatch(es) per update; the run "
                      f"being resumed made {per_update} ({was_world} x --update-freq {was}): {hint}")


def resumed_configs(ckpt: dict[str, Any], data: Any, data_dir: Any, save_dir: Path, options: TrainOptions,
                     model: ModelOverrides, world_size: int) -> tuple[TrainConfig, str, dict[str, Any]]:
    """The run's configs from its checkpoint, with the options that may change on resume changed."""
    from nmtkit.checkpoint import check_finite

    last = str(save_dir / LAST)
    for name in ("train_config", "model_config", "model_state", "optimizer_state", "schedule_state", "trainer"):
        if not isinstance(ckpt.get(name), dict):  # a damaged checkpoint, before anything is written
            raise CheckpointError(f"its {name} is missing or not a mapping: it cannot be resumed", last)
    missing = sorted(({f.name for f in fields(TrainState)} | {"world_size", "precision"}) - set(ckpt["trainer"]))
    if missing:  # what another nmtkit wrote (or a damaged file), before anything is written
        raise CheckpointError(f"its training state lacks {missing}, which this nmtkit writes, so it cannot be resumed; "
                              "re-run 'nmtkit train' with this nmtkit to start the run again", last)
    for name in ("model_state", "raw_model_state"):  # a run that diverged: every update from them is NaN too
        if isinstance(ckpt.get(name), dict):
            check_finite(ckpt[name], last, "the run cannot continue from them; start it again with --force (with a "
                                           "lower --lr if it diverged)")
    procs = ckpt["trainer"]["world_size"]
    if not isinstance(procs, int) or isinstance(procs, bool) or procs < 1:
        raise CheckpointError(f"its training state's world_size {procs!r:.40} is not a number of processes: it cannot "
                              "be resumed", last)
    cfg = resume_config(ckpt, options, world_size)
    arch, model_config = ckpt["arch"], dict(ckpt["model_config"])
    for name, value in model.given().items():
        if name not in model_config:  # as a new run says it (not "differs from ... (None)")
            raise ConfigError(f"{option_name(name)} does not apply to {arch}")
        if model_config[name] != value:
            raise ConfigError(f"{option_name(name)} {value} differs from the run being resumed ({model_config[name]})")
    same = "resume with the data directory the run was started with"
    differs = pipeline_differences(ckpt.get("pipeline"), data.pipeline)
    if differs:  # the run's later updates would see text preprocessed otherwise than its first ones
        raise CheckpointError(f"the text pipeline (preprocessing) of {data_dir} differs from the run's "
                              f"({', '.join(differs)}): {same}", last)
    if ckpt["src_vocab"] != data.src_vocab.to_list() or ckpt["tgt_vocab"] != data.tgt_vocab.to_list():
        raise CheckpointError(f"the vocabularies of {data_dir} differ from the run's: {same}", last)
    # same vocabularies, other text: the run would not continue, it would change (another dev set: its scores
    # would be compared with the old one's best, for checkpoint_best.pt, early stopping and the lr schedule)
    for split, what in (("train", "training"), ("valid", "dev")):
        was, now = _split_sizes(ckpt.get("data_manifest"), split), _split_sizes(data.manifest, split)
        if was and now and was != now:
            raise CheckpointError(f"the {what} data of {data_dir} ({now}) differs from the run's ({was}): {same}", last)
        was, now = _digests(ckpt.get("data_manifest"), split), _digests(data.manifest, split)
        if was and now and was != now:  # the same sizes, other text (pairs reordered, a word changed)
            raise CheckpointError(f"the {what} text of {data_dir} differs from the run's (the sha256 of the files "
                                  f"preprocess read): {same}", last)
    _check_run_record(save_dir, cfg, arch, model_config)
    update = ckpt["trainer"]["update"]
    every = [ckpt["train_config"][k] for k in ("save_every", "valid_every")]  # the run's schedule until now
    later = [p.name for p in kept_checkpoints(save_dir) if kept_update(p.name) > update]
    # a run killed before its next save leaves none past that save; more: an older checkpoint_last.pt put back
    if later and kept_update(later[-1]) > min((update // n + 1) * n for n in every):
        log.warning("%s is at update %d, older than the run's kept %s (an earlier copy put back?): the run replaces "
                    "each as it reaches its update again and leaves the others, which `nmtkit average --last` would "
                    "average with its own; move them away to keep them apart", last, update,
                    later[0] if len(later) == 1 else f"{later[0]} to {later[-1]}")
    return cfg, arch, model_config


def _check_run_record(save_dir: Path, cfg: TrainConfig, arch: str, model_config: dict[str, Any]) -> None:
    """checkpoint_last.pt's configs against the run's record of them: another run's checkpoint copied
    in would continue that run here. Not compared: what resume may change, and --update-freq."""
    found = _run_record(save_dir)
    if found is None:
        return
    record, source, file = found
    ours = json.loads(config_text(cfg, arch, model_config))  # as config.json holds it (lists, not tuples)
    overridable = resume_overridable(TrainConfig)
    lacking = object()
    settings = [("arch", record.get("arch", lacking), arch)]
    for part in ("model_config", "train_config"):
        theirs = record.get(part) if isinstance(record.get(part), dict) else {}
        settings += [(k, theirs.get(k, lacking), v) for k, v in ours[part].items()
                     if not (part == "train_config" and (k in overridable or k == "update_freq"))]
    lacks = [name for name, was, _ in settings if was is lacking]
    if lacks:
        raise CheckpointError(f"the run's record lacks the settings {lacks}, which this nmtkit writes, so the run "
                              "cannot be resumed; re-run 'nmtkit train' with this nmtkit to start the run again",
                              str(file))
    for name, was, now in settings:
        if was != now:
            raise CheckpointError(f"not this run's checkpoint: its {name} {now} differs from {was} in {source}; put "
                                  "the run's own checkpoint_last.pt back, or resume the other run in its own --save-dir",
                                  str(save_dir / LAST))


def _run_record(save_dir: Path) -> tuple[dict[str, Any], str, Path] | None:
    """The run's configs as config.json records them, else as checkpoint_best.pt does; where they
    were read (in words) and that file; None where neither can be read."""
    from nmtkit.checkpoint import load_checkpoint

    try:
        record = json.loads((save_dir / CONFIG_FILE).read_text(encoding="utf-8"))
        if isinstance(record, dict):
            return record, f"{save_dir / CONFIG_FILE}, the record the run wrote at its start", save_dir / CONFIG_FILE
    except (OSError, ValueError):
        pass
    try:
        best = load_checkpoint(save_dir / BEST, mmap=True)
        record = json.loads(json.dumps({k: best[k] for k in ("arch", "model_config", "train_config") if k in best}))
    except (CheckpointError, TypeError, ValueError):
        return None
    return record, f"{save_dir / BEST}, the run's best checkpoint ({CONFIG_FILE} is missing)", save_dir / BEST


def _split_sizes(manifest: Any, split: str) -> str | None:
    """The split's pairs and tokens as a data directory's manifest records them, or None."""
    info = ((manifest or {}).get("splits") or {}).get(split) if isinstance(manifest, dict) else None
    if not isinstance(info, dict) or not all(k in info for k in ("lines", "src_tokens", "tgt_tokens")):
        return None
    return f"{info['lines']} pairs, {info['src_tokens']} + {info['tgt_tokens']} tokens"


def _digests(manifest: Any, split: str) -> tuple[list[str], list[str]] | None:
    """The sha256 of the split's two text files, as preprocess recorded them, or None."""
    prefix = ((manifest.get("splits") or {}).get(split) or {}).get("prefix") if isinstance(manifest, dict) else None
    if not isinstance(prefix, str):
        return None
    src, tgt = (sorted(recorded_digests(manifest, prefix, manifest.get(side))) for side in ("src_lang", "tgt_lang"))
    return (src, tgt) if src and tgt else None
