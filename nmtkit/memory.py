"""Keeping the CPU footprint bounded: oneDNN's primitive cache and glibc's free heap.

oneDNN (PyTorch's CPU backend for bf16 products) builds a primitive for every distinct product
shape and keeps up to ONEDNN_PRIMITIVE_CACHE_CAPACITY of them (1,024 by default), each with
its own buffers: decoding, whose shapes change with every batch (source width, live beam rows,
shortlist size), held hundreds of megabytes in them. `limit_onednn_cache` sets a smaller
capacity in the environment; oneDNN reads it once, when it first builds a primitive, so it
must run before the first product (the CLI calls it at start-up). A capacity the user has set
is kept.

On Linux with glibc, memory that PyTorch frees (oneDNN's buffers for a product shape, the
activations of a batch) mostly stays in malloc's arenas: the process keeps it resident, and
when the next batch's buffers have other sizes they do not fit the holes, so the resident size
grows with the variety of shapes a run meets. `malloc_trim(0)` returns every free page of every
arena to the system (benchmarks/MEMORY.md has the figures). It costs a few milliseconds (about
5 after a beam-5 batch) and the pages it returns fault back in, so callers do it every few
batches or updates, never between steps. Elsewhere (macOS, musl, Windows) this is a
no-op.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from functools import lru_cache

# oneDNN primitives kept: enough for the distinct shapes of a training update or a decoding batch
ONEDNN_CACHE_CAPACITY = 64

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


def limit_onednn_cache(capacity: int = ONEDNN_CACHE_CAPACITY) -> None:
    """Cap oneDNN's primitive cache at `capacity` unless ONEDNN_PRIMITIVE_CACHE_CAPACITY is set."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(capacity))


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
