"""Optimisers and the learning-rate schedule.

The paper (Bahdanau et al. 2015, appendix B.2) trains with Adadelta (Zeiler 2012, epsilon 1e-6,
rho 0.95) and rescales the gradient to an L2 norm of at most 1. Adam with a linear warm-up and a
decay on plateau of the dev score is the usual modern alternative. The schedule is a small
class with its own `state_dict`, so a resumed run continues it exactly.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import torch

from nmtkit.train.config import TrainConfig


def build_optimizer(params: Iterable[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """The optimiser named by `cfg.optimizer`, at the base learning rate.

    Adam and SGD use PyTorch's one-kernel implementations (`fused=True`) where available (CPU
    and CUDA: one pass over all parameters, several times faster than the per-tensor loop);
    Adadelta the multi-tensor path.
    """
    params = [p for p in params if p.requires_grad]
    if cfg.optimizer == "adadelta":
        return torch.optim.Adadelta(params, lr=cfg.lr, rho=cfg.adadelta_rho, eps=cfg.adadelta_eps,
                                    weight_decay=cfg.weight_decay, foreach=True)
    if cfg.optimizer == "adam":
        kw = dict(lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
        return _one_kernel_or_foreach(torch.optim.Adam, params, kw)
    if cfg.optimizer == "sgd":
        return _one_kernel_or_foreach(torch.optim.SGD, params, dict(lr=cfg.lr, weight_decay=cfg.weight_decay))
    raise AssertionError(cfg.optimizer)  # TrainConfig.validate rejects others


def _one_kernel_or_foreach(cls, params: list, kw: dict) -> torch.optim.Optimizer:
    try:
        return cls(params, fused=True, **kw)
    except (RuntimeError, TypeError, ValueError):  # device or dtype without a one-kernel implementation
        return cls(params, foreach=True, **kw)


class LRSchedule:
    """lr(update) = base_lr * warm-up(update) * decay, where decay shrinks on dev plateaus.

    warm-up: linear from base_lr / warmup_updates to base_lr over the first `warmup_updates`.
    plateau: after each validation, if the dev metric did not improve for more than
    `lr_patience` validations in a row, decay *= lr_decay (never below `min_lr`).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig):
        self.optimizer = optimizer
        self.base_lr = cfg.lr
        self.warmup = cfg.warmup_updates
        self.plateau = cfg.lr_schedule == "plateau"
        self.decay_factor = cfg.lr_decay
        self.patience = cfg.lr_patience
        self.min_lr = cfg.min_lr
        self.higher_is_better = cfg.best_metric == "bleu"
        self.decay = 1.0
        self.best: float | None = None
        self.bad = 0

    def lr_at(self, update: int) -> float:
        """The learning rate for update number `update` (0-based)."""
        warm = min(1.0, (update + 1) / self.warmup) if self.warmup > 0 else 1.0
        return max(self.base_lr * warm * self.decay, self.min_lr if update >= self.warmup else 0.0)

    def set_update(self, update: int) -> float:
        lr = self.lr_at(update)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def on_validation(self, metric: float) -> bool:
        """Record a dev score; return True when the learning rate was decayed."""
        if not self.plateau or math.isnan(metric):
            return False
        improved = self.best is None or (metric > self.best if self.higher_is_better else metric < self.best)
        if improved:
            self.best, self.bad = metric, 0
            return False
        self.bad += 1
        if self.bad > self.patience and self.base_lr * self.decay > self.min_lr:
            self.decay *= self.decay_factor
            self.bad = 0
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "best": self.best, "bad": self.bad}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.decay = float(state["decay"])
        self.best = None if state["best"] is None else float(state["best"])
        self.bad = int(state["bad"])
