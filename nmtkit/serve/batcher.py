"""The server's options (`ServeConfig`, the request `Limits`) and dynamic batching: one worker
task takes the first waiting request, then those with the same options that arrive within `delay`
seconds, up to `batch_size` sentences, and decodes their lines in one call; a request with other
options waits for the next round, and a gone client's lines are dropped before decoding. Every
sentence is searched independently, so a translation does not depend on its batch mates. Every
torch operation, model loading included, runs on one thread, `DecodeThread`: a second thread that
starts parallel work halves PyTorch's CPU speed.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from nmtkit.errors import ConfigError, NmtkitError
from nmtkit.options import check_fields, option
from nmtkit.translate.config import DecodeConfig, SearchConfig


@dataclass(frozen=True)
class Limits:
    """Sizes a request may have; the server refuses anything larger with a 4xx."""

    max_lines: int = option(100, min=1, help="Most lines in one request.")
    max_line_chars: int = option(1000, min=1, help="Most characters in one line of a request.")
    max_body_bytes: int = option(1 << 20, min=1, help="Largest request body.")
    max_beam: int = option(5, min=1, names=("--beam", "-k"),
                           help="Beam width: the default and the most a request may ask for.")

    def __post_init__(self) -> None:
        check_fields(self)


# --batch-delay-ms beyond this holds every request (and a shutdown) for longer than a client waits
MAX_BATCH_DELAY_MS = 10_000.0


@dataclass(frozen=True)
class ServeConfig:
    """The options of `nmtkit serve` beyond DecodeConfig's, SearchConfig's and Limits'."""

    host: str = option("127.0.0.1", help="Address to listen on. The default answers this machine only; 0.0.0.0 "
                                         "opens the server to the network (it has no authentication).")
    allow_hosts: tuple[str, ...] = option(
        (), names=("--allow-host",), multiple=True, metavar="NAME",
        help="Also accept requests whose Host header (or a browser's Origin) names NAME (repeatable). Without it "
             "only IP addresses, localhost and --host are accepted, so that no web page can reach the server "
             "through a visitor's browser (DNS rebinding, cross-site POSTs).")
    port: int = option(8080, min=0, max=65535, help="Port (0: any free port).")
    batch_delay_ms: float = option(
        5.0, min=0, max=MAX_BATCH_DELAY_MS,
        help="How long a request arriving at an idle server waits for others to share its batch (at most "
             f"{MAX_BATCH_DELAY_MS:,.0f} ms: every request in the batch waits this long).")
    body_timeout: float = option(
        30.0, min=0, min_open=True, metavar="SECONDS", message="must be > 0 seconds",
        help="A client that has not sent its whole request body within this time gets a 408.")
    idle_timeout: float = option(
        15.0, min=0, min_open=True, metavar="SECONDS", message="must be > 0 seconds",
        help="A connection that sends no complete request line and headers within this time (silent, too slow, "
             "or idle between requests) is closed.")
    quiet: bool = option(False, names=("--quiet", "-q"), help="No per-request log lines or warnings on stderr "
                         "(still said: errors, where it listens, its stop, and a --host beyond this machine).")
    limits: Limits = field(default_factory=Limits)  # its fields are options of their own
    batch_size: int | None = option(None, min=1, cli=False,
                                    help="Most sentences gathered into one decoder call (None: the translator's).")
    shutdown_timeout: float = option(60.0, min=0, cli=False,
                                     help="Seconds in-flight requests get to finish on SIGTERM, SIGHUP or SIGINT.")
    # what `run` loads, and how every request searches (but its beam and n-best)
    decode: DecodeConfig | None = None
    search: SearchConfig = field(default_factory=SearchConfig)

    def __post_init__(self) -> None:
        check_fields(self)
        for name, cls in (("decode", DecodeConfig), ("search", SearchConfig), ("limits", Limits)):
            value = getattr(self, name)  # else an AttributeError from the decoding thread, the server half up
            if not isinstance(value, cls) and not (name == "decode" and value is None):
                raise TypeError(f"ServeConfig.{name} is a {cls.__name__}, not {type(value).__name__}")
        if not self.host:  # asyncio listens on every interface for an empty host (--host "$UNSET")
            raise ConfigError("--host '' names no address (an unset variable?): give 127.0.0.1 (this machine), or "
                              "0.0.0.0 to open the server to the network")
        for name in self.allow_hosts:
            if not re.fullmatch(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]", name):
                raise ConfigError(f"--allow-host {name!r}: give a host name as a Host header names it (e.g. "
                                  "mt.example.org), not a pattern, URL, port or empty name, which would never match")


# (lines, beam, nbest, need_attention) -> one result per line, in order
TranslateFn = Callable[[Sequence[str], int, int, bool], list[Any]]


class ClientGone(Exception):
    """The requester closed its connection before its lines were decoded."""


@dataclass
class _Job:
    lines: Sequence[str]
    beam: int
    nbest: int
    attention: bool
    future: asyncio.Future = field(repr=False)
    gone: Callable[[], bool] = field(repr=False)  # the client closed its connection

    def dropped(self) -> bool:
        """True when nobody waits for this job any more (its future is cancelled if so)."""
        if not self.future.done() and self.gone():
            self.future.cancel()
        return self.future.done()


@dataclass
class BatchStats:
    """Counters for /health: how many decoder calls served how many requests and sentences."""

    batches: int = 0
    requests: int = 0
    sentences: int = 0
    largest: int = 0  # most sentences in one call


class DecodeThread:
    """The one thread a server runs torch on: the model is loaded (`call`) and every batch decoded (`run`) there."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nmtkit-decode")

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._executor.submit(fn, *args).result()

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=True)


class Batcher:
    """Collects requests into batches and runs them on `thread` (its own if none), closed at the stop."""

    def __init__(self, translate: TranslateFn, batch_size: int, delay: float, thread: DecodeThread | None = None):
        self.translate = translate
        self.batch_size = batch_size
        self.delay = delay
        self.stats = BatchStats()
        self._queue: asyncio.Queue[_Job] | None = None
        self._held: collections.deque[_Job] = collections.deque()  # taken but left for a later round
        self._task: asyncio.Task | None = None
        self._thread = thread

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        if self._thread is None:
            self._thread = DecodeThread()
        self._task = asyncio.create_task(self._run(), name="nmtkit-batcher")

    async def stop(self) -> None:
        """Stop the worker (call once no request is waiting any more)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._thread is not None:
            self._thread.close()
            self._thread = None

    async def submit(self, lines: Sequence[str], beam: int, nbest: int, attention: bool,
                     gone: Callable[[], bool] | None = None) -> list[Any]:
        """Translate `lines` (one result per line) within some batch. `gone()` says whether the
        requester went away: its lines are then dropped, and ClientGone is raised."""
        assert self._queue is not None, "Batcher.start() first"
        if not lines:
            return []
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Job(list(lines), beam, nbest, attention, future, gone or (lambda: False)))
        try:
            return await future
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if future.cancelled() and not (task is not None and task.cancelling()):
                raise ClientGone("the client closed the connection; its lines were not translated") from None
            raise

    async def _next_job(self, timeout: float | None) -> _Job | None:
        if self._held:
            return self._held.popleft()
        assert self._queue is not None
        if not self._queue.empty():
            return self._queue.get_nowait()
        if timeout is not None and timeout <= 0:
            return None
        try:  # None: no time limit
            return await asyncio.wait_for(self._queue.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def _gather(self) -> list[_Job]:
        """The next batch: the oldest job plus compatible ones arriving within the delay."""
        loop = asyncio.get_running_loop()
        first = await self._next_job(None)
        while first.dropped():
            first = await self._next_job(None)
        group, size = [first], len(first.lines)
        deadline = loop.time() + self.delay
        skipped: list[_Job] = []
        while size < self.batch_size:
            job = await self._next_job(deadline - loop.time())
            if job is None:
                break
            if job.dropped():
                continue
            if (job.beam, job.nbest) != (first.beam, first.nbest) or size + len(job.lines) > self.batch_size:
                skipped.append(job)
                continue
            group.append(job)
            size += len(job.lines)
        self._held.extend(skipped)
        return group

    async def _run(self) -> None:
        assert self._thread is not None
        while True:
            group = [job for job in await self._gather() if not job.dropped()]  # clients that went away
            if group:
                await self._serve_group(group)

    async def _serve_group(self, group: list[_Job]) -> None:
        """Translate the lines of `group`'s requests as one batch and answer each its own. An
        NmtkitError fails only its request: a group of several is then served one at a time."""
        lines = [line for job in group for line in job.lines]
        attention = any(job.attention for job in group)
        try:
            results = await self._thread.run(self.translate, lines, group[0].beam, group[0].nbest, attention)
        except Exception as err:  # noqa: BLE001 - handed to every waiting request
            if isinstance(err, NmtkitError) and len(group) > 1:
                for job in group:
                    await self._serve_group([job])
                return
            for job in group:
                if not job.future.done():
                    job.future.set_exception(err)
            return
        self.stats.batches += 1
        self.stats.requests += len(group)
        self.stats.sentences += len(lines)
        self.stats.largest = max(self.stats.largest, len(lines))
        start = 0
        for job in group:
            if not job.future.done():
                job.future.set_result(results[start : start + len(job.lines)])
            start += len(job.lines)
