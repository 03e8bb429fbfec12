"""Weight initialisation of Bahdanau et al. (2015), appendix B.1.

- recurrent matrices (U, U_z, U_r of each encoder direction and of the decoder): random
  orthogonal, one square block per gate;
- the alignment model's W_a and U_a: N(0, 0.001^2);
- v_a and every bias: zero;
- every other weight matrix (embeddings included): N(0, 0.01^2).

Each model lists its recurrent blocks and its alignment matrices; everything else falls under
the default rule, so a new parameter cannot be forgotten.
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import Tensor, nn

PAPER_STD = 0.01
PAPER_ALIGN_STD = 0.001


@torch.no_grad()
def orthogonal_blocks_(weight: Tensor, block: int) -> None:
    """Fill each (block, block) row-block of `weight` (k*block, block) with a random orthogonal matrix."""
    rows, cols = weight.shape
    assert rows % block == 0 and cols == block, (weight.shape, block)
    for i in range(0, rows, block):
        nn.init.orthogonal_(weight[i : i + block])


@torch.no_grad()
def paper_init_(
    model: nn.Module,
    recurrent: Iterable[tuple[Tensor, int]],
    align: Iterable[Tensor],
    zero: Iterable[Tensor] = (),
) -> None:
    """Initialise `model` as in the paper's appendix B.1.

    recurrent: (weight, block size) pairs whose square blocks become orthogonal.
    align: weight matrices drawn from N(0, 0.001^2) (W_a, U_a).
    zero: extra parameters set to zero (v_a); every parameter named `*bias*` is zeroed too.
    Every other parameter is drawn from N(0, 0.01^2).
    """
    done: set[int] = set()
    for weight, block in recurrent:
        orthogonal_blocks_(weight, block)
        done.add(id(weight))
    for weight in align:
        weight.normal_(0.0, PAPER_ALIGN_STD)
        done.add(id(weight))
    for p in zero:
        p.zero_()
        done.add(id(p))
    for name, p in model.named_parameters():
        if id(p) in done:
            continue
        if "bias" in name.rsplit(".", 1)[-1]:
            p.zero_()
        else:
            p.normal_(0.0, PAPER_STD)
