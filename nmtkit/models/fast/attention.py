"""The additive attention's scores v^T tanh(q + K), fast: blocked on the CPU, tanh through sigmoid.

Without autograd on the CPU, `additive_scores` and `additive_scores_grouped` (G queries per
sentence: beam search's hypotheses, against the sentence's keys, never copied) compute the
(B, [G,] S, K) tanh block by block, so that it stays in the cache, and each block only up to
its longest sentence. In eager float32 on the CPU, tanh is computed as 2 sigmoid(2x) - 1
(`tanh_`), the same function through a kernel about 10x faster than PyTorch's CPU tanh; the two
forms differ by float32 rounding (scores to about 1e-6). Float64 (the equation tests' exact
reference), other devices and compiled bodies keep tanh itself. The plain form is
`models.rnnsearch.RNNSearch.attend`.
"""
from __future__ import annotations

import torch
from torch import Tensor

# Without autograd (decoding), the (B, S, K) tanh intermediate is computed in row blocks of about
# this many elements, so that it stays in the CPU cache instead of streaming through memory:
# 4-5x faster for beam search, whose B*K rows make it tens of MB (same values, row by row).
_SCORE_BLOCK = 1 << 18


def sigmoid_form(x: Tensor) -> bool:
    """Whether tanh(x) is computed as 2 sigmoid(2x) - 1 (module docstring): eager float32 on the CPU."""
    return x.dtype == torch.float32 and x.device.type == "cpu" and not torch.compiler.is_compiling()


def tanh_(x: Tensor) -> Tensor:
    """tanh(x), in place (module docstring: through sigmoid in eager float32 on the CPU)."""
    if sigmoid_form(x):
        return torch.sigmoid_(x.mul_(2)).mul_(2).sub_(1)
    return x.tanh_()


class _BlockScores:
    """v^T tanh(keys + query) block by block (the CPU inference paths below), with what every
    block shares computed once per call. In the sigmoid form (`sigmoid_form`) a block is
    sigmoid(2 query + 2 keys) . 2v, one pass over the block fewer than tanh_'s, and `finish`
    subtracts sum(v) from all the scores at once: 2 sigmoid(2x) - 1 = tanh(x), so
    v^T tanh(x) = 2 v^T sigmoid(2x) - sum(v). Doubling is exact in floating point, so
    2 query + 2 keys rounds as 2 (query + keys) does."""

    def __init__(self, query_proj: Tensor, keys: Tensor, v: Tensor):
        self.sigmoid = sigmoid_form(keys) and sigmoid_form(query_proj)
        self.query, self.v = (query_proj * 2, v * 2) if self.sigmoid else (query_proj, v)
        self.shift = v.sum() if self.sigmoid else None

    def block(self, keys: Tensor, query: Tensor) -> Tensor:
        """keys and `self.query`'s rows `query` (broadcastable against keys) -> scores before
        `finish`."""
        if self.sigmoid:
            return torch.sigmoid_(torch.add(query, keys, alpha=2)).matmul(self.v)
        return (keys + query).tanh_().matmul(self.v)

    def finish(self, scores: Tensor) -> Tensor:
        return scores.sub_(self.shift) if self.sigmoid else scores


def additive_scores(query_proj: Tensor, keys: Tensor, v: Tensor) -> Tensor:
    """e = v^T tanh(query_proj + keys).

    query_proj: (B, K) W_a s_{i-1}; keys: (B, S, K) U_a h_j; v: (K,) -> scores (B, S).
    """
    B, S, K = keys.shape
    rows = max(1, _SCORE_BLOCK // max(1, S * K))
    if torch.is_grad_enabled() or keys.device.type != "cpu" or rows >= B or torch.compiler.is_compiling():
        return torch.tanh(keys + query_proj.unsqueeze(1)).matmul(v)
    out = keys.new_empty((B, S), dtype=torch.result_type(keys, query_proj))
    scorer = _BlockScores(query_proj, keys, v)
    for i in range(0, B, rows):
        out[i : i + rows] = scorer.block(keys[i : i + rows], scorer.query[i : i + rows].unsqueeze(1))
    return scorer.finish(out)


def additive_scores_grouped(query_proj: Tensor, keys: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """e = v^T tanh(query_proj + keys) for G queries per sentence (beam search's hypotheses).

    query_proj: (B, G, K); keys: (B, S, K), shared by the G queries of a sentence;
    v: (K,); mask: (B, S) bool, True at real positions -> scores (B, G, S), with a placeholder
    (the caller masks them) beyond a block's longest sentence. The same values at
    real positions as `additive_scores` on keys repeated G times, without materialising those
    copies (they are memory traffic that dominates a batched beam search step). On the CPU,
    blocks of sentences are done one after the other (the (., G, S, K) tanh intermediate then
    stays in the cache) and each block only up to its longest sentence, so short sentences do
    not pay for the padding of a long one. Inference only.
    """
    B, G, K = query_proj.shape
    S = keys.size(1)
    if torch.is_grad_enabled() or keys.device.type != "cpu" or torch.compiler.is_compiling():
        # (compiled, the tanh and the product with v fuse into one kernel: no intermediate)
        return torch.tanh(keys.unsqueeze(1) + query_proj.unsqueeze(2)).matmul(v)
    rows = max(1, _SCORE_BLOCK // max(1, G * S * K))
    lens = mask.sum(dim=1).numpy()  # a CPU tensor here: a view, not a device read
    out = keys.new_zeros((B, G, S), dtype=torch.result_type(keys, query_proj))
    scorer = _BlockScores(query_proj, keys, v)
    for i in range(0, B, rows):
        w = int(lens[i : i + rows].max())
        out[i : i + rows, :, :w] = scorer.block(keys[i : i + rows, :w].unsqueeze(1),
                                                scorer.query[i : i + rows].unsqueeze(2))
    return scorer.finish(out)
