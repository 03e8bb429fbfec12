"""Decoding a buffer's batches in several processes on the CPU (`--workers`).

Batched beam search on a CPU is many small products and per-step Python work: small products
scale poorly over threads, and Python threads share the interpreter's lock, which serialises
their per-step work. So, as Marian's `--cpu-threads` and CTranslate2's `inter_threads` do, W
workers each decode whole batches on their own share of the threads: this process and W-1
children (nmtkit.workers) forked once the model is loaded, sharing its weights (copy on write).
A child takes batches from a shared counter until none is left and answers with all its
results. Every batch is decoded as it would be in one process on the same number of threads,
so the translations are the same.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
from typing import Callable, TypeVar

from nmtkit.workers import Workers

T = TypeVar("T")

# `--workers` auto: at most this many workers (each one holds its batch's activations)
MAX_AUTO_WORKERS = 4

_DIED = ("a decoding worker process died without answering ({how}; out of memory? "
         "--workers 1 decodes in one process)")


def can_fork() -> bool:
    """Whether worker processes can be forked here: a POSIX system other than macOS (where
    forking a process that has loaded system frameworks is unsafe)."""
    return hasattr(os, "fork") and sys.platform != "darwin"


def resolve_workers(workers: int | None, threads: int, device_type: str) -> int:
    """--workers for a decode: the number given, or for auto (None) one per thread up to
    MAX_AUTO_WORKERS on the CPU, while this process runs no other Python thread (forking a
    process with threads can copy a lock another thread holds; a server decodes on a thread of
    its own and so stays in one process). GPUs and systems without fork: 1."""
    if device_type != "cpu" or not can_fork():
        return 1
    if workers is not None:
        return workers
    if threading.active_count() > 1:
        return 1
    return max(1, min(threads, MAX_AUTO_WORKERS))


def thread_shares(threads: int, workers: int) -> list[int]:
    """Torch threads of each worker: `threads` split as evenly as possible, at least 1 each."""
    base, extra = divmod(threads, workers)
    return [max(1, base + (i < extra)) for i in range(workers)]


def map_batches(decode: Callable[[int], T], n_jobs: int, workers: int, threads: int) -> list[T]:
    """[decode(0), ..., decode(n_jobs - 1)], decoded by `workers` processes (this one and
    workers-1 forked children, nmtkit.workers) with `threads` torch threads between them; in
    order.

    A child's exception is raised here (as a RuntimeError naming it where it cannot be
    pickled), and a child that dies without answering (killed, out of memory) is a
    WorkerError saying so (one line on the command line). If this process fails or is
    interrupted, its children are killed and reaped before the exception goes on."""
    workers = min(workers, n_jobs)
    if workers <= 1:
        return [decode(j) for j in range(n_jobs)]
    import multiprocessing

    import torch

    counter = multiprocessing.get_context("fork").Value("q", 0)  # the next batch to take

    def take() -> int:
        with counter.get_lock():
            j = counter.value
            counter.value = j + 1
        return j

    def decode_taken(_: object) -> dict[int, T]:
        out = {}
        while (j := take()) < n_jobs:
            out[j] = decode(j)
        return out

    before = torch.get_num_threads()
    try:
        with Workers(_DIED) as pool:
            children = [pool.start(decode_taken, functools.partial(torch.set_num_threads, share))
                        for share in thread_shares(threads, workers)[1:]]
            for child in children:
                child.send(None)
            torch.set_num_threads(thread_shares(threads, workers)[0])
            results = decode_taken(None)
            for child in children:
                results.update(child.reply())
    finally:
        torch.set_num_threads(before)
    return [results[j] for j in range(n_jobs)]
