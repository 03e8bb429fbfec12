"""Worker processes for every command that has them: forked children, sharing this process's
memory, so only tasks and replies are pickled. A worker answers each task with the result or the
exception and leaves with os._exit (never into the caller's code, buffers or exit handlers)."""
from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection, Pipe, wait
from typing import Any, Callable

from nmtkit import signals
from nmtkit.errors import WorkerError


def can_fork() -> bool:
    """Whether worker processes can be forked here: a POSIX system other than macOS."""
    return hasattr(os, "fork") and sys.platform != "darwin"


class Worker:
    """One worker process: `send` it a task, read its `reply`; `pid`, and `conn` to wait on."""

    def __init__(self, pid: int, conn: Connection, died: str):
        self.pid, self.conn, self._died = pid, conn, died
        self.reaped = False

    def send(self, task: Any) -> None:
        """Hand the worker its next task; a WorkerError where it died meanwhile (killed, out of memory)."""
        try:
            self.conn.send(task)
        except (BrokenPipeError, ConnectionResetError):  # an OSError: taken for the caller's own writes
            raise self._death() from None

    def reply(self) -> Any:
        """The result of the task sent last, or the worker's exception raised here."""
        try:
            kind, value = self.conn.recv()
        except (EOFError, ConnectionResetError):  # reset: it died with a task of ours unread
            raise self._death() from None
        if kind == "error":
            raise value
        return value

    def _death(self) -> WorkerError:
        """The WorkerError of a worker that died without answering, saying how it ended."""
        status = self.stop(kill=False)
        how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.waitstatus_to_exitcode(status)}")
        return WorkerError(self._died.format(how=how))

    def stop(self, kill: bool = True) -> int:
        """End the worker (SIGKILL unless not `kill`) and reap it; its wait status (0 if reaped before)."""
        if self.reaped:
            return 0
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self.conn.close()
        self.reaped = True
        try:
            return os.waitpid(self.pid, 0)[1]
        except ChildProcessError:
            return 0


class Workers:
    """A block of worker processes: `start` forks one; leaving the block kills and reaps those
    still there. `died`: the WorkerError message, with `{how}` for the way a worker ended."""

    def __init__(self, died: str):
        self._died = died
        self.started: list[Worker] = []

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: Any) -> None:
        for worker in self.started:
            worker.stop()

    def start(self, handle: Callable[[Any], Any], setup: Callable[[], Any] | None = None) -> Worker:
        """A new worker that runs `setup()` (when given), then answers each task with `handle(task)`."""
        for stream in (sys.stdout, sys.stderr):  # nothing buffered twice
            if stream is not None:
                stream.flush()
        ours, theirs = Pipe()
        parent = os.getpid()
        with signals.blocked():  # until the worker has its own signals, and it is registered here
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                ours.close()
                for other in self.started:
                    other.conn.close()
                _serve(theirs, handle, setup, parent)
            theirs.close()
            worker = Worker(pid, ours, self._died)
            self.started.append(worker)
        return worker

    def ready(self, workers: list[Worker]) -> list[Worker]:
        """Those of `workers` that have a reply to read (or have died): waits for one at least."""
        conns = wait([w.conn for w in workers])
        return [w for w in workers if w.conn in conns]


def _serve(conn: Connection, handle: Callable[[Any], Any], setup: Callable[[], Any] | None, parent: int) -> None:
    code = 0
    try:
        signals.as_worker(parent)
        failed: BaseException | None = None
        try:
            if setup is not None:
                setup()
        except BaseException as err:  # noqa: BLE001 - the answer to the first task
            failed = err
        while True:
            try:
                task = conn.recv()
            except EOFError:
                break
            if failed is not None:
                raise failed
            conn.send_bytes(pickle.dumps(("ok", handle(task)), protocol=pickle.HIGHEST_PROTOCOL))
    except BaseException as err:  # noqa: BLE001 - everything goes back to the parent
        code = 1
        with contextlib.suppress(BaseException):  # the parent is gone or has stopped listening
            conn.send_bytes(_error_payload(err))
    finally:
        os._exit(code)


def _error_payload(err: BaseException) -> bytes:
    """`err` pickled, or where it cannot be (or be read back), a RuntimeError with its text."""
    try:
        payload = pickle.dumps(("error", err), protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(payload)
        return payload
    except Exception:  # noqa: BLE001 - an exception that does not pickle: its text
        return pickle.dumps(("error", RuntimeError(f"{type(err).__name__}: {err}")))
