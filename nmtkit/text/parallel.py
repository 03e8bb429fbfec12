"""Order-preserving parallel map over a stream of lines, with bounded memory."""
from __future__ import annotations

import itertools
import multiprocessing as mp
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")


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


def parallel_map(func: Callable[[T], R], items: Iterable[T], workers: int = 1,
                 chunk_size: int = 1000, initializer: Callable[..., None] | None = None,
                 initargs: tuple = ()) -> Iterator[R]:
    """`map(func, items)` over `workers` processes, in input order, streaming.

    `func` must be picklable (a module-level function or a functools.partial of one). At most
    about 2 * workers chunks are in flight, so memory stays bounded on any input size.
    `initializer(*initargs)`, if given, runs once in each worker before any item (or once in
    this process when workers <= 1): the place to build large per-worker state (e.g. BPE
    tables) instead of pickling it with every chunk.
    """
    if workers <= 1:
        if initializer is not None:
            initializer(*initargs)
        for x in items:
            yield func(x)
        return
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    with ctx.Pool(workers, initializer=initializer, initargs=initargs) as pool:
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
