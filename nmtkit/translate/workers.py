"""Decoding a buffer's batches in several processes on the CPU (`--workers`).

Batched beam search on a CPU is many small products and per-step Python work. Small products
scale poorly over threads (on a 2-core Xeon the peer benchmark's beam 5 ran 1.6x faster on 2
threads than on 1), and two Python threads of one torch thread each gained nothing: the
interpreter's lock serialises their per-step work. Processes do not share that lock. So, as
Marian's `--cpu-threads` and CTranslate2's `inter_threads` do, W workers each decode whole
batches on their own share of the threads: this process and W-1 children forked once the model
is loaded, which share its weights (copy on write: a child writes only its own activations).

A child takes batches from a shared counter until none is left, then sends all its results
through a pipe and exits with `os._exit`: it never returns into the caller, never flushes the
parent's buffered output and never runs its exit handlers. Every batch is decoded as it would
be in one process on the same number of threads, so the translations are the same.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from typing import Callable, TypeVar

T = TypeVar("T")

# `--workers` auto: at most this many workers (each one holds its batch's activations)
MAX_AUTO_WORKERS = 4


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
    workers-1 forked children) with `threads` torch threads between them; in order.

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

    shares = thread_shares(threads, workers)
    for stream in (sys.stdout, sys.stderr):  # nothing buffered twice
        if stream is not None:
            stream.flush()
    children: list[tuple[int, int]] = []  # (pid, read end of its pipe)
    parent = os.getpid()
    before = torch.get_num_threads()
    try:
        for share in shares[1:]:
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: never returns
                os.close(read_fd)
                _child(decode, take, n_jobs, share, write_fd, parent)
            os.close(write_fd)
            children.append((pid, read_fd))
        torch.set_num_threads(shares[0])
        results: dict[int, T] = {}
        while (j := take()) < n_jobs:
            results[j] = decode(j)
        while children:
            results.update(_collect(*children.pop(0)))
    finally:
        torch.set_num_threads(before)
        for pid, read_fd in children:  # left only when something failed
            _kill(pid, read_fd)
    return [results[j] for j in range(n_jobs)]


def _child(decode: Callable[[int], T], take: Callable[[], int], n_jobs: int, threads: int, write_fd: int,
           parent: int) -> None:
    """A forked worker: decode batches until none is left, send {index: result} (or the
    exception) through `write_fd`, exit."""
    code = 0
    try:
        _die_with_parent(parent)
        for sig in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C reaches the whole group: the parent reports it
            signal.signal(sig, signal.SIG_DFL)
        import torch

        torch.set_num_threads(threads)
        out = {}
        while (j := take()) < n_jobs:
            out[j] = decode(j)
        payload = pickle.dumps(("ok", out), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as err:  # noqa: BLE001 - everything goes back to the parent
        code = 1
        try:
            payload = pickle.dumps(("error", err), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - an exception that does not pickle: its text
            payload = pickle.dumps(("error", RuntimeError(f"{type(err).__name__}: {err}")))
    try:
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(payload)
    finally:
        os._exit(code)


def _die_with_parent(parent: int) -> None:
    """Have Linux kill this process when its parent (pid `parent`) dies (prctl
    PR_SET_PDEATHSIG), so a worker never outlives a command killed with SIGKILL; elsewhere it
    ends at its next write."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _collect(pid: int, read_fd: int) -> dict:
    """A child's results (read to the end of its pipe), or its exception raised here."""
    with os.fdopen(read_fd, "rb") as pipe:
        payload = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not payload:
        how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.waitstatus_to_exitcode(status)}")
        from nmtkit.errors import WorkerError

        raise WorkerError(f"a decoding worker process died without answering ({how}; out of memory? "
                          "--workers 1 decodes in one process)")
    kind, value = pickle.loads(payload)
    if kind == "error":
        raise value
    return value


def _kill(pid: int, read_fd: int) -> None:
    """Stop and reap a child whose results are no longer wanted."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.close(read_fd)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
