"""Fused recurrence steps: the one place that decides whether a step body runs eagerly or compiled.

A recurrent step at the paper's sizes does about a microsecond of arithmetic per elementwise op,
while every op launched costs 5-10 us of dispatch and kernel launch on a GPU (DESIGN.md 10). The
recurrences (recurrence.py, gru_recurrence.py) are therefore written as loops over small, pure
*step bodies* (tensors in, tensors out, no Python state), and this module hands each loop either
the body itself (eager: the reference, and the default on CPUs) or the body compiled by
torch.compile's inductor backend, which fuses all of a step's elementwise work and reductions
into one or two kernels around its matrix products (C++/OpenMP on CPUs, Triton on GPUs).

Compiled bodies use dynamic shapes (one compilation serves every batch size and sentence length)
and are cached per body for the process; inductor also caches the generated code on disk, so a
second process pays seconds, not the first compilation's tens of seconds.
"""
from __future__ import annotations

import functools
import shutil
from typing import Callable, TypeVar

import torch

F = TypeVar("F", bound=Callable)

_COMPILED: dict[Callable, Callable] = {}


def fusion_available(device_type: str) -> tuple[bool, str]:
    """(available, why not) for fusing on `device_type` ("cpu" or "cuda")."""
    if device_type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return False, "Triton is not installed (torch.compile needs it on CUDA)"
        return True, ""
    if device_type == "cpu":
        if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
            return False, "no C++ compiler on PATH (torch.compile needs one on CPUs)"
        return True, ""
    return False, f"fusion is not supported on device type '{device_type}'"


def resolve_fuse(mode: str, device: torch.device) -> bool:
    """--fuse auto|on|off on `device` -> whether to fuse. auto fuses on CUDA (where launches
    dominate) when it can; on asks for it and is a ConfigError where it is unavailable."""
    ok, why = fusion_available(device.type)
    if mode == "on" and not ok:
        from nmtkit.errors import ConfigError

        raise ConfigError(f"--fuse on: {why}")
    return ok and (mode == "on" or (mode == "auto" and device.type == "cuda"))


def step_fn(body: F, fuse: bool) -> F:
    """`body` itself, or (with `fuse`) its compiled version, built once per process."""
    if not fuse or torch.compiler.is_compiling():  # inside a compiled body: inline it
        return body
    compiled = _COMPILED.get(body)
    if compiled is None:
        compiled = _COMPILED[body] = _compile(body)
    return compiled  # type: ignore[return-value]


def _compile(body: Callable) -> Callable:
    compiled = torch.compile(body, dynamic=True, fullgraph=True)
    return functools.wraps(body)(compiled)
