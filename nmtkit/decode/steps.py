"""What beam search, sampling and forced decoding share: one decoding step over every model (an
ensemble averages probabilities: `average_log_probs`), the specials never generated masked, EOS
forced at each sentence's length limit (at most floor(max_len_a * src_len + max_len_b) tokens
before EOS, so every hypothesis ends with EOS), and the `Hypothesis` they hand out, ranked by

    score(y) = log p(y | x) / |y|^alpha      (|y| counts the final EOS)

alpha = 1 is the plain per-word average, alpha = 0 the raw log-probability. Forced decoding
(`forced_log_probs`) scores a given translation through the same step.
Shapes: N rows (hypotheses or sentences), V target vocabulary, S source positions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from nmtkit.models.base import EncoderOut, Seq2Seq
from nmtkit.text.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID


@dataclass
class Hypothesis:
    """One translation: target ids without BOS/EOS, the ranking score log_prob /
    (len(tokens)+1)^alpha, the sum of the token log-probabilities (EOS included), and, when
    asked for, the attention (len(tokens)+1, n) on the CPU over the sentence's n source tokens
    (a last row for EOS) and source_eos_attention (len(tokens)+1,), the weights on the source
    EOS the model appends (`EncoderOut.src_eos`; None without one)."""

    tokens: list[int]
    score: float
    log_prob: float
    attention: Tensor | None = None
    source_eos_attention: Tensor | None = None


def finished(tokens: list[int], log_prob: float, lenpen: float, attention: Tensor | None,
             enc: EncoderOut, src_len: int) -> Hypothesis:
    """The Hypothesis of `tokens` (ids before EOS) and `log_prob` (EOS included); its attention
    (len(tokens)+1, >= S') as decoding kept it, cut by `enc` to the `src_len` source tokens and
    the source EOS."""
    att, eos = enc.split_attention(attention, src_len) if attention is not None else (None, None)
    return Hypothesis(tokens=tokens, score=log_prob / (len(tokens) + 1) ** lenpen, log_prob=log_prob,
                      attention=att, source_eos_attention=eos)


def average_log_probs(log_probs: Sequence[Tensor]) -> Tensor:
    """[(N, V)] * M log-probabilities -> (N, V) fp32 log of their mean probability, as in fairseq:
    log p = logsumexp_m(log p_m) - log M (not Nematus' product of experts, sum_m log p_m)."""
    return torch.logsumexp(torch.stack([lp.float() for lp in log_probs]), dim=0) - math.log(len(log_probs))


def max_lengths(src_lens: Tensor, max_len_a: float, max_len_b: float) -> Tensor:
    """(B,) the most target tokens (before EOS) each sentence may get: floor(a * src_len + b), >= 1."""
    return torch.floor(src_lens.double() * max_len_a + max_len_b).long().clamp(min=1)


def as_models(models_or_model: Seq2Seq | Sequence[Seq2Seq]) -> list[Seq2Seq]:
    """One model or an ensemble, as a non-empty list."""
    if isinstance(models_or_model, torch.nn.Module):
        return [models_or_model]
    models = list(models_or_model)
    if not models:
        raise ValueError("no model given")
    return models


def step_all(
    models: list[Seq2Seq], prev: Tensor, states: list, encs: list[EncoderOut], outs: list | None = None
) -> tuple[Tensor, list, Tensor]:
    """One decoding step of every model: (combined log_probs (N, V) fp32, new states, attn (N, S),
    an ensemble's the mean); `outs`: each model's shortlist output rows (V: the shortlist's length)."""
    steps = [m.step(prev, st, e, out) for m, st, e, out in zip(models, states, encs, outs or [None] * len(models))]
    new_states = [st for _, st, _ in steps]
    if len(models) == 1:
        return steps[0][0].float(), new_states, steps[0][2]
    attn = torch.stack([a.float() for _, _, a in steps]).mean(dim=0)
    return average_log_probs([lp.float() for lp, _, _ in steps]), new_states, attn


def attention_buffer(buf: Tensor | None, t: int, first: Tensor) -> Tensor:
    """`buf` (steps, N, S) fp32, the attention kept step by step for alignments, with room for step
    t: doubled as needed, not allocated for the length limit (a*S+b steps of S columns grow with
    the square of a long source's length), nor one small tensor a step, which fragments the heap
    (docs/experiments.md). `first`: the first step's attention (N, S), the most rows and columns."""
    if buf is not None and t < buf.size(0):
        return buf
    new = first.new_zeros(2 * t + 16, *(first.shape if buf is None else buf.shape[1:]), dtype=torch.float32)
    if buf is not None:
        new[:t] = buf
    return new


def mask_tokens(lp: Tensor, ban_unk: bool, at_limit: np.ndarray) -> None:
    """In place: PAD and BOS (and with `ban_unk` the unknown word) are never generated, and rows
    `at_limit` (N,) bool (host) may only emit EOS, keeping its log-probability."""
    lp[:, PAD_ID] = float("-inf")
    lp[:, BOS_ID] = float("-inf")
    if ban_unk:
        lp[:, UNK_ID] = float("-inf")
    if at_limit.any():
        idx = torch.from_numpy(np.flatnonzero(at_limit)).to(lp.device, non_blocking=True)
        eos = lp[idx, EOS_ID]
        lp[idx] = float("-inf")
        lp[idx, EOS_ID] = eos


@torch.inference_mode()
def forced_log_probs(models_or_model: Seq2Seq | Sequence[Seq2Seq], src: Tensor, src_lens: Tensor,
                     tgt: Tensor) -> Tensor:
    """(B, T) fp32: log p(tgt[b, t] | tgt[b, :t], src[b]) over the whole target vocabulary, 0 at
    padding, through `step_all` as beam search steps, so that a translation the search found
    scores here as it scored there. src: (B, S) ids, src_lens: (B,); tgt: (B, T) target ids each
    ending with EOS, padded with PAD; all on the models' device."""
    models = as_models(models_or_model)
    encs = [m.encode_for_steps(src, src_lens) for m in models]
    states = [m.init_state(e) for m, e in zip(models, encs)]
    B, T = tgt.shape
    prev = torch.full((B,), BOS_ID, dtype=torch.long, device=tgt.device)
    out = torch.empty(B, T, dtype=torch.float32, device=tgt.device)
    for t in range(T):
        lp, states, _ = step_all(models, prev, states, encs)
        prev = tgt[:, t]
        out[:, t] = lp.gather(1, prev.unsqueeze(1)).squeeze(1)
    return out.masked_fill(tgt.eq(PAD_ID), 0.0)
