"""Binarised corpus format, shared by `preprocess` (writer) and `train` (reader).

A split of one language is two flat numpy arrays in the data directory:
- `{split}.{lang}.ids.npy`: int32 token ids of every sentence, concatenated; no BOS/EOS
  (the model adds them).
- `{split}.{lang}.offsets.npy`: int64, length n_sentences + 1; sentence k is
  `ids[offsets[k]:offsets[k+1]]`.
- `{split}.{lang}.words.npy`: int32, length n_sentences: each sentence's length in words (tokens
  after Moses tokenisation, before BPE), the unit of preprocess's and train's --max-len.
All are loaded with `mmap_mode="r"`, so a corpus of any size costs no memory up front.
This module imports numpy only (no torch).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from nmtkit.errors import InputError


def split_paths(data_dir: str | Path, split: str, lang: str) -> tuple[Path, Path]:
    d = Path(data_dir)
    return d / f"{split}.{lang}.ids.npy", d / f"{split}.{lang}.offsets.npy"


def words_path(data_dir: str | Path, split: str, lang: str) -> Path:
    """The per-sentence word lengths of one side of a split."""
    return Path(data_dir) / f"{split}.{lang}.words.npy"


class SplitWriter:
    """Streams one side's ids to raw files in `work_dir`, then writes the three .npy files above
    block by block (int32 ids, int64 offsets n+1, int32 word lengths n), without holding the split
    in memory.

    `add(ids, lens, words)` takes a block of sentences: their ids concatenated (N,), their lengths
    in ids (n,) and in words (n,); `close()` writes `{split}.{lang}.ids.npy` / `.offsets.npy` /
    `.words.npy` in `out_dir`.
    """

    BLOCK = 1 << 20  # values per block when converting raw files to .npy

    def __init__(self, out_dir: str | Path, work_dir: str | Path, split: str, lang: str):
        self.ids_path, self.offsets_path = split_paths(out_dir, split, lang)
        self.words_path = words_path(out_dir, split, lang)
        self._ids_raw = Path(work_dir) / f"{split}.{lang}.ids.raw"
        self._lens_raw = Path(work_dir) / f"{split}.{lang}.lens.raw"
        self._words_raw = Path(work_dir) / f"{split}.{lang}.words.raw"
        self._fi = open(self._ids_raw, "wb")
        self._fl = open(self._lens_raw, "wb")
        self._fw = open(self._words_raw, "wb")
        self.n_tokens = 0
        self.n_lines = 0

    def add(self, ids: np.ndarray, lens: np.ndarray, words: np.ndarray) -> None:
        assert len(words) == len(lens), (len(words), len(lens))
        self._fi.write(np.ascontiguousarray(ids, dtype=np.int32).tobytes())
        self._fl.write(np.ascontiguousarray(lens, dtype=np.int64).tobytes())
        self._fw.write(np.ascontiguousarray(words, dtype=np.int32).tobytes())
        self.n_tokens += len(ids)
        self.n_lines += len(lens)

    def close(self) -> None:
        for f in (self._fi, self._fl, self._fw):
            f.close()
        self._copy(self._ids_raw, self.ids_path, np.int32, self.n_tokens, cumulative=False)
        self._copy(self._lens_raw, self.offsets_path, np.int64, self.n_lines + 1, cumulative=True)
        self._copy(self._words_raw, self.words_path, np.int32, self.n_lines, cumulative=False)
        for raw in (self._ids_raw, self._lens_raw, self._words_raw):
            raw.unlink()

    def _copy(self, raw: Path, path: Path, dtype, n: int, cumulative: bool) -> None:
        """Write `raw` (native-endian values) as a 1-D .npy of length n, BLOCK values at a time;
        with `cumulative`, as [0, running sums...] (lengths -> offsets). Plain file writes, no
        memory map, so the resident memory stays at one block whatever the corpus size."""
        dtype = np.dtype(dtype)
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (n,)}
        written = 0
        with open(path, "wb") as out, open(raw, "rb") as f:
            np.lib.format.write_array_header_1_0(out, header)
            if not cumulative:
                shutil.copyfileobj(f, out, self.BLOCK * dtype.itemsize)
                written = n
            else:
                out.write(np.zeros(1, dtype=dtype).tobytes())
                written, running = 1, 0
                while True:
                    block = np.fromfile(f, dtype=dtype, count=self.BLOCK)
                    if not len(block):
                        break
                    sums = np.cumsum(block, dtype=dtype)
                    sums += running
                    running = int(sums[-1])
                    out.write(sums.tobytes())
                    written += len(block)
        assert written == n and path.stat().st_size >= n * dtype.itemsize, (path, written, n)


def check_npy(path: str | Path, expected_len: int | None = None) -> int:
    """The length of the 1-D integer .npy at `path`, after checking that the file holds every
    byte its header promises (a truncated copy would fail later as "mmap length is greater than
    file size") and, when given, `expected_len` values (the manifest's count)."""
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
    if len(shape) != 1 or dtype.kind not in "iu" or dtype.hasobject:
        raise InputError(f"holds a {dtype} array of shape {shape}, not the 1-D integer array preprocess writes; "
                         "rerun 'nmtkit preprocess'", str(path))
    n = int(shape[0])
    need = data_start + n * dtype.itemsize
    size = path.stat().st_size
    if size < need:
        raise InputError(f"truncated: {size} bytes where its header promises {need}; rerun 'nmtkit preprocess'",
                         str(path))
    if expected_len is not None and n != expected_len:
        raise InputError(f"holds {n} values where the manifest says {expected_len}: truncated, corrupt or from "
                         "another preprocess run", str(path))
    return n


def value_range(values: np.ndarray, block: int = 1 << 20) -> tuple[int, int]:
    """(min, max) of a 1-D array, (0, -1) when empty, in one pass over blocks that stay in the
    cache: a mapped corpus of hundreds of millions of ids is then read from the page cache once,
    not once for its minimum and again for its maximum."""
    lowest, highest = 0, -1
    for start in range(0, len(values), block):
        chunk = np.asarray(values[start : start + block])
        low, high = int(chunk.min()), int(chunk.max())
        lowest, highest = (low, high) if start == 0 else (min(lowest, low), max(highest, high))
    return lowest, highest


class BinarizedText:
    """One language of one split, memory-mapped. `len(x)`, `x[k]` -> np.ndarray of ids;
    `x.lengths` (n,) in ids (model tokens), `x.word_lengths` (n,) in words; `x.max_id` the
    largest id (-1 when there are none)."""

    def __init__(self, data_dir: str | Path, split: str, lang: str):
        ids_path, off_path = split_paths(data_dir, split, lang)
        w_path = words_path(data_dir, split, lang)
        for p in (ids_path, off_path, w_path):
            if not p.exists():
                raise InputError(f"binarised split '{split}.{lang}' not found (run 'nmtkit preprocess')", str(p))
        check_npy(ids_path)
        n = check_npy(off_path) - 1
        check_npy(w_path, n)
        self.ids = np.load(ids_path, mmap_mode="r")
        self.offsets = np.load(off_path, mmap_mode="r")
        self.lengths = np.diff(np.asarray(self.offsets)).astype(np.int64)
        self.word_lengths = np.load(w_path, mmap_mode="r")
        self._check(ids_path, off_path, w_path)

    def _check(self, ids_path: Path, off_path: Path, w_path: Path) -> None:
        """Offsets that cut `ids` into sentences (0 first, never decreasing, len(ids) last),
        word lengths and ids that are not negative, and word lengths that fit the ids: else
        sentences would be cut wrongly without a word, fail as tracebacks in batching, or be
        dropped by --max-len for a length they do not have. (Ids past the vocabulary: the data
        directory's check.)"""
        off = self.offsets
        if len(off) == 0 or off[0] != 0 or off[-1] != len(self.ids) or (self.lengths < 0).any():
            raise InputError(f"its offsets do not cut {ids_path.name}'s {len(self.ids)} ids into sentences (they must "
                             "start at 0, never decrease and end at the number of ids): rerun 'nmtkit preprocess'",
                             str(off_path))
        lowest, self.max_id = value_range(self.ids)
        words = np.asarray(self.word_lengths)
        for path, low in ((ids_path, lowest), (w_path, value_range(words)[0])):
            if low < 0:
                raise InputError("holds negative values: rerun 'nmtkit preprocess'", str(path))
        # each word is one id or more (BPE splits it), so a sentence has words exactly when it has ids
        bad = np.flatnonzero((words > self.lengths) | ((words == 0) & (self.lengths > 0)))
        if len(bad):
            k = int(bad[0])
            raise InputError(f"sentence {k + 1} has {int(words[k])} words but {int(self.lengths[k])} ids in "
                             f"{ids_path.name} (every word is one id or more; {len(bad)} sentences disagree): "
                             "corrupt; rerun 'nmtkit preprocess'", str(w_path))

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


def write_split(out_dir: str | Path, split: str, lang: str, sentences: list[list[int]],
                words: list[int] | None = None) -> None:
    """One side of a split held in memory (tests, benchmarks), through `SplitWriter`; `words`:
    each sentence's length in words (default: its length in ids, every id a word)."""
    w = SplitWriter(out_dir, out_dir, split, lang)
    lens = np.asarray([len(s) for s in sentences], dtype=np.int64)
    w.add(np.asarray([i for s in sentences for i in s], dtype=np.int32), lens,
          lens if words is None else np.asarray(words, dtype=np.int32))
    w.close()
