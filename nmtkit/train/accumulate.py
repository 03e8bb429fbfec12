"""Training statistics between two log records, accumulated on the device: no host
synchronisation per update; they are read (and summed over ranks) at log intervals only."""
from __future__ import annotations

import time

import torch

from nmtkit.train import distributed as ddp


class Accumulators:
    """Sums since the last `reset`: objective, NLL and gradient norm (device tensors), target
    tokens (this rank's and the global minibatches'), sentences, updates; `start` is the wall
    time they cover from (the trainer moves it past validations)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.reset()

    def reset(self) -> None:
        z = torch.zeros((), device=self.device)
        self.obj, self.nll, self.gnorm = z.clone(), z.clone(), z.clone()
        self.tokens_local = 0
        self.tokens_global = 0
        self.sents = 0
        self.updates = 0
        self.start = time.perf_counter()

    def add(self, loss_sum: torch.Tensor, nll_sum: torch.Tensor, gnorm: torch.Tensor, tokens_local: int,
            tokens_global: int, sents: int) -> None:
        self.obj += loss_sum.detach().float()
        self.nll += nll_sum.detach().float()
        self.gnorm += gnorm.detach().float()
        self.tokens_local += tokens_local
        self.tokens_global += tokens_global
        self.sents += sents
        self.updates += 1

    def read(self, dist_info: ddp.DistInfo) -> tuple[float, float, float, float]:
        """(objective, NLL, gradient-norm sums, target tokens), summed over ranks: the only host
        reads of the losses."""
        stats = torch.stack([self.obj, self.nll, self.gnorm,
                             torch.tensor(float(self.tokens_local), device=self.device)]).double()
        if dist_info.enabled:
            import torch.distributed as dist

            dist.all_reduce(stats)
        obj, nll, gnorm_sum, tokens = stats.tolist()
        return obj, nll, gnorm_sum, tokens
