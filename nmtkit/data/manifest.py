"""A data directory's manifest: the one reader of `manifest.json`, what `nmtkit preprocess`
records, and the two vocabularies it names. Torch- and numpy-free.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmtkit.errors import ConfigError, InputError
from nmtkit.io.checks import check_found, is_inside, real_path
from nmtkit.io.dirs import read_one_folder
from nmtkit.text.io import input_candidates
from nmtkit.text.vocab import Vocab

MANIFEST_VERSION = 2  # of the data directory: manifest.json and the binarised splits it describes


def new_manifest(src_lang: str, tgt_lang: str, vocab: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A manifest.json record of this format: languages, `vocab` and `fields` (pipeline, splits, ...)."""
    return {"format_version": MANIFEST_VERSION, "src_lang": src_lang, "tgt_lang": tgt_lang, "vocab": vocab, **fields}


@dataclass
class Manifest:
    """`manifest.json` of data directory `path` (as `manifest`), with its vocabularies loaded."""

    path: Path
    manifest: dict[str, Any]
    src_lang: str
    tgt_lang: str
    src_vocab: Vocab
    tgt_vocab: Vocab
    pipeline: dict[str, Any]


def read_manifest(path: str | Path) -> Manifest:
    """Read and check `path/manifest.json` and its vocabulary files, all of one folder where
    `preprocess --force` replaces it meanwhile."""
    return read_one_folder(path, lambda: read_manifest_files(Path(path)))


def read_manifest_files(path: Path) -> Manifest:
    """`read_manifest` within a `read_one_folder` of the caller's."""
    check_found(path, "data directory not found (create it with 'nmtkit preprocess')")
    if not path.is_dir():
        raise InputError("not a directory (expected a data directory with manifest.json from 'nmtkit preprocess')",
                         str(path))
    mpath = path / "manifest.json"
    if not mpath.is_file():
        raise InputError("no manifest.json: not a data directory from 'nmtkit preprocess'", str(path))
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"manifest.json is not valid JSON ({err})", str(mpath)) from None
    if not isinstance(manifest, dict):
        raise InputError("manifest.json must hold a JSON object", str(mpath))
    for key in ("src_lang", "tgt_lang", "vocab"):
        if key not in manifest:
            raise InputError(f"manifest.json lacks the key '{key}'", str(mpath))
    version = manifest.get("format_version")
    if version != MANIFEST_VERSION:
        raise InputError(f"manifest.json format_version {version!r} is not one this nmtkit reads ({MANIFEST_VERSION}); "
                         "re-run 'nmtkit preprocess' with this nmtkit to write the data directory again", str(mpath))
    vocab = manifest["vocab"]
    if not isinstance(vocab, dict) or not all(isinstance(vocab.get(k), str) for k in ("src", "tgt")):
        raise InputError("manifest.json 'vocab' must be {\"src\": file, \"tgt\": file}", str(mpath))
    for side in ("src", "tgt"):  # a vocabulary is a file of the data directory, never one elsewhere
        name = vocab[side]
        file, root = real_path(path / name), real_path(path)
        if os.path.isabs(name) or file == root or not is_inside(file, root):
            raise InputError(f"manifest.json vocab.{side} {name!r} is not a file of the data directory", str(mpath))
    for key in ("splits", "settings"):  # the parts readers index into
        if not isinstance(manifest.get(key) or {}, dict):
            raise InputError(f"manifest.json '{key}' must be a JSON object, not {manifest[key]!r:.40}", str(mpath))
    if not all(isinstance(split, dict) for split in (manifest.get("splits") or {}).values()):
        raise InputError("manifest.json 'splits' must map each split to a JSON object", str(mpath))
    pipeline = _pipeline(manifest, mpath)
    vocabs = _vocabularies(path, vocab)
    return Manifest(path, manifest, str(manifest["src_lang"]), str(manifest["tgt_lang"]),
                    vocabs["src"], vocabs["tgt"], pipeline)


def _pipeline(manifest: dict[str, Any], mpath: Path) -> dict[str, Any]:
    """The manifest's text pipeline, checked as translation will read it from the checkpoints."""
    pipeline = manifest.get("pipeline")
    if not isinstance(pipeline, dict) or not pipeline:
        raise InputError(f"manifest.json 'pipeline' is {json.dumps(pipeline)[:40]}, not the text pipeline preprocess records: "
                         "damaged or edited; rerun 'nmtkit preprocess'", str(mpath))
    for key in ("src_lang", "tgt_lang"):
        if key in pipeline and pipeline[key] != manifest[key]:
            raise InputError(f"manifest.json pipeline.{key} {pipeline[key]!r} contradicts its {key} "
                             f"{manifest[key]!r}", str(mpath))
    if "bpe" in manifest and bool(manifest["bpe"]) != (pipeline.get("bpe") is not None):
        says = ("'bpe' record says the data was segmented with BPE, but its pipeline.bpe is null" if manifest["bpe"]
                else "'bpe' record is null, but its pipeline.bpe holds BPE codes")
        raise InputError(f"manifest.json's {says} (damaged or edited): rerun 'nmtkit preprocess'", str(mpath))
    from nmtkit.text.pipeline import TextPipeline

    try:
        TextPipeline.from_dict(pipeline)
    except ConfigError as err:
        raise InputError(str(err), str(mpath)) from None
    return dict(pipeline)


def _vocabularies(path: Path, vocab: dict[str, Any]) -> dict[str, Vocab]:
    """The two vocabulary files the manifest's `vocab` names, each of the size it records, if any."""
    vocabs = {side: Vocab.load(path / vocab[side]) for side in ("src", "tgt")}
    for side, v in vocabs.items():
        size = vocab.get(f"{side}_size")
        if isinstance(size, int) and not isinstance(size, bool) and len(v) != size:
            raise InputError(f"holds {len(v):,} words where manifest.json's vocab.{side}_size says {size:,}: the "
                             "vocabulary of another language or data directory; rerun 'nmtkit preprocess'",
                             str(path / vocab[side]))
    return vocabs


def owned_files(manifest: dict[str, Any]) -> set[str]:
    """The files (relative paths) `nmtkit preprocess` wrote into the data directory of `manifest`:
    its "files" list, or the names its vocabularies, BPE codes and splits imply."""
    if isinstance(manifest.get("files"), list):
        return {str(f) for f in manifest["files"]} | {"manifest.json"}
    langs = [str(manifest.get("src_lang")), str(manifest.get("tgt_lang"))]
    files = {"manifest.json", "bpe.codes", *(f"bpe.codes.{lang}" for lang in langs)}
    vocab = manifest.get("vocab")
    if isinstance(vocab, dict):
        files |= {str(vocab.get("src")), str(vocab.get("tgt"))}
    for split in manifest.get("splits") or {}:
        files |= {f"{split}.{lang}.{kind}.npy" for lang in langs for kind in ("ids", "offsets", "words")}
    return files


def recorded_digests(manifest: Any, prefix: str, lang: str) -> set[str]:
    """The sha256 preprocess recorded in the manifest's "inputs" for the file PREFIX.lang (or
    PREFIX.lang.gz) it read; empty where it recorded none (a hand-made manifest)."""
    inputs = manifest.get("inputs") if isinstance(manifest, dict) else None
    names = input_candidates(prefix, lang)
    return {str(h) for k, h in inputs.items() if k in names} if isinstance(inputs, dict) else set()
