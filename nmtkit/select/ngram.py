"""Interpolated modified Kneser-Ney n-gram LMs (Chen & Goodman 1998, section 3), estimated with
numpy, with the conventions of SRILM/KenLM (see `NgramLM`), their vocabulary and flat batches.

Storage has no Python dict per n-gram: the unigram table is indexed by word id; an order-k n-gram
(k >= 2) is the int64 key `ctx * V + w`, `ctx` the row of its (k-1)-gram context in the
order-(k-1) table (a trie flattened into sorted arrays), so keys never collide. Look-ups are one
`np.searchsorted` per order for a whole batch.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Iterable, Mapping, Sequence, TextIO

import numpy as np

from nmtkit.text.vocab import BOS, EOS, UNK

# The LM's own ids (no <pad>): NOT the ids of nmtkit.text.vocab, though the symbols are the same strings.
LM_BOS_ID, LM_EOS_ID, LM_UNK_ID = 0, 1, 2
LM_SPECIALS = (BOS, EOS, UNK)


@dataclass
class LMVocab:
    """Token <-> id map shared by both LMs of one language: the specials, then the words by decreasing
    count (ties by string). Any other token is `<unk>`, a literal `<s>` or `</s>` in the text too."""

    itos: list[str]
    stoi: dict[str, int] = field(init=False, repr=False)
    flat_stoi: dict[str, int] = field(init=False, repr=False)  # the encoders'

    def __post_init__(self) -> None:
        assert tuple(self.itos[:3]) == LM_SPECIALS
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        self.flat_stoi = {**self.stoi, BOS: LM_UNK_ID, EOS: LM_UNK_ID}

    def __len__(self) -> int:
        return len(self.itos)

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], min_count: int = 1) -> "LMVocab":
        """Words seen at least `min_count` times in `sentences` (the in-domain text)."""
        return cls.from_counts(Counter(chain.from_iterable(sentences)), min_count)

    @classmethod
    def from_counts(cls, counts: Mapping[str, int], min_count: int = 1) -> "LMVocab":
        """Words of `counts` (word -> count) seen at least `min_count` times, the specials left out."""
        words = sorted((w for w, c in counts.items() if c >= min_count and w not in LM_SPECIALS),
                       key=lambda w: (-counts[w], w))
        return cls(list(LM_SPECIALS) + words)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        get = self.flat_stoi.get
        return [get(t, LM_UNK_ID) for t in tokens]

    def encode_batch(self, sentences: Sequence[Sequence[str]]) -> "FlatBatch":
        ids = map(self.flat_stoi.get, chain.from_iterable(sentences), repeat(LM_UNK_ID))
        return flat_batch(np.fromiter(ids, dtype=np.int64), list(map(len, sentences)))


@dataclass
class FlatBatch:
    """A batch of sentences as one array, `<s> ids </s>` each: toks (T,) int64 ids; dist (T,) int64
    position in the sentence (0 at `<s>`; an order-k n-gram ends at p iff dist[p] >= k - 1);
    starts (N,) int64 index of each `<s>`; lens (N,) int64 predicted tokens (words + `</s>`)."""

    toks: np.ndarray
    dist: np.ndarray
    starts: np.ndarray
    lens: np.ndarray


def flatten(sentences: Sequence[Sequence[int]]) -> FlatBatch:
    """Sentences of ids (without `<s>`, `</s>`) -> one FlatBatch."""
    return flat_batch(np.fromiter(chain.from_iterable(sentences), dtype=np.int64), list(map(len, sentences)))


def flat_batch(ids: np.ndarray, lens: np.ndarray) -> FlatBatch:
    """Word ids (W,) of sentences of lengths lens (N,), of any integer dtype -> their FlatBatch."""
    ids, lens = np.asarray(ids, dtype=np.int64), np.asarray(lens, dtype=np.int64)
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
    return FlatBatch(toks, dist, starts, lens + 1)


DEFAULT_DISCOUNTS = (0.5, 1.0, 1.5)


def kn_discounts(adjusted_counts: np.ndarray) -> tuple[float, float, float]:
    """(D1, D2, D3+) from the count-of-counts n1..n4 of one order (Chen & Goodman eq. 26), or all three
    DEFAULT_DISCOUNTS where one is undefined or outside (0, j] (tiny corpora), as KenLM's
    --discount_fallback: a mixed triple such as D2 = 2 > D3+ leaves n-grams seen twice no mass."""
    n = np.bincount(np.minimum(adjusted_counts, 5).astype(np.int64), minlength=6)[1:5].astype(np.float64)
    j = np.arange(1.0, 4.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = j - (j + 1) * n[0] / (n[0] + 2 * n[1]) * n[1:] / n[:3]
    ok = np.isfinite(d).all() and ((d > 0) & (d <= j)).all()
    return (float(d[0]), float(d[1]), float(d[2])) if ok else DEFAULT_DISCOUNTS


def _smooth(a: np.ndarray, d: tuple[float, float, float], ctx: np.ndarray,
            n_ctx: int) -> tuple[np.ndarray, np.ndarray]:
    """Kneser-Ney's two terms for n-grams of adjusted counts `a` (m,) in the contexts of rows `ctx`
    (m,) < n_ctx: disc_prob (m,) max(a - D(a), 0) / a(h.), D(a) = 0, D1, D2, D3+ for a = 0, 1, 2,
    >= 3; and gamma (n_ctx,) (D1 N1(h.) + D2 N2(h.) + D3+ N3+(h.)) / a(h.), 1.0 for a context
    never seen."""
    denom = np.bincount(ctx, weights=a, minlength=n_ctx)
    mass = d[0] * np.bincount(ctx[a == 1], minlength=n_ctx)  # added in this order
    mass += d[1] * np.bincount(ctx[a == 2], minlength=n_ctx)
    mass += d[2] * np.bincount(ctx[a >= 3], minlength=n_ctx)
    gamma = np.ones(n_ctx)
    np.divide(mass, denom, out=gamma, where=denom > 0)
    del mass
    disc_prob = np.array([0.0, *d])[np.minimum(a, 3)]
    np.subtract(a, disc_prob, out=disc_prob)
    np.maximum(disc_prob, 0.0, out=disc_prob)
    disc_prob /= denom[ctx]
    return disc_prob, gamma


@dataclass
class _Order:
    """Tables of one order k >= 2: keys (n_k,) int64 ctx * V + w, sorted; disc_prob (n_k,) float64
    max(a - D(a), 0) / a(ctx .); gamma (n_{k-1},) float64 the weight of each order-(k-1) row as a
    context. Only what scoring reads is kept: every scoring worker holds the model."""

    keys: np.ndarray
    disc_prob: np.ndarray
    gamma: np.ndarray
    discounts: tuple[float, float, float]
    max_count: int  # the largest adjusted count (the raw count at the highest order)


@dataclass
class _Counts:
    """Raw counts of orders 2..n, each list indexed by k - 2: keys (n_k,) int64 ctx * V + w, sorted;
    raw (n_k,) int32; bos (n_k,) bool: starts with `<s>`; suffix (n_k,) int32: row of its (k-1)-gram
    suffix in order k-1."""

    keys: list[np.ndarray]
    raw: list[np.ndarray]
    bos: list[np.ndarray]
    suffix: list[np.ndarray]


def _unique(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`np.unique(keys, return_index=True, return_inverse=True, return_counts=True)` with inv and cnt
    int32, in about half its temporary memory (keep no reference to `keys`: it is dropped once sorted)."""
    n = keys.size
    perm = np.argsort(keys, kind="stable")
    ordered = keys[perm]
    del keys
    new = np.empty(n, dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    uniq = ordered[starts]
    del ordered
    rows = np.cumsum(new, dtype=np.int32)
    rows -= 1
    del new
    inv = np.empty(n, dtype=np.int32)
    inv[perm] = rows
    del rows
    first = perm[starts]
    cnt = np.diff(starts, append=n).astype(np.int32)
    return uniq, first, inv, cnt


def _keys(prev_idx: np.ndarray, toks: np.ndarray, at: np.ndarray, V: int) -> np.ndarray:
    """(m,) int64 key ctx * V + w of the n-gram ending at each position where `at` (bool) holds."""
    keys = prev_idx[:-1][at[1:]].astype(np.int64)
    keys *= V
    keys += toks[at]
    return keys


def _count(toks: np.ndarray, dist: np.ndarray, V: int, order: int) -> _Counts:
    """Pass up the orders, tracking the row of each position's k-gram (-1 where the sentence is too
    short). Each order's temporaries are dropped before the sort, which sets the peak memory."""
    assert toks.size < 2**31, "too many tokens for int32 rows"
    c = _Counts([], [], [], [])
    prev_idx = toks  # order-1 row = the id itself
    for k in range(2, order + 1):
        at = dist >= k - 1  # never at position 0, a <s>
        n_prev = V if k == 2 else c.keys[-1].size
        assert n_prev * V < 2**62, "n-gram key would overflow int64"
        uniq, first, inv, cnt = _unique(_keys(prev_idx, toks, at, V))
        first_pos = np.flatnonzero(at)[first]
        del first
        c.keys.append(uniq)
        c.raw.append(cnt)
        del cnt
        c.bos.append(dist[first_pos] == k - 1)
        c.suffix.append(prev_idx[first_pos].astype(np.int32))
        del first_pos
        if k < order:
            idx = np.full(toks.size, -1, dtype=np.int32)
            idx[at] = inv
            prev_idx = idx
        del inv, at
    return c


def _adjusted_counts(c: _Counts, toks: np.ndarray, dist: np.ndarray, V: int, order: int) -> list[np.ndarray]:
    """a() per order (index k; index 0 unused), int64 at order 1 and int32 above: raw at the top
    order and for n-grams starting with <s>, continuation counts N1+(. g) otherwise."""
    adj: list[np.ndarray] = [np.zeros(0)] * (order + 1)
    if order == 1:
        adj[1] = np.bincount(toks[dist > 0], minlength=V).astype(np.int64)
    else:
        adj[order] = c.raw[-1]
        for k in range(order - 1, 1, -1):
            cont = np.bincount(c.suffix[k - 1], minlength=c.keys[k - 2].size)  # from order k+1
            adj[k] = np.where(c.bos[k - 2], c.raw[k - 2], cont).astype(np.int32)
        adj[1] = np.bincount(c.suffix[0], minlength=V).astype(np.int64)
    adj[1][LM_BOS_ID] = 0
    return adj


def _interpolate(c: _Counts, adj: list[np.ndarray], disc: Sequence[tuple[float, float, float]],
                 V: int, order: int) -> list["_Order"]:
    """The tables of orders 2..n; `c` and `adj` are emptied as they are used, to bound the memory."""
    orders: list[_Order] = []
    for k in range(2, order + 1):
        keys = c.keys[k - 2]
        a = adj[k]
        n_prev = V if k == 2 else c.keys[k - 3].size
        ctx = np.empty(keys.size, dtype=np.int32)  # the context's row
        np.floor_divide(keys, V, out=ctx, casting="unsafe")
        disc_prob, gamma = _smooth(a, disc[k - 1], ctx, n_prev)
        max_count = int(a.max()) if a.size else 0
        adj[k] = c.raw[k - 2] = c.bos[k - 2] = a = None  # type: ignore[assignment,call-overload]
        c.suffix[k - 2] = None  # type: ignore[call-overload]
        del ctx
        orders.append(_Order(keys, disc_prob, gamma, disc[k - 1], max_count))  # type: ignore[arg-type]
    return orders


@dataclass(eq=False)
class NgramLM:
    """An interpolated modified Kneser-Ney LM over ids of one `LMVocab` (size V).

    Every sentence is `<s> w1 ... wL </s>` with one `<s>`, only ever context; the predicted
    vocabulary is every id but `<s>`, and for any context its probabilities sum to 1. The highest
    order uses raw counts; a lower-order n-gram its continuation count N1+(. g), except n-grams
    starting with `<s>`, which keep their raw count (as in KenLM). The unigram level is
    interpolated with the uniform distribution over the predicted vocabulary:

        p_k(w | h) = max(a(hw) - D_k(a(hw)), 0) / a(h.) + gamma_k(h) p_{k-1}(w | h')
        gamma_k(h) = (D_k1 N1(h.) + D_k2 N2(h.) + D_k3+ N3+(h.)) / a(h.)
        D_k1 = 1 - 2Y n2/n1,  D_k2 = 2 - 3Y n3/n2,  D_k3+ = 3 - 4Y n4/n3,  Y = n1 / (n1 + 2 n2)

    a(): the adjusted count above; n_j: the number of order-k n-grams with a() = j. A context
    never seen at order k backs off with weight 1.
    """

    order: int
    vocab_size: int
    unigram: np.ndarray  # (V,) p_1(w); 0 for <s>
    uni_counts: np.ndarray  # (V,) adjusted unigram counts
    uni_discounts: tuple[float, float, float]
    orders: list[_Order]  # orders[k - 2] is order k

    @classmethod
    def estimate(cls, sentences: Sequence[Sequence[int]] | FlatBatch, vocab_size: int, order: int = 4,
                 discounts: Sequence[tuple[float, float, float]] | None = None) -> "NgramLM":
        """Count and smooth `sentences`: id lists without `<s>`/`</s>`, ids < vocab_size (or their
        FlatBatch). `discounts` (one triple per order 1..n) overrides the count-of-counts estimate."""
        if order < 1:
            raise ValueError("order must be >= 1")
        V = int(vocab_size)
        flat = sentences if isinstance(sentences, FlatBatch) else flatten(sentences)
        toks, dist = flat.toks, flat.dist
        if toks.size and (toks.min() < 0 or toks.max() >= V):
            raise ValueError("token id out of range")
        if not (dist > 0).any():
            raise ValueError("cannot estimate a language model from no text")
        counts = _count(toks, dist, V, order)
        adj = _adjusted_counts(counts, toks, dist, V, order)
        disc = list(discounts) if discounts is not None else [kn_discounts(a) for a in adj[1:]]
        if len(disc) != order:
            raise ValueError("need one discount triple per order")
        disc = [tuple(float(x) for x in d) for d in disc]
        disc_prob, gamma = _smooth(adj[1], disc[0], np.zeros(V, dtype=np.int32), 1)
        unigram = disc_prob + gamma[0] / (V - 1)
        unigram[LM_BOS_ID] = 0.0
        orders = _interpolate(counts, adj, disc, V, order)
        return cls(order, V, unigram, adj[1], disc[0], orders)

    def _row(self, ngram: Sequence[int]) -> int:
        """Row of an n-gram (length >= 1) in its order's table, or -1 if unseen."""
        row = int(ngram[0])
        for j, w in enumerate(ngram[1:], start=2):
            keys = self.orders[j - 2].keys
            key = row * self.vocab_size + int(w)
            pos = int(np.searchsorted(keys, key))
            if pos >= keys.size or keys[pos] != key:
                return -1
            row = pos
        return row

    def _context_rows(self, context: Sequence[int]) -> list[tuple[_Order, int]]:
        """(order-k table, row of the context's last k - 1 ids in order k - 1) for k = 2, 3, ... while
        that suffix of the context was seen: an unseen one and every longer one back off with weight 1."""
        ctx = list(context)[-(self.order - 1):] if self.order > 1 else []
        if LM_BOS_ID in ctx[1:]:
            raise ValueError("<s> may only start a context")
        rows = []
        for k in range(2, len(ctx) + 2):
            row = self._row(ctx[len(ctx) - (k - 1):])
            if row < 0:
                break
            rows.append((self.orders[k - 2], row))
        return rows

    def prob(self, context: Sequence[int], word: int) -> float:
        """p(word | context) by the recursive definition, one n-gram at a time: the reference that
        `context_distribution` and the batched path are tested against, so it shares neither."""
        p = float(self.unigram[word])
        for o, row in self._context_rows(context):
            key = row * self.vocab_size + int(word)
            pos = int(np.searchsorted(o.keys, key))
            found = pos < o.keys.size and o.keys[pos] == key
            p = float(o.gamma[row]) * p + (float(o.disc_prob[pos]) if found else 0.0)
        return p

    def context_distribution(self, context: Sequence[int]) -> np.ndarray:
        """(V,) p(w | context) for every id at once (0 for `<s>`); sums to 1."""
        p = self.unigram.copy()
        V = self.vocab_size
        for o, row in self._context_rows(context):
            lo, hi = np.searchsorted(o.keys, [row * V, (row + 1) * V])
            p *= o.gamma[row]
            p[o.keys[lo:hi] % V] += o.disc_prob[lo:hi]
        return p

    def batch_logprobs(self, batch: FlatBatch) -> np.ndarray:
        """(T,) natural-log p of every position of `batch` given its history (0 at `<s>`)."""
        toks, dist = batch.toks, batch.dist
        V = self.vocab_size
        p = self.unigram[toks]
        p[batch.starts] = 1.0
        prev_idx = toks
        for k in range(2, self.order + 1):
            o = self.orders[k - 2]
            pv = np.flatnonzero(dist >= k - 1)
            ctx = prev_idx[pv - 1]
            has = ctx >= 0
            pv, ctx = pv[has], ctx[has]
            keys = ctx * V + toks[pv]
            pos = np.searchsorted(o.keys, keys)
            np.minimum(pos, o.keys.size - 1, out=pos)
            found = o.keys[pos] == keys
            p[pv] = o.gamma[ctx] * p[pv] + np.where(found, o.disc_prob[pos], 0.0)
            if k < self.order:
                idx = np.full(toks.size, -1, dtype=np.int64)
                idx[pv] = np.where(found, pos, -1)
                prev_idx = idx
        return np.log(p)

    def batch_cross_entropies(self, batch: FlatBatch) -> np.ndarray:
        """(N,) per-token cross-entropy in bits: -log2 p(s) / (len(s) + 1), `</s>` counted."""
        total = np.add.reduceat(self.batch_logprobs(batch), batch.starts)
        return -total / batch.lens / math.log(2.0)

    def token_logprobs(self, sentences: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Natural-log p of every predicted token (words and `</s>`): logp (P,) float64 and sent (P,)
        int64 the sentence of each."""
        batch = flatten(sentences)
        logp = self.batch_logprobs(batch)
        pred = batch.dist > 0
        sent = np.cumsum(batch.dist == 0) - 1
        return logp[pred], sent[pred]

    def cross_entropies(self, sentences: Sequence[Sequence[int]]) -> np.ndarray:
        """`batch_cross_entropies` of id lists (without `<s>`, `</s>`)."""
        return self.batch_cross_entropies(flatten(sentences))

    def sizes(self) -> list[int]:
        """Number of n-grams per order (order 1: words with a count, incl. `</s>`)."""
        return [int(np.count_nonzero(self.uni_counts))] + [int(o.keys.size) for o in self.orders]

    def write_arpa(self, fh: TextIO, itos: Sequence[str]) -> None:
        """Write the model in ARPA back-off format, the same distribution: a stored n-gram's ARPA
        probability is its interpolated p_k(w | h) = disc_prob + gamma(h) p_{k-1}(w | h') and its
        back-off weight its gamma; every stored n-gram's prefix and suffix are stored too, so
        back-off reproduces p exactly. `words[k - 1]` (n_k, k) holds the order-k n-grams' ids."""
        V = self.vocab_size
        words = [np.arange(V, dtype=np.int64)[:, None]]
        probs = [self.unigram]
        for k, o in enumerate(self.orders, start=2):
            ctx = o.keys // V
            w = np.concatenate([words[-1][ctx], (o.keys % V)[:, None]], axis=1)
            suffix = w[:, 1]  # the suffix's row, looked up an order at a time
            for j in range(2, k):
                suffix = np.searchsorted(self.orders[j - 2].keys, suffix * V + w[:, j])
            probs.append(o.disc_prob + o.gamma[ctx] * probs[-1][suffix])
            words.append(w)
        sizes = [V] + [o.keys.size for o in self.orders]
        fh.write("\\data\\\n" + "".join(f"ngram {k}={n}\n" for k, n in enumerate(sizes, start=1)) + "\n")
        for k in range(1, self.order + 1):
            fh.write(f"\\{k}-grams:\n")
            prob = probs[k - 1]  # one row per n-gram of order k
            bow = self.orders[k - 1].gamma if k < self.order else None
            w = words[k - 1]
            for r in range(prob.size):
                lp = -99.0 if prob[r] <= 0 else math.log10(prob[r])
                text = " ".join(itos[i] for i in w[r])
                tail = "" if bow is None else f"\t{math.log10(bow[r]):.7f}"
                fh.write(f"{lp:.7f}\t{text}{tail}\n")
            fh.write("\n")
        fh.write("\\end\\\n")
