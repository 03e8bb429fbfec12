"""The `nmtkit` command: a click group over the subcommands, and `main`, which turns every error
into one line on stderr and an exit status. Only this package knows click, rich and exit codes; each
subcommand's module parses its options into one config for its verb's `run`, and imports no torch
at module level, so that `nmtkit --help` is quick."""
from __future__ import annotations

import atexit
import contextlib
import errno
import importlib
import io
import os
import re
import select
import sys
import threading
from typing import Any, NoReturn

import click

from nmtkit import __version__, signals
from nmtkit.cli.common import one_line, setup_warnings, sigterm_unwinds
from nmtkit.devices import ONEDNN_CACHE_CAPACITY, TRAIN_ONEDNN_CACHE_CAPACITY, limit_cpu_caches
from nmtkit.errors import NmtkitError, OutputError, describe_os_error, first_line
from nmtkit.io.files import abandoned_outputs, is_stdout
from nmtkit.signals import Terminated

# name -> "module:command", in pipeline order; a module loads only when its subcommand is asked for
SUBCOMMANDS = {
    "preprocess": "nmtkit.cli.preprocess:preprocess_cmd",
    "select-data": "nmtkit.cli.select:select_data_cmd",
    "train": "nmtkit.cli.train:train_cmd",
    "translate": "nmtkit.cli.translate:translate_cmd",
    "score": "nmtkit.cli.score:score_cmd",
    "serve": "nmtkit.cli.serve:serve_cmd",
    "tokenize": "nmtkit.cli.tokenize:tokenize_cmd",
    "average": "nmtkit.cli.average:average_cmd",
}


class _LazyGroup(click.Group):
    """Lists subcommands in pipeline order and imports each one's module when it is asked for."""

    def list_commands(self, ctx: click.Context | None) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        return command(cmd_name) if cmd_name in SUBCOMMANDS else None

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[Any, Any, list[str]]:
        """The subcommand, refusing a single-dash word (OpenNMT-py's `-output`, `-beam_size`), which click
        would read as a short option and its value (`-o utput`) or report as its first letter's (`-b`)."""
        name, cmd, rest = super().resolve_command(ctx, args)
        opts = {o: p.is_flag for p in cmd.params for o in (*p.opts, *p.secondary_opts)} if cmd else {}
        words = [str(a) for a in rest]  # the API passes paths
        for before, word in zip([None, *words], words[:words.index("--") if "--" in words else None]):
            if re.fullmatch(r"-[A-Za-z][A-Za-z_-]{2,}", word) and word not in opts and opts.get(before, True):
                raise click.NoSuchOption("--" + word[1:].replace("_", "-"), f"No such option '{word}' (nmtkit's long "
                                         "options begin with two dashes).", [*opts, "--help"],
                                         ctx=click.Context(cmd, info_name=name, parent=ctx))
        return name, cmd, rest

    def invoke(self, ctx: click.Context) -> Any:
        """SIGTERM's or SIGHUP's `Terminated` passes click as its Abort: as a KeyboardInterrupt click
        would first write a blank line, which closes a terminal's ^C echo, where no ^C was typed."""
        try:
            return super().invoke(ctx)
        except Terminated as stop:
            raise click.exceptions.Abort() from stop
        except BrokenPipeError as err:  # click would end the command with status 1 and not a word
            if err.filename is not None and is_stdout(err.filename):  # -o /dev/stdout | head: as -o - is
                raise _StdoutGone() from err
            gone = " (its reader went away before the end)" if err.filename is not None else ""
            raise OutputError(describe_os_error(err) + gone) from err


def command(name: str) -> click.Command:
    """The click command of subcommand `name` (imported on first use); KeyError for no subcommand."""
    module, attr = SUBCOMMANDS[name].split(":")
    return getattr(importlib.import_module(module), attr)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="nmtkit")
@click.option("--debug", is_flag=True, help="Show full tracebacks for errors.")  # read by `main` from argv
def cli(debug: bool) -> None:
    """nmtkit: neural machine translation in the style of the classic MT toolkits.

    A pipeline of plain-text files: preprocess -> train -> translate -> score,
    with select-data before preprocess to pick in-domain training data.
    """
    setup_warnings()
    try:  # else relative paths name nothing, and loading torch dies in C ("oneMKL FATAL ERROR")
        os.getcwd()
    except FileNotFoundError:
        raise NmtkitError("the current folder no longer exists (deleted or moved away): cd to a folder that "
                          "exists and run the command again") from None


class _StdoutGone(Exception):
    """The reader of stdout went away (`nmtkit translate ... | head`). Not an OSError, so that
    click (which turns EPIPE into status 1) lets it through to `main`, which exits with 0."""


class _Wrapped:
    """A stream that hands all to the one it wraps, but an OSError of its `write` or `flush` to
    `_failed`: a write that `_failed` lets pass counts as written."""

    def __init__(self, stream):
        self._stream = stream

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as err:
            self._failed(err)
            return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except OSError as err:
            self._failed(err)


class _NamedStdout(_Wrapped):
    """sys.stdout, but an OSError names "<stdout>", and a broken pipe becomes `_StdoutGone`."""

    def _failed(self, err: OSError) -> NoReturn:
        if isinstance(err, BrokenPipeError):
            raise _StdoutGone()
        if err.filename is None:
            err.filename = "<stdout>"
        raise err


class _ClosedStream:
    """Stands for a standard stream the process was started without (`>&-`, `<&-`; Python leaves
    None): using it is an OSError naming it; flushing it, `isatty` and its encoding (which sympy,
    imported by torch, reads) are not uses."""
    encoding = errors = None

    def __init__(self, name: str):
        self._name = name

    def isatty(self) -> bool:
        return False

    def flush(self) -> None:
        pass

    def __getattr__(self, attr):
        raise OSError(errno.EBADF, "closed: the command was started without it", self._name)


class _Diagnostics(_Wrapped):
    """sys.stderr, but a failed write or flush (`2>/dev/full`) is dropped: notes, warnings and
    progress are no part of a command's result, which does not fail for want of them."""

    def _failed(self, err: OSError) -> None:
        pass


class _WaitingRead(io.RawIOBase):
    """Standard input's descriptor `fd` read as a blocking one, where another program left it
    non-blocking: Python's readers would take "no data yet" for the end of the input."""

    def __init__(self, fd: int):
        super().__init__()
        self._fd = fd

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def readinto(self, buf) -> int:
        while True:
            try:
                data = os.read(self._fd, len(buf))
            except BlockingIOError:
                select.select([self._fd], [], [])
                continue
            buf[:len(data)] = data
            return len(data)


def _waiting_stdin(stdin):
    """`stdin`, or where its descriptor is non-blocking, a text stream over it that waits."""
    try:
        fd = stdin.fileno()
        if os.get_blocking(fd):
            return stdin
    except (OSError, ValueError, AttributeError):  # not a descriptor (a test's in-memory stdin)
        return stdin
    return io.TextIOWrapper(io.BufferedReader(_WaitingRead(fd)), encoding=stdin.encoding, errors=stdin.errors)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush has nothing to fail on."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: list[str] | None = None) -> None:
    """Run the group, turning errors into one line on stderr. `argv` None is the program itself: it
    reads sys.argv and ends the process; a list runs the command and returns (or raises SystemExit)."""
    args = sys.argv[1:] if argv is None else argv
    command_name = next((a for a in args if a in SUBCOMMANDS), "")
    # before torch builds its first product
    limit_cpu_caches(TRAIN_ONEDNN_CACHE_CAPACITY if command_name == "train" else ONEDNN_CACHE_CAPACITY)
    real_stdin, real_stdout, real_stderr = sys.stdin, sys.stdout, sys.stderr
    if hasattr(real_stdout, "reconfigure"):  # UTF-8 whatever the locale says; a non-UTF-8 file name as its bytes
        real_stdout.reconfigure(encoding="utf-8", errors="surrogateescape")
    sys.stdout = _NamedStdout(real_stdout) if real_stdout is not None else _ClosedStream("<stdout>")  # type: ignore
    if real_stderr is not None:
        sys.stderr = _Diagnostics(real_stderr)  # type: ignore[assignment]
    sys.stdin = _ClosedStream("<stdin>") if real_stdin is None else _waiting_stdin(real_stdin)  # type: ignore
    try:
        _run(argv, "--debug" in args, command_name)
    except SystemExit as done:
        if argv is not None:
            raise
        code = done.code
    else:
        code = 0
    finally:
        if isinstance(sys.stdout, (_NamedStdout, _ClosedStream)):
            sys.stdout = real_stdout
        sys.stdin = real_stdin
        if isinstance(sys.stderr, _Diagnostics):
            sys.stderr = real_stderr
    if argv is None:
        _end_process(code)


def _end_process(code: int | str | None) -> None:
    """Exit with `code` without the interpreter's teardown, slow with torch imported: the atexit
    handlers run and stdout and stderr are flushed here. With a live non-daemon thread, a non-integer
    code, without torch, or under a profiler or tracer, the ordinary exit runs."""
    if not isinstance(code, int) and code is not None:
        raise SystemExit(code)
    others = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    if "torch" not in sys.modules or others or sys.getprofile() is not None or sys.gettrace() is not None:
        raise SystemExit(code)
    # a Ctrl-C now would raise inside an atexit handler, which Python reports as a traceback and goes on
    with signals.blocked():
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                raise SystemExit(code) from None  # let the interpreter report it as it would
        os._exit(code or 0)


def _run(argv: list[str] | None, debug: bool, command_name: str) -> None:
    earlier = len(abandoned_outputs())  # another command's, run before in this process
    try:
        with sigterm_unwinds():  # kill, timeout, a scheduler: every command unwinds as on Ctrl-C, leaving no temp file
            cli.main(args=argv, prog_name="nmtkit", standalone_mode=False)
        sys.stdout.flush()  # a full stdout must fail here, not in the interpreter's exit
    except NmtkitError as err:
        if debug:
            raise
        _end(f"error: {err}", err.exit_code)
    except click.exceptions.Abort as err:  # click's form of KeyboardInterrupt, SIGTERM's and SIGHUP's included
        stop = err.__cause__ or err.__context__
        if isinstance(stop, Terminated):
            # an nmtkit error unwinding the command when SIGTERM arrived (torchrun stops every rank as
            # soon as one fails, while the others clean up after their own error) is what ended it
            unwinding = stop.__context__
            while unwinding is not None and not isinstance(unwinding, NmtkitError):
                unwinding = unwinding.__context__
            if unwinding is not None and not debug:
                _end(f"error: {unwinding}", unwinding.exit_code)
            _end("terminated", 128 + stop.signum)  # 143 for SIGTERM, 129 for SIGHUP, as a shell expects
        _end("aborted", 130)
    except click.ClickException as err:  # a bad command line (status 2) or a file click opened: one line too
        _end(f"error: {_click_error_line(err)}", err.exit_code)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)
    except _StdoutGone:
        # `nmtkit translate ... | head`: not an error (status 0, for `set -o pipefail` scripts),
        # unless the command had other outputs, which it then left unwritten (status 1)
        _silence_stdout()
        lost = abandoned_outputs()[earlier:]
        if lost:
            _end(f"error: stdout was closed before the end (by its reader, such as head), so "
                 f"{' and '.join(lost)} {'was' if len(lost) == 1 else 'were'} not written", 1)
        sys.exit(0)
    except OSError as err:
        if debug:
            raise
        if err.filename == "<stdout>":
            _silence_stdout()
        cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")  # made by torch on its first torch.compile use
        named = (" (TORCHINDUCTOR_CACHE_DIR: set it to a folder you can write)"
                 if cache and str(err.filename).startswith(cache) else "")
        _end(f"error: {describe_os_error(err)}{named}", 1)
    except KeyboardInterrupt:
        _end("interrupted", 130)
    except (MemoryError, RuntimeError) as err:  # torch's OutOfMemoryError is a RuntimeError
        if debug or not _out_of_memory(err):
            raise
        reason = first_line(err) or type(err).__name__
        advice = _MEMORY_ADVICE.get(command_name)
        _end(f"error: out of memory: {reason}" + (f" ({advice})" if advice else ""), 1)


def _end(message: str, status: int) -> NoReturn:
    """`nmtkit: MESSAGE` on stderr, on one line whatever it quotes, then exit with `status`."""
    click.echo("nmtkit: " + one_line(message), err=True)
    sys.exit(status)


# what needs less memory, for the commands whose options size their batches
_MEMORY_ADVICE = {"train": "smaller model sizes, --batch-size or --max-tokens need less",
                  "translate": "a smaller --batch-size or --max-tokens needs less",
                  "serve": "a smaller --batch-size or --max-tokens needs less"}


def _click_error_line(err: click.ClickException) -> str:
    """click's message for `err` on one line; a usage error points at its command's --help."""
    text = " ".join(err.format_message().split())
    if isinstance(err, click.UsageError) and err.ctx is not None:
        return f"{text.rstrip('.')} (see '{err.ctx.command_path} --help')"
    return text


def _out_of_memory(err: BaseException) -> bool:
    """Whether `err` is a failed allocation: MemoryError, torch's OutOfMemoryError or its CPU allocator's."""
    if isinstance(err, MemoryError):
        return True
    oom = getattr(sys.modules.get("torch"), "OutOfMemoryError", None)
    return (oom is not None and isinstance(err, oom)) or "can't allocate memory" in str(err)
