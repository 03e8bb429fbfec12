"""The fast paths every built model has on top of the plain `Seq2Seq` interface, and the chunked loss.

`Accelerated` comes first in a built model's bases. `loss` is `linear_cross_entropy`, which never
holds the (N, V) logits of a batch: each chunk of positions is projected, normalised and scored,
and its gradients made right away in the forward pass (the backward only scales them).
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmtkit.models.base import PAD_ID, EncoderOut, Seq2Seq, State
from nmtkit.models.fast.fusion import matmul_dtype, step_fn


class Accelerated(Seq2Seq):
    """A model with the fast paths; `fuse_steps` is a keyword argument."""

    # what `--precision int8` quantises: the nn.Linear layers decoding only calls as modules, and
    # the bidirectional nn.GRU encoder it runs as `quantize.Int8BiGRU`
    int8_linears: tuple[str, ...] = ()
    int8_encoder: str | None = None
    # whether teacher forcing can run as CUDA graphs, and whether it does (--cuda-graphs)
    graph_loops_supported: bool = False
    graph_loops: bool = False

    def __init__(self, *args, fuse_steps: bool = False):
        super().__init__(*args)
        self._fuse_steps = bool(fuse_steps)
        # what `int8_stacks` names, built by int8 decoding (quantize.py); no part of the state_dict
        self.decode_stacks: dict[str, nn.Module] = {}

    def int8_stacks(self) -> dict[str, tuple[str | None, tuple[str, ...]]]:
        """Groups of `int8_linears` a decoding step applies to the same input (embedding rows with
        an embedding), by their name in `decode_stacks`: (embedding or None, layers)."""
        return {}

    @property
    def fuse_steps(self) -> bool:
        """Whether the step bodies run compiled (fusion.py); chosen at construction."""
        return self._fuse_steps

    def with_fused_steps(self, fuse_steps: bool = True) -> "Accelerated":
        """A copy of this model (same weights, dtype, device and mode) with `fuse_steps` set."""
        clone = copy.deepcopy(self)
        clone._fuse_steps = bool(fuse_steps)
        return clone

    def step(self, prev_tokens: Tensor, state: State, enc: EncoderOut,
             out: tuple[Tensor, Tensor | None] | None = None) -> tuple[Tensor, State, Tensor]:
        """`Seq2Seq.step`; with `fuse_steps`, the whole step runs as one compiled body."""
        return step_fn(Seq2Seq._step, self.fuse_steps)(self, prev_tokens, state, enc, out)

    def loss(self, src: Tensor, src_lens: Tensor, tgt_in: Tensor, tgt_out: Tensor,
             label_smoothing: float = 0.0, chunk_tokens: int = 4096, n_tokens: int | None = None
             ) -> tuple[Tensor, Tensor, int]:
        """`Seq2Seq.loss` through `linear_cross_entropy`. `n_tokens`, the number of non-pad targets
        when the caller knows it, picks the real positions without a host synchronisation."""
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


# logits held at once by the chunked loss: in general, and in bf16/fp16 on the CPU
MAX_CHUNK_LOGITS = 1 << 26
CPU_CHUNK_LOGITS = 1 << 23
ROW_MULTIPLE = 64  # 16-bit chunks are padded with zero rows to a multiple of this (few product shapes)
BLOCK_LOGITS = 1 << 19  # logits normalised at once on the CPU (eager): their float32 passes stay in the caches
MIN_BLOCK_ROWS = 32  # ... but at least this many rows: with a large vocabulary, launches would outweigh the caches


def block_rows(vocab: int, chunk: int, blocks: bool) -> int:
    """The rows of logits the chunked loss normalises at once: on the CPU in eager mode (`blocks`),
    BLOCK_LOGITS worth and at least MIN_BLOCK_ROWS; elsewhere a whole chunk (compiled, the passes fuse)."""
    return max(1, MIN_BLOCK_ROWS, BLOCK_LOGITS // max(1, vocab)) if blocks else chunk


def linear_cross_entropy(feats: Tensor, weight: Tensor, bias: Tensor | None, gold: Tensor, label_smoothing: float = 0.0,
                         chunk_tokens: int = 4096, fuse: bool = False) -> tuple[Tensor, Tensor]:
    """sum_n CE(softmax(weight feats_n + bias), gold_n) with label smoothing as in `Seq2Seq.loss`,
    and the plain NLL sum: feats (N, F), weight (V, F), bias (V,) or None, gold (N,) -> (loss_sum,
    nll_sum). Products run in the autocast dtype, softmax and sums in float32."""
    compute_dtype = matmul_dtype(feats, weight)
    half = compute_dtype in (torch.bfloat16, torch.float16)
    budget = CPU_CHUNK_LOGITS if half and feats.device.type == "cpu" else MAX_CHUNK_LOGITS
    chunk = max(1, min(chunk_tokens, budget // max(1, weight.size(0))))
    if half and chunk > ROW_MULTIPLE:
        chunk -= chunk % ROW_MULTIPLE  # every chunk but the last is a whole number of row blocks
    if bias is None:
        bias = weight.new_zeros(weight.size(0), requires_grad=False)
    return _ChunkedLinearCrossEntropy.apply(feats, weight, bias, gold, float(label_smoothing), chunk, compute_dtype, fuse)


def _lce_rows(z: Tensor, g: Tensor, gold_step: Tensor, label_smoothing: float, need_grad: bool
              ) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None]:
    """A block of rows (a pure step body): logits z (r, V) in the compute dtype, g (r, 1) gold ids,
    gold_step (r, 1) the constant -(1 - ls) -> (log p of the gold ids (r, 1), the mean log p of
    each row (r,) with label smoothing or None, d loss / d logits (r, V) in float32 (float64 for
    float64) or None, its column sums or None). One fused log_softmax reads the block; the rest
    stays in the cache. The sums over rows are the caller's, once for all blocks."""
    acc = torch.float64 if z.dtype == torch.float64 else torch.float32
    lp = torch.log_softmax(z, dim=-1, dtype=acc)  # (r, V)
    gold_lp = lp.gather(1, g)
    mean_lp = lp.mean(dim=-1) if label_smoothing > 0 else None  # lse - mean(logits) = -mean(log p)
    if not need_grad:
        return gold_lp, mean_lp, None, None
    # d loss / d logits = softmax - (1 - ls) onehot - ls / V
    p = lp.exp_().scatter_add_(1, g, gold_step)
    if label_smoothing > 0:
        p.sub_(label_smoothing / z.size(1))
    return gold_lp, mean_lp, p, p.sum(0)


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """The loss and its gradients computed together in `forward`; `backward` scales them."""

    @staticmethod
    def forward(ctx, feats, weight, bias, gold, label_smoothing, chunk, compute_dtype, fuse):  # type: ignore[override]
        acc = torch.float64 if compute_dtype == torch.float64 else torch.float32
        need_grad = any(ctx.needs_input_grad[:3])
        N, V = feats.size(0), weight.size(0)
        pad_rows = compute_dtype in (torch.bfloat16, torch.float16)
        grad_feats = torch.empty_like(feats) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(weight, dtype=acc) if need_grad else None
        with torch.autocast(feats.device.type, enabled=False):
            # detached: requires-grad flags would split the compiled body's graphs
            feats = feats.detach()
            w = weight.detach().to(compute_dtype)
            b = bias.detach().to(compute_dtype)
            body = step_fn(_lce_rows, fuse)
            rows = block_rows(V, chunk, feats.device.type == "cpu" and not fuse)
            gold_step = torch.full((min(chunk, N), 1), -(1.0 - label_smoothing), dtype=acc, device=feats.device)
            kept: tuple[list[Tensor], list[Tensor], list[Tensor]] = ([], [], [])  # gold log p, mean log p, column sums
            for i in range(0, N, chunk):
                f = feats[i : i + chunk].to(compute_dtype)
                n = f.size(0)
                if pad_rows and n % ROW_MULTIPLE:
                    f = F.pad(f, (0, 0, 0, ROW_MULTIPLE - n % ROW_MULTIPLE))  # zero rows
                g = gold[i : i + chunk].unsqueeze(1)
                # (m, V) logits, overwritten block by block with their gradient in the compute dtype;
                # the padding rows keep their logits: their features are zero, and their rows are dropped
                z = F.linear(f, w, b)
                for j in range(0, n, rows):
                    k = min(j + rows, n)
                    *sums, p, p_sum = body(z[j:k], g[j:k], gold_step[: k - j], label_smoothing, need_grad)
                    for lst, t in zip(kept, (*sums, p_sum)):
                        if t is not None:
                            lst.append(t)
                    if need_grad:
                        z[j:k] = p
                if not need_grad:
                    continue
                if grad_feats is not None and grad_feats.dtype == compute_dtype and f.size(0) == n:
                    torch.mm(z, w, out=grad_feats[i : i + chunk])  # one launch, no copy
                elif grad_feats is not None:
                    grad_feats[i : i + chunk] = z.mm(w)[:n].to(grad_feats.dtype)
                if acc == compute_dtype:
                    grad_w.addmm_(z.t(), f)
                else:
                    grad_w += z.t().mm(f).to(acc)
            nll_sum = -torch.cat(kept[0]).sum() if N else torch.zeros((), dtype=acc, device=feats.device)
            if label_smoothing > 0 and N:
                loss_sum = (1 - label_smoothing) * nll_sum - label_smoothing * torch.cat(kept[1]).sum()
            else:
                loss_sum = nll_sum.clone()  # not the NLL itself: that one is marked non-differentiable
            grad_b = None
            if need_grad:
                grad_b = torch.stack(kept[2]).sum(0) if kept[2] else torch.zeros(V, dtype=acc, device=feats.device)
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
        return (
            grad_feats * grad_loss.to(grad_feats.dtype) if ctx.has_feats_grad else None,
            grad_w * grad_loss.to(grad_w.dtype) if ctx.needs_input_grad[1] else None,
            grad_b * grad_loss.to(grad_b.dtype) if ctx.needs_input_grad[2] else None,
            None, None, None, None, None,
        )
