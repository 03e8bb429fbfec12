"""Moses-style truecasing (`train-truecaser.perl` / `truecase.perl` / `detruecaser.perl`).

Training counts, for every lowercased word, the surface forms seen in positions where case
is informative (not sentence-initial), using sacremoses' `learn_truecase_weights`; the
model is the most frequent form of each word ("best"). Applying it replaces every word
that has a best form by that form, as `truecase.perl` does; unknown words are left alone.
Detruecasing uppercases the first letter of each sentence.

The model is kept as a plain list of best forms (the key is each form's lowercase), so it
fits in a manifest or checkpoint as primitives. Unlike sacremoses' `truecase`, tokens are
never split at `|` (Moses factors): with escape=False a `|` is an ordinary token.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from functools import lru_cache

SENT_END = frozenset({".", ":", "?", "!"})
DELAYED_SENT_START = frozenset({"(", "[", '"', "'", "&apos;", "&quot;", "&#91;", "&#93;"})


@lru_cache(maxsize=None)
def _trainer():
    from sacremoses import MosesTruecaser

    return MosesTruecaser()


def truecase_weights(tokens: list[str]) -> list[tuple[str, str, float]]:
    """(lowercase, surface form, weight) observations from one tokenised sentence."""
    return _trainer().learn_truecase_weights(tokens)


def add_weights(casing: dict[str, Counter], weights: list[tuple[str, str, float]]) -> None:
    """Accumulate observations into `casing[lower][surface] += weight`."""
    for lower, surface, w in weights:
        casing[lower][surface] += w


def new_casing() -> dict[str, Counter]:
    return defaultdict(Counter)


def best_forms(casing: dict[str, Counter]) -> list[str]:
    """The model: the most frequent surface form of each word (ties: first seen), sorted."""
    return sorted(c.most_common(1)[0][0] for c in casing.values() if c)


class Truecaser:
    """Applies a model given as a list of best forms."""

    def __init__(self, forms: list[str]):
        self.best = {f.lower(): f for f in forms}

    def __call__(self, tokens: list[str]) -> list[str]:
        get = self.best.get
        return [get(t.lower(), t) for t in tokens]


def detruecase(tokens: list[str]) -> list[str]:
    """Uppercase the first letter of each sentence start (after . : ? ! and opening quotes)."""
    out = []
    start = True
    for tok in tokens:
        if start:
            tok = tok[:1].upper() + tok[1:]
        out.append(tok)
        if tok in SENT_END:
            start = True
        elif tok not in DELAYED_SENT_START:
            start = False
    return out
