"""The one channel from a command's library function to its caller.

Every verb is `run(config, progress=None) -> report`: the config holds every option and path,
`progress` receives `(stage, done, total)` as each stage advances (None: nothing is shown), and
the report says what was done, for the CLI's summary and for Python callers. Warnings go to the
`nmtkit` loggers, and notes (information the user asked for, such as where a plot went) at the
`NOTE` level, which the CLI prints as `nmtkit: note: ...` and `--quiet` silences.
"""
from __future__ import annotations

import logging
from typing import Protocol

NOTE = 25  # between INFO and WARNING
logging.addLevelName(NOTE, "NOTE")


class Progress(Protocol):
    """Told that `stage` has done `done` of `total` items (None: total unknown)."""

    def __call__(self, stage: str, done: int, total: int | None) -> None: ...


def no_progress(stage: str, done: int, total: int | None) -> None:
    """The progress of a run nobody watches."""


def note(logger: logging.Logger, message: str) -> None:
    """Tell the user `message` (not a warning): `nmtkit: note: MESSAGE` on the CLI's stderr."""
    logger.log(NOTE, message)
