"""RNNsearch's additive attention and decoder recurrence (appendix A.2), fast.

`additive_scores(_grouped)` compute v^T tanh(q + K); without autograd on the CPU block by block (the
tanh stays in the cache), and in eager float32 on the CPU with tanh as 2 sigmoid(2x) - 1 (`tanh_`, a
faster kernel). `bahdanau_recurrence` is `FastRNNSearch.attend_and_update` in a loop with a
hand-written backward: the backward keeps only what recurs and recomputes the tanh activations, and
the weight gradients are one product over all T*B rows. Each direction is a loop of a pure step body
(compiled with `fuse`; a CUDA graph with `graphs`).
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from nmtkit.models.fast.fusion import bucket, loop_graphs, matmul_dtype, step_fn

_SCORE_BLOCK = 1 << 18  # elements of the (B, S, K) tanh intermediate made at once on the CPU


def sigmoid_form(x: Tensor) -> bool:
    """Whether tanh(x) is computed as 2 sigmoid(2x) - 1: eager float32 on the CPU."""
    return x.dtype == torch.float32 and x.device.type == "cpu" and not torch.compiler.is_compiling()


def tanh_(x: Tensor) -> Tensor:
    """tanh(x), in place."""
    if sigmoid_form(x):
        return torch.sigmoid_(x.mul_(2)).mul_(2).sub_(1)
    return x.tanh_()


class _BlockScores:
    """v^T tanh(keys + query) block by block; in the sigmoid form 2 v^T sigmoid(2x), and `finish`
    subtracts sum(v) (doubling is exact in floating point)."""

    def __init__(self, query_proj: Tensor, keys: Tensor, v: Tensor):
        self.sigmoid = sigmoid_form(keys) and sigmoid_form(query_proj)
        self.query, self.v = (query_proj * 2, v * 2) if self.sigmoid else (query_proj, v)
        self.shift = v.sum() if self.sigmoid else None

    def block(self, keys: Tensor, query: Tensor) -> Tensor:
        """keys and rows `query` of `self.query` (broadcastable) -> scores before `finish`."""
        if self.sigmoid:
            return torch.sigmoid_(torch.add(query, keys, alpha=2)).matmul(self.v)
        return (keys + query).tanh_().matmul(self.v)

    def finish(self, scores: Tensor) -> Tensor:
        return scores.sub_(self.shift) if self.sigmoid else scores


def additive_scores(query_proj: Tensor, keys: Tensor, v: Tensor) -> Tensor:
    """e = v^T tanh(query_proj + keys): query_proj (B, K) W_a s_{i-1}, keys (B, S, K) U_a h_j,
    v (K,) -> scores (B, S)."""
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
    """`additive_scores` for G queries per sentence, inference only: query_proj (B, G, K), keys
    (B, S, K) never copied, mask (B, S) -> scores (B, G, S), a placeholder where mask is False."""
    B, G, K = query_proj.shape
    S = keys.size(1)
    if torch.is_grad_enabled() or keys.device.type != "cpu" or torch.compiler.is_compiling():
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


def pair_product_dtype(mm_dtype: torch.dtype, device_type: str) -> torch.dtype:
    """The dtype of the products whose shapes depend on both T and S: float32 for 16-bit products
    on the CPU, where oneDNN builds a primitive for each 16-bit shape and these shapes are many."""
    return torch.float32 if device_type == "cpu" and mm_dtype.itemsize == 2 else mm_dtype


def bahdanau_recurrence(x_gates: Tensor, s0: Tensor, keys: Tensor, values: Tensor, mask: Tensor,
                        w_q: Tensor, v_a: Tensor, U: Tensor, fuse: bool = False, graphs: bool = False
                        ) -> tuple[Tensor, Tensor]:
    """x_gates (B, T, 3d), s0 (B, d), keys (B, S, n'), values (B, S, 3d), mask (B, S) bool,
    w_q (n' + 2d, d), v_a (n',), U (d, d) -> (states s_0..s_T (B, T+1, d), alpha (B, T, S))."""
    dev = x_gates.device.type
    mm_dtype = matmul_dtype(x_gates, w_q)
    acc = torch.float32 if torch.is_autocast_enabled(dev) else mm_dtype
    with torch.autocast(dev, enabled=False):
        args = [t.to(acc) for t in (x_gates, s0, keys, values)]
        if not torch.is_grad_enabled() or not any(
                t.requires_grad for t in (x_gates, s0, keys, values, w_q, v_a, U)):
            # no backward: keep nothing per step (O(B S n') memory, not O(T B S n'))
            states, alphas = _forward(*args, mask, w_q, v_a, U, mm_dtype, fuse, keep=False)
            return states.transpose(0, 1), alphas.transpose(0, 1)
        return _Recurrence.apply(*args, mask, w_q, v_a, U, mm_dtype, fuse, graphs)


def _scores_tanh(keys: Tensor, qa: Tensor, work: Tensor | None) -> Tensor:
    """tanh(q_a + K): keys (B, S, n'), qa (B, n') -> (B, S, n'), in `work` when given."""
    return tanh_(keys + qa.unsqueeze(1) if work is None else torch.add(keys, qa.unsqueeze(1), out=work))


def _fwd_step(s: Tensor, x: Tensor, keys: Tensor, vals: Tensor, pad: Tensor, wq: Tensor, va: Tensor,
              Uc: Tensor, work: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One step from s_i (B, d), x_i (B, 3d); keys (B, S, n'), vals (B, S, 3d), wq and Uc in the
    matmul dtype, pad (B, S) bool -> (s_{i+1}, alpha_i (B, S), q_a (B, n'), [z; r; cand] (B, 3d)).
    `work`: an optional buffer like keys for the tanh activations."""
    acc, mmd = s.dtype, wq.dtype
    na, d = keys.size(2), s.size(1)
    q = (s.to(mmd) @ wq.t()).to(acc)
    th = _scores_tanh(keys, q[:, :na], work)
    alpha = torch.softmax((th @ va).masked_fill(pad, float("-inf")), dim=-1)
    g = x + torch.bmm(alpha.unsqueeze(1).to(mmd), vals).squeeze(1).to(acc)
    zr = torch.sigmoid(g[:, : 2 * d] + q[:, na:])
    z, r = zr[:, :d], zr[:, d:]
    cand = torch.tanh(g[:, 2 * d :] + ((r * s).to(mmd) @ Uc.t()).to(acc))
    return torch.lerp(s, cand, z), alpha, q[:, :na], torch.cat([z, r, cand], dim=1)


def _forward(x_gates, s0, keys, values, mask, w_q, v_a, U, mm_dtype, fuse: bool, keep: bool):
    """The loop: states (T+1, B, d), alphas (T, B, S) and, when `keep`, q_a (T, B, n') and [z; r;
    cand] (T, B, 3d), in one flat tuple (a graphed loop's outputs)."""
    step = step_fn(_fwd_step, fuse)
    # detached: the autograd Function does the backward; a requires-grad flag would split graphs
    x_gates, s0, keys, values, w_q, v_a, U = (t.detach() for t in (x_gates, s0, keys, values, w_q, v_a, U))
    acc = x_gates.dtype
    wq, Uc, vals, va = w_q.to(mm_dtype), U.to(mm_dtype), values.to(mm_dtype), v_a.to(acc)
    pad = ~mask
    work = None if fuse else torch.empty_like(keys)
    states, alphas, kept = [], [], ([], [])
    s = s0
    for x in x_gates.unbind(1):
        states.append(s)
        s, alpha, *rest = step(s, x, keys, vals, pad, wq, va, Uc, work)
        alphas.append(alpha)
        if keep:
            for lst, t in zip(kept, rest):
                lst.append(t)
    states.append(s)
    stacked = tuple(torch.stack(lst) for lst in kept) if keep else ()
    return torch.stack(states), torch.stack(alphas), *stacked


def _bwd_step(g_next: Tensor, g_s: Tensor, g_alpha: Tensor, z: Tensor, r: Tensor, cand: Tensor,
              s: Tensor, alpha: Tensor, qa: Tensor, keys: Tensor, g_keys: Tensor, vals_t: Tensor,
              wq: Tensor, va: Tensor, Uc: Tensor, work: Tensor | None = None
              ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The gradients through step i. g_next = dL/ds_{i+1} (B, d), g_s and g_alpha the direct
    gradients of s_i and alpha_i; g_keys (B, S, n'), the keys' gradient of the later steps before
    the factor v_a; vals_t (B, 3d, S) -> (dL/ds_i, g_x (B, 3d), g_q (B, n'+2d), g_keys with step i
    added, this step's term of v_a's gradient (n',))."""
    acc, mmd = s.dtype, wq.dtype
    d = s.size(1)
    g_z = g_next * (cand - s)
    g_pc = g_next * z * (1 - cand * cand)  # through cand's tanh
    g_rs = (g_pc.to(mmd) @ Uc).to(acc)
    g_s = g_s + g_next * (1 - z) + g_rs * r
    g_x = torch.cat([g_z * z * (1 - z), (g_rs * s) * r * (1 - r), g_pc], dim=1)
    g_alpha = g_alpha + torch.bmm(g_x.to(mmd).unsqueeze(1), vals_t).squeeze(1).to(acc)
    g_e = alpha * (g_alpha - (alpha * g_alpha).sum(-1, keepdim=True))  # 0 at padding
    th = _scores_tanh(keys, qa, work)  # as the forward step computed it, bit for bit
    g_v = torch.bmm(g_e.unsqueeze(1), th).sum((0, 1))  # sum_b,j g_e th
    # through the tanh of the scores: (1 - th^2) g_e, in place on th (eager: no other temporary)
    g_pre = th.mul_(th).neg_().add_(1).mul_(g_e.unsqueeze(2))
    g_q = torch.cat([g_pre.sum(1) * va, g_x[:, : 2 * d]], dim=1)
    g_s = g_s + (g_q.to(mmd) @ wq).to(acc)
    return g_s, g_x, g_q, g_keys.add_(g_pre), g_v


def _backward_loop(g_states, g_alphas, zrc, states, alphas, qas, keys, values, w_q, v_a, U, *, mm_dtype, fuse):
    """g_states (T+1, B, d), g_alphas (T, B, S) and the kept forward results -> (dL/ds_0, g_x (T, B,
    3d), g_q (T, B, n'+2d), g_keys (B, S, n'), v_a's gradient terms (T, n') from step T-1 down)."""
    step = step_fn(_bwd_step, fuse)
    T = alphas.shape[0]
    zs, rs, cands = zrc.chunk(3, dim=2)
    wq, Uc = w_q.to(mm_dtype), U.to(mm_dtype)
    vals_t = values.to(mm_dtype).transpose(1, 2).contiguous()  # (B, 3d, S): a faster bmm below
    va = v_a.to(states.dtype)
    g_next = g_states[T].contiguous()  # dL/ds_T: zero unless the caller reads the new states
    g_keys = torch.zeros_like(keys)
    work = None if fuse else torch.empty_like(keys)
    g_xs, g_qs, g_vs = [], [], []
    for i in range(T - 1, -1, -1):
        g_next, g_x, g_q, g_keys, g_v = step(
            g_next, g_states[i], g_alphas[i], zs[i], rs[i], cands[i], states[i], alphas[i], qas[i], keys,
            g_keys, vals_t, wq, va, Uc, work)
        g_xs.append(g_x)
        g_qs.append(g_q)
        g_vs.append(g_v)
    g_x, g_q = (torch.stack(lst[::-1]) for lst in (g_xs, g_qs))  # (T, B, .)
    return g_next, g_x, g_q, g_keys, torch.stack(g_vs)


def _pad_to(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """`t` inside zeros of `shape` (t itself when it has that shape)."""
    if tuple(t.shape) == shape:
        return t
    out = t.new_zeros(shape)
    out[tuple(slice(0, n) for n in t.shape)] = t
    return out


class _Recurrence(torch.autograd.Function):
    """The recurrence with its hand-written backward. With `graphs`, both loops run as CUDA graphs
    over B, T and S padded to BUCKET multiples: a padded row attends to its first position only
    (not NaN), and padded steps get zero gradients."""

    @staticmethod
    def forward(ctx, x_gates, s0, keys, values, mask, w_q, v_a, U, mm_dtype, fuse, graphs):  # type: ignore[override]
        B, T, S = x_gates.size(0), x_gates.size(1), keys.size(1)
        ctx.mm_dtype, ctx.fuse, ctx.graphs, ctx.sizes = mm_dtype, fuse, graphs, (B, T, S)
        if graphs:  # (autograd does not record inside forward: no detach needed)
            Bp, Tp, Sp = bucket(B), bucket(T), bucket(S)
            x_gates = _pad_to(x_gates, (Bp, Tp, x_gates.size(2)))
            s0 = _pad_to(s0, (Bp, s0.size(1)))
            keys = _pad_to(keys, (Bp, Sp, keys.size(2)))
            values = _pad_to(values, (Bp, Sp, values.size(2)))
            mask = _pad_to(mask, (Bp, Sp))
            mask[B:, 0] = True
            states, alphas, qas, zrc = loop_graphs(x_gates.device).run(
                ("forward", mm_dtype, fuse), functools.partial(_forward, mm_dtype=mm_dtype, fuse=fuse, keep=True),
                (x_gates, s0, keys, values, mask, w_q, v_a, U))
        else:
            states, alphas, qas, zrc = _forward(x_gates, s0, keys, values, mask, w_q, v_a, U, mm_dtype, fuse, keep=True)
        ctx.save_for_backward(keys, values, w_q, v_a, U, states, alphas, qas, zrc)
        return states[: T + 1, :B].transpose(0, 1), alphas[:T, :B, :S].transpose(0, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, g_states, g_alphas):  # type: ignore[override]
        keys, values, w_q, v_a, U, states, alphas, qas, zrc = (t.detach() for t in ctx.saved_tensors)
        mmd = ctx.mm_dtype
        B, T, S = ctx.sizes
        Tp, Bp, d = alphas.shape[0], states.size(1), states.size(2)
        with torch.autocast(states.device.type, enabled=False):
            saved = (zrc, states, alphas, qas, keys, values, w_q, v_a, U)
            if ctx.graphs:  # padded steps and rows: zero gradients
                g_st, g_al = states.new_zeros(Tp + 1, Bp, d), torch.zeros_like(alphas)
                if g_states is not None:
                    g_st[: T + 1, :B] = g_states.transpose(0, 1)
                if g_alphas is not None:
                    g_al[:T, :B, :S] = g_alphas.transpose(0, 1)
                g_next, g_x, g_q, g_keys, g_vs = loop_graphs(states.device).run(
                    ("backward", mmd, ctx.fuse), functools.partial(_backward_loop, mm_dtype=mmd, fuse=ctx.fuse),
                    (g_st, g_al, *saved))
            else:
                g_st = g_states.transpose(0, 1) if g_states is not None else states.new_zeros(T + 1, B, d)
                g_al = g_alphas.transpose(0, 1) if g_alphas is not None else torch.zeros_like(alphas)
                g_next, g_x, g_q, g_keys, g_vs = _backward_loop(g_st, g_al, *saved, mm_dtype=mmd, fuse=ctx.fuse)
            # the real steps, rows and positions (g_vs runs from step Tp-1 down: its last T)
            g_next, g_x, g_q, g_keys, g_v = g_next[:B], g_x[:T, :B], g_q[:T, :B], g_keys[:B, :S], g_vs[Tp - T :].sum(0)
            states, alphas, rs = states[:T, :B], alphas[:T, :B, :S], zrc[:T, :B, d : 2 * d]
            values = values[:B, :S]
            g_keys = g_keys.mul_(v_a.to(g_keys.dtype))
            # weight gradients: one product over all T*B rows
            g_wq = (g_q.reshape(T * B, -1).t().to(mmd) @ states.reshape(T * B, d).to(mmd)).to(w_q.dtype)
            rs_all = (rs * states).reshape(-1, d)
            g_U = (g_x[:, :, 2 * d :].reshape(-1, d).t().to(mmd) @ rs_all.to(mmd)).to(U.dtype)
            pmd = pair_product_dtype(mmd, states.device.type)
            g_values = torch.bmm(alphas.permute(1, 2, 0).to(pmd), g_x.transpose(0, 1).to(pmd)).to(values.dtype)
        return (g_x.transpose(0, 1), g_next, g_keys, g_values, None, g_wq, g_v.to(v_a.dtype), g_U, None, None, None)
