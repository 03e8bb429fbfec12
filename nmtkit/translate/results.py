"""What translation hands from the `Translator` to the writers and the API: one `Result` per
input line, holding its n-best hypotheses as decoded and as `Translation`s (text, tokens, scores,
attention over the source tokens). Plain data: no torch import, no decoding, no writing."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nmtkit.translate.alignment import hard_pairs


@dataclass(frozen=True)
class Translation:
    """One hypothesis of a line.

    text: the output string (in the translator's output format); tokens: the model's target
    tokens (subwords, after UNK replacement); score: log_prob / (len(tokens)+1)^lenpen, the
    ranking score; log_prob: the model's log-probability, EOS included; src_tokens: the model's
    source tokens; attention: (len(tokens)+1, len(src_tokens)) weights (a torch tensor; rows:
    target tokens then EOS, columns: source tokens), None unless asked for;
    source_eos_attention: (len(tokens)+1,) the weights on the source EOS the model appends
    (each row of attention and it together sums to 1), None without one.
    """

    text: str
    tokens: list[str]
    score: float
    log_prob: float
    src_tokens: list[str]
    attention: Any = field(default=None, repr=False)
    source_eos_attention: Any = field(default=None, repr=False)

    def alignment(self) -> list[tuple[int, int]]:
        """[(source i, target j)]: each target token's most attended source token (model
        tokens, from 0, EOS excluded), as `--alignments hard` writes it. Needs the attention
        (`generate(..., alignments=True)`)."""
        if self.attention is None:
            raise ValueError("no attention kept: ask for it with generate(..., alignments=True)")
        return hard_pairs(self.attention, len(self.tokens))


@dataclass
class Result:
    """One input line's translation(s).

    index: the line's number (from 1); src_tokens: the model's source tokens (subwords), as
    strings (before UNK mapping). hyps: the n-best hypotheses (`nmtkit.decode.hypothesis.Hypothesis`;
    empty for an empty line); tgt_tokens: their target tokens (after UNK replacement); texts:
    their output strings in the requested output format; truncated: the line had more source
    tokens than --max-src-len and was translated from its first ones. `text`, `score` and
    `nbest` give the same as plain values and `Translation`s.
    """

    index: int
    src_tokens: list[str]
    hyps: list[Any] = field(default_factory=list)
    tgt_tokens: list[list[str]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    truncated: bool = False

    @property
    def text(self) -> str:
        """The best translation ("" for an empty line)."""
        return self.texts[0] if self.texts else ""

    @property
    def score(self) -> float:
        """The best translation's score (0.0 for an empty line)."""
        return self.hyps[0].score if self.hyps else 0.0

    @property
    def nbest(self) -> list[Translation]:
        """The hypotheses, best first (none for an empty line)."""
        return [Translation(text, toks, h.score, h.log_prob, self.src_tokens, h.attention, h.source_eos_attention)
                for text, toks, h in zip(self.texts, self.tgt_tokens, self.hyps)]
