"""The interface every architecture implements, used by training and by beam search.

Shapes: B batch, S source length, T target length, V target vocabulary, A annotation size.
Token id conventions come from `nmtkit.text.vocab`: PAD_ID=0, UNK_ID=1, BOS_ID=2, EOS_ID=3.
Source batches carry no BOS/EOS unless the model adds them; `tgt_in` starts with BOS and
`tgt_out` ends with EOS (both padded with PAD_ID).

Convention (docs/design.md, 3): `forward` (teacher forcing) must equal a loop of `step`, and
everything that does not depend on the previous decoder state is computed for all time
steps at once outside the recurrent loop (docs/design.md, 4).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmtkit.models.fusion import step_fn
from nmtkit.text.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: F401 (re-exported)

State = Any  # a Tensor or a tuple of Tensors, each with the batch on dim 0


@dataclass
class EncoderOut:
    """What `encode` returns; every tensor has the batch on dim 0.

    annotations: (B, S, A)  h_j, the vectors attention averages over.
    keys:        (B, S, K)  precomputed attention keys (U_a h_j), or None.
    mask:        (B, S) bool, True at real (non-pad) source positions.
    summary:     (B, D) a fixed sentence summary (RNNencdec's c), or None.
    init:        whatever `init_state` needs (e.g. backward h_1), a Tensor/tuple or None.
    values:      (B, S, G) other per-position projections of h_j that the decoder averages
                 with the attention weights (RNNsearch: [C; C_z; C_r] h_j, so that
                 sum_j alpha_ij (C h_j) = C c_i costs S*G per step instead of A*G), or None.

    When a model appends EOS to the source (`src_eos`), S counts that EOS position too, so
    attention matrices have one more column than the source has tokens.
    """

    annotations: Tensor
    keys: Tensor | None
    mask: Tensor
    summary: Tensor | None = None
    init: Any = None
    values: Tensor | None = None

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


def append_eos(src: Tensor, src_lens: Tensor, eos_id: int = EOS_ID) -> tuple[Tensor, Tensor]:
    """src (B, S) padded with 0 -> (B, S+1) with EOS written after each sentence, lens + 1."""
    out = F.pad(src, (0, 1), value=PAD_ID)
    out[torch.arange(src.size(0), device=src.device), src_lens.to(src.device)] = eos_id
    return out, src_lens + 1


def length_mask(lens: Tensor, max_len: int) -> Tensor:
    """(B,) lengths -> (B, max_len) bool, True at real positions."""
    return torch.arange(max_len, device=lens.device).unsqueeze(0) < lens.unsqueeze(1)


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
    # True when `step` accepts N = B * G state rows over B encoder rows (the G hypotheses of a
    # sentence, consecutive rows, share its encoder row): beam search then never copies the
    # encoder outputs K times (see nmtkit.decode.search)
    grouped_encoder: bool = False
    # Training and decoding run the recurrences' step bodies compiled (models/fusion.py): fewer,
    # fused kernels, the same equations. Set by the trainer from --fuse.
    fuse_steps: bool = False

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

    def output_projection(self) -> nn.Linear | None:
        """The nn.Linear that `output_layer` is, if it is exactly one (enables the fused loss)."""
        return None

    # ---- derived ------------------------------------------------------------------------
    def forward(self, src: Tensor, src_lens: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: log-probabilities (B, T, V) in float32 (or float64).

        Training does not come through here but through `loss` (under DistributedDataParallel,
        wrapped as the forward of `nmtkit.train.distributed.LossModule`).
        """
        feats, _ = self.decode_features(self.encode(src, src_lens), tgt_in)
        return _log_softmax(self.output_layer(feats))

    def step(self, prev_tokens: Tensor, state: State, enc: EncoderOut,
             out: tuple[Tensor, Tensor | None] | None = None) -> tuple[Tensor, State, Tensor]:
        """One decoding step: (log_probs (B, V), new state, attention (B, S)).

        `out` = (weight (L, F), bias (L,) or None): the rows of `output_projection()` for a
        shortlist of L target ids (nmtkit.decode.shortlist); the log-probabilities are then
        (B, L), normalised over the shortlist. With `fuse_steps`, the whole step (attention,
        state update, output layer, log-softmax) runs as one compiled body (models/fusion.py):
        a handful of kernels instead of dozens."""
        return step_fn(Seq2Seq._step, self.fuse_steps)(self, prev_tokens, state, enc, out)

    def _step(self, prev_tokens: Tensor, state: State, enc: EncoderOut,
              out: tuple[Tensor, Tensor | None] | None = None) -> tuple[Tensor, State, Tensor]:
        feats, state, attn = self.step_features(prev_tokens, state, enc)
        logits = self.output_layer(feats) if out is None else F.linear(feats, out[0], out[1])
        return _log_softmax(logits), state, attn

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
        fused: bool = True,
        n_tokens: int | None = None,
    ) -> tuple[Tensor, Tensor, int]:
        """Summed token losses over non-pad targets, computed in chunks of target tokens.

        `n_tokens`: the number of non-pad targets when the caller knows it (the trainer does,
        from the lengths on the host); the real positions are then picked without reading
        the device (a boolean mask's nonzero is a host synchronisation on a GPU).

        Returns (loss_sum, nll_sum, n_tokens): the training objective (with label smoothing)
        and the plain negative log-likelihood, both summed (not averaged). Differentiate
        `loss_sum`; `nll_sum` is for reporting.

        With `fused` (default) and a model whose output layer is one nn.Linear, the vocabulary
        projection, log-softmax and loss are computed chunk by chunk together with their
        gradients (see `linear_cross_entropy`): no (N, V) tensor is kept for the backward pass,
        and a chunk holds at most MAX_CHUNK_LOGITS (2^26) logits. Otherwise the plain chunked loop is used.
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
        proj = self.output_projection() if fused else None
        if proj is not None:
            loss_sum, nll_sum = linear_cross_entropy(
                feats, proj.weight, proj.bias, gold, label_smoothing, chunk_tokens, self.fuse_steps
            )
            return loss_sum, nll_sum, int(gold.numel())
        acc = torch.float64 if feats.dtype == torch.float64 else torch.float32
        loss_sum = feats.new_zeros((), dtype=acc)
        nll_sum = feats.new_zeros((), dtype=acc)
        for i in range(0, feats.size(0), chunk_tokens):
            lp = _log_softmax(self.output_layer(feats[i : i + chunk_tokens]))
            g = gold[i : i + chunk_tokens]
            nll = -lp.gather(1, g.unsqueeze(1)).squeeze(1)
            nll_sum = nll_sum + nll.sum()
            if label_smoothing > 0:
                smooth = -lp.mean(dim=-1)
                loss_sum = loss_sum + ((1 - label_smoothing) * nll + label_smoothing * smooth).sum()
            else:
                loss_sum = loss_sum + nll.sum()
        return loss_sum, nll_sum, int(gold.numel())


def dropout(p: float) -> nn.Module:
    """nn.Dropout(p), or nn.Identity for p = 0 (the paper presets): no op launched at all."""
    return nn.Dropout(p) if p > 0 else nn.Identity()


def _log_softmax(logits: Tensor) -> Tensor:
    """log_softmax in float32 at least (bf16/fp16 logits from autocast are upcast)."""
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    return F.log_softmax(logits, dim=-1)


# Logits held at once by the chunked loss: 2^26 (256 MB in float32) keeps memory bounded while
# a paper-sized batch (80 pairs, ~2,500 target tokens, 30k words) takes 2 chunks, not 5 (fewer
# launches per step; benchmarks/launches.py).
MAX_CHUNK_LOGITS = 1 << 26


def linear_cross_entropy(
    feats: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    gold: Tensor,
    label_smoothing: float = 0.0,
    chunk_tokens: int = 4096,
    fuse: bool = False,
) -> tuple[Tensor, Tensor]:
    """sum_n CE(softmax(weight feats_n + bias), gold_n), and the plain NLL sum.

    feats (N, F), weight (V, F), bias (V,) or None, gold (N,) -> (loss_sum, nll_sum) scalars.
    The loss with label smoothing ls is (1 - ls) * nll + ls * mean_v(-log p_v), as in
    `Seq2Seq.loss`. Gradients (for loss_sum only) are computed in the forward pass chunk by
    chunk, so memory stays O(chunk * V) whatever N is, with no recomputation. Under autocast
    the matrix products run in the autocast dtype; softmax and sums run in float32. `fuse`
    compiles the per-chunk body (models/fusion.py).
    """
    device_type = feats.device.type
    if torch.is_autocast_enabled(device_type):
        compute_dtype = torch.get_autocast_dtype(device_type)
    else:
        compute_dtype = torch.promote_types(feats.dtype, weight.dtype)
    chunk = max(1, min(chunk_tokens, MAX_CHUNK_LOGITS // max(1, weight.size(0))))
    if bias is None:
        bias = weight.new_zeros(weight.size(0), requires_grad=False)
    return _LinearCrossEntropy.apply(feats, weight, bias, gold, float(label_smoothing), chunk, compute_dtype, fuse)


def _lce_chunk(f: Tensor, w: Tensor, b: Tensor, g: Tensor, label_smoothing: float, need_grad: bool
               ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """One chunk of `linear_cross_entropy`: f (n, F), w (V, F), b (V,) in the compute dtype,
    g (n, 1) gold ids -> (nll sum, loss sum, d loss / d logits (n, V) or None), sums in float32
    (float64 for float64 inputs). A pure step body (models/fusion.py)."""
    acc = torch.float64 if f.dtype == torch.float64 else torch.float32
    V = w.size(0)
    logits = F.linear(f, w, b).to(acc)  # (n, V)
    lse = torch.logsumexp(logits, dim=-1)
    nll = lse - logits.gather(1, g).squeeze(1)
    if label_smoothing > 0:
        loss = ((1 - label_smoothing) * nll + label_smoothing * (lse - logits.mean(dim=-1))).sum()
    else:
        loss = nll.sum()
    if not need_grad:
        return nll.sum(), loss, None, None
    # d loss / d logits = softmax - (1 - ls) onehot - ls / V
    p = logits.sub_(lse.unsqueeze(1)).exp_()
    p.scatter_add_(1, g, torch.full_like(g, -(1.0 - label_smoothing), dtype=acc))
    if label_smoothing > 0:
        p.sub_(label_smoothing / V)
    return nll.sum(), loss, p, p.sum(0)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, feats, weight, bias, gold, label_smoothing, chunk, compute_dtype, fuse):  # type: ignore[override]
        acc = torch.float64 if compute_dtype == torch.float64 else torch.float32
        need_grad = any(ctx.needs_input_grad[:3])
        N, V = feats.size(0), weight.size(0)
        loss_sum = torch.zeros((), dtype=acc, device=feats.device)
        nll_sum = torch.zeros((), dtype=acc, device=feats.device)
        grad_feats = torch.empty_like(feats) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(weight, dtype=acc) if need_grad else None
        grad_b = torch.zeros(V, dtype=acc, device=feats.device) if need_grad else None
        with torch.autocast(feats.device.type, enabled=False):
            # detached: this Function does its own backward (and requires-grad flags would split
            # the compiled body's graphs)
            feats = feats.detach()
            w = weight.detach().to(compute_dtype)
            b = bias.detach().to(compute_dtype)
            body = step_fn(_lce_chunk, fuse)
            for i in range(0, N, chunk):
                f = feats[i : i + chunk].to(compute_dtype)
                g = gold[i : i + chunk].unsqueeze(1)
                nll, loss, p, p_sum = body(f, w, b, g, label_smoothing, need_grad)
                nll_sum += nll
                loss_sum += loss
                if not need_grad:
                    continue
                grad_b += p_sum
                gp = p.to(compute_dtype)
                if grad_feats is not None and grad_feats.dtype == compute_dtype:
                    torch.mm(gp, w, out=grad_feats[i : i + chunk])  # one launch, no copy
                elif grad_feats is not None:
                    grad_feats[i : i + chunk] = gp.mm(w).to(grad_feats.dtype)
                if acc == compute_dtype:
                    grad_w.addmm_(gp.t(), f)
                else:
                    grad_w += gp.t().mm(f).to(acc)
        ctx.mark_non_differentiable(nll_sum)
        if need_grad:
            ctx.save_for_backward(
                grad_feats if grad_feats is not None else torch.empty(0),
                grad_w.to(weight.dtype),
                grad_b.to(bias.dtype),
            )
        ctx.has_feats_grad = grad_feats is not None
        return loss_sum, nll_sum

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):  # type: ignore[override]
        grad_feats, grad_w, grad_b = ctx.saved_tensors
        gf = grad_feats * grad_loss.to(grad_feats.dtype) if ctx.has_feats_grad else None
        return (
            gf,
            grad_w * grad_loss.to(grad_w.dtype) if ctx.needs_input_grad[1] else None,
            grad_b * grad_loss.to(grad_b.dtype) if ctx.needs_input_grad[2] else None,
            None, None, None, None, None,
        )
