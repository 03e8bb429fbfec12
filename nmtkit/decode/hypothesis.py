"""What decoding hands out: a `Hypothesis` (tokens, scores, attention over the source tokens),
built in one place (`finished`) for beam search and sampling alike.

Length normalisation follows the usual practice (Bahdanau et al. 2015 give none):

    score(y) = log p(y | x) / |y|^alpha      (|y| counts the final EOS)

alpha = 1 is the plain per-word average, alpha = 0 the raw log-probability.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from nmtkit.models.base import EncoderOut

__all__ = ["Hypothesis", "finished", "length_normalise"]


@dataclass
class Hypothesis:
    """One translation.

    tokens:    target ids without BOS/EOS.
    score:     the length-normalised score used for ranking, log_prob / (len(tokens)+1)^alpha.
    log_prob:  the raw sum of the token log-probabilities, EOS included.
    attention: (len(tokens)+1, n) float tensor on the CPU over the sentence's n source tokens,
               one row per target token and a last row for EOS; None unless asked for.
    source_eos_attention: (len(tokens)+1,) the weights on the source EOS the model appends
               (`EncoderOut.src_eos`), or None (no attention asked for, or no source EOS).
    """

    tokens: list[int]
    score: float
    log_prob: float
    attention: Tensor | None = None
    source_eos_attention: Tensor | None = None


def length_normalise(log_prob: float, length: int, lenpen: float) -> float:
    """score = log_prob / length^lenpen (length counts EOS, so it is never 0)."""
    if lenpen == 0:
        return log_prob
    return log_prob / (max(1, length) ** lenpen)


def finished(tokens: list[int], log_prob: float, lenpen: float, attention: Tensor | None,
             enc: EncoderOut, src_len: int) -> Hypothesis:
    """A finished hypothesis of a sentence of `src_len` source tokens: `tokens` (ids before EOS),
    its `log_prob` (EOS included), and its attention (len(tokens)+1, >= S') as decoding kept it,
    cut to the sentence's source tokens and its source EOS by the encoder output that knows them."""
    att, eos = enc.split_attention(attention, src_len) if attention is not None else (None, None)
    return Hypothesis(tokens=tokens, score=length_normalise(log_prob, len(tokens) + 1, lenpen), log_prob=log_prob,
                      attention=att, source_eos_attention=eos)
