"""Length-bucketed minibatches and their sharding across distributed ranks (numpy only).

The paper's procedure (Bahdanau et al. 2015, section 4.2 / appendix B.2): every 20 updates,
read 1600 sentence pairs, sort them by length and split them into 20 minibatches of 80 pairs.
`epoch_batches` implements it for one epoch: the corpus order is shuffled with a seed derived
from (seed, epoch), cut into pools of `pool_size` pairs, each pool is sorted by length and cut
into minibatches, either of `batch_size` pairs (the paper) or under a budget of `max_tokens`
padded tokens, and the minibatch order inside the pool is shuffled (so consecutive updates do
not always grow in length).

The whole epoch plan is a pure function of (lengths, settings, seed, epoch): a resumed run
recomputes it and skips the minibatches already done, and every distributed rank computes the
same plan and takes its own minibatches of each update (`update_batches`: --batch-size and
--max-tokens are per rank, as in fairseq), so ranks take the same number of steps and never
need to talk about the data.

Padding (`pad_rows`, `collate`) and evaluation batches (`length_batches`) are written here
once, for training, validation and translation. This module imports numpy only (no torch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from nmtkit.errors import ConfigError
from nmtkit.text.vocab import BOS_ID, EOS_ID, PAD_ID


@dataclass(frozen=True)
class BatchingConfig:
    """How one epoch is cut into minibatches.

    batch_size:  at most this many pairs per minibatch (None: no limit; needs max_tokens).
    max_tokens:  at most this many padded tokens per minibatch, counted as
                 n_pairs * max(longest source, longest target + 1); None: no token budget.
    pool_size:   pairs read, sorted by length and split at once (the paper: 1600 = 20 x 80).
    shuffle:     shuffle the corpus order and the minibatch order inside each pool.
    """

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
        if self.pool_size < 1:
            raise ConfigError(f"--sort-pool must be at least 1, got {self.pool_size}")


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator that orders epoch `epoch` (independent of every other RNG in the run)."""
    return np.random.default_rng([int(seed), int(epoch), 0x6E6D74])


def keep_pairs(src_lens: np.ndarray, tgt_lens: np.ndarray, max_len: int | None) -> np.ndarray:
    """Indices of the pairs used for training: both sides non-empty and at most `max_len` tokens."""
    src_lens = np.asarray(src_lens)
    tgt_lens = np.asarray(tgt_lens)
    ok = (src_lens > 0) & (tgt_lens > 0)
    if max_len is not None:
        ok &= (src_lens <= max_len) & (tgt_lens <= max_len)
    return np.flatnonzero(ok).astype(np.int64)


def _cost(src_len: int, tgt_len: int) -> int:
    """Padded tokens one pair adds to a batch: the longer of source and target (+EOS)."""
    return max(int(src_len), int(tgt_len) + 1)


def over_budget(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int) -> tuple[int, int]:
    """(pairs whose padded size exceeds `max_tokens`, the largest padded size): each such pair
    forms a one-pair minibatch over the budget."""
    cost = np.maximum(np.asarray(src_lens), np.asarray(tgt_lens) + 1)
    return int((cost > max_tokens).sum()), int(cost.max()) if cost.size else 0


def _split_pool(
    pool: np.ndarray, src_lens: np.ndarray, tgt_lens: np.ndarray, cfg: BatchingConfig
) -> list[np.ndarray]:
    """Sort one pool by length (target, then source) and cut it into minibatches."""
    order = np.lexsort((src_lens[pool], tgt_lens[pool]))  # last key is the primary one
    pool = pool[order]
    if cfg.max_tokens is None:
        bs = int(cfg.batch_size)  # type: ignore[arg-type]
        return [pool[i : i + bs] for i in range(0, len(pool), bs)]
    batches: list[np.ndarray] = []
    start, longest = 0, 0
    for i, k in enumerate(pool):
        cost = _cost(src_lens[k], tgt_lens[k])
        n = i - start + 1
        too_many = cfg.batch_size is not None and n > cfg.batch_size
        if n > 1 and (too_many or max(longest, cost) * n > cfg.max_tokens):
            batches.append(pool[start:i])
            start, longest = i, cost
        else:
            longest = max(longest, cost)
    if start < len(pool):
        batches.append(pool[start:])
    return batches


def epoch_batches(
    src_lens: np.ndarray,
    tgt_lens: np.ndarray,
    cfg: BatchingConfig,
    seed: int,
    epoch: int,
    indices: np.ndarray | None = None,
) -> list[np.ndarray]:
    """The minibatches (arrays of pair indices) of one epoch, in training order.

    `indices` restricts the epoch to those pairs (e.g. `keep_pairs(...)`); every one of them
    appears in exactly one minibatch. A single pair longer than the token budget still forms
    a minibatch of its own (it is never silently dropped).
    """
    src_lens = np.asarray(src_lens)
    tgt_lens = np.asarray(tgt_lens)
    if indices is None:
        indices = np.arange(len(src_lens), dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    rng = epoch_rng(seed, epoch)
    order = rng.permutation(indices) if cfg.shuffle else indices
    out: list[np.ndarray] = []
    for p in range(0, len(order), cfg.pool_size):
        batches = _split_pool(order[p : p + cfg.pool_size], src_lens, tgt_lens, cfg)
        if cfg.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        out.extend(batches)
    return out


def update_batches(plan: list[np.ndarray], start: int, world_size: int, update_freq: int) -> list[np.ndarray]:
    """The minibatches of the update that starts at `plan[start]`: `update_freq` rounds of one
    minibatch per rank (rank r trains on `batches[r::world_size]`); at the end of an epoch as
    many whole rounds as remain, and [] when fewer minibatches than ranks remain (they are left
    out of that epoch; the next epoch's plan is shuffled anew)."""
    rounds = min(update_freq, (len(plan) - start) // world_size)
    return plan[start : start + max(0, rounds) * world_size]


def length_batches(
    lengths: Sequence[int] | np.ndarray,
    batch_size: int,
    max_tokens: int | None = None,
    indices: np.ndarray | None = None,
    longest_first: bool = False,
) -> list[np.ndarray]:
    """Sentence indices in batches of similar length, for decoding and evaluation (no shuffling).

    The `indices` (default: all) are sorted by length (stable: ties keep their order), shortest
    first or `longest_first`, and cut into batches of at most `batch_size` sentences and, with
    `max_tokens`, at most that many padded tokens (sentences x the longest one); a single
    longer sentence gets a batch of its own.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if indices is None:
        indices = np.arange(len(lengths), dtype=np.int64)
    keys = lengths[indices]
    order = indices[np.argsort(-keys if longest_first else keys, kind="stable")]
    if max_tokens is None:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    batches: list[np.ndarray] = []
    start, longest = 0, 0
    for k, i in enumerate(order):
        n = k - start  # sentences already in the batch
        width = max(longest, int(lengths[i]))
        if n and (n >= batch_size or (n + 1) * width > max_tokens):
            batches.append(order[start:k])
            start, width = k, int(lengths[i])
        longest = width
    if start < len(order):
        batches.append(order[start:])
    return batches


def pad_rows(rows: Sequence[Sequence[int] | np.ndarray], pad: int = PAD_ID, width: int | None = None) -> np.ndarray:
    """(B, width) int64: the rows left-aligned, filled with `pad` (width: the longest row)."""
    if width is None:
        width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def collate(
    src_ids: np.ndarray,
    src_offsets: np.ndarray,
    tgt_ids: np.ndarray,
    tgt_offsets: np.ndarray,
    batch: np.ndarray,
    bos: int = BOS_ID,
    eos: int = EOS_ID,
    pad: int = PAD_ID,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Padded arrays for one minibatch of pair indices.

    Returns (src (B, S) int64, src_lens (B,) int64, tgt_in (B, T+1) = [BOS] + y,
    tgt_out (B, T+1) = y + [EOS]), padded with `pad` (`pad_rows`). Sources carry no BOS/EOS.
    """
    b = len(batch)
    s0, s1 = src_offsets[batch], src_offsets[batch + 1]
    t0, t1 = tgt_offsets[batch], tgt_offsets[batch + 1]
    src_lens = (s1 - s0).astype(np.int64)
    tgt_lens = (t1 - t0).astype(np.int64)
    src = pad_rows([src_ids[s0[i] : s1[i]] for i in range(b)], pad, int(src_lens.max(initial=0)))
    y = pad_rows([tgt_ids[t0[i] : t1[i]] for i in range(b)], pad, int(tgt_lens.max(initial=0)))
    column = np.full((b, 1), pad, dtype=np.int64)
    tgt_in = np.concatenate([column + (bos - pad), y], axis=1)
    tgt_out = np.concatenate([y, column], axis=1)
    tgt_out[np.arange(b), tgt_lens] = eos
    return src, src_lens, tgt_in, tgt_out
