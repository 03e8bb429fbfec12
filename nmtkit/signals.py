"""SIGINT and SIGTERM, for every command: blocked around work a signal must not cut in two
(`blocked`), sent to another handler for a while (`handled_by`, `held`), SIGTERM unwinding a
command as Ctrl-C does (`sigterm_interrupts`), and the set-up of a worker process
(`as_worker`: the parent handles Ctrl-C; the worker dies with its parent, `die_with_parent`)."""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def blocked(signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Within: `signals` blocked for this thread (`pthread_sigmask`, where the platform has it);
    one that came meanwhile is delivered after. In the main thread they are also noted by a handler
    and raised again after: the mask is this thread's only, and a thread started unmasked (numpy's
    OpenBLAS pool) takes a signal sent to the process, whose Python handler then runs here at once."""
    noted: list[int] = []
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    except (AttributeError, ValueError, OSError):
        old = None
    try:
        with handled_by(lambda signum, frame: noted.append(signum), signals):
            yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)


@contextlib.contextmanager
def handled_by(handler: Any, signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Within: `signals` (SIGINT and SIGTERM) go to `handler`, their handlers restored after; one
    that is ignored (nohup) or whose handler Python did not set is left alone. A no-op but in the
    main thread (only it may set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handled = [sig for sig in signals if signal.getsignal(sig) not in (None, signal.SIG_IGN)]
    old = {sig: signal.signal(sig, handler) for sig in handled}
    try:
        yield
    finally:
        for sig, before in old.items():
            signal.signal(sig, before)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """SIGTERM and a first SIGINT held off while a run that failed cleans up: torchrun sends
    SIGTERM to every rank as soon as one fails, which would replace the run's own error with
    "terminated". A second SIGINT still interrupts."""
    seen: list[int] = []

    def note(signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and signal.SIGINT in seen:
            raise KeyboardInterrupt
        seen.append(signum)

    with handled_by(note):
        yield


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so that it unwinds as Ctrl-C does."""


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within: SIGTERM raises `Terminated` (a KeyboardInterrupt) wherever the main thread is;
    elsewhere than in the main thread a no-op."""
    def handler(signum, frame):
        raise Terminated()

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def die_with_parent(sig: int, parent: int) -> None:
    """On Linux, have `sig` sent to this process when its parent (pid `parent`) dies (prctl
    PR_SET_PDEATHSIG), and send it now if that parent is already gone."""
    if not sys.platform.startswith("linux"):
        return
    try:  # prctl option 1: PR_SET_PDEATHSIG
        if ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)


def as_worker(parent: int) -> None:
    """In a worker process forked (with STOP_SIGNALS blocked) from `parent`: Ctrl-C ignored (the
    parent handles it and stops its workers), SIGTERM's default action, the signals unblocked,
    and SIGKILL when the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(signal.SIGKILL, parent)
    with contextlib.suppress(AttributeError, ValueError, OSError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
