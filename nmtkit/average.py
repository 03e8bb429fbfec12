"""Checkpoint averaging (`nmtkit average`): the element-wise mean of compatible models' parameters
(Vaswani et al. 2017, section 6.1), taken in float64, one checkpoint in memory at a time, and cast
back to each tensor's dtype. The result is a model checkpoint without optimiser state whose
configs, vocabularies, pipeline and lexicon are the last checkpoint's; "averaged_from" lists the
inputs with their update numbers."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from nmtkit.checkpoint import (
    check_compatible,
    check_finite,
    checkpoint_paths,
    load_checkpoint,
    make_checkpoint,
    model_fields,
    save_checkpoint,
)
from nmtkit.devices import import_torch
from nmtkit.errors import CheckpointError, ConfigError, InputError, OutputError
from nmtkit.io.checks import Output, check_found, check_given_once, check_outputs_vs_inputs, file_path
from nmtkit.io.dirs import (
    LOCK_FILE,
    is_run_file,
    kept_checkpoints,
    kept_update,
    run_files_present,
)
from nmtkit.io.files import is_stdout
from nmtkit.options import check_fields, option
from nmtkit.progress import Progress

log = logging.getLogger("nmtkit.average")


@dataclass(frozen=True)
class AverageConfig:
    """Every option of `nmtkit average` (its click options are generated from these fields)."""

    output: str = option(names=("--output", "-o"), required=True, metavar="FILE", path="file",
                         help="The averaged checkpoint to write (not one of the inputs); translate and serve read it "
                              "like any other.")
    models: tuple[str, ...] = option((), names=("--model", "-m"), multiple=True, metavar="CHECKPOINT", path="file",
                                     help="A checkpoint to average (repeatable, at least one).")
    last: int | None = option(None, min=1, metavar="N", help="Average the run's N newest checkpoint_<update>.pt "
                                                              "(kept by train --keep-every); needs --save-dir.")
    save_dir: str | None = option(None, metavar="RUN", path="directory",
                                  help="The run directory whose kept checkpoints --last takes.")
    force: bool = option(False, help="Overwrite an existing -o file (never an input: that is refused).")

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", tuple(checkpoint_paths(self.models)))
        check_fields(self)
        if (self.last is None) != (self.save_dir is None):
            raise ConfigError("--last N and --save-dir RUN go together")
        if self.last is not None and self.models:
            raise ConfigError("give either -m FILE ... or --last N --save-dir RUN, not both")


def last_checkpoints(save_dir: str | Path, n: int) -> list[Path]:
    """The `n` newest kept checkpoints of a run, oldest first; an error when there are fewer."""
    save_dir = Path(save_dir)
    check_found(save_dir, "run directory not found")
    if not save_dir.is_dir():
        raise InputError("not a directory: --save-dir is the run directory whose checkpoint_<update>.pt files "
                         "--last averages", str(save_dir))
    kept = kept_checkpoints(save_dir)
    if len(kept) < n:
        have, fewer = ", ".join(p.name for p in kept) or "none", f"give --last {len(kept)} or less, or " if kept else ""
        raise InputError(f"--last {n} needs {n} checkpoint_<update>.pt files but the run kept {len(kept)} "
                         f"({have}); {fewer}train with --keep-every N to keep them", str(save_dir))
    return kept[-n:]


def check_averageable(path: str, ckpt: dict[str, Any], first_path: str, first: dict[str, Any]) -> None:
    """CheckpointError naming `path` unless `ckpt` can be averaged with `first`: what an ensemble
    needs alike, and the same architecture, model config and parameter names, shapes and dtypes."""
    if ckpt.get("arch") != first.get("arch"):
        raise CheckpointError(f"architecture {ckpt.get('arch')} differs from {first_path}'s ({first.get('arch')}); "
                              "only checkpoints of one model can be averaged", path)
    a, b = first.get("model_config") or {}, ckpt.get("model_config") or {}
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if diff:
        k = diff[0]
        raise CheckpointError(f"model config differs from {first_path}'s ({k} {b.get(k)} vs {a.get(k)}); "
                              "only checkpoints of one model can be averaged", path)
    check_compatible([first_path, path], [first, ckpt], needs="averaging needs checkpoints")
    seeds = [(c.get("train_config") or {}).get("seed") for c in (first, ckpt)]
    if seeds[0] != seeds[1]:  # a run keeps its seed when resumed: another run, from other initial weights
        log.warning("%s was trained with --seed %s, %s with --seed %s: the mean of runs from other initial weights "
                    "is in general no working model (average the checkpoints of one run)", path, seeds[1],
                    first_path, seeds[0])
    sa, sb = first["model_state"], ckpt["model_state"]
    if set(sa) != set(sb):
        k = sorted(set(sa) ^ set(sb))[0]
        raise CheckpointError(f"parameter {k} is in one of this checkpoint and {first_path} only", path)
    for k, t in sb.items():
        if tuple(t.shape) != tuple(sa[k].shape) or t.dtype != sa[k].dtype:
            raise CheckpointError(f"parameter {k} is {t.dtype} {tuple(t.shape)}, {first_path} has "
                                  f"{sa[k].dtype} {tuple(sa[k].shape)}", path)


def check_paths(paths: Sequence[str | Path], output: str | Path, force: bool, input_option: str = "-m") -> None:
    """Refuse a missing input, an input given twice, and an output that is one of the inputs, not
    a file or not writable; messages name the inputs by `input_option`."""
    if not paths:
        raise ConfigError("give the checkpoints to average (-m FILE, repeatable) or --last N --save-dir RUN")
    _check_output_name(output)
    for p in map(str, paths):
        if os.path.isdir(p):
            raise CheckpointError("is a directory, not a checkpoint file (e.g. RUN/checkpoint_best.pt); to average a "
                                  "run's newest kept checkpoints give --last N --save-dir RUN", p)
        check_found(p, "checkpoint not found", CheckpointError)
        if not os.path.isfile(p):  # a device or a FIFO is named as load_checkpoint names it
            raise CheckpointError("is not a regular file, so not a checkpoint", p)
    check_given_once(paths, "each checkpoint counts once")
    check_outputs_vs_inputs([(input_option, p) for p in paths],
                            files=[Output("-o", output, "averaged checkpoint", force)])


def _check_output_name(output: str | Path) -> None:
    """Refuse -o naming stdout under any name or a .gz file (translate maps a checkpoint), or any
    file of a training run (its checkpoints, metrics.jsonl, config.json, ...): they are the run's."""
    if file_path(output) is None or is_stdout(output):
        raise ConfigError(f"-o {str(output)!r}: the averaged checkpoint is written to a file, give its name")
    if str(output).endswith(".gz"):  # a .gz output would be compressed, which no checkpoint reader undoes
        raise ConfigError(f"-o {str(output)!r}: a checkpoint is never gzip-compressed (translate maps it); "
                          "give a name without .gz")
    folder, name = os.path.split(os.path.realpath(output))
    if (is_run_file(name) or name == LOCK_FILE) and run_files_present(Path(folder)):
        raise OutputError(f"is a file of the training run in {folder}, which it would replace; "
                          "give the averaged checkpoint another name (e.g. averaged.pt)", str(output))


def average_checkpoints(paths: Sequence[str], progress: Progress | None = None,
                        by_name: bool = False) -> dict[str, Any]:
    """The checkpoint dict of the parameter mean of `paths` (other tensors must be equal). Two of
    one update with the same weights are refused; `by_name`: so is a checkpoint_N.pt not of update N."""
    torch = import_torch()
    first_path, first = paths[0], None
    sums: dict[str, Any] = {}
    sources = []
    for path in paths:
        ckpt = load_checkpoint(path)
        model_fields(ckpt, path)
        check_finite(ckpt["model_state"], path)  # one NaN would make that weight NaN in the mean
        if first is None:
            first = ckpt
            sums = {k: (t.to(torch.float64) if t.is_floating_point() else t.clone())
                    for k, t in ckpt["model_state"].items()}
        else:
            check_averageable(path, ckpt, first_path, first)
            for k, t in ckpt["model_state"].items():
                if t.is_floating_point():
                    sums[k] += t.to(torch.float64)
                elif not torch.equal(t, sums[k]):
                    raise CheckpointError(f"integer tensor {k} differs from {first_path}'s; it cannot be averaged",
                                          path)
        update = (ckpt.get("trainer") or {}).get("update")
        twin = next((src["path"] for src in sources if update is not None and src["update"] == update
                     and _same_weights(ckpt, src["path"])), None)  # another run's update `update` is other weights
        if twin is not None:
            raise CheckpointError(f"holds update {update}, as {twin} does: the same weights would count twice in the "
                                  "mean", path)
        named = kept_update(os.path.basename(path)) if by_name else None
        if named is not None and named != update:
            raise CheckpointError(f"is named for update {named} but holds update {update}: --last picks checkpoints "
                                  "by the update they hold", path)
        sources.append({"path": path, "update": update})
        if progress is not None:
            progress(path, len(sources), len(paths))
    assert first is not None
    last, n = ckpt, len(paths)  # the result's configs, vocabularies, pipeline and lexicon are the last one's
    state = {k: ((s / n).to(first["model_state"][k].dtype) if first["model_state"][k].is_floating_point() else s)
             for k, s in sums.items()}
    return make_checkpoint(
        arch=last["arch"], model_config=last["model_config"], model_state=state, pipeline=last["pipeline"],
        src_lang=last["src_lang"], tgt_lang=last["tgt_lang"], src_vocab=last["src_vocab"],
        tgt_vocab=last["tgt_vocab"], train_config=last.get("train_config") or {},
        data_manifest=last.get("data_manifest"), lexicon=last.get("lexicon"),
        training={"averaged_from": sources},
    )


def _same_weights(ckpt: dict[str, Any], path: str) -> bool:
    """Whether the checkpoint `path` (read again, mapped) holds the model weights of `ckpt`."""
    import torch

    other = load_checkpoint(path, mmap=True)["model_state"]
    return all(torch.equal(t, other[k]) for k, t in ckpt["model_state"].items())


def run(config: AverageConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Average the config's checkpoints into `config.output`, every path checked before any is read;
    `progress(path, i, n)` follows the i-th of n. The report: "output", "inputs" and "checkpoint"."""
    if not isinstance(config, AverageConfig):
        raise TypeError(f"nmtkit.average.run takes an AverageConfig, not {type(config).__name__}")
    if config.last is None:
        paths, given_by = list(config.models), "-m"
    else:
        paths, given_by = [str(p) for p in last_checkpoints(config.save_dir, config.last)], "--last"
    check_paths(paths, config.output, config.force, given_by)
    ckpt = average_checkpoints(paths, progress, by_name=given_by == "--last")
    save_checkpoint(ckpt, config.output)
    return {"output": config.output, "inputs": paths, "checkpoint": ckpt}
