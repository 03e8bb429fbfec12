"""Keeping the CPU footprint bounded: the caches behind PyTorch's bf16 products and glibc's free heap.

oneDNN keeps a primitive (with buffers) for each product shape and ideep an LRU cache of
computations, 1,024 entries each by default; decoding and training meet many shapes, so both
grew by hundreds of megabytes (figures in benchmarks/MEMORY.md). `limit_cpu_caches` sets both
capacities in the environment before the first product (a capacity the user set is kept).
Memory PyTorch frees mostly stays in glibc's malloc arenas, and the resident size grows with the
variety of shapes: `release_free_memory` (`malloc_trim(0)`, a few milliseconds) returns the free pages; callers
do it every few batches or updates, never between steps. Elsewhere than glibc it is a no-op."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from functools import lru_cache

# oneDNN primitives kept: enough for the distinct shapes of a training update or a decoding batch
ONEDNN_CACHE_CAPACITY = 64
# ideep computations kept: oneDNN's own cache above already makes rebuilding one cheap
IDEEP_CACHE_CAPACITY = 1

# CPU training gives malloc's free pages back every this many updates. bf16 training on the
# benchmark's data (batches of 64 pairs of 1-64 subwords) otherwise grew from 860 MB at update 100
# to 1,050 MB at 600 and 2,260 MB after 4,800; trimmed, it held at 615, 723 and 740 MB at updates
# 100, 600 and 1,500, at no measurable cost (a trim takes a few milliseconds, an update ~100 ms).
RELEASE_EVERY_UPDATES = 10

# Decoding trims every this many batches. Each trim takes ~5 ms and the next batch faults the
# returned pages back in: per batch, that was 3-10% of the benchmark's int8 beam-5 run, while
# every 8 batches its peak RSS stayed the same (352-366 MB against 361-364 MB, 4.2-4.3 s
# against 4.9-5.1 s).
RELEASE_EVERY_BATCHES = 8


def limit_cpu_caches(onednn: int = ONEDNN_CACHE_CAPACITY, ideep: int = IDEEP_CACHE_CAPACITY) -> None:
    """Cap oneDNN's primitive cache and ideep's computation cache (module docstring), each unless
    the user set it (ONEDNN_PRIMITIVE_CACHE_CAPACITY, LRU_CACHE_CAPACITY)."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(onednn))
    os.environ.setdefault("LRU_CACHE_CAPACITY", str(ideep))


@lru_cache(maxsize=1)
def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
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
