"""GRU encoders (one direction or both) as a loop over pure step bodies with a hand-written
backward: nn.GRU's equations (gate order r, z, n), W_ih e_t + b_ih precomputed for all t, the D
directions stacked (one bmm per step), weight gradients once over all S*B rows.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from nmtkit.models.fast.fusion import matmul_dtype, step_fn


def gru_gates(x: Tensor, gh: Tensor, b: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """x, gh (D, B, 3n), b (D, 1, 3n) -> r, z, candidate c, a_n = W_hn h + b_hn (each (D, B, n))."""
    a = gh.to(x.dtype) + b
    r, z = torch.sigmoid(x[..., : 2 * n] + a[..., : 2 * n]).chunk(2, dim=-1)
    a_n = a[..., 2 * n :]
    return r, z, torch.tanh(x[..., 2 * n :] + r * a_n), a_n


def _forward_step(x: Tensor, h: Tensor, h_mm: Tensor, w_t: Tensor, b: Tensor
                  ) -> tuple[Tensor, Tensor, Tensor]:
    """One step of D GRUs. x (D, B, 3n) = W_ih x_t + b_ih, h (D, B, n) = h_{t-1}, h_mm the same in
    w_t's dtype, w_t = W_hh^T (D, n, 3n), b = b_hh (D, 1, 3n) -> (h_t, h_t in w_t's dtype, W_hh h_{t-1})."""
    gh = torch.bmm(h_mm, w_t)
    _, z, c, _ = gru_gates(x, gh, b, h.size(-1))
    h_new = c + z * (h - c)
    return h_new, h_new.to(w_t.dtype), gh


def _backward_step(g_out: Tensor, g_z: Tensor, g_mm: Tensor, x: Tensor, h: Tensor, gh: Tensor,
                   w: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The backward of `_forward_step` at step t, recomputing its gates: dL/dh_t = g_out + g_z + g_mm,
    with g_z = z_{t+1} dL/dh_{t+1} and g_mm = dgh_{t+1} W_hh, h = h_{t-1}, w = W_hh (D, 3n, n)
    -> (g_z, g_mm for step t-1, dL/dx_t, dgh_t (D, B, 3n))."""
    n = h.size(-1)
    g = g_out + g_z + g_mm.to(g_out.dtype)
    r, z, c, a_n = gru_gates(x, gh, b, n)
    g_pre_n = (g - g * z) * (1 - c * c)  # through c's tanh
    g_pre_r = g_pre_n * a_n * r * (1 - r)
    g_pre_z = g * (h - c) * z * (1 - z)
    g_x = torch.cat([g_pre_r, g_pre_z, g_pre_n], dim=-1)
    g_gh = torch.cat([g_pre_r, g_pre_z, g_pre_n * r], dim=-1)
    return g * z, torch.bmm(g_gh.to(w.dtype), w), g_x, g_gh


def gru_recurrence(xs: Tensor, w_hh: Tensor, b_hh: Tensor, fuse: bool = False) -> Tensor:
    """D independent GRUs over S steps from h_0 = 0: xs (D, S, B, 3n) = W_ih x_t + b_ih, w_hh
    (D, 3n, n), b_hh (D, 3n) -> states h_1..h_S (D, S, B, n), float32 under autocast."""
    dev = xs.device.type
    mm_dtype = matmul_dtype(xs, w_hh)
    acc = torch.float32 if torch.is_autocast_enabled(dev) else mm_dtype
    with torch.autocast(dev, enabled=False):
        xs = xs.to(acc)
        if torch.is_grad_enabled() and any(t.requires_grad for t in (xs, w_hh, b_hh)):
            return _GRURecurrence.apply(xs, w_hh, b_hh, mm_dtype, fuse)
        return _forward(xs, w_hh, b_hh, mm_dtype, fuse, keep=False)[0]


def _forward(xs: Tensor, w_hh: Tensor, b_hh: Tensor, mm_dtype: torch.dtype, fuse: bool, keep: bool
             ) -> tuple[Tensor, Tensor | None]:
    """The loop: states (D, S, B, n) and, when `keep`, gh = W_hh h_{t-1} (D, S, B, 3n)."""
    D, S, B, G = xs.shape
    body = step_fn(_forward_step, fuse)
    # detached: a requires-grad flag would split the compiled body's graphs
    xs, w_hh, b_hh = xs.detach(), w_hh.detach(), b_hh.detach()
    w_t = w_hh.to(mm_dtype).transpose(1, 2)
    b = b_hh.to(xs.dtype).unsqueeze(1)
    h = xs.new_zeros(D, B, G // 3)
    h_mm = h.to(mm_dtype)
    states, ghs = [], []
    for x in xs.unbind(1):
        h, h_mm, gh = body(x, h, h_mm, w_t, b)
        states.append(h)
        if keep:
            ghs.append(gh)
    return torch.stack(states, dim=1), (torch.stack(ghs, dim=1) if keep else None)


class _GRURecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xs, w_hh, b_hh, mm_dtype, fuse):  # type: ignore[override]
        states, ghs = _forward(xs, w_hh, b_hh, mm_dtype, fuse, keep=True)
        ctx.mm_dtype, ctx.fuse = mm_dtype, fuse
        ctx.save_for_backward(xs, w_hh, b_hh, states, ghs)
        return states

    @staticmethod
    @once_differentiable
    def backward(ctx, g_states):  # type: ignore[override]
        xs, w_hh, b_hh, states, ghs = (t.detach() for t in ctx.saved_tensors)
        mmd = ctx.mm_dtype
        D, S, B, n = states.shape
        with torch.autocast(xs.device.type, enabled=False):
            body = step_fn(_backward_step, ctx.fuse)
            w = w_hh.to(mmd)
            b = b_hh.to(xs.dtype).unsqueeze(1)
            # h_{t-1} for every t: h_0 = 0, then the states but the last
            h_prev = torch.cat([states.new_zeros(D, 1, B, n), states[:, :-1]], dim=1)
            g_z = states.new_zeros(D, B, n)
            g_mm = states.new_zeros(D, B, n, dtype=mmd)  # not g_z itself: an alias would compile apart
            g_xs, g_ghs = [], []
            for t in range(S - 1, -1, -1):
                g_z, g_mm, g_x, g_gh = body(g_states[:, t], g_z, g_mm, xs[:, t], h_prev[:, t],
                                            ghs[:, t], w, b)
                g_xs.append(g_x)
                g_ghs.append(g_gh)
            g_gh_all = torch.stack(g_ghs[::-1], dim=1).reshape(D, S * B, 3 * n)
            # weight gradients: one product over all S*B rows per direction
            g_w = torch.bmm(g_gh_all.transpose(1, 2).to(mmd), h_prev.reshape(D, S * B, n).to(mmd))
            g_b = g_gh_all.sum(dim=1)
        return torch.stack(g_xs[::-1], dim=1), g_w.to(w_hh.dtype), g_b.to(b_hh.dtype), None, None


def reversal_index(lens: Tensor, mask: Tensor) -> Tensor:
    """(B, S) index that reverses each row within its length and leaves padding in place."""
    pos = torch.arange(mask.size(1), device=mask.device).unsqueeze(0)
    return torch.where(mask, lens.unsqueeze(1) - 1 - pos, pos)


def step_order(lens: Tensor, mask: Tensor) -> Tensor:
    """steps (2, S, B, 1): the source position direction d (0 forward, 1 backward) reads at step t
    for lens (B,), mask (B, S); the same index puts states back in source order."""
    B, S = mask.shape
    pos = torch.arange(S, device=mask.device).unsqueeze(1).expand(S, B)
    return torch.stack([pos, reversal_index(lens, mask).t()]).unsqueeze(3)


def source_order(states: Tensor, steps: Tensor, mask: Tensor) -> Tensor:
    """Both directions' states (2, S, B, n) in step order (`step_order`) -> annotations
    [fwd h_j ; bwd h_j] (B, S, 2n) in source order, zero at padded positions."""
    _, S, B, n = states.shape
    out = states.gather(1, steps.expand(-1, -1, -1, n))
    out = out * mask.t().unsqueeze(2).to(out.dtype)
    return out.permute(2, 1, 0, 3).reshape(B, S, 2 * n)


def bigru_annotations(rnn: nn.GRU, emb: Tensor, lens: Tensor, mask: Tensor, fuse: bool = False) -> Tensor:
    """The outputs of a one-layer bidirectional nn.GRU (batch_first), equal to the packed module's:
    emb (B, S, m), lens (B,), mask (B, S) bool -> annotations [fwd h_j ; bwd h_j] (B, S, 2n)."""
    w_ih, b_ih, w_hh, b_hh = (torch.stack([getattr(rnn, name), getattr(rnn, name + "_reverse")])
                              for name in ("weight_ih_l0", "bias_ih_l0", "weight_hh_l0", "bias_hh_l0"))
    B, S, m = emb.shape
    steps = step_order(lens, mask)
    e = emb.transpose(0, 1).expand(2, S, B, m).gather(1, steps.expand(-1, -1, -1, m))
    xs = torch.baddbmm(b_ih.unsqueeze(1), e.view(2, S * B, m), w_ih.transpose(1, 2))
    states = gru_recurrence(xs.view(2, S, B, -1), w_hh, b_hh, fuse)  # (2, S, B, n), step order
    return source_order(states, steps, mask)


def gru_states(rnn: nn.GRU, emb: Tensor, lens: Tensor, mask: Tensor, fuse: bool = False
               ) -> tuple[Tensor, Tensor]:
    """A one-layer unidirectional nn.GRU (batch_first) over emb (B, S, m), as if packed:
    (states (B, S, n), zero at padded positions; each sentence's last state h_{len} (B, n))."""
    xs = F.linear(emb.transpose(0, 1), rnn.weight_ih_l0, rnn.bias_ih_l0).unsqueeze(0)  # (1, S, B, 3n)
    states = gru_recurrence(xs, rnn.weight_hh_l0.unsqueeze(0), rnn.bias_hh_l0.unsqueeze(0), fuse)
    states = states[0].transpose(0, 1)  # (B, S, n)
    return states * mask.unsqueeze(2).to(states.dtype), last_states(states, lens)


def last_states(states: Tensor, lens: Tensor) -> Tensor:
    """Each sentence's state at its last real position: states (B, S, n), lens (B,) -> (B, n)."""
    return states.gather(1, (lens - 1).view(-1, 1, 1).expand(-1, 1, states.size(2))).squeeze(1)
