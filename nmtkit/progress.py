"""The one channel from a command's library function to its caller: every verb is
`run(config, progress=None) -> report`, `progress` receiving `(stage, done, total)` as each stage
advances. Warnings go to the `nmtkit` loggers, and notes (information the user asked for) at the
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
