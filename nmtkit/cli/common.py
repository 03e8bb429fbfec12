"""Helpers shared by the subcommand modules (warnings and progress on stderr, the decoding options
of translate and serve); worker counts live in nmtkit.devices."""
from __future__ import annotations

import contextlib
import logging
import sys
from typing import Iterator

import click

# `nmtkit translate` and `nmtkit serve` decode alike: their --fuse and --shortlist are one option each
fuse_option = click.option(
    "--fuse", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
    help="Compile the decoding step into a few fused kernels (torch.compile; the first run compiles "
         "for up to a minute, later runs reuse the cache). auto: on CUDA.")

SHORTLIST_HELP = (
    "auto: where the checkpoint holds a lexicon (nmtkit train stores one), score only a shortlist of "
    "target words per batch, the 1,000 most frequent and the 20 likeliest translations of each source "
    "word (Jean et al. 2015; nmtkit.decode.shortlist): beam search about 20% faster on a CPU, BLEU "
    "unchanged on the benchmark's dev set; off: the whole vocabulary.")


def shortlist_option(extra: str = ""):
    """--shortlist auto|off, its help followed by `extra`."""
    return click.option("--shortlist", type=click.Choice(["auto", "off"]), default="auto", show_default=True,
                        help=SHORTLIST_HELP + extra)


# `nmtkit preprocess` and `nmtkit tokenize` tokenise alike: one --protect
protect_option = click.option("--protect", multiple=True, metavar="FILE|SET",
              help="Keep the matches of these regular expressions whole when tokenising (tokenizer.perl "
                   "-protected): a FILE with one regex a line, or a named set: printf (%s, %d, %1$s, %(name)s), "
                   "url, email, xml (tags), basic (Moses' basic-protected-patterns). Repeatable; recorded in "
                   "the data directory, so translate and serve protect the same.")


def progress_enabled(quiet: bool) -> bool:
    """Progress bars go to stderr, only when it is a terminal and --quiet was not given."""
    return not quiet and sys.stderr.isatty()


def make_console():
    """A rich console on stderr (never stdout: stdout carries data only)."""
    from rich.console import Console

    return Console(stderr=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so that it unwinds as Ctrl-C does."""


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within: SIGTERM ends the command as Ctrl-C does, removing the outputs being written
    (nmtkit.outputs aborts them on any exception); `main` exits with 143."""
    import signal

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


class _StderrHandler(logging.StreamHandler):
    """One line per record on whatever sys.stderr is when the record is emitted (click's test
    runner swaps it per call), as `nmtkit: warning: MESSAGE`."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("nmtkit: %(levelname)s: %(message)s"))

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass

    def format(self, record: logging.LogRecord) -> str:
        record = logging.makeLogRecord({**record.__dict__, "levelname": record.levelname.lower()})
        return super().format(record)


# The library's loggers live under "nmtkit"; Python warnings (logging.captureWarnings) under "py.warnings".
WARNING_LOGGERS = ("nmtkit", "py.warnings")


def setup_warnings() -> None:
    """Make the logging module the one channel of warnings to the user: the `nmtkit` loggers'
    records at WARNING and above and Python's warnings go through one stderr handler. Called by
    the `nmtkit` group before any subcommand; idempotent; `quiet_warnings` mutes it."""
    logging.captureWarnings(True)
    for name in WARNING_LOGGERS:
        logger = logging.getLogger(name)
        handlers = [h for h in logger.handlers if isinstance(h, _StderrHandler)]
        if not handlers:
            handlers = [_StderrHandler()]
            logger.addHandler(handlers[0])
        handlers[0].setLevel(logging.WARNING)


def quiet_warnings(quiet: bool) -> None:
    """With -q/--quiet, no warnings on stderr (errors still are, by `nmtkit.cli.main`)."""
    if not quiet:
        return
    for name in WARNING_LOGGERS:
        for h in logging.getLogger(name).handlers:
            if isinstance(h, _StderrHandler):
                h.setLevel(logging.ERROR)
