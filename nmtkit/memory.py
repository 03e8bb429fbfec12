"""Giving freed heap memory back to the operating system (glibc's malloc_trim).

On Linux with glibc, memory that PyTorch frees (oneDNN's buffers for a product shape, the
activations of a batch) mostly stays in malloc's arenas: the process keeps it resident, and
when the next batch's buffers have other sizes they do not fit the holes, so the resident size
grows with the variety of shapes a run meets. `malloc_trim(0)` returns every free page of every
arena to the system (benchmarks/MEMORY.md has the figures). It costs about a millisecond, so
callers do it between batches, not between steps. Elsewhere (macOS, musl, Windows) this is a
no-op.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import lru_cache


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
