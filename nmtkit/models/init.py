"""Weight initialisation: Bahdanau et al. (2015), appendix B.1, and the non-paper choices.

`INITS` names the choices every architecture accepts (its config's `init`): "paper" (recurrent
matrices random orthogonal per gate block; W_a, U_a N(0, 0.001^2); v_a and biases zero; every
other weight, embeddings included, N(0, 0.01^2)); "default" (PyTorch's own); "uniform" (every
parameter U(-0.1, 0.1), OpenNMT-py's `param_init 0.1`); "uniform-emb" (PyTorch's, embeddings
U(-0.1, 0.1)). Each model lists its recurrent blocks and alignment matrices; everything else
falls under the default rule, so a new parameter cannot be forgotten. `uninitialised` skips it
all for a model whose every tensor a checkpoint then fills.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterable, Iterator

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

PAPER_STD = 0.01
PAPER_ALIGN_STD = 0.001
INITS = ("paper", "default", "uniform", "uniform-emb")
UNIFORM_SCALE = 0.1


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


@torch.no_grad()
def uniform_init_(model: nn.Module, scale: float = UNIFORM_SCALE, embeddings_only: bool = False) -> None:
    """Draw every parameter (or only the nn.Embedding weights) from U(-scale, scale).

    The rows of padding indices stay zero, as nn.Embedding initialises them.
    """
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            module.weight.uniform_(-scale, scale)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
    if embeddings_only:
        return
    emb = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for p in model.parameters():
        if id(p) not in emb:
            p.uniform_(-scale, scale)


def apply_init_(model: nn.Module, init: str, paper: Callable[[], None], default: Callable[[], None] = lambda: None) -> None:
    """Initialise `model` by the name `init` (one of `INITS`; the config has validated it).

    `paper`: the model's appendix-B.1 initialisation; `default`: what the model adds to
    PyTorch's own (e.g. a scale for a bare nn.Parameter), also run before "uniform-emb".
    Under `uninitialised()` it does nothing.
    """
    if _skipping.get():
        return
    if init == "paper":
        paper()
    elif init == "uniform":
        uniform_init_(model)
    else:
        default()
        if init == "uniform-emb":
            uniform_init_(model, embeddings_only=True)


# PyTorch's own initialisers, which its modules (nn.Linear, nn.Embedding, nn.GRU, ...) call in
# their constructors, and the in-place fills they are made of
_FILLS = frozenset({
    nn.init.uniform_, nn.init.normal_, nn.init.constant_, nn.init.kaiming_uniform_,
    Tensor.uniform_, Tensor.normal_, Tensor.zero_, Tensor.fill_,
})
_skipping = contextvars.ContextVar("nmtkit_skip_init", default=False)


class _SkipFills(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _FILLS:
            return args[0] if args else (kwargs or {})["tensor"]
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def uninitialised() -> Iterator[None]:
    """Models built inside are left uninitialised (their tensors hold whatever memory they were
    given): neither `apply_init_` nor PyTorch's module initialisers run. For a model whose every
    parameter and buffer is then filled by a strict `load_state_dict`: the random initialisation
    of a paper-size RNNsearch takes a second or more (its orthogonal blocks above all)."""
    token = _skipping.set(True)
    try:
        with _SkipFills():
            yield
    finally:
        _skipping.reset(token)
