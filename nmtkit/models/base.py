"""The interface every architecture implements, used by training and by beam search.

Shapes: B batch, S source length, T target length, V target vocabulary, A annotation size.
Token id conventions come from `nmtkit.text.vocab`: PAD_ID=0, UNK_ID=1, BOS_ID=2, EOS_ID=3.
Source batches carry no BOS/EOS unless the model adds them; `tgt_in` starts with BOS and
`tgt_out` ends with EOS (both padded with PAD_ID).

Convention (DESIGN.md 3): `forward` (teacher forcing) must equal a loop of `step`, and
everything that does not depend on the previous decoder state is computed for all time
steps at once outside the recurrent loop (DESIGN.md 4).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor, nn
import torch.nn.functional as F

State = Any  # a Tensor or a tuple of Tensors, each with the batch on dim 0


@dataclass
class EncoderOut:
    """What `encode` returns; every tensor has the batch on dim 0.

    annotations: (B, S, A)  h_j, the vectors attention averages over.
    keys:        (B, S, K)  precomputed attention keys (U_a h_j), or None.
    mask:        (B, S) bool, True at real (non-pad) source positions.
    summary:     (B, D) a fixed sentence summary (RNNencdec's c), or None.
    init:        whatever `init_state` needs (e.g. backward h_1), a Tensor/tuple or None.
    """

    annotations: Tensor
    keys: Tensor | None
    mask: Tensor
    summary: Tensor | None = None
    init: Any = None

    def index_select(self, index: Tensor) -> "EncoderOut":
        """Rows `index` of the batch (beam search expands and reorders with this)."""
        return EncoderOut(**{f.name: _index(getattr(self, f.name), index) for f in fields(self)})


def _index(x: Any, index: Tensor) -> Any:
    if x is None:
        return None
    if isinstance(x, Tensor):
        return x.index_select(0, index)
    if isinstance(x, (tuple, list)):
        return type(x)(_index(v, index) for v in x)
    raise TypeError(f"cannot index {type(x)}")


def reorder_state(state: State, index: Tensor) -> State:
    """Rows `index` of a decoder state (Tensor or nested tuple of Tensors)."""
    return _index(state, index)


class Seq2Seq(nn.Module):
    """Base class of the encoder-decoder models.

    Subclasses implement `encode`, `init_state`, `decode_features` (teacher forcing up to the
    layer before the vocabulary projection), `step_features` (one step of the same) and
    `output_layer` (the final projection to vocabulary logits, e.g. W_o). The base class derives
    `forward`, `step` and a chunked `loss` from those, so the softmax over the vocabulary is
    never materialised for a whole batch at once during training.
    """

    config: Any  # the architecture's <Arch>Config dataclass

    # ---- to implement -------------------------------------------------------------------
    def encode(self, src: Tensor, src_lens: Tensor) -> EncoderOut:
        """src: (B, S) ids, src_lens: (B,) -> EncoderOut."""
        raise NotImplementedError

    def init_state(self, enc: EncoderOut) -> State:
        """The decoder state before the first target token (s_0)."""
        raise NotImplementedError

    def decode_features(self, enc: EncoderOut, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing. tgt_in: (B, T) -> (features (B, T, F), attention (B, T, S))."""
        raise NotImplementedError

    def step_features(
        self, prev_tokens: Tensor, state: State, enc: EncoderOut
    ) -> tuple[Tensor, State, Tensor]:
        """One step. prev_tokens: (B,) -> (features (B, F), new state, attention (B, S))."""
        raise NotImplementedError

    def output_layer(self, features: Tensor) -> Tensor:
        """(..., F) -> logits (..., V)."""
        raise NotImplementedError

    # ---- derived ------------------------------------------------------------------------
    def forward(self, src: Tensor, src_lens: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: log-probabilities (B, T, V)."""
        feats, _ = self.decode_features(self.encode(src, src_lens), tgt_in)
        return F.log_softmax(self.output_layer(feats).float(), dim=-1)

    def step(self, prev_tokens: Tensor, state: State, enc: EncoderOut) -> tuple[Tensor, State, Tensor]:
        """One decoding step: (log_probs (B, V), new state, attention (B, S))."""
        feats, state, attn = self.step_features(prev_tokens, state, enc)
        return F.log_softmax(self.output_layer(feats).float(), dim=-1), state, attn

    def reorder(self, state: State, index: Tensor) -> State:
        """Select/reorder batch rows of the state for beam search."""
        return reorder_state(state, index)

    def loss(
        self,
        src: Tensor,
        src_lens: Tensor,
        tgt_in: Tensor,
        tgt_out: Tensor,
        label_smoothing: float = 0.0,
        chunk_tokens: int = 4096,
    ) -> tuple[Tensor, Tensor, int]:
        """Summed token losses over non-pad targets, computed in chunks of target tokens.

        Returns (loss_sum, nll_sum, n_tokens): the training objective (with label smoothing)
        and the plain negative log-likelihood, both summed (not averaged).
        """
        feats, _ = self.decode_features(self.encode(src, src_lens), tgt_in)
        mask = tgt_out.ne(0)
        feats = feats[mask]  # (N, F): only real target positions
        gold = tgt_out[mask]
        loss_sum = feats.new_zeros((), dtype=torch.float32)
        nll_sum = feats.new_zeros((), dtype=torch.float32)
        for i in range(0, feats.size(0), chunk_tokens):
            lp = F.log_softmax(self.output_layer(feats[i : i + chunk_tokens]).float(), dim=-1)
            g = gold[i : i + chunk_tokens]
            nll = -lp.gather(1, g.unsqueeze(1)).squeeze(1)
            nll_sum = nll_sum + nll.sum()
            if label_smoothing > 0:
                smooth = -lp.mean(dim=-1)
                loss_sum = loss_sum + ((1 - label_smoothing) * nll + label_smoothing * smooth).sum()
            else:
                loss_sum = loss_sum + nll.sum()
        return loss_sum, nll_sum, int(gold.numel())
