"""Batching invariants: the paper's sorted pools, token budgets, epoch coverage, sharding."""
from __future__ import annotations

import numpy as np
import pytest

from nmtkit.data.binarized import (
    BatchingConfig,
    collate,
    epoch_batches,
    keep_pairs,
    length_batches,
    over_budget,
    pad_rows,
    update_batches,
)
from nmtkit.errors import ConfigError


def _lengths(n: int, seed: int = 0, hi: int = 60) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, hi, size=n), rng.integers(1, hi, size=n)


def test_paper_pools_are_1600_pairs_sorted_and_split_into_20_batches_of_80():
    src, tgt = _lengths(5000)
    cfg = BatchingConfig(batch_size=80, pool_size=1600)
    batches = epoch_batches(src, tgt, cfg, seed=1, epoch=1)
    order = np.random.default_rng([1, 1, 0x6E6D74]).permutation(5000)  # the epoch's reading order
    for p in range(3):  # three full pools of 1600 pairs
        pool_batches = batches[20 * p : 20 * (p + 1)]
        assert all(len(b) == 80 for b in pool_batches)
        assert sorted(np.concatenate(pool_batches).tolist()) == sorted(order[1600 * p : 1600 * (p + 1)].tolist())
        # each batch is a contiguous run of the pool sorted by target length
        by_min = sorted(pool_batches, key=lambda b: (tgt[b].min(), tgt[b].max()))
        for a, b in zip(by_min, by_min[1:]):
            assert tgt[a].max() <= tgt[b].min()
    # the minibatch order inside a pool is shuffled, not ascending
    mins = [int(tgt[b].min()) for b in batches[:20]]
    assert mins != sorted(mins)


def test_token_budget_respected_and_single_long_pair_kept():
    src, tgt = _lengths(3000, seed=2)
    src[7] = 500  # longer than the whole budget: a batch of its own, never dropped
    cfg = BatchingConfig(batch_size=None, max_tokens=400, pool_size=1000)
    batches = epoch_batches(src, tgt, cfg, seed=3, epoch=1)
    for b in batches:
        cost = len(b) * max(int(src[b].max()), int(tgt[b].max()) + 1)
        assert cost <= 400 or len(b) == 1
    assert any(7 in b for b in batches)
    # the budget is used: batches are not trivially small
    assert np.mean([len(b) for b in batches]) > 5


def test_a_pool_of_0_sorts_the_whole_corpus_into_fuller_budgets_than_pools_of_1600():
    src, tgt = _lengths(20_000, seed=6, hi=50)
    whole = epoch_batches(src, tgt, BatchingConfig(batch_size=None, max_tokens=2000, pool_size=0), seed=1, epoch=1)
    pools = epoch_batches(src, tgt, BatchingConfig(batch_size=None, max_tokens=2000, pool_size=1600), seed=1, epoch=1)
    by_min = sorted(whole, key=lambda b: (tgt[b].min(), tgt[b].max()))  # one sorted run, cut into batches
    assert all(tgt[a].max() <= tgt[b].min() for a, b in zip(by_min, by_min[1:]))

    assert len(whole) < 0.8 * len(pools)  # each pool of 1600 ends in a part-filled budget
    one = epoch_batches(src, tgt, BatchingConfig(batch_size=None, max_tokens=2000, pool_size=20_000), seed=1, epoch=1)
    assert len(one) == len(whole) and all(np.array_equal(a, b) for a, b in zip(one, whole))  # 0: one pool of all
    mins = [int(tgt[b].min()) for b in whole[:20]]
    assert mins != sorted(mins)  # the batches' order is shuffled


def test_token_budget_with_pair_cap():
    src, tgt = np.full(500, 2), np.full(500, 2)
    batches = epoch_batches(src, tgt, BatchingConfig(batch_size=10, max_tokens=10_000), seed=1, epoch=1)
    assert max(len(b) for b in batches) == 10


@pytest.mark.parametrize("cfg", [BatchingConfig(batch_size=80), BatchingConfig(batch_size=None, max_tokens=300),
                                 BatchingConfig(batch_size=7, pool_size=50),
                                 BatchingConfig(batch_size=None, max_tokens=300, pool_size=0)])
def test_every_kept_pair_exactly_once_per_epoch(cfg):
    src, tgt = _lengths(2345, seed=4)
    keep = keep_pairs(src, tgt, max_len=40)
    for epoch in (1, 2):
        batches = epoch_batches(src, tgt, cfg, seed=9, epoch=epoch, indices=keep)
        flat = np.concatenate(batches)
        assert len(flat) == len(keep)
        assert np.array_equal(np.sort(flat), keep)


def test_plan_is_a_function_of_seed_and_epoch():
    src, tgt = _lengths(1000, seed=5)
    cfg = BatchingConfig(batch_size=20, pool_size=200)
    a = epoch_batches(src, tgt, cfg, seed=1, epoch=3)
    b = epoch_batches(src, tgt, cfg, seed=1, epoch=3)
    c = epoch_batches(src, tgt, cfg, seed=1, epoch=4)
    d = epoch_batches(src, tgt, cfg, seed=2, epoch=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert not all(np.array_equal(x, y) for x, y in zip(a, d))


@pytest.mark.parametrize("world,freq", [(1, 1), (1, 3), (2, 1), (3, 2), (4, 1)])
def test_updates_give_each_rank_its_own_minibatches_and_cover_the_epoch(world, freq):
    """Every update holds `freq` rounds of one minibatch per rank (fewer whole rounds at the end of
    the epoch); the updates cover the plan but for fewer minibatches than ranks at its end."""
    src, tgt = _lengths(800, seed=6)
    plan = epoch_batches(src, tgt, BatchingConfig(batch_size=33, pool_size=330), seed=1, epoch=1)
    assert len(plan) == 25  # no multiple of 2, 3 or 4: the epoch ends in a part round
    start, seen = 0, []
    while True:
        group = update_batches(plan, start, world, freq)
        if not group:
            break
        assert len(group) % world == 0 and len(group) <= world * freq
        assert all(len(group[r::world]) == len(group) // world for r in range(world))
        seen += group
        start += len(group)
    assert len(plan) - len(seen) < world
    assert all(np.array_equal(a, b) for a, b in zip(seen, plan))


def test_the_over_budget_warning_counts_the_pairs_that_batching_puts_alone_over_the_budget():
    """Both count a target with its EOS: max(source, target + 1) tokens per pair."""
    src, tgt = _lengths(500, seed=8)
    over, largest = over_budget(src, tgt, 40)
    alone = [b for b in epoch_batches(src, tgt, BatchingConfig(batch_size=None, max_tokens=40), seed=1, epoch=1)
             if len(b) == 1 and max(src[b[0]], tgt[b[0]] + 1) > 40]
    assert over == len(alone) > 0 and largest == int(np.maximum(src, tgt + 1).max())


def test_keep_pairs_drops_long_and_empty_sides():
    src = np.array([3, 0, 51, 50, 10, 4])
    tgt = np.array([3, 2, 5, 50, 51, 0])
    assert keep_pairs(src, tgt, 50).tolist() == [0, 3]
    assert keep_pairs(src, tgt, None).tolist() == [0, 2, 3, 4]


def test_collate_adds_bos_eos_and_pads():
    src_seqs = [[5, 6, 7], [8]]
    tgt_seqs = [[9], [10, 11]]

    def flat(seqs):
        ids = np.array([x for s in seqs for x in s], dtype=np.int32)
        off = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
        return ids, off

    si, so = flat(src_seqs)
    ti, to = flat(tgt_seqs)
    src, src_lens, tgt_in, tgt_out = collate(si, so, ti, to, np.array([1, 0]))
    assert src.tolist() == [[8, 0, 0], [5, 6, 7]]
    assert src_lens.tolist() == [1, 3]
    assert tgt_in.tolist() == [[2, 10, 11], [2, 9, 0]]
    assert tgt_out.tolist() == [[10, 11, 3], [9, 3, 0]]


@pytest.mark.parametrize("kwargs", [dict(batch_size=None, max_tokens=None), dict(batch_size=0),
                                    dict(max_tokens=-1), dict(pool_size=-1)])
def test_bad_batching_settings_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        BatchingConfig(**kwargs)


def test_length_batches_sort_by_length_and_respect_both_caps():
    lengths = [3, 10, 1, 7, 7, 2, 9, 4]
    batches = [b.tolist() for b in length_batches(lengths, batch_size=3, max_tokens=20, longest_first=True)]
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths, reverse=True)
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 20
    assert [b.tolist() for b in length_batches([50], batch_size=4, max_tokens=10)] == [[0]]  # too long: alone


def test_length_batches_shortest_first_keep_ties_in_order_and_take_only_the_given_indices():
    lengths = np.array([3, 0, 2, 3, 2, 5])
    batches = length_batches(lengths, batch_size=2, indices=np.array([0, 2, 3, 4, 5]))
    assert [b.tolist() for b in batches] == [[2, 4], [0, 3], [5]]
    budget = length_batches(lengths, batch_size=9, max_tokens=6, indices=np.array([0, 2, 3, 4, 5]))
    assert [b.tolist() for b in budget] == [[2, 4], [0, 3], [5]]  # 3 x 2 fits, 3 x 3 does not


def test_pad_rows_left_aligns_and_fills_with_pad():
    out = pad_rows([[5, 6, 7], [], [8]], pad=0)
    assert out.dtype == np.int64 and out.tolist() == [[5, 6, 7], [0, 0, 0], [8, 0, 0]]
    assert pad_rows([[1]], pad=9, width=3).tolist() == [[1, 9, 9]]
