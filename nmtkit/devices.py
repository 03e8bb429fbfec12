"""Where work runs and what it keeps: the CPU cores available to this process, the torch device
and threads to use, and the CPU footprint bounded: oneDNN's and ideep's caches, which keep an
entry per product shape (`limit_cpu_caches`), and the free pages glibc's malloc keeps
(`release_free_memory`). Importing this module does not import torch. Figures: benchmarks/MEMORY.md.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import re
import sys
from functools import lru_cache
from typing import Any, Iterator

from nmtkit.errors import ConfigError, NmtkitError, first_line


def import_torch() -> Any:
    """`import torch`, with Ctrl-C and SIGTERM held until it is done: torch's C code imports numpy
    and clears whatever error that raises, so an interrupt there was lost or left numpy half-imported."""
    if "torch" in sys.modules:  # imported, or half-imported by another thread: __import__ waits for that one
        return __import__("torch")
    from nmtkit.signals import blocked

    threads = os.environ.get("OMP_NUM_THREADS")
    if threads is not None and not re.fullmatch(r"\s*\+?0*[1-9]\d*\s*(,\s*\+?0*[1-9]\d*\s*)*", threads):  # as libgomp parses it
        logging.getLogger(__name__).warning("OMP_NUM_THREADS=%r is not a number of threads: ignored", threads)
        del os.environ["OMP_NUM_THREADS"]  # else libgomp writes "\nlibgomp: Invalid value ..." as torch loads
    with blocked():
        try:
            import torch
        except ImportError as err:  # under `ulimit -v`: "libtorch_cpu.so: failed to map segment from shared object"
            raise NmtkitError(f"cannot load torch: {first_line(err)} (a memory limit such as ulimit -v too low "
                              "for its libraries, or a broken install)") from None
    return torch


_DEFAULT_THREADS: list[int] = []  # torch's thread count when nmtkit first asked for it


def default_threads() -> int:
    """torch's own thread count before nmtkit set any (the default of translate's --threads)."""
    if not _DEFAULT_THREADS:
        _DEFAULT_THREADS.append(import_torch().get_num_threads())
    return _DEFAULT_THREADS[0]


def use_threads(n: int) -> None:
    """torch's threads (a setting of the process) set to `n` unless they are."""
    torch = import_torch()
    default_threads()  # noted before the first change
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


@contextlib.contextmanager
def threads_restored() -> Iterator[None]:
    """Within, torch's threads may change (a training run's --threads); after, they are as before."""
    before = import_torch().get_num_threads()
    try:
        yield
    finally:
        use_threads(before)


def available_cores() -> int:
    """CPU cores this process may use (its affinity mask, not the machine's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def threads_per_process(local_world_size: int = 1) -> int:
    """Torch threads for one of `local_world_size` processes sharing this machine's cores."""
    return max(1, available_cores() // max(1, local_world_size))


PRECISIONS = ("fp32", "bf16", "fp16", "auto")  # autocast dtypes of --precision (nmtkit.models.precision)
# translate's and serve's --precision: also int8 weights, which a model being trained cannot have
DECODE_PRECISIONS = PRECISIONS + ("int8",)
FUSE = ("auto", "on", "off")  # --fuse: compile the recurrences' step bodies (nmtkit.models.fast.fusion)
CUDA_GRAPHS = ("auto", "on", "off")  # --cuda-graphs: replay the training loops as CUDA graphs (nmtkit.models.fast.fusion)
MAX_THREADS = 4096  # --threads: torch takes a C int, and no machine has more cores than this
MAX_WORKERS = 256  # --workers: processes past this are a fork storm, not a speed-up
DEVICE_HELP = ("Where to run: auto (CUDA when available), cpu, cuda (under torchrun: the process's own GPU) "
               "or cuda:N.")
_DEVICE_NAME = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")


def check_device_name(name: str) -> str:
    """`name` if it is a --device name (auto, cpu, cuda, cuda:N), else a ConfigError."""
    if not isinstance(name, str) or not _DEVICE_NAME.match(name):
        raise ConfigError(f"--device must be auto, cpu, cuda or cuda:N, not '{name}'")
    return name


def resolve_device(name: str, local_rank: int = 0):
    """A --device name -> a torch.device, made the current CUDA device; `cuda` is GPU `local_rank`
    (modulo the GPU count). CUDA where there is none is a ConfigError."""
    import torch

    check_device_name(name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"--device {name} but no CUDA device is available (use --device cpu or auto)")
    if name == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
    else:
        device = torch.device(name)
        if device.index is None or device.index >= torch.cuda.device_count():
            raise ConfigError(f"--device {name}: there are {torch.cuda.device_count()} CUDA device(s)")
    torch.cuda.set_device(device)
    return device


ONEDNN_CACHE_CAPACITY = 64  # oneDNN primitives kept: enough for the distinct shapes of a decoding batch
TRAIN_ONEDNN_CACHE_CAPACITY = 1024  # ... by `nmtkit train`: oneDNN's default (each batch brings new shapes)
IDEEP_CACHE_CAPACITY = 1  # ideep computations kept: oneDNN's cache already makes rebuilding one cheap

RELEASE_EVERY_UPDATES = 10  # CPU training gives malloc's free pages back every this many updates
RELEASE_EVERY_BATCHES = 8  # ... decoding every this many batches (the next batch faults them back in)


def limit_cpu_caches(onednn: int = ONEDNN_CACHE_CAPACITY, ideep: int = IDEEP_CACHE_CAPACITY) -> None:
    """Cap oneDNN's primitive and ideep's computation caches, each unless the user set its variable."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(onednn))
    os.environ.setdefault("LRU_CACHE_CAPACITY", str(ideep))


@lru_cache(maxsize=1)
def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Return malloc's free pages to the OS; True where that was possible (glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
