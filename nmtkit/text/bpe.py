"""Byte-pair encoding (Sennrich et al. 2016) through subword-nmt's Python API; the codes are text."""
from __future__ import annotations

import contextlib
import io
from collections import Counter
from typing import Callable, Iterable

SEPARATOR = "@@"
UNRECORDED_SUBWORDS = 20  # this many target words ending in "@@" say the text was BPE'd before nmtkit


def unrecorded_subwords(vocab: Iterable[str]) -> int:
    """How many words of a vocabulary whose pipeline makes no BPE end in "@@", where they are enough
    (`UNRECORDED_SUBWORDS`) to say its text was BPE'd before nmtkit; else 0."""
    n = sum(w.endswith(SEPARATOR) for w in vocab)
    return n if n >= UNRECORDED_SUBWORDS else 0


def learn_codes(word_counts: Counter, merges: int, min_frequency: int = 2) -> str:
    """BPE codes text learned from `word_counts` (token -> count) by subword-nmt, its output silenced."""
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
    """A ValueError naming the first line of `codes` that subword-nmt cannot read (it would exit the
    process): an optional "#version: X.Y" line, then one merge a line, two units and a space."""
    import re

    body, line = codes, 1
    if body.startswith("#version:"):
        first, _, body = body.partition("\n")
        if not re.fullmatch(r"#version:\s+0+\.0*[12](\.0+)*\s*", first):  # the two it can apply
            raise ValueError(f"line 1 is not a version subword-nmt applies (0.1, 0.2): {first[:60]!r}")
        line = 2
    body = body.rstrip("\n")  # none left: no merges (`Bpe` splits words into characters)
    bad = body and re.search(r"^(?! *[^ \r\n]+ [^ \r\n]+[ \r]*$).*$", body, re.MULTILINE)
    if bad:
        line += body.count("\n", 0, bad.start())
        raise ValueError(f"line {line} is not two units separated by a space: {bad.group()[:60]!r}")


def count_merges(codes: str) -> int:
    """Number of merge operations in a codes text (lines end at "\n" alone, as subword-nmt reads them)."""
    return sum(1 for line in codes.split("\n") if line and not line.startswith("#version"))


class Bpe:
    """Applies BPE codes to tokens (subword-nmt's `BPE`, with its per-word cache)."""

    def __init__(self, codes: str, vocab: Iterable[str] | None = None, separator: str = SEPARATOR):
        from subword_nmt.apply_bpe import BPE

        self.separator = separator
        # codes without merges split every word into characters, which subword-nmt cannot load
        self._bpe = BPE(io.StringIO(codes), separator=separator, vocab=set(vocab) if vocab is not None else None) \
            if count_merges(codes) else None
        # word -> its pieces, as subword-nmt's own cache, without its per-word call overhead
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
    """Undo BPE ("lo@@ wer" -> "lower"); a dangling separator at the end (a model's output) is dropped."""
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
    """Counts of the pieces that `segment` makes of the counted words, weighted by the words' counts."""
    out: Counter = Counter()
    for word, count in word_counts.items():
        for piece in segment([word]):
            out[piece] += count
    return out


def subword_vocab(codes: str, word_counts: Counter, threshold: int, separator: str = SEPARATOR) -> list[str]:
    """Subwords seen `threshold` times or more in the BPE-segmented `word_counts` (apply-bpe's filter)."""
    counts = piece_counts(word_counts, Bpe(codes, separator=separator).apply)
    return sorted(w for w, c in counts.items() if c >= threshold)
