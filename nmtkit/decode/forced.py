"""Forced decoding: the log-probability a model (or an ensemble, averaging probabilities) gives
each token of a given translation, step by step through `step_all`, the step beam search takes,
so that a translation the search found scores here as it scored there. For reranking,
contrastive evaluation and filtering (`Translator.score`, `nmtkit translate --score-reference`).
Shapes: B sentences, S source positions, T target tokens with the EOS.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from nmtkit.decode.steps import as_models, step_all
from nmtkit.models.base import Seq2Seq
from nmtkit.text.vocab import BOS_ID, PAD_ID


@torch.inference_mode()
def forced_log_probs(models_or_model: Seq2Seq | Sequence[Seq2Seq], src: Tensor, src_lens: Tensor,
                     tgt: Tensor) -> Tensor:
    """(B, T) fp32: log p(tgt[b, t] | tgt[b, :t], src[b]) over the whole target vocabulary, 0 at
    padding. src: (B, S) ids, src_lens: (B,); tgt: (B, T) target ids each ending with EOS, padded
    with PAD; all on the models' device. A padded row keeps stepping on PAD (its values dropped)."""
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
