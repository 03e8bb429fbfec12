"""Helpers shared by the subcommand modules (progress display, worker counts)."""
from __future__ import annotations

import os
import sys


def default_workers() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def progress_enabled(quiet: bool) -> bool:
    """Progress bars go to stderr, only when it is a terminal and --quiet was not given."""
    return not quiet and sys.stderr.isatty()


def make_console():
    """A rich console on stderr (never stdout: stdout carries data only)."""
    from rich.console import Console

    return Console(stderr=True)
