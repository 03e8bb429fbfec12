"""Order-preserving parallel map over a stream of lines, with bounded memory, in worker
processes (nmtkit.workers), and the one owner of the state its workers share (`worker_state`)."""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Iterator, TypeVar

from nmtkit.errors import NmtkitError
from nmtkit.workers import Worker, Workers, can_fork

T = TypeVar("T")
R = TypeVar("R")

_NO_STATE = object()
_WORKER_STATE: Any = _NO_STATE

_DIED = "a worker process died without answering ({how}; out of memory? --workers 1 works in one process)"


def worker_state() -> Any:
    """The state of the `parallel_map` this code runs under; a RuntimeError outside any map."""
    if _WORKER_STATE is _NO_STATE:
        raise RuntimeError("worker_state() called outside parallel_map(..., state=...)")
    return _WORKER_STATE


def _use_state(state: Any, prepare: Callable[[Any], Any] | None) -> None:
    """Make `state` (through `prepare`, if given) what `worker_state()` returns, if there is one."""
    global _WORKER_STATE
    if state is not _NO_STATE:
        _WORKER_STATE = prepare(state) if prepare is not None else state


def _numbered(func: Callable[[T], R], x: T, i: int) -> R:
    """`func(x)`; an NmtkitError it raises learns `item`, the position of `x` (to name the line)."""
    try:
        return func(x)
    except NmtkitError as err:
        err.item = i
        raise


def parallel_map(func: Callable[[T], R], items: Iterable[T], workers: int = 1, chunk_size: int = 1000,
                 state: Any = _NO_STATE, prepare: Callable[[Any], Any] | None = None) -> Iterator[R]:
    """`map(func, items)` over `workers` forked processes, in input order, streaming: the workers
    inherit `func` and `state`, only items and results are pickled, and at most 2 * workers chunks
    are in flight. `state` (through `prepare`, once per worker) is what `worker_state()` returns
    inside `func`. Without workers (`workers <= 1`, or no fork) all runs in this process."""
    global _WORKER_STATE
    if workers > 1 and can_fork():
        yield from _forked_map(func, items, workers, chunk_size, state, prepare)
        return
    saved = _WORKER_STATE
    _use_state(state, prepare)
    try:
        for i, x in enumerate(items):
            yield _numbered(func, x, i)
    finally:
        _WORKER_STATE = saved


def _forked_map(func: Callable[[T], R], items: Iterable[T], workers: int, chunk_size: int, state: Any,
                prepare: Callable[[Any], Any] | None) -> Iterator[R]:
    """`parallel_map` in up to `workers` forked processes, started as chunks come: each worker
    holds one chunk at a time; results wait here until those before them are yielded."""
    def handle(chunk: list[T]) -> list[R]:
        return [_numbered(func, x, i) for i, x in enumerate(chunk)]

    it = iter(items)
    chunks = iter(lambda: list(itertools.islice(it, chunk_size)), [])  # lists of chunk_size items, till none are left
    window = 2 * workers
    busy: dict[Worker, int] = {}  # a worker -> the number of the chunk it holds
    idle: list[Worker] = []
    results: dict[int, list[R]] = {}
    sent = done = 0  # chunks sent, chunks yielded
    more = True
    with Workers(_DIED) as pool:
        while True:
            while more and sent - done < window and (idle or len(pool.started) < workers):
                chunk = next(chunks, None)
                if chunk is None:
                    more = False
                    break
                worker = idle.pop() if idle else pool.start(handle, lambda: _use_state(state, prepare))
                worker.send(chunk)
                busy[worker] = sent
                sent += 1
            while done in results:
                yield from results.pop(done)
                done += 1
            if not busy:
                if not more:
                    return
                continue
            for worker in pool.ready(list(busy)):
                number = busy.pop(worker)
                try:
                    results[number] = worker.reply()
                except NmtkitError as err:
                    if hasattr(err, "item"):  # a line's error (`_numbered`), not a worker's death
                        err.item += number * chunk_size
                    raise
                idle.append(worker)
