"""Byte-pair encoding (Sennrich et al. 2016) through subword-nmt's Python API.

`learn_codes` is `subword-nmt learn-bpe --dict-input` (joint BPE sums the two sides' counts
first, as `learn-joint-bpe-and-vocab` does); `subword_vocab` is the filter of `apply-bpe
--vocabulary V --vocabulary-threshold T`, with which rarer subwords split back into known ones;
`Bpe` applies codes to a token list and `join_bpe` undoes it. The codes are plain text, stored
inline in the manifest and checkpoint so that translation needs no side file.
"""
from __future__ import annotations

import contextlib
import io
from collections import Counter
from typing import Callable, Iterable

SEPARATOR = "@@"


def learn_codes(word_counts: Counter, merges: int, min_frequency: int = 2) -> str:
    """BPE codes text learned from `word_counts` (token -> count), with fewer merges when no pair
    occurs `min_frequency` times, as subword-nmt does (its own output silenced)."""
    from subword_nmt import learn_bpe

    vocab_lines = [f"{w} {c}" for w, c in word_counts.items() if c > 0 and w]
    out = io.StringIO()
    if not vocab_lines:
        return "#version: 0.2\n"
    saved_tqdm = learn_bpe.tqdm
    try:
        learn_bpe.tqdm = lambda it, *a, **k: it  # subword-nmt would draw its own bar on stderr
        with contextlib.redirect_stderr(io.StringIO()):
            learn_bpe.learn_bpe(vocab_lines, out, merges, min_frequency=min_frequency, is_dict=True)
    finally:
        learn_bpe.tqdm = saved_tqdm
    return out.getvalue()


def check_codes(codes: str) -> None:
    """A ValueError naming the first line of `codes` that subword-nmt cannot read (it would print
    it and exit the process): an optional "#version: X.Y" line, then one merge a line, two units
    separated by one space."""
    import re

    body, line = codes, 1
    if body.startswith("#version:"):
        first, _, body = body.partition("\n")
        if not re.fullmatch(r"#version:\s*\d+(\.\d+)*\s*", first):
            raise ValueError(f"line 1 is not a version: {first[:60]!r}")
        line = 2
    body = body.rstrip("\n")  # none left: no merges (`Bpe` splits words into characters)
    bad = body and re.search(r"^(?! *[^ \r\n]+ [^ \r\n]+[ \r]*$).*$", body, re.MULTILINE)
    if bad:
        line += body.count("\n", 0, bad.start())
        raise ValueError(f"line {line} is not two units separated by a space: {bad.group()[:60]!r}")


def count_merges(codes: str) -> int:
    """Number of merge operations in a codes text."""
    return sum(1 for line in codes.splitlines() if line and not line.startswith("#version"))


class Bpe:
    """Applies BPE codes to tokens (subword-nmt's `BPE`, with its per-word cache)."""

    def __init__(self, codes: str, vocab: Iterable[str] | None = None, separator: str = SEPARATOR):
        from subword_nmt.apply_bpe import BPE

        self.separator = separator
        # codes without merges (learned from a corpus where no pair of symbols repeats) split every
        # word into its characters, which subword-nmt cannot load (it prints an error and exits)
        self._bpe = BPE(io.StringIO(codes), separator=separator, vocab=set(vocab) if vocab is not None else None) \
            if count_merges(codes) else None
        # word -> its pieces: grows with the number of distinct words, like subword-nmt's own
        # cache, but skips subword-nmt's per-word call overhead on the (frequent) repeats.
        self._pieces: dict[str, tuple[str, ...]] = {}

    def apply(self, tokens: list[str]) -> list[str]:
        """Segment each token; non-final pieces end with the separator, e.g. ["lo@@", "wer"]."""
        cache = self._pieces
        out: list[str] = []
        for word in tokens:
            pieces = cache.get(word)
            if pieces is None:
                pieces = cache[word] = tuple(self._bpe.segment_tokens([word]) if self._bpe is not None
                                             else [c + self.separator for c in word[:-1]] + [word[-1:]])
            out.extend(pieces)
        return out


def join_bpe(tokens: list[str], separator: str = SEPARATOR) -> list[str]:
    """Undo BPE: glue every piece ending in `@@` to the next one ("lo@@ wer" -> "lower"); a
    dangling separator at the end (possible in a model's output) is dropped."""
    out: list[str] = []
    pending = ""
    n = len(separator)
    for tok in tokens:
        if tok.endswith(separator):
            pending += tok[:-n]
        else:
            out.append(pending + tok)
            pending = ""
    if pending:
        out.append(pending)
    return out


def piece_counts(word_counts: Counter, segment: Callable[[list[str]], list[str]]) -> Counter:
    """Counts of the pieces that `segment` (casing, BPE: word by word) makes of the counted words,
    each weighted by its word's count."""
    out: Counter = Counter()
    for word, count in word_counts.items():
        for piece in segment([word]):
            out[piece] += count
    return out


def subword_vocab(codes: str, word_counts: Counter, threshold: int, separator: str = SEPARATOR) -> list[str]:
    """Subwords whose frequency in the BPE-segmented `word_counts` is >= `threshold` (each word
    segmented once, weighted by its count: as learn-joint-bpe-and-vocab segmenting the whole side)."""
    counts = piece_counts(word_counts, Bpe(codes, separator=separator).apply)
    return sorted(w for w, c in counts.items() if c >= threshold)
