"""Helpers shared by the subcommand modules (progress display); worker counts live in nmtkit.devices."""
from __future__ import annotations

import sys


def progress_enabled(quiet: bool) -> bool:
    """Progress bars go to stderr, only when it is a terminal and --quiet was not given."""
    return not quiet and sys.stderr.isatty()


def make_console():
    """A rich console on stderr (never stdout: stdout carries data only)."""
    from rich.console import Console

    return Console(stderr=True)
