"""User-facing errors: every mistake a user can make raises an `NmtkitError` whose message is one
line naming the file, the line and what was expected; the CLI prints it without a traceback.
`assert` is kept for internal invariants only.
"""
from __future__ import annotations

import errno


def first_line(err: BaseException) -> str:
    """The first line of an exception's message ("" when it has none)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else ""


class NmtkitError(Exception):
    """Base class of every error meant for the user. `exit_code` is the process exit status."""

    exit_code = 1

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        self.path, self.line, self.bare_message = path, line, message
        where = "" if path is None else f"{path}: " if line is None else f"{path}:{line}: "
        super().__init__(where + message)


class InputError(NmtkitError):
    """A bad input file: missing, unreadable, invalid UTF-8, mismatched line counts."""


class ConfigError(NmtkitError):
    """Bad or inconsistent options or config values."""

    exit_code = 2


class OutputExistsError(NmtkitError):
    """The destination exists and `--force` was not given."""


class OutputError(NmtkitError):
    """An output cannot be written (permissions, disk full)."""


class CheckpointError(NmtkitError):
    """A checkpoint that cannot be used: wrong format version, truncated, mismatched vocabularies."""


class WorkerError(NmtkitError):
    """A worker process (`--workers`: translate's decoding, or the text workers of preprocess,
    tokenize and select-data) died without answering (killed, out of memory)."""


class TrainingError(NmtkitError):
    """Training cannot continue (e.g. a NaN/inf loss)."""


def describe_os_error(err: OSError) -> str:
    """One line for an OSError met at the file-system boundary: `path: strerror`."""
    reason = err.strerror or (errno.errorcode.get(err.errno, "") if err.errno else "") or str(err) or type(err).__name__
    if err.filename is None:
        return f"cannot read or write a file: {reason}"
    text = f"{err.filename}: {reason}"
    if err.filename2 is not None:
        text += f" (with {err.filename2})"
    return text
