"""SIGINT, SIGTERM and SIGHUP (a closed terminal), for every command: blocked around work a signal
must not cut in two, sent to another handler for a while, SIGTERM and SIGHUP unwinding a command as
Ctrl-C does, and the set-up of a worker process. A signal ignored at start (nohup) stays ignored."""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def blocked(signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Within: `signals` blocked for this thread, and delivered after. In the main thread also noted
    by a handler and raised again after: a thread started unmasked (numpy's OpenBLAS pool) takes a
    signal sent to the process, whose Python handler then runs here at once."""
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


def taken(signals: tuple[int, ...] = STOP_SIGNALS) -> list[int]:
    """Those of `signals` a command may take: not ignored at its start (nohup), and set by Python."""
    return [sig for sig in signals if signal.getsignal(sig) not in (None, signal.SIG_IGN)]


@contextlib.contextmanager
def handled_by(handler: Any, signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Within: `signals` (but one ignored or not set by Python) go to `handler`; main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, handler) for sig in taken(signals)}
    try:
        yield
    finally:
        for sig, before in old.items():
            signal.signal(sig, before)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """SIGTERM, SIGHUP and a first SIGINT held off while a failed run cleans up (torchrun sends
    SIGTERM to every rank as soon as one fails); a second SIGINT still interrupts."""
    seen: list[int] = []

    def note(signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and signal.SIGINT in seen:
            raise KeyboardInterrupt
        seen.append(signum)

    with handled_by(note):
        yield


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (`signum`), raised where the command is, so that it unwinds as Ctrl-C does."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__()
        self.signum = signum


def sigterm_interrupts() -> contextlib.AbstractContextManager:
    """Within: SIGTERM and SIGHUP raise `Terminated` wherever the main thread is; elsewhere a no-op."""
    def handler(signum, frame):
        raise Terminated(signum)

    return handled_by(handler, (signal.SIGTERM, signal.SIGHUP))


def die_with_parent(sig: int, parent: int) -> None:
    """On Linux, have `sig` sent to this process when its parent (pid `parent`) dies, or now."""
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
    """In a worker forked from `parent` with STOP_SIGNALS blocked: Ctrl-C and a closed terminal's
    SIGHUP ignored (the parent's), SIGTERM's default action, the signals unblocked, and SIGKILL when
    the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(signal.SIGKILL, parent)
    with contextlib.suppress(AttributeError, ValueError, OSError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
