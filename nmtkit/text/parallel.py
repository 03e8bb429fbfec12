"""Order-preserving parallel map over a stream of lines, with bounded memory, and the one owner
of the state its workers share (`worker_state`)."""
from __future__ import annotations

import itertools
import multiprocessing as mp
import signal
from typing import Any, Callable, Iterable, Iterator, TypeVar

from nmtkit.interrupts import interrupts_blocked

T = TypeVar("T")
R = TypeVar("R")

_NO_STATE = object()
_WORKER_STATE: Any = _NO_STATE


def worker_state() -> Any:
    """The state of the `parallel_map` this code runs under: in a worker process, or in this
    process when the map runs without workers. A RuntimeError outside any map."""
    if _WORKER_STATE is _NO_STATE:
        raise RuntimeError("worker_state() called outside parallel_map(..., state=...)")
    return _WORKER_STATE


def _start_worker(state: Any, prepare: Callable[[Any], Any] | None) -> None:
    """Runs once per worker process before any item: its signals, and its state when given."""
    global _WORKER_STATE
    if mp.current_process().name != "MainProcess":
        # Ctrl-C is handled once, by the main process (which then stops the pool), so the
        # workers do not each print a KeyboardInterrupt traceback; the pool stops them with
        # SIGTERM, which ends them as it ends any process (not as the command's handler would)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if hasattr(signal, "pthread_sigmask"):  # blocked by `_pool` until now: a SIGTERM that came meanwhile ends it
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if state is not _NO_STATE:
        _WORKER_STATE = prepare(state) if prepare is not None else state


def _apply_chunk(args):
    func, chunk = args
    return [func(x) for x in chunk]


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while True:
        chunk = list(itertools.islice(it, size))
        if not chunk:
            return
        yield chunk


def parallel_map(func: Callable[[T], R], items: Iterable[T], workers: int = 1, chunk_size: int = 1000,
                 state: Any = _NO_STATE, prepare: Callable[[Any], Any] | None = None) -> Iterator[R]:
    """`map(func, items)` over `workers` processes, in input order, streaming.

    `func` must be picklable (a module-level function or a functools.partial of one). At most
    about 2 * workers chunks are in flight, so memory stays bounded on any input size.

    `state`, if given, is what `worker_state()` returns inside `func`: large shared data (LMs,
    BPE tables, score arrays) that a forked worker inherits from this process's memory instead
    of receiving it pickled with every chunk. `prepare(state)`, if given, runs once per worker
    and its result becomes the worker's state (the place to build per-process tables). Without
    workers (`workers <= 1`) both happen in this process, for the duration of the map.
    """
    global _WORKER_STATE
    if workers <= 1:
        saved = _WORKER_STATE
        if state is not _NO_STATE:
            _WORKER_STATE = prepare(state) if prepare is not None else state
        try:
            for x in items:
                yield func(x)
        finally:
            _WORKER_STATE = saved
        return
    with _pool(workers, state, prepare) as pool:
        tasks = ((func, c) for c in _chunks(items, chunk_size))
        # imap consumes `tasks` lazily but may run ahead; bound it by feeding in windows.
        window = 2 * workers
        pending: list = []
        for task in tasks:
            pending.append(pool.apply_async(_apply_chunk, (task,)))
            if len(pending) >= window:
                yield from pending.pop(0).get()
        for res in pending:
            yield from res.get()


def _pool(workers: int, state: Any, prepare: Callable[[Any], Any] | None):
    """A process pool whose workers take SIGTERM's default action (`_start_worker`). Forked
    workers inherit the command's SIGTERM handler (nmtkit.cli), and a stop that comes before a
    worker replaces it would be taken by that handler and then dropped with it: the pool's
    terminate() would wait on that worker forever. So SIGTERM stays blocked from the fork
    (workers the pool adds later fork from its threads, created blocked) until the worker has
    the default action; this process's own block ends once the pool is made."""
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    with interrupts_blocked(frozenset({signal.SIGTERM})):
        return ctx.Pool(workers, initializer=_start_worker, initargs=(state, prepare))
