"""Binarised corpus format, shared by `preprocess` (writer) and `train` (reader).

A split of one language is two flat numpy arrays in the data directory:
- `{split}.{lang}.ids.npy`: int32 token ids of every sentence, concatenated; no BOS/EOS
  (the model adds them).
- `{split}.{lang}.offsets.npy`: int64, length n_sentences + 1; sentence k is
  `ids[offsets[k]:offsets[k+1]]`.
Both are loaded with `mmap_mode="r"`, so a corpus of any size costs no memory up front.
This module imports numpy only (no torch).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from nmtkit.errors import InputError


def split_paths(data_dir: str | Path, split: str, lang: str) -> tuple[Path, Path]:
    d = Path(data_dir)
    return d / f"{split}.{lang}.ids.npy", d / f"{split}.{lang}.offsets.npy"


class SplitWriter:
    """Appends sentences (lists of ids) and writes the two arrays on `close()`.

    Ids are buffered in chunks of int32 arrays, so memory is 4 bytes per token.
    """

    def __init__(self, data_dir: str | Path, split: str, lang: str):
        self.ids_path, self.offsets_path = split_paths(data_dir, split, lang)
        self._chunks: list[np.ndarray] = []
        self._buf: list[int] = []
        self._lengths: list[int] = []

    def add(self, ids: Sequence[int]) -> None:
        self._buf.extend(ids)
        self._lengths.append(len(ids))
        if len(self._buf) >= 1 << 20:
            self._chunks.append(np.asarray(self._buf, dtype=np.int32))
            self._buf = []

    def close(self) -> None:
        if self._buf or not self._chunks:
            self._chunks.append(np.asarray(self._buf, dtype=np.int32))
        ids = np.concatenate(self._chunks)
        offsets = np.zeros(len(self._lengths) + 1, dtype=np.int64)
        np.cumsum(np.asarray(self._lengths, dtype=np.int64), out=offsets[1:])
        np.save(self.ids_path, ids)
        np.save(self.offsets_path, offsets)


def write_split(data_dir: str | Path, split: str, lang: str, sentences: Iterable[Sequence[int]]) -> None:
    w = SplitWriter(data_dir, split, lang)
    for s in sentences:
        w.add(s)
    w.close()


def check_npy(path: str | Path, expected_len: int | None = None) -> int:
    """The length of the 1-D .npy at `path`, after checking that the file holds every byte its
    header promises (a truncated copy would fail later as "mmap length is greater than file
    size") and, when given, `expected_len` values (the manifest's count)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(f)
            data_start = f.tell()
    except (ValueError, EOFError) as err:
        raise InputError(f"not a readable .npy array, truncated or corrupt ({err}); rerun 'nmtkit preprocess'",
                         str(path)) from None
    n = int(np.prod(shape)) if len(shape) else 1
    need = data_start + n * dtype.itemsize
    size = path.stat().st_size
    if size < need:
        raise InputError(f"truncated: {size} bytes where its header promises {need}; rerun 'nmtkit preprocess'",
                         str(path))
    if expected_len is not None and n != expected_len:
        raise InputError(f"holds {n} values where the manifest says {expected_len}: truncated, corrupt or from "
                         "another preprocess run", str(path))
    return n


class BinarizedText:
    """One language of one split, memory-mapped. `len(x)`, `x[k]` -> np.ndarray of ids, `x.lengths`."""

    def __init__(self, data_dir: str | Path, split: str, lang: str):
        ids_path, off_path = split_paths(data_dir, split, lang)
        for p in (ids_path, off_path):
            if not p.exists():
                raise InputError(f"binarised split '{split}.{lang}' not found (run 'nmtkit preprocess')", str(p))
            check_npy(p)
        self.ids = np.load(ids_path, mmap_mode="r")
        self.offsets = np.load(off_path, mmap_mode="r")
        self.lengths = np.diff(np.asarray(self.offsets)).astype(np.int64)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, k: int) -> np.ndarray:
        return np.asarray(self.ids[self.offsets[k] : self.offsets[k + 1]])


class ParallelData:
    """A source/target pair of `BinarizedText` with equal sentence counts."""

    def __init__(self, data_dir: str | Path, split: str, src_lang: str, tgt_lang: str):
        self.src = BinarizedText(data_dir, split, src_lang)
        self.tgt = BinarizedText(data_dir, split, tgt_lang)
        if len(self.src) != len(self.tgt):
            raise InputError(
                f"split '{split}' has {len(self.src)} source but {len(self.tgt)} target sentences",
                str(data_dir),
            )

    def __len__(self) -> int:
        return len(self.src)
