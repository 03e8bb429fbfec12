"""Fused step bodies: the one place that decides whether a step body runs eagerly or compiled.

The recurrences are loops over small, pure step bodies (tensors in, tensors out); `step_fn`
hands a loop the body itself (eager: the reference and the default) or, with --fuse on, the body
compiled by inductor, which fuses a step's elementwise work into one or two kernels around its
matrix products. Compiled bodies use dynamic shapes without duck shaping and take detached
tensors, so that each compiles a few graphs (`MAX_GRAPHS_PER_BODY`), never dynamo's recompile
limit; a body that still reaches it, or that cannot be traced or compiled, runs eagerly from
then on with one warning: fusion is a speed-up, never a reason to stop a run.
See docs/experiments.md ("Notes from the model code") for the measurements.
"""
from __future__ import annotations

import functools
import logging
import shutil
from typing import Callable, TypeVar

import torch

from nmtkit.errors import ConfigError, first_line

F = TypeVar("F", bound=Callable)

log = logging.getLogger(__name__)

# What the test driving every shape case (tests/test_fusion.py) holds each body to; dynamo's
# own limit is 8 graphs per body.
MAX_GRAPHS_PER_BODY = 6

_COMPILED: dict[Callable, Callable] = {}
_FELL_BACK: set[Callable] = set()  # bodies that met the recompile limit (warned once)
_UNCOMPILABLE: set[Callable] = set()  # bodies dynamo or inductor failed on: eager from then on


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
    """--fuse auto|on|off on `device` -> whether to fuse. on asks for it and is a ConfigError
    where it is unavailable. auto does not fuse, on any device, as measured (benchmarks/GPU.md):
    on an H200 a training step is bound by the host either way, and the unfused step was faster
    in 5 of 9 settings (by up to 25%), the fused one in 4 (by up to 6%), after 30-40 s of
    compiling; fused decoding saved ~3.5 s on newstest2014 at beam 12 after ~60 s of compiling.
    On CPUs fusing is about even."""
    ok, why = fusion_available(device.type)
    if mode == "on" and not ok:
        raise ConfigError(f"--fuse on: {why}")
    return ok and mode == "on"


def step_fn(body: F, fuse: bool) -> F:
    """`body` itself, or (with `fuse`) its compiled version, built once per process."""
    if not fuse or torch.compiler.is_compiling():  # inside a compiled body: inline it
        return body
    compiled = _COMPILED.get(body)
    if compiled is None:
        compiled = _COMPILED[body] = _compile(body)
    return compiled  # type: ignore[return-value]


def graphs_compiled(body: Callable) -> int:
    """How many graphs dynamo holds for `body` in this process (0 when it never compiled it)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    code = getattr(body, "__code__", None)
    return len(_debug_get_cache_entry_list(code)) if code is not None else 0


def compiled_bodies() -> list[Callable]:
    """The step bodies compiled in this process so far."""
    return list(_COMPILED)


def _compile(body: Callable) -> Callable:
    import torch.fx.experimental._config as fx_config
    from torch._dynamo.exc import BackendCompilerFailed, FailOnRecompileLimitHit, Unsupported, UserError

    # Process-wide, read when a graph is traced: every size its own symbol (see the module docstring).
    fx_config.use_duck_shape = False
    compiled = torch.compile(body, dynamic=True, fullgraph=True)

    @functools.wraps(body)
    def run(*args, **kwargs):
        if body in _UNCOMPILABLE:
            return body(*args, **kwargs)
        if body in _FELL_BACK:  # shapes compiled before: fused; others: eager, without asking dynamo again
            with torch.compiler.set_stance("eager_on_recompile"):
                return compiled(*args, **kwargs)
        try:
            return compiled(*args, **kwargs)
        except (Unsupported, UserError, BackendCompilerFailed) as err:
            _UNCOMPILABLE.add(body)
            log.warning("fused step %s cannot be compiled (%s: %s): it runs unfused from now on",
                        body.__qualname__, type(err).__name__, first_line(err))
            return body(*args, **kwargs)
        except FailOnRecompileLimitHit:  # once per body: later calls take the stance above
            _FELL_BACK.add(body)
            log.warning("fused step %s reached torch.compile's recompile limit (%d graphs): shapes it "
                        "has not compiled run unfused from now on", body.__qualname__,
                        torch._dynamo.config.recompile_limit)
            return body(*args, **kwargs)

    return run
