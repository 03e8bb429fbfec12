"""The training loss over the vocabulary, computed chunk by chunk with a hand-written backward.

`linear_cross_entropy` takes the features before the output projection W_o and returns the summed
cross-entropy without ever holding the (N, V) logits of a whole batch: each chunk of target
positions is projected, normalised and scored, and its gradients (features, W_o, b_o) are made
right away, in the forward pass; the backward only scales them. Memory is O(chunk * V), with no
recomputation. The per-chunk body `_lce_chunk` runs compiled with `fuse` (fusion.py). In
bf16/fp16, chunks are padded with zero rows to a multiple of ROW_MULTIPLE, so that oneDNN caches
few product shapes on the CPU (benchmarks/MEMORY.md); float32 and float64 are not padded.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from nmtkit.models.fast.fusion import step_fn

# Logits held at once by the chunked loss, per device type. On a GPU 2^26 (256 MB in float32)
# keeps memory bounded while a paper-sized batch (80 pairs, ~2,500 target tokens, 30k words)
# takes 2 chunks, not 5 (fewer launches per step; benchmarks/launches.py). In bf16/fp16 on the
# CPU, where launches cost nothing, the budget is memory: such a chunk holds about 8 bytes a
# logit (the 16-bit product, its float32 copy turned into the gradient, that gradient in 16
# bits), so 2^23 logits are about 64 MB (benchmarks/MEMORY.md).
MAX_CHUNK_LOGITS = 1 << 26
CPU_CHUNK_LOGITS = 1 << 23
# 16-bit chunks are padded to a multiple of this many rows (few distinct product shapes)
ROW_MULTIPLE = 64


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
    chunk (module docstring). Under autocast the matrix products run in the autocast dtype;
    softmax and sums run in float32. `fuse` compiles the per-chunk body (models/fast/fusion.py).
    """
    device_type = feats.device.type
    if torch.is_autocast_enabled(device_type):
        compute_dtype = torch.get_autocast_dtype(device_type)
    else:
        compute_dtype = torch.promote_types(feats.dtype, weight.dtype)
    half = compute_dtype in (torch.bfloat16, torch.float16)
    budget = CPU_CHUNK_LOGITS if half and device_type == "cpu" else MAX_CHUNK_LOGITS
    chunk = max(1, min(chunk_tokens, budget // max(1, weight.size(0))))
    if half and chunk > ROW_MULTIPLE:
        chunk -= chunk % ROW_MULTIPLE  # every chunk but the last is a whole number of row blocks
    if bias is None:
        bias = weight.new_zeros(weight.size(0), requires_grad=False)
    return _ChunkedLinearCrossEntropy.apply(feats, weight, bias, gold, float(label_smoothing), chunk, compute_dtype, fuse)


def _lce_chunk(f: Tensor, w: Tensor, b: Tensor, g: Tensor, label_smoothing: float, need_grad: bool
               ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """One chunk of `linear_cross_entropy`: f (m, F), w (V, F), b (V,) in the compute dtype,
    g (n, 1) gold ids of the first n <= m rows of f (the rest are padding) -> (nll sum, loss
    sum, d loss / d logits (m, V) whose padding rows are to be ignored, or None; the column sums
    of its n real rows or None), sums in float32 (float64 for float64 inputs). A pure step body
    (models/fast/fusion.py)."""
    acc = torch.float64 if f.dtype == torch.float64 else torch.float32
    V, n = w.size(0), g.size(0)
    padded = F.linear(f, w, b).to(acc)  # (m, V)
    logits = padded[:n] if n < f.size(0) else padded  # (n, V)
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
    # the padding rows of `padded` keep their logits: the caller drops their d loss / d features,
    # and their features are zero, so they add nothing to d loss / d W
    return nll.sum(), loss, padded, p.sum(0)


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """The loss and its gradients computed together in `forward`; `backward` scales them."""

    @staticmethod
    def forward(ctx, feats, weight, bias, gold, label_smoothing, chunk, compute_dtype, fuse):  # type: ignore[override]
        acc = torch.float64 if compute_dtype == torch.float64 else torch.float32
        need_grad = any(ctx.needs_input_grad[:3])
        N, V = feats.size(0), weight.size(0)
        loss_sum = torch.zeros((), dtype=acc, device=feats.device)
        nll_sum = torch.zeros((), dtype=acc, device=feats.device)
        pad_rows = compute_dtype in (torch.bfloat16, torch.float16)
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
                n = f.size(0)
                if pad_rows and n % ROW_MULTIPLE:
                    f = F.pad(f, (0, 0, 0, ROW_MULTIPLE - n % ROW_MULTIPLE))  # zero rows
                g = gold[i : i + chunk].unsqueeze(1)
                nll, loss, p, p_sum = body(f, w, b, g, label_smoothing, need_grad)
                nll_sum += nll
                loss_sum += loss
                if not need_grad:
                    continue
                grad_b += p_sum
                gp = p.to(compute_dtype)
                if grad_feats is not None and grad_feats.dtype == compute_dtype and f.size(0) == n:
                    torch.mm(gp, w, out=grad_feats[i : i + chunk])  # one launch, no copy
                elif grad_feats is not None:
                    grad_feats[i : i + chunk] = gp.mm(w)[:n].to(grad_feats.dtype)
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
