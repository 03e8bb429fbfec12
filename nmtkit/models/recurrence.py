"""The RNNsearch decoder recurrence (Bahdanau et al. 2015, appendix A.2) with a hand-written
backward pass, for teacher-forced training.

Only the recurrence runs step by step; everything that does not depend on s_{i-1} comes in
precomputed (DESIGN.md 4). For i = 0..T-1 (s_0 given; x_i = [W_z; W_r; W] E y_{i-1} + biases):
  [q_a; q_z; q_r] = [W_a; U_z; U_r] s_i                      (one matmul: w_q)
  alpha_i = masked_softmax_j(v_a . tanh(q_a + K_j))            (K = U_a h, precomputed keys)
  g_i = x_i + sum_j alpha_ij V_j                               (V = [C_z; C_r; C] h, precomputed values)
  z, r = sigmoid(g_i[:2d] + [q_z; q_r]);  cand = tanh(g_i[2d:] + U (r * s_i))
  s_{i+1} = s_i + z * (cand - s_i)                              (not computed for the last i)
Outputs: the states s_0..s_{T-1} (B, T, d) (the paper's output for y_{i+1} uses s_i) and the
weights alpha (B, T, S).

Why by hand: autograd would, at every step, compute the weight gradients of w_q and U with thin
(B-row) matrix products and accumulate full (B, S, 3d) gradients into the values; here the
backward loop keeps only what truly recurs, and the weight gradients (one matmul each over all
T*B rows) and the value gradient (one bmm of alpha^T with the gate gradients) are computed once
after it. The equations are the same as `RNNSearch._attend_and_update`, which the tests use to
check this function's outputs and gradients in float64.

Precision: elementwise work and the softmax run in float32 (float64 if the inputs are); under
autocast the matrix products take the autocast dtype (bf16 helps only on CPUs with native BF16
support and on GPUs).
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


def bahdanau_recurrence(x_gates: Tensor, s0: Tensor, keys: Tensor, values: Tensor, mask: Tensor,
                        w_q: Tensor, v_a: Tensor, U: Tensor) -> tuple[Tensor, Tensor]:
    """x_gates (B, T, 3d), s0 (B, d), keys (B, S, n'), values (B, S, 3d), mask (B, S) bool,
    w_q (n' + 2d, d), v_a (n',), U (d, d) -> (states s_0..s_{T-1} (B, T, d), alpha (B, T, S))."""
    dev = x_gates.device.type
    if torch.is_autocast_enabled(dev):
        mm_dtype = torch.get_autocast_dtype(dev)
        acc = torch.float32
    else:
        acc = torch.promote_types(x_gates.dtype, w_q.dtype)
        mm_dtype = acc
    with torch.autocast(dev, enabled=False):
        args = [t.to(acc) for t in (x_gates, s0, keys, values)]
        if not torch.is_grad_enabled() or not any(
                t.requires_grad for t in (x_gates, s0, keys, values, w_q, v_a, U)):
            # No backward (dev loss, scoring): keep nothing per step, so memory is O(B S n')
            # rather than O(T B S n') on long validation sentences.
            states, alphas, _ = _forward(*args, mask, w_q, v_a, U, mm_dtype, keep=False)
            return states.transpose(0, 1), alphas.transpose(0, 1)
        return _Recurrence.apply(*args, mask, w_q, v_a, U, mm_dtype)


def _forward(x_gates, s0, keys, values, mask, w_q, v_a, U, mm_dtype, keep: bool):
    """The recurrence loop. Returns states (T, B, d), alphas (T, B, S) and, when `keep`, what the
    backward pass needs: (th_all (T, B, S, n'), zs, rs, cands (T-1, B, d))."""
    acc = x_gates.dtype
    B, T, G = x_gates.shape
    d, S, na = s0.size(1), keys.size(1), keys.size(2)
    wq = w_q.to(mm_dtype)
    Uc = U.to(mm_dtype)
    vals = values.to(mm_dtype)
    va = v_a.to(acc)
    xg = x_gates.transpose(0, 1)  # (T, B, 3d)
    states = x_gates.new_empty(T, B, d)
    alphas = x_gates.new_empty(T, B, S)
    n_keep = T if keep else 1
    th_all = x_gates.new_empty(n_keep, B, S, na)
    zs = x_gates.new_empty(max(n_keep - 1, 0), B, d) if keep else None
    rs = torch.empty_like(zs) if keep else None
    cands = torch.empty_like(zs) if keep else None
    pad = ~mask
    s = s0
    for i in range(T):
        states[i] = s
        q = (s.to(mm_dtype) @ wq.t()).to(acc)
        th = th_all[i if keep else 0]
        torch.add(keys, q[:, :na].unsqueeze(1), out=th)
        th.tanh_()
        e = (th @ va).masked_fill_(pad, float("-inf"))
        alpha = torch.softmax(e, dim=-1)
        alphas[i] = alpha
        if i == T - 1:
            break
        g = xg[i] + torch.bmm(alpha.unsqueeze(1).to(mm_dtype), vals).squeeze(1).to(acc)
        zr = torch.sigmoid(g[:, : 2 * d] + q[:, na:])
        z, r = zr[:, :d], zr[:, d:]
        cand = torch.tanh(g[:, 2 * d :] + ((r * s).to(mm_dtype) @ Uc.t()).to(acc))
        if keep:
            zs[i], rs[i], cands[i] = z, r, cand
        s = torch.lerp(s, cand, z)
    return states, alphas, ((th_all, zs, rs, cands) if keep else None)


class _Recurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_gates, s0, keys, values, mask, w_q, v_a, U, mm_dtype):  # type: ignore[override]
        states, alphas, (th_all, zs, rs, cands) = _forward(x_gates, s0, keys, values, mask, w_q, v_a, U,
                                                           mm_dtype, keep=True)
        ctx.mm_dtype = mm_dtype
        ctx.save_for_backward(values, mask, w_q, v_a, U, states, alphas, th_all, zs, rs, cands)
        return states.transpose(0, 1), alphas.transpose(0, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, g_states, g_alphas):  # type: ignore[override]
        values, mask, w_q, v_a, U, states, alphas, th_all, zs, rs, cands = ctx.saved_tensors  # noqa: F841
        mmd = ctx.mm_dtype
        T, B, d = states.shape
        S, na = th_all.size(2), th_all.size(3)
        acc = states.dtype
        dev = states.device.type
        with torch.autocast(dev, enabled=False):
            wq, Uc = w_q.to(mmd), U.to(mmd)
            vals_t = values.to(mmd).transpose(1, 2).contiguous()  # (B, 3d, S): a faster bmm below
            va = v_a.to(acc)
            g_states = g_states.transpose(0, 1) if g_states is not None else None
            g_alphas = g_alphas.transpose(0, 1) if g_alphas is not None else None
            g_x = states.new_zeros(T, B, 3 * d)
            g_q = states.new_empty(T, B, na + 2 * d)
            g_keys = states.new_zeros(B, S, na)
            g_e_all = states.new_empty(T, B, S)
            buf = states.new_empty(B, S, na)
            outer = states.new_empty(B, S, na)
            g_next = None
            for i in range(T - 1, -1, -1):
                g_s = g_states[i].clone() if g_states is not None else states.new_zeros(B, d)
                g_alpha = g_alphas[i].clone() if g_alphas is not None else states.new_zeros(B, S)
                if i < T - 1:
                    z, r, cand, s = zs[i], rs[i], cands[i], states[i]
                    g_z = g_next * (cand - s)
                    g_pc = g_next * z * (1 - cand * cand)  # through cand's tanh
                    g_s += g_next * (1 - z)
                    g_rs = (g_pc.to(mmd) @ Uc).to(acc)
                    g_s += g_rs * r
                    g_x[i, :, :d] = g_z * z * (1 - z)
                    g_x[i, :, d : 2 * d] = (g_rs * s) * r * (1 - r)
                    g_x[i, :, 2 * d :] = g_pc
                    g_alpha += torch.bmm(g_x[i].to(mmd).unsqueeze(1), vals_t).squeeze(1).to(acc)
                    g_q[i, :, na:] = g_x[i, :, : 2 * d]
                else:
                    g_q[i, :, na:] = 0
                alpha = alphas[i]
                g_e = g_e_all[i]
                torch.mul(alpha, g_alpha - (alpha * g_alpha).sum(-1, keepdim=True), out=g_e)  # 0 at padding
                th = th_all[i]
                # g_pre = (g_e v_a) (1 - th^2) = outer - outer * th^2
                torch.mul(th, th, out=buf)
                torch.mul(g_e.unsqueeze(2), va, out=outer)
                torch.addcmul(outer, outer, buf, value=-1.0, out=buf)
                g_keys += buf
                torch.sum(buf, dim=1, out=g_q[i, :, :na])
                g_s += (g_q[i].to(mmd) @ wq).to(acc)
                g_next = g_s
            g_v = torch.mv(th_all.reshape(-1, na).t(), g_e_all.reshape(-1))  # sum_i,b,j g_e th
            # weight gradients: one product over all T*B rows
            g_wq = (g_q.reshape(T * B, -1).t().to(mmd) @ states.reshape(T * B, d).to(mmd)).to(w_q.dtype)
            if T > 1:
                rs_all = (rs * states[: T - 1]).reshape(-1, d)
                g_U = (g_x[: T - 1, :, 2 * d :].reshape(-1, d).t().to(mmd) @ rs_all.to(mmd)).to(U.dtype)
                g_values = torch.bmm(alphas[: T - 1].permute(1, 2, 0).to(mmd),
                                     g_x[: T - 1].transpose(0, 1).to(mmd)).to(values.dtype)
            else:
                g_U = torch.zeros_like(U)
                g_values = torch.zeros_like(values)
        return (g_x.transpose(0, 1), g_next, g_keys, g_values, None, g_wq, g_v.to(v_a.dtype), g_U, None)
