"""Checkpoint format: one self-describing file per model (docs/design.md, convention 2).

A dict of primitives and tensors only, loadable with `weights_only=True`: format_version
(CHECKPOINT_FORMAT; another is refused), arch, model_config and model_state, pipeline (the text
pipeline), src_lang, tgt_lang, src_vocab, tgt_vocab (list[str]), train_config (TrainConfig as a
dict), data_manifest (or None), lexicon (int32 (src vocab, k) likeliest target ids for
nmtkit.decode.shortlist, or None), the trainer's state, and in an `nmtkit average` output
averaged_from ([{"path", "update"}], not resumable).
"""
from __future__ import annotations

import contextlib
import os
import pickle
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from nmtkit import __version__
from nmtkit.devices import import_torch
from nmtkit.errors import CheckpointError, ConfigError
from nmtkit.io.checks import check_found, check_given_once
from nmtkit.io.files import OutputFile
from nmtkit.text.pipeline import TextPipeline, pipeline_differences
from nmtkit.text.vocab import Vocab

CHECKPOINT_FORMAT = 3


def checkpoint_paths(value: Any) -> list[str]:
    """One checkpoint path or an iterable of them (the Python API's argument) as a list of str;
    anything else (bytes included, which would be taken apart into character codes) a TypeError."""
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    if isinstance(value, (bytes, bytearray)) or not hasattr(value, "__iter__"):
        raise TypeError(f"checkpoints must be a path or a list of paths, not {type(value).__name__}")
    paths = list(value)
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"checkpoint paths must be str or os.PathLike, not {type(p).__name__} ({p!r:.60})")
    return [os.fspath(p) for p in paths]


def make_checkpoint(
    *,
    arch: str,
    model_config: dict[str, Any],
    model_state: dict[str, Any],
    pipeline: dict[str, Any],
    src_lang: str,
    tgt_lang: str,
    src_vocab: list[str],
    tgt_vocab: list[str],
    train_config: dict[str, Any],
    data_manifest: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    lexicon: Any = None,
) -> dict[str, Any]:
    """The checkpoint dict of the schema above; `training`, the trainer's own state, appended as is."""
    return {
        "format_version": CHECKPOINT_FORMAT,
        "nmtkit_version": __version__,
        "arch": arch,
        "model_config": model_config,
        "model_state": model_state,
        "pipeline": pipeline,
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "src_vocab": src_vocab,
        "tgt_vocab": tgt_vocab,
        "train_config": train_config,
        "data_manifest": data_manifest,
        "lexicon": lexicon,
        **(training or {}),
    }


class _WriteRecorder:
    """A file wrapper that remembers what stopped a write: torch.save reports a full disk, or a
    Ctrl-C, as a RuntimeError of its zip writer that names neither the file nor the reason."""

    def __init__(self, file: Any):
        self.file = file
        self.error: BaseException | None = None

    def write(self, data: Any) -> int:
        try:
            return self.file.write(data)
        except BaseException as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.file.flush()


def save_checkpoint(obj: dict[str, Any], path: str | Path) -> None:
    """Write `obj` to `path` atomically (a full disk: OSError(ENOSPC) naming `path`, the old file kept)."""
    import torch

    obj = _word_lists(obj, _join)  # a new dict
    obj.setdefault("format_version", CHECKPOINT_FORMAT)
    with OutputFile(path, "wb") as out:
        rec = _WriteRecorder(out.file)
        try:
            torch.save(obj, rec)
        except RuntimeError as err:
            if rec.error is None:
                raise
            if not isinstance(rec.error, OSError):  # Ctrl-C (or SIGTERM) mid-write: what stopped the command
                raise rec.error from None
            raise OSError(rec.error.errno, rec.error.strerror, str(path)) from err


def load_checkpoint(path: str | Path, map_location: Any = "cpu", mmap: bool = False) -> dict[str, Any]:
    """Load and validate a checkpoint; clear errors for missing, truncated or foreign files. `mmap`:
    map the file's tensors, so that those nobody touches cost neither reading time nor memory."""
    torch = import_torch()  # often the command's first use of torch
    check_found(path, "checkpoint not found", CheckpointError)
    path = Path(path)
    if path.is_dir():
        raise CheckpointError("is a directory, not a checkpoint file (e.g. RUN/checkpoint_best.pt)", str(path))
    if not path.is_file():  # a device or a FIFO: reading it could block or never end
        raise CheckpointError("is not a regular file, so not a checkpoint", str(path))
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":  # torch.save writes a zip archive; anything else is not read at all
            raise CheckpointError("not an nmtkit checkpoint: it is not a torch checkpoint (no zip archive); it was "
                                  "not loaded", str(path))
    try:
        with warnings.catch_warnings(), _utf8_name(path) as name:  # torch's notes on foreign pickles: the
            warnings.simplefilter("ignore")                           # error below says it all
            obj = torch.load(name, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError:  # torch's message advises weights_only=False: never pass that on
        raise CheckpointError("not an nmtkit checkpoint: it holds objects other than tensors and plain values; it "
                              "was not loaded", str(path)) from None
    except Exception as err:  # truncated zip, not a torch file
        names = ["?/data.pkl"]  # a whole zip archive of another kind: numpy's .npz (Marian's model.npz)
        with contextlib.suppress(Exception):
            names = zipfile.ZipFile(path).namelist()
        if not any(name.endswith("/data.pkl") for name in names):
            raise CheckpointError("not an nmtkit checkpoint: a zip archive, but not torch's (a numpy .npz, as Marian "
                                  "saves models?); it was not loaded", str(path)) from None
        msg = str(err).splitlines()[0].split(". ")[0] if str(err) else type(err).__name__  # torch's first sentence
        raise CheckpointError(f"not a readable nmtkit checkpoint (truncated or corrupt?): {msg}", str(path)) from None
    if not isinstance(obj, dict) or "format_version" not in obj:
        raise CheckpointError("not an nmtkit checkpoint (no format_version)", str(path))
    if obj["format_version"] != CHECKPOINT_FORMAT:
        raise CheckpointError(f"checkpoint format version {obj['format_version']!r:.40} is not one this nmtkit reads "
                              f"({CHECKPOINT_FORMAT}); re-run 'nmtkit train' with this nmtkit to write the checkpoint "
                              "again", str(path))
    return _word_lists(obj, _split)


@contextlib.contextmanager
def _utf8_name(path: Path) -> Iterator[str | Path]:
    """`path`, or /proc/self/fd/N open on it where its name is not UTF-8 (torch cannot encode it)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    yield path


def _word_lists(obj: dict[str, Any], convert: Any) -> dict[str, Any]:
    """A copy of `obj` with `convert` applied to its vocabularies and truecasing forms, on disk one
    newline-joined string each (one opcode for the weights-only unpickler, not one per word)."""
    out = dict(obj)
    for key in ("src_vocab", "tgt_vocab"):
        if key in out:
            out[key] = convert(out[key])
    pipeline = out.get("pipeline")
    if isinstance(pipeline, dict) and isinstance(pipeline.get("truecase"), dict):
        forms = {side: convert(words) for side, words in pipeline["truecase"].items()}
        out["pipeline"] = {**pipeline, "truecase": forms}
    return out


def _join(words: Any) -> Any:
    """A list of words as one string; anything that would not split back (`_split`) as it is."""
    if isinstance(words, list) and words and all(isinstance(w, str) and "\n" not in w for w in words):
        return "\n".join(words)
    return words


def _split(words: Any) -> Any:
    return words.split("\n") if isinstance(words, str) else words


def model_fields(ckpt: dict[str, Any], path: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(arch, model_config, model_state) of a checkpoint, checked to be mappings (of tensors)."""
    import torch

    for key in ("arch", "model_config", "model_state"):
        if key not in ckpt:
            raise CheckpointError(f"checkpoint lacks field '{key}'", path)
    config, state = ckpt["model_config"], ckpt["model_state"]
    if not isinstance(config, dict) or not isinstance(state, dict) or not all(
            isinstance(t, torch.Tensor) for t in state.values()):
        raise CheckpointError("its model_config and model_state are not both mappings (of tensors)", path)
    return ckpt["arch"], config, state


def load_model(path: str | Path, device: Any = "cpu", fuse_steps: bool = False,
               prepare: Callable[[Any], Any] | None = None):
    """(model in eval mode on `device`, checkpoint dict) from a memory-mapped checkpoint file.
    `prepare(model)` (e.g. int8 quantisation) runs while the tensors are still the file's, then
    those still mapped are copied: a file overwritten in place under `serve` would SIGBUS it."""
    import torch

    from nmtkit.models import build_model
    from nmtkit.models.base import uninitialised

    ckpt = load_checkpoint(path, map_location="cpu", mmap=True)
    arch, config, state = model_fields(ckpt, str(path))
    try:
        # no random initialisation for the strict load to overwrite
        with uninitialised():
            model = build_model(arch, config, fuse_steps=fuse_steps)
    except KeyError as err:
        raise CheckpointError(f"checkpoint lacks field {err}", str(path)) from None
    except ConfigError as err:  # an unknown architecture, a config key or value it does not take
        raise CheckpointError(str(err), str(path)) from None
    if prepare is not None:  # assign keeps the file's dtypes: a float16 file's weights become float32 here
        own = model.state_dict()
        state = {k: v.to(own[k].dtype) if k in own and v.dtype != own[k].dtype else v for k, v in state.items()}
    try:
        model.load_state_dict(state, assign=prepare is not None)
    except RuntimeError as err:  # the model's tensors disagree with its config: missing, extra or resized
        detail = "; ".join(line.strip() for line in str(err).splitlines()[1:] if line.strip())
        raise CheckpointError(f"the model's tensors do not fit its config: {detail}", str(path)) from None
    check_finite(state, str(path))
    model.eval()
    if prepare is not None:
        prepare(model)
        mapped = {t.untyped_storage().data_ptr() for t in state.values() if isinstance(t, torch.Tensor)}
        _copy_tensors_of(model, mapped)
    model.to(device)
    return model, ckpt


def check_finite(state: dict[str, Any], path: str,
                 why: str = "their mean and any translation would be NaN") -> None:
    """A CheckpointError naming the float tensors of `state` that hold a NaN or an infinity, and
    `why` that matters. A float32 sum per tensor finds them: NaN and infinities survive a sum."""
    import torch

    bad = [name for name, t in state.items() if isinstance(t, torch.Tensor) and t.is_floating_point()
           and not bool(torch.isfinite(t.sum(dtype=torch.float32)))]
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise CheckpointError(f"its model has weights that are NaN or infinite (in {', '.join(bad[:3])}{more}): "
                              f"{why}", path)


def _copy_tensors_of(model: Any, storages: set[int]) -> None:
    """Replace every parameter and buffer of `model` in one of `storages` (data pointers) by a copy."""
    import torch

    with torch.no_grad():
        for module in model.modules():
            for name, p in module._parameters.items():
                if p is not None and p.untyped_storage().data_ptr() in storages:
                    module._parameters[name] = torch.nn.Parameter(p.clone(), requires_grad=p.requires_grad)
            for name, b in module._buffers.items():
                if b is not None and b.untyped_storage().data_ptr() in storages:
                    module._buffers[name] = b.clone()


@dataclass(frozen=True)
class ModelBundle:
    """What translation needs from one checkpoint or an ensemble: the files and their models; the
    rest is the first checkpoint's (an ensemble shares it)."""

    paths: tuple[str, ...]
    models: tuple[Any, ...]
    src_vocab: Vocab
    tgt_vocab: Vocab
    pipeline: TextPipeline
    arch: str | None
    src_lang: str | None
    tgt_lang: str | None
    lexicon: Any
    trained_max_len: int | None


def pipeline_of(ckpt: dict[str, Any], path: str) -> TextPipeline:
    d = ckpt.get("pipeline")
    if not isinstance(d, dict):
        raise CheckpointError("checkpoint has no text pipeline", path)
    try:
        return TextPipeline.from_dict(d, rerun="'nmtkit preprocess' and 'nmtkit train'")
    except ConfigError as err:  # a setting of the wrong type or value, named
        raise CheckpointError(str(err), path) from None
    except Exception as err:  # noqa: BLE001 - a foreign/old pipeline dict
        raise CheckpointError(f"cannot rebuild the text pipeline: {err}", path) from None


def _lexicon_of(ckpt: dict[str, Any], n_src: int, n_tgt: int, path: str) -> Any:
    """The checkpoint's lexicon copied out of the file's mapping, or None; a CheckpointError where
    it does not fit the vocabularies (the shortlists would quietly drop its rows and clip its ids)."""
    import torch

    lex = ckpt.get("lexicon")
    if lex is None:
        return None
    integer = isinstance(lex, torch.Tensor) and not lex.is_floating_point() and not lex.is_complex() \
        and lex.dtype != torch.bool
    if integer and lex.dim() == 2 and lex.size(0) == n_src and (
            lex.numel() == 0 or (int(lex.min()) >= 0 and int(lex.max()) < n_tgt)):
        return lex.clone()
    found = f"{tuple(lex.shape)} {lex.dtype}" if isinstance(lex, torch.Tensor) else type(lex).__name__
    if integer and lex.numel():
        found += f", ids {int(lex.min()):,} to {int(lex.max()):,}"
    raise CheckpointError(f"its lexicon does not fit its vocabularies: {found}, where ({n_src:,}, k) integer "
                          f"target ids below {n_tgt:,} were expected", path)


def load_bundle(paths: Sequence[str | Path], device: Any = "cpu", fuse_steps: bool = False,
                prepare: Callable[[Any], Any] | None = None) -> ModelBundle:
    """The models of `paths` (as `load_model` loads them) with the first checkpoint's vocabularies,
    text pipeline and lexicon; one that cannot join the others is a CheckpointError."""
    names = tuple(str(p) for p in paths)
    check_given_once(names, "an ensemble counts each model once")
    loaded = [load_model(p, device, fuse_steps=fuse_steps, prepare=prepare) for p in names]
    ckpts = [ckpt for _, ckpt in loaded]
    check_compatible(list(names), ckpts)
    first = ckpts[0]
    try:
        src_vocab, tgt_vocab = Vocab(list(first["src_vocab"])), Vocab(list(first["tgt_vocab"]))
    except (KeyError, ValueError, TypeError) as err:
        raise CheckpointError(f"checkpoint has no usable vocabularies ({err})", names[0]) from None
    for name, ckpt in zip(names, ckpts):  # an id past an embedding or an output layer (every member shares them)
        for side, vocab in (("src", src_vocab), ("tgt", tgt_vocab)):
            size = ckpt["model_config"].get(f"{side}_vocab_size")
            if size is not None and size != len(vocab):
                raise CheckpointError(f"its {side}_vocab has {len(vocab):,} words, but its model was built for "
                                      f"{size:,}", name)
    max_len = (first.get("train_config") or {}).get("max_len")  # the longest training sentence, in words
    return ModelBundle(
        paths=names, models=tuple(model for model, _ in loaded), src_vocab=src_vocab, tgt_vocab=tgt_vocab,
        pipeline=pipeline_of(first, names[0]), arch=first.get("arch"), src_lang=first.get("src_lang"),
        tgt_lang=first.get("tgt_lang"), lexicon=_lexicon_of(first, len(src_vocab), len(tgt_vocab), names[0]),
        trained_max_len=max_len if isinstance(max_len, int) and max_len > 0 else None)


def check_compatible(paths: Sequence[str], ckpts: Sequence[dict], needs: str = "an ensemble needs models") -> None:
    """A CheckpointError naming the first checkpoint whose languages, vocabularies, text pipeline
    or source EOS (src_eos) differ from the first one's, what differs, and what `needs` them alike."""
    first_path, first = paths[0], ckpts[0]
    for path, ckpt in zip(paths[1:], ckpts[1:]):
        pairs = ["-".join(map(str, (c.get("src_lang"), c.get("tgt_lang")))) for c in (ckpt, first)]
        if pairs[0] != pairs[1]:  # before the vocabularies, which a model of the other direction has swapped
            raise CheckpointError(f"language pair differs from {first_path}'s ({pairs[0]} vs {pairs[1]}); {needs} "
                                  "of one translation direction", path)
        for side in ("src", "tgt"):
            a, b = first.get(f"{side}_vocab"), ckpt.get(f"{side}_vocab")
            if a != b:
                a, b = a or [], b or []
                detail = f"{len(b)} vs {len(a)} tokens"
                if len(a) == len(b):
                    i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
                    detail = f"token {i} is '{b[i]}' vs '{a[i]}'"
                raise CheckpointError(
                    f"{side} vocabulary differs from {first_path}'s ({detail}); {needs} trained on the same "
                    "vocabularies", path)
        differs = pipeline_differences(first.get("pipeline"), ckpt.get("pipeline"))
        if differs:
            raise CheckpointError(
                f"text pipeline (preprocessing) differs from {first_path}'s ({', '.join(differs)}); {needs} "
                "trained on the same preprocessing", path)
        eos = [(c.get("model_config") or {}).get("src_eos", True) for c in (first, ckpt)]
        if eos[0] != eos[1]:  # the ensemble's attention is the mean over one set of source positions
            raise CheckpointError(f"src_eos differs from {first_path}'s (one appends EOS to the source, the other "
                                  f"not); {needs} that attend over the same source positions", path)
