"""Binarised corpora (numpy memmaps) and their length-bucketed minibatches (numpy only, no torch).

A split of one language is three flat arrays in the data directory, loaded with mmap_mode="r":
`{split}.{lang}.ids.npy` (int32 token ids of every sentence, concatenated, no BOS/EOS),
`.offsets.npy` (int64, n + 1: sentence k is ids[offsets[k]:offsets[k+1]]) and `.words.npy`
(int32, n: each sentence's length in words before BPE, the unit of --max-len). `epoch_batches` is
the paper's batching (section 4.2), a pure function of (lengths, settings, seed, epoch): a resumed
run recomputes it, and every distributed rank takes its own minibatches without talking.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from nmtkit.errors import ConfigError, InputError
from nmtkit.io.checks import check_found
from nmtkit.text.vocab import BOS_ID, EOS_ID, PAD_ID


def split_paths(data_dir: str | Path, split: str, lang: str) -> tuple[Path, Path, Path]:
    d = Path(data_dir)
    return d / f"{split}.{lang}.ids.npy", d / f"{split}.{lang}.offsets.npy", d / f"{split}.{lang}.words.npy"


class SplitWriter:
    """Streams one side's ids to raw files in `work_dir`, then writes the three .npy files in
    `out_dir` block by block. `add(ids (N,), lens (n,), words (n,))` takes a block of sentences."""

    BLOCK = 1 << 20  # values per block when converting raw files to .npy

    def __init__(self, out_dir: str | Path, work_dir: str | Path, split: str, lang: str):
        self.ids_path, self.offsets_path, self.words_path = split_paths(out_dir, split, lang)
        self._raw = [Path(work_dir) / f"{split}.{lang}.{kind}.raw" for kind in ("ids", "lens", "words")]
        self._files = [open(raw, "wb") for raw in self._raw]
        self.n_tokens = self.n_lines = 0

    def add(self, ids: np.ndarray, lens: np.ndarray, words: np.ndarray) -> None:
        assert len(words) == len(lens), (len(words), len(lens))
        for f, values, dtype in zip(self._files, (ids, lens, words), (np.int32, np.int64, np.int32)):
            f.write(np.ascontiguousarray(values, dtype=dtype).tobytes())
        self.n_tokens += len(ids)
        self.n_lines += len(lens)

    def close(self) -> None:
        for f in self._files:
            f.close()
        ids_raw, lens_raw, words_raw = self._raw
        self._copy(ids_raw, self.ids_path, np.int32, self.n_tokens, cumulative=False)
        self._copy(lens_raw, self.offsets_path, np.int64, self.n_lines + 1, cumulative=True)
        self._copy(words_raw, self.words_path, np.int32, self.n_lines, cumulative=False)
        for raw in self._raw:
            raw.unlink()

    def _copy(self, raw: Path, path: Path, dtype, n: int, cumulative: bool) -> None:
        """Write `raw` (native-endian values) as a 1-D .npy of length n, BLOCK values at a time;
        with `cumulative`, as [0, running sums...] (lengths -> offsets)."""
        dtype = np.dtype(dtype)
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (n,)}
        with open(path, "wb") as out, open(raw, "rb") as f:
            np.lib.format.write_array_header_1_0(out, header)
            start = out.tell()
            if not cumulative:
                shutil.copyfileobj(f, out, self.BLOCK * dtype.itemsize)
            else:
                sums = np.zeros(1, dtype=dtype)
                out.write(sums.tobytes())
                while len(block := np.fromfile(f, dtype=dtype, count=self.BLOCK)):
                    sums = np.cumsum(block, dtype=dtype) + sums[-1]
                    out.write(sums.tobytes())
            written = (out.tell() - start) // dtype.itemsize
        assert written == n, (path, written, n)


def check_npy(path: str | Path, expected_len: int | None = None) -> int:
    """The length of the 1-D integer .npy at `path`, checked whole (and of `expected_len` values)."""
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
    """(min, max) of a 1-D array, (0, -1) when empty, in one pass over cache-sized blocks."""
    lowest, highest = 0, -1
    for start in range(0, len(values), block):
        chunk = np.asarray(values[start : start + block])
        low, high = int(chunk.min()), int(chunk.max())
        lowest, highest = (low, high) if start == 0 else (min(lowest, low), max(highest, high))
    return lowest, highest


class BinarizedText:
    """One language of one split, memory-mapped: `x[k]` the ids of sentence k, `lengths` (n,) in ids,
    `word_lengths` (n,) in words, `max_id` the largest id (-1 when there are none)."""

    def __init__(self, data_dir: str | Path, split: str, lang: str):
        ids_path, off_path, w_path = split_paths(data_dir, split, lang)
        for p in (ids_path, off_path, w_path):
            check_found(p, f"binarised split '{split}.{lang}' not found (run 'nmtkit preprocess')")
        check_npy(ids_path)
        n = check_npy(off_path) - 1
        check_npy(w_path, n)
        self.ids = np.load(ids_path, mmap_mode="r")
        self.offsets = np.load(off_path, mmap_mode="r")
        self.lengths = np.diff(np.asarray(self.offsets)).astype(np.int64)
        self.word_lengths = np.load(w_path, mmap_mode="r")
        self._check(ids_path, off_path, w_path)

    def _check(self, ids_path: Path, off_path: Path, w_path: Path) -> None:
        """Offsets that cut `ids` into sentences, no negative values, word lengths that fit the ids."""
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
            raise InputError(f"split '{split}' has {len(self.src)} source but {len(self.tgt)} target sentences",
                             str(data_dir))

    def __len__(self) -> int:
        return len(self.src)


def write_split(out_dir: str | Path, split: str, lang: str, sentences: list[list[int]],
                words: list[int] | None = None) -> None:
    """One side of a split held in memory (tests, benchmarks); `words` defaults to the lengths in ids."""
    w = SplitWriter(out_dir, out_dir, split, lang)
    lens = np.asarray([len(s) for s in sentences], dtype=np.int64)
    w.add(np.asarray([i for s in sentences for i in s], dtype=np.int32), lens,
          lens if words is None else np.asarray(words, dtype=np.int32))
    w.close()


# ---- minibatches ------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchingConfig:
    """Minibatches of at most `batch_size` pairs and `max_tokens` padded tokens, n_pairs *
    max(longest source, longest target + 1) (None: no limit); `pool_size` pairs sorted at once (0: all)."""

    batch_size: int | None = 80
    max_tokens: int | None = None
    pool_size: int = 1600
    shuffle: bool = True

    def __post_init__(self) -> None:
        if self.batch_size is None and self.max_tokens is None:
            raise ConfigError("need a batch size or a token budget (--batch-size or --max-tokens)")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError(f"--max-tokens must be at least 1, got {self.max_tokens}")
        if self.pool_size < 0:
            raise ConfigError(f"--sort-pool must be at least 0 (the whole corpus), got {self.pool_size}")


def keep_pairs(src_lens: np.ndarray, tgt_lens: np.ndarray, max_len: int | None) -> np.ndarray:
    """Indices of the pairs used for training: both sides non-empty and at most `max_len` tokens."""
    src_lens, tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
    ok = (src_lens > 0) & (tgt_lens > 0)
    if max_len is not None:
        ok &= (src_lens <= max_len) & (tgt_lens <= max_len)
    return np.flatnonzero(ok).astype(np.int64)


def over_budget(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int) -> tuple[int, int]:
    """(pairs whose padded size exceeds `max_tokens`, the largest padded size)."""
    cost = np.maximum(np.asarray(src_lens), np.asarray(tgt_lens) + 1)
    return int((cost > max_tokens).sum()), int(cost.max()) if cost.size else 0


def _cut(order: np.ndarray, costs: np.ndarray, batch_size: int | None,
         max_tokens: int | None) -> list[np.ndarray]:
    """`order` cut in turn into batches of at most `batch_size` items whose number times their largest
    cost (`costs`, one per item) is at most `max_tokens` (None: no limit; an item over it alone)."""
    if max_tokens is None:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    batches: list[np.ndarray] = []
    start, longest = 0, 0
    for i, cost in enumerate(costs.tolist()):
        n = i - start + 1
        if n > 1 and ((batch_size is not None and n > batch_size) or max(longest, cost) * n > max_tokens):
            batches.append(order[start:i])
            start, longest = i, cost
        else:
            longest = max(longest, cost)
    if start < len(order):
        batches.append(order[start:])
    return batches


def epoch_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, cfg: BatchingConfig, seed: int, epoch: int,
                  indices: np.ndarray | None = None) -> list[np.ndarray]:
    """The minibatches (arrays of pair indices) of one epoch, in training order: the pairs shuffled
    (`cfg.shuffle`), each pool sorted by length (target, then source) and cut, the minibatches shuffled."""
    src_lens, tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
    indices = np.arange(len(src_lens), dtype=np.int64) if indices is None else np.asarray(indices, dtype=np.int64)
    rng = np.random.default_rng([int(seed), int(epoch), 0x6E6D74])  # independent of every other RNG in the run
    order = rng.permutation(indices) if cfg.shuffle else indices
    out: list[np.ndarray] = []
    pool_size = cfg.pool_size or max(len(order), 1)
    for p in range(0, len(order), pool_size):
        pool = order[p : p + pool_size]
        pool = pool[np.lexsort((src_lens[pool], tgt_lens[pool]))]  # last key is the primary one
        costs = np.maximum(src_lens[pool].astype(np.int64), tgt_lens[pool].astype(np.int64) + 1)  # with EOS
        batches = _cut(pool, costs, cfg.batch_size, cfg.max_tokens)
        if cfg.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        out.extend(batches)
    return out


def update_batches(plan: list[np.ndarray], start: int, world_size: int, update_freq: int) -> list[np.ndarray]:
    """The minibatches of the update that starts at `plan[start]`: `update_freq` rounds of one per
    rank (rank r trains on `batches[r::world_size]`), fewer whole rounds at the end of an epoch."""
    rounds = min(update_freq, (len(plan) - start) // world_size)
    return plan[start : start + max(0, rounds) * world_size]


def length_batches(lengths: Sequence[int] | np.ndarray, batch_size: int, max_tokens: int | None = None,
                   indices: np.ndarray | None = None, longest_first: bool = False) -> list[np.ndarray]:
    """Sentence `indices` (default: all) stably sorted by length (or `longest_first`) and cut into
    batches of at most `batch_size` sentences and `max_tokens` padded tokens, for decoding."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if indices is None:
        indices = np.arange(len(lengths), dtype=np.int64)
    keys = lengths[indices]
    order = indices[np.argsort(-keys if longest_first else keys, kind="stable")]
    return _cut(order, lengths[order], batch_size, max_tokens)


def pad_rows(rows: Sequence[Sequence[int] | np.ndarray], pad: int = PAD_ID, width: int | None = None) -> np.ndarray:
    """(B, width) int64: the rows left-aligned, filled with `pad` (width: the longest row)."""
    if width is None:
        width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def collate(src_ids: np.ndarray, src_offsets: np.ndarray, tgt_ids: np.ndarray, tgt_offsets: np.ndarray,
            batch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Padded arrays for one minibatch of pair indices: (src (B, S) int64, src_lens (B,) int64,
    tgt_in (B, T+1) = [BOS] + y, tgt_out (B, T+1) = y + [EOS]); sources carry no BOS/EOS."""
    b = len(batch)
    s0, s1 = src_offsets[batch], src_offsets[batch + 1]
    t0, t1 = tgt_offsets[batch], tgt_offsets[batch + 1]
    src_lens = (s1 - s0).astype(np.int64)
    tgt_lens = (t1 - t0).astype(np.int64)
    src = pad_rows([src_ids[s0[i] : s1[i]] for i in range(b)], width=int(src_lens.max(initial=0)))
    y = pad_rows([tgt_ids[t0[i] : t1[i]] for i in range(b)], width=int(tgt_lens.max(initial=0)))
    tgt_in = np.concatenate([np.full((b, 1), BOS_ID, dtype=np.int64), y], axis=1)
    tgt_out = np.concatenate([y, np.full((b, 1), PAD_ID, dtype=np.int64)], axis=1)
    tgt_out[np.arange(b), tgt_lens] = EOS_ID
    return src, src_lens, tgt_in, tgt_out
