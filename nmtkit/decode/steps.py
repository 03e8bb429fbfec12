"""One decoding step over the `Seq2Seq` interface, shared by beam search and sampling: every
model's step combined (ensembles average probabilities: `average_log_probs`), the specials
that are never generated masked, and EOS forced at each sentence's length limit.

Length limits: a sentence of `src_len` tokens gets at most `floor(max_len_a * src_len +
max_len_b)` target tokens before EOS; at that step EOS is forced, so every hypothesis ends
with EOS and its log-probability includes EOS's.

Shapes: N rows (hypotheses or sentences), V target vocabulary, S source positions.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from nmtkit.models.base import EncoderOut, Seq2Seq
from nmtkit.text.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

__all__ = ["as_models", "force_eos", "mask_specials", "max_lengths", "step_all"]


def average_log_probs(log_probs: Sequence[Tensor]) -> Tensor:
    """[(N, V)] * M log-probabilities -> (N, V) log of their mean probability (fp32).

    An ensemble's distribution is the mean of its members' probabilities, as in Nematus and
    fairseq: log p = logsumexp_m(log p_m) - log M (not a product of experts)."""
    if len(log_probs) == 1:
        return log_probs[0]
    return torch.logsumexp(torch.stack([lp.float() for lp in log_probs]), dim=0) - math.log(len(log_probs))


def max_lengths(src_lens: Tensor, max_len_a: float, max_len_b: float) -> Tensor:
    """(B,) the most target tokens (before EOS) each sentence may get: floor(a * src_len + b), >= 1."""
    lim = torch.floor(src_lens.double() * max_len_a + max_len_b).long()
    return lim.clamp(min=1)


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
    """One decoding step of every model: (combined log_probs (N, V) fp32, new states, attn (N, S));
    `outs`: each model's shortlist output rows (`Seq2Seq.step`), V then the shortlist's length.
    The attention of an ensemble is the models' mean."""
    lps, attns, new_states = [], [], []
    for i, (model, state, enc) in enumerate(zip(models, states, encs)):
        lp, state, attn = model.step(prev, state, enc, outs[i] if outs is not None else None)
        lps.append(lp.float())
        attns.append(attn)
        new_states.append(state)
    if len(models) == 1:
        return lps[0], new_states, attns[0]
    lp = average_log_probs(lps)
    attn = torch.stack([a.float() for a in attns]).mean(dim=0)
    return lp, new_states, attn


def mask_specials(lp: Tensor, ban_unk: bool = False) -> None:
    """PAD and BOS (and with `ban_unk` the unknown word) are never generated (in place)."""
    lp[:, PAD_ID] = float("-inf")
    lp[:, BOS_ID] = float("-inf")
    if ban_unk:
        lp[:, UNK_ID] = float("-inf")


def force_eos(lp: Tensor, rows: np.ndarray) -> Tensor:
    """Rows `rows` (N,) bool (host) may only emit EOS, keeping EOS's own log-probability (in
    place; touches only those rows)."""
    idx = torch.from_numpy(np.flatnonzero(rows)).to(lp.device, non_blocking=True)
    eos = lp[idx, EOS_ID]
    lp[idx] = float("-inf")
    lp[idx, EOS_ID] = eos
    return lp
