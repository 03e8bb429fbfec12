"""How the recurrences' loops run: eagerly, as compiled step bodies (--fuse), or as CUDA graphs.

`step_fn` hands a loop its pure step body, or with --fuse on the body compiled by inductor with
dynamic shapes and without duck shaping (a few graphs per body); a body that reaches dynamo's
recompile limit or cannot be compiled runs eagerly from then on, with one warning. `LoopGraphs`
runs a pure loop through a CUDA graph captured per key and input shapes (--cuda-graphs), its inputs
and outputs views of one device arena; a failed capture makes every loop eager, with one warning.
"""
from __future__ import annotations

import functools
import logging
import math
import shutil
from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

import torch
from torch import Tensor

from nmtkit.errors import ConfigError, first_line

F = TypeVar("F", bound=Callable)

log = logging.getLogger(__name__)

MAX_GRAPHS_PER_BODY = 6  # what tests/test_fusion.py holds each body to

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
    """--fuse auto|on|off on `device` -> whether to fuse: on is a ConfigError where fusion is
    unavailable; auto never fuses (it did not pay off: benchmarks/GPU.md)."""
    ok, why = fusion_available(device.type)
    if mode == "on" and not ok:
        raise ConfigError(f"--fuse on: {why}")
    return ok and mode == "on"


def step_fn(body: F, fuse: bool) -> F:
    """`body` itself, or (with `fuse`) its compiled version, built once per process."""
    if not fuse or torch.compiler.is_compiling():  # inside a compiled body: inline it
        return body
    if body not in _COMPILED:
        _COMPILED[body] = _compile(body)
    return _COMPILED[body]  # type: ignore[return-value]


def matmul_dtype(x: Tensor, w: Tensor) -> torch.dtype:
    """The dtype the step bodies' products of x and w run in: autocast's, else the promoted one."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return torch.promote_types(x.dtype, w.dtype)


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

    fx_config.use_duck_shape = False  # process-wide, read when a graph is traced
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


# ---- CUDA graphs of whole loops ----------------------------------------------------------
BUCKET = 8  # lengths and batch sizes are padded up to multiples of this (recurrence.py)
MAX_GRAPHS = 128  # graphs kept per device; least recently used first out
_ALIGN = 256  # bytes: every view of the arena starts at a multiple of this


def bucket(n: int, multiple: int = BUCKET) -> int:
    """n rounded up to a multiple of `multiple` (BUCKET)."""
    return -(-n // multiple) * multiple


def resolve_cuda_graphs(mode: str, device: torch.device, model) -> bool:
    """--cuda-graphs auto|on|off for training `model` (or its class) on `device` -> whether its
    loops run as CUDA graphs: on is a ConfigError where they cannot, auto is on where they can."""
    cls = model if isinstance(model, type) else type(model)
    able = device.type == "cuda" and cls.graph_loops_supported
    if mode == "on" and not able:
        why = (f"needs a CUDA device (training runs on {device})" if device.type != "cuda"
               else f"{cls.__name__} has no graphed loop (only rnnsearch's decoder recurrence has one)")
        raise ConfigError(f"--cuda-graphs on: {why}")
    return able and mode != "off"


class LoopGraphs:
    """The graphs, arena and memory pool of one device: the first call of a shape runs eagerly, at
    most MAX_GRAPHS are kept; on a CPU a stand-in calls `fn` on the arena's views."""

    def __init__(self, device: torch.device):
        self.device = device
        self.eager = device.type != "cuda"  # the CPU stand-in
        # per key: (its graph (None: the CPU stand-in), fn, its views of the arena: ins, outs)
        self.entries: OrderedDict[Hashable, tuple] = OrderedDict()
        self.arena: Tensor | None = None
        self.captures = 0
        self.failed: str | None = None  # why a capture failed: every loop runs eagerly since
        self._pool = None
        self._stream = None

    def run(self, key: Hashable, fn: Callable[..., tuple[Tensor, ...]], inputs: tuple[Tensor, ...]
            ) -> tuple[Tensor, ...]:
        """fn(*inputs) through the graph of (key, the inputs' shapes and dtypes) as new tensors;
        `key` must name everything else `fn` depends on."""
        if self.failed is not None:
            with torch.no_grad():
                return tuple(fn(*inputs))
        full = (key, tuple((tuple(t.shape), t.dtype) for t in inputs))
        entry = self.entries.get(full)
        if entry is None:
            return self._capture(full, fn, inputs)
        self.entries.move_to_end(full)
        graph, captured_fn, ins, outs = entry
        with torch.no_grad():
            for view, t in zip(ins, inputs):
                view.copy_(t)
            if graph is not None:
                graph.replay()
            else:
                for view, r in zip(outs, captured_fn(*ins)):
                    view.copy_(r)
            return tuple(o.clone() for o in outs)

    def clear(self) -> None:
        """Drop every graph and the arena (their memory returns to the caching allocator)."""
        self.entries.clear()
        self.arena = None
        self._pool = None

    def _capture(self, full: Hashable, fn: Callable, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        with torch.no_grad():
            outs = self._eager_first(fn, inputs)
            specs = [(tuple(t.shape), t.dtype) for t in (*inputs, *outs)]
            offsets, total = _layout(specs)
            if self.arena is None or self.arena.numel() < total:
                self.clear()  # the graphs address the old arena
                # a quarter more than asked: the first batches of a run grow it less often
                self.arena = torch.empty(total + total // 4, dtype=torch.uint8, device=self.device)
            views = [self.arena[off : off + math.prod(shape) * dtype.itemsize].view(dtype).view(shape)
                     for off, (shape, dtype) in zip(offsets, specs)]
            ins, outv = views[: len(inputs)], views[len(inputs):]
            for view, t in zip(ins, inputs):
                view.copy_(t)
            graph = None
            if not self.eager:
                try:
                    self._eager_first(fn, tuple(ins))  # once more on the views: fused bodies guard on storage offsets
                    graph = self._record(fn, ins, outv)
                except Exception as err:  # noqa: BLE001 - graphs are a speed-up, never a reason to stop a run
                    self.clear()
                    self.failed = f"{type(err).__name__}: {first_line(err)}"
                    log.warning("capturing a CUDA graph failed (%s): the training loops run without graphs "
                                "from now on", self.failed)
                    return outs
            while len(self.entries) >= MAX_GRAPHS:
                self.entries.popitem(last=False)
            self.entries[full] = (graph, fn, ins, outv)
            self.captures += 1
        return outs

    def _eager_first(self, fn: Callable, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        """fn(*inputs) eagerly; on CUDA on the capture stream (warm-up)."""
        if self.eager:
            return tuple(fn(*inputs))
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        current = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            outs = tuple(fn(*inputs))
        current.wait_stream(self._stream)
        for t in outs:  # made on the side stream, used on the current one
            t.record_stream(current)
        return outs

    def _record(self, fn: Callable, ins: list[Tensor], outv: list[Tensor]):
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # thread_local: other threads (NCCL's watchdog under DDP) may use CUDA meanwhile
        with torch.cuda.graph(graph, pool=self._pool, stream=self._stream, capture_error_mode="thread_local"):
            for view, r in zip(outv, fn(*ins)):
                view.copy_(r)
        return graph


def _layout(specs: list[tuple[tuple[int, ...], torch.dtype]]) -> tuple[list[int], int]:
    """Byte offsets of consecutive tensors of these shapes and dtypes, and the total size."""
    offsets, pos = [], 0
    for shape, dtype in specs:
        offsets.append(pos)
        pos += bucket(math.prod(shape) * dtype.itemsize, _ALIGN)
    return offsets, max(pos, _ALIGN)


_RUNNERS: dict[tuple[str, int | None], LoopGraphs] = {}


def loop_graphs(device: torch.device) -> LoopGraphs:
    """The process's LoopGraphs for `device` (one arena and pool per device)."""
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = (device.type, device.index)
    if key not in _RUNNERS:
        _RUNNERS[key] = LoopGraphs(device)
    return _RUNNERS[key]


def release_all() -> None:
    """Drop every device's graphs and arena (a benchmark between configurations)."""
    for runner in _RUNNERS.values():
        runner.clear()


def captured() -> int:
    """CUDA graphs (or their CPU stand-ins) captured in this process so far, on every device."""
    return sum(r.captures for r in _RUNNERS.values())
