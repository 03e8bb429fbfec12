"""Vocabulary shortlists for decoding (Jean et al. 2015, section 3.2): a batch's output layer is
computed over the M most frequent target words plus the K' likeliest translations of each of its
source words. The translations come from a lexicon built once from the training data when a
run starts (`build_lexicon`, stored in its checkpoints): for each source word s the k target
words t of highest Dice coefficient 2 c(s, t) / (c(s) + c(t)) over same-sentence-pair token
co-occurrences. No torch at build time.
"""
from __future__ import annotations

from typing import Any

import numpy as np

LEXICON_K = 20  # translations kept per source word
FREQUENT = 1000  # the most frequent target words, always candidates
MAX_PAIRS = 100_000  # sentence pairs sampled for the co-occurrence counts


def _positions(off: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The token positions of sentences `rows` (concatenated) and their lengths."""
    n = (off[rows + 1] - off[rows]).astype(np.int64)
    return np.repeat(off[rows], n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)), n


def build_lexicon(src_ids: Any, src_off: Any, tgt_ids: Any, tgt_off: Any, src_vocab: int, tgt_vocab: int,
                  k: int = LEXICON_K, max_pairs: int = MAX_PAIRS, seed: int = 0) -> np.ndarray:
    """(src_vocab, k) int32: each source id's k target ids of highest Dice coefficient, best
    first (PAD, id 0, where a word has fewer than k partners). src_ids/tgt_ids: the concatenated
    ids of a binarised split, src_off/tgt_off its offsets (n + 1); at most `max_pairs` sentence
    pairs, drawn with `seed`, are counted."""
    src_ids, tgt_ids = np.asarray(src_ids), np.asarray(tgt_ids)
    src_off, tgt_off = np.asarray(src_off, dtype=np.int64), np.asarray(tgt_off, dtype=np.int64)
    n = len(src_off) - 1
    rows = np.arange(n)
    if n > max_pairs:
        rows = np.sort(np.random.default_rng(seed).choice(n, max_pairs, replace=False))
    s_pos, a = _positions(src_off, rows)
    t_pos, b = _positions(tgt_off, rows)
    s_tok, t_tok = src_ids[s_pos].astype(np.int64), tgt_ids[t_pos].astype(np.int64)
    c_s = np.bincount(s_tok, minlength=src_vocab)
    c_t = np.bincount(t_tok, minlength=tgt_vocab)
    # every (source token, target token) pair of a sentence pair: each source token repeated by
    # its sentence's target length, against that sentence's target tokens (their positions in t_tok)
    t_at, reps = _positions(np.concatenate(([0], np.cumsum(b))), np.repeat(np.arange(len(b)), a))
    keys, c_st = np.unique(np.repeat(s_tok, reps) * tgt_vocab + t_tok[t_at], return_counts=True)
    ks, kt = keys // tgt_vocab, keys % tgt_vocab
    dice = 2.0 * c_st / (c_s[ks] + c_t[kt])
    order = np.lexsort((-dice, ks))  # by source id, then best first
    ks, kt = ks[order], kt[order]
    rank = np.arange(len(ks)) - np.searchsorted(ks, ks, side="left")
    keep = rank < k
    lex = np.zeros((src_vocab, k), np.int32)
    lex[ks[keep], rank[keep]] = kt[keep]
    return lex


def shortlist_ids(lexicon: Any, src: Any, vocab_size: int, frequent: int = FREQUENT):
    """The sorted candidate target ids (L,) long tensor for a batch of source ids `src` (B, S)
    (PAD's row is harmless): ids 0..frequent-1 (the specials and the most frequent words), the
    lexicon rows of every source id, padded with the next most frequent ids to a multiple of
    beam search's top-k group (16), or the whole vocabulary where that is not longer."""
    import torch

    from nmtkit.decode.search import TOPK_GROUP
    from nmtkit.text.vocab import SPECIALS

    lex = torch.as_tensor(lexicon)
    mask = torch.zeros(vocab_size, dtype=torch.bool)
    mask[: max(len(SPECIALS), min(frequent, vocab_size))] = True
    src = torch.as_tensor(src).reshape(-1).cpu()
    src = src[(src >= 0) & (src < lex.size(0))]
    mask[lex.index_select(0, src.unique()).reshape(-1).long().clamp_(0, vocab_size - 1)] = True
    need = (-int(mask.sum())) % TOPK_GROUP  # padded to a whole number of groups with the next free ids
    mask[(~mask).nonzero().squeeze(1)[:need]] = True
    return mask.nonzero().squeeze(1)
