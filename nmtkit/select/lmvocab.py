"""The n-gram LMs' vocabulary and the flat batches they are estimated and scored on.

`LMVocab` maps tokens to the LM's own small ids; `flatten` / `FlatBatch` lay out a batch of
sentences as one `<s> ids </s>` array for the vectorised counting and scoring in
`nmtkit.select.ngram`. numpy only.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Iterable, Sequence

import numpy as np

from nmtkit.text.vocab import BOS, EOS, UNK

# The LM's own ids: its vocabulary has no <pad> and puts <s>, </s>, <unk> first in this order, so
# they are NOT the ids of nmtkit.text.vocab (PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0-3); the
# LM_ prefix keeps the two sets apart. The symbols themselves are the same strings.
LM_BOS_ID, LM_EOS_ID, LM_UNK_ID = 0, 1, 2
LM_SPECIALS = (BOS, EOS, UNK)


@dataclass
class LMVocab:
    """Token <-> id map shared by the in-domain and the out-of-domain LM of one language.

    Ids: 0 `<s>`, 1 `</s>`, 2 `<unk>`, then the words in order of decreasing count (ties by
    string). Any token not in it maps to `<unk>`.
    """

    itos: list[str]
    stoi: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        assert tuple(self.itos[:3]) == LM_SPECIALS
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], min_count: int = 1) -> "LMVocab":
        """Words seen at least `min_count` times in `sentences` (the in-domain text)."""
        counts: Counter[str] = Counter()
        for toks in sentences:
            counts.update(toks)
        for special in LM_SPECIALS:
            counts.pop(special, None)
        words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        return cls(list(LM_SPECIALS) + words)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        get = self.stoi.get
        return [get(t, LM_UNK_ID) for t in tokens]

    def _flat_lookup(self) -> dict[str, int]:
        # A literal "<s>" or "</s>" in the text is an ordinary (unknown) word.
        lk = getattr(self, "_lookup", None)
        if lk is None:
            lk = dict(self.stoi)
            lk[BOS] = lk[EOS] = LM_UNK_ID
            self._lookup = lk
        return lk

    def encode_batch(self, sentences: Sequence[Sequence[str]]) -> "FlatBatch":
        """Token lists -> one FlatBatch (one dict look-up pass over the whole batch)."""
        lens = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
        words = list(chain.from_iterable(sentences))
        get = self._flat_lookup().get
        ids = np.fromiter(map(get, words, repeat(LM_UNK_ID)), dtype=np.int64, count=len(words))
        toks, dist, starts = _assemble(ids, lens)
        return FlatBatch(toks, dist, starts, lens + 1)

    def encode_lines(self, lines: Sequence[str], lowercase: bool = False) -> "FlatBatch":
        """Already tokenised lines (tokens separated by whitespace) -> one FlatBatch."""
        if lowercase:
            return self.encode_batch([line.lower().split() for line in lines])
        return self.encode_batch([line.split() for line in lines])


@dataclass
class FlatBatch:
    """A batch of sentences as one array, `<s> ids </s>` each, for vectorised scoring.

    toks (T,) int64 ids; dist (T,) int64 position in the sentence (0 at `<s>`);
    starts (N,) int64 index of each `<s>`; lens (N,) int64 predicted tokens (words + `</s>`).
    """

    toks: np.ndarray
    dist: np.ndarray
    starts: np.ndarray
    lens: np.ndarray


def flatten(sentences: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sentences of ids -> (toks, dist, sent_starts).

    toks (T,) int64: every sentence as `<s> ids </s>`, concatenated.
    dist (T,) int64: position within its sentence (0 at `<s>`), i.e. how many tokens of
        history a position has; an order-k n-gram ends at p iff dist[p] >= k - 1.
    sent_starts (N,) int64: index of each sentence's `<s>` in toks.
    """
    lens = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
    ids = np.fromiter(chain.from_iterable(sentences), dtype=np.int64, count=int(lens.sum()))
    return _assemble(ids, lens)


def _assemble(ids: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Word ids (W,) of sentences of lengths lens (N,) -> (toks, dist, starts) as in `flatten`."""
    sizes = lens + 2
    starts = np.zeros(lens.size, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    toks = np.empty(int(sizes.sum()), dtype=np.int64)
    is_word = np.ones(toks.size, dtype=bool)
    is_word[starts] = False
    is_word[starts + lens + 1] = False
    toks[starts] = LM_BOS_ID
    toks[starts + lens + 1] = LM_EOS_ID
    toks[is_word] = ids
    dist = np.arange(toks.size, dtype=np.int64) - np.repeat(starts, sizes)
    return toks, dist, starts
