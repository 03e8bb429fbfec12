"""Signals blocked around work that an interrupt must not cut in two: Ctrl-C and SIGTERM wait
at the process's door (the kernel keeps them pending) and act as soon as the work is done."""
from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def interrupts_blocked(signals: frozenset[int] = frozenset({signal.SIGINT, signal.SIGTERM})) -> Iterator[None]:
    """Within: `signals` blocked for this thread (`pthread_sigmask`), the mask restored after; a
    signal that came meanwhile is delivered then. Where the platform cannot block signals, the
    work runs as it comes."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    except (AttributeError, ValueError, OSError):
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
