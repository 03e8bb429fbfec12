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


class BinarizedText:
    """One language of one split, memory-mapped. `len(x)`, `x[k]` -> np.ndarray of ids, `x.lengths`."""

    def __init__(self, data_dir: str | Path, split: str, lang: str):
        ids_path, off_path = split_paths(data_dir, split, lang)
        for p in (ids_path, off_path):
            if not p.exists():
                raise InputError(f"binarised split '{split}.{lang}' not found (run 'nmtkit preprocess')", str(p))
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
