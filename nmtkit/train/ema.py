"""An exponential moving average of the weights (Polyak averaging; Marian's --exponential-smoothing,
fairseq's --ema-decay, OpenNMT-py's -average_decay), in float32 beside the model (float64 for a
float64 model). After update u (from 1), with decay D, start update s and k = u - s:

    ema_u = theta_u                                   (u <= s)
    ema_u = d_k * ema_{u-1} + (1 - d_k) * theta_u     (u > s), d_k = min(D, (1 + k) / (10 + k))

d_k is Marian's warm-up: early on the average spans the last ~k/9 updates, not the initial
weights. One fused `lerp` per update. A run validates, stops early and keeps checkpoint_best.pt
on the average; every checkpoint's model_state is the average (what `translate` and `average`
read) and checkpoint_last.pt keeps the raw weights for --resume.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn


class WeightAverage:
    """The moving average of `model`'s floating-point parameters, in float32 or wider (the
    model's other state is the model's)."""

    def __init__(self, model: nn.Module, decay: float, start: int):
        self.model, self.decay, self.start = model, decay, start
        named = [(n, p) for n, p in model.named_parameters() if p.is_floating_point()]
        self.names = [n for n, _ in named]
        # the parameters' storage, read in place (the optimiser and load_state_dict write into it)
        self.params = [p.detach() for _, p in named]
        self.tensors = [p.to(torch.promote_types(p.dtype, torch.float32), copy=True) for p in self.params]

    def update(self, update: int) -> None:
        """Fold in the weights after update `update` (copy them up to the start update)."""
        with torch.no_grad():
            new = [p.to(t.dtype) for p, t in zip(self.params, self.tensors)]  # no copy where the dtypes agree
            if update <= self.start:
                torch._foreach_copy_(self.tensors, new)
            else:
                torch._foreach_lerp_(self.tensors, new, 1.0 - self.decay_at(update))

    def decay_at(self, update: int) -> float:
        """The decay applied after `update` (> start): D, or less during the warm-up."""
        k = update - self.start
        return min(self.decay, (1 + k) / (10 + k))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's state_dict with the averaged parameters in place of the raw ones."""
        state = self.model.state_dict()
        for n, t in zip(self.names, self.tensors):
            state[n] = t.to(state[n].dtype, copy=True)
        return state

    def load(self, state: dict[str, torch.Tensor]) -> None:
        """Take the average from a checkpoint's model_state (as `state_dict` wrote it)."""
        for n, t in zip(self.names, self.tensors):
            t.copy_(state[n])

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The model holds the average inside the block (validation), its raw weights after."""
        with torch.no_grad():
            raw = [p.clone() for p in self.params]
            torch._foreach_copy_(self.params, self.tensors)
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_(self.params, raw)
