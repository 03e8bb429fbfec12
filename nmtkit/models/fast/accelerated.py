"""The fast paths every built model has on top of the plain `Seq2Seq` interface.

`Accelerated` comes first in a built model's bases (`models.build_model` builds only such
classes): `fuse_steps`, fixed at construction, runs the recurrences' step bodies and the whole
decoding step compiled (fusion.py); `graph_loops` (set by training, --cuda-graphs) replays the
teacher-forcing loops as CUDA graphs (graphs.py); `decode_stacks` holds what int8 decoding
builds (quantize.py); and `loss` is the chunked loss (chunked_loss.py), which never holds the
(N, V) logits of a whole batch. The plain `Seq2Seq` methods are what these are held to.
"""
from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from nmtkit.models.base import PAD_ID, EncoderOut, Seq2Seq, State
from nmtkit.models.fast.chunked_loss import linear_cross_entropy
from nmtkit.models.fast.fusion import step_fn


class Accelerated(Seq2Seq):
    """A model with the fast paths (module docstring); `fuse_steps` is a keyword argument."""

    # the nn.Linear layers that decoding only calls as modules (never reading their .weight):
    # what `--precision int8` quantises (nmtkit.models.fast.quantize); empty: no int8 decoding
    int8_linears: tuple[str, ...] = ()
    # the one-layer bidirectional nn.GRU encoder that int8 decoding runs as `quantize.Int8BiGRU`
    # (over the source embedding `encode_bigru` hands it), or None (the encoder stays float32)
    int8_encoder: str | None = None
    # True when teacher forcing can run its recurrence as CUDA graphs (nmtkit.models.fast.graphs);
    # `graph_loops`, set by training (--cuda-graphs), turns them on
    graph_loops_supported: bool = False
    graph_loops: bool = False

    def __init__(self, *args, fuse_steps: bool = False):
        super().__init__(*args)
        self._fuse_steps = bool(fuse_steps)
        # what `int8_stacks` names, built by int8 decoding (nmtkit.models.fast.quantize.Int8Stack);
        # a plain dict: no part of the model's state_dict
        self.decode_stacks: dict[str, nn.Module] = {}

    def int8_stacks(self) -> dict[str, tuple[str | None, tuple[str, ...]]]:
        """Groups of `int8_linears` that a decoding step applies to the same input, by the name
        the step looks them up under in `decode_stacks`: (embedding or None, layers). With an
        embedding, the input is that embedding's rows. Int8 decoding runs each group as one
        product; the step falls back to the layers themselves where a group is not built."""
        return {}

    @property
    def fuse_steps(self) -> bool:
        """Whether the step bodies run compiled (models/fast/fusion.py); chosen at construction."""
        return self._fuse_steps

    def with_fused_steps(self, fuse_steps: bool = True) -> "Accelerated":
        """A copy of this model (same weights, dtype, device and mode) with `fuse_steps` set."""
        clone = copy.deepcopy(self)
        clone._fuse_steps = bool(fuse_steps)
        return clone

    def step(self, prev_tokens: Tensor, state: State, enc: EncoderOut,
             out: tuple[Tensor, Tensor | None] | None = None) -> tuple[Tensor, State, Tensor]:
        """`Seq2Seq.step`; with `fuse_steps`, the whole step (attention, state update, output
        layer, log-softmax) runs as one compiled body: a handful of kernels instead of dozens."""
        return step_fn(Seq2Seq._step, self.fuse_steps)(self, prev_tokens, state, enc, out)

    def loss(self, src: Tensor, src_lens: Tensor, tgt_in: Tensor, tgt_out: Tensor,
             label_smoothing: float = 0.0, chunk_tokens: int = 4096, n_tokens: int | None = None
             ) -> tuple[Tensor, Tensor, int]:
        """`Seq2Seq.loss`, with the vocabulary projection (`output_projection()`), log-softmax
        and loss computed chunk by chunk together with their gradients (chunked_loss.py).

        `n_tokens`: the number of non-pad targets when the caller knows it (the trainer does,
        from the lengths on the host); the real positions are then picked without reading
        the device (a boolean mask's nonzero is a host synchronisation on a GPU).
        """
        feats, _ = self.decode_features(self.encode(src, src_lens), tgt_in)
        mask = tgt_out.ne(PAD_ID)
        if n_tokens is None:
            feats = feats[mask]  # (N, F): only real target positions
            gold = tgt_out[mask]
        else:
            idx = torch.nonzero_static(mask.reshape(-1), size=n_tokens).squeeze(1)  # (N,), row-major
            feats = feats.reshape(-1, feats.size(-1)).index_select(0, idx)
            gold = tgt_out.reshape(-1).index_select(0, idx)
        proj = self.output_projection()
        if proj is None:
            raise ValueError(f"{type(self).__name__} has no single output projection for the chunked loss")
        loss_sum, nll_sum = linear_cross_entropy(
            feats, proj.weight, proj.bias, gold, label_smoothing, chunk_tokens, self.fuse_steps
        )
        return loss_sum, nll_sum, int(gold.numel())
