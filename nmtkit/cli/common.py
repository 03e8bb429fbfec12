"""Helpers shared by the subcommand modules: options generated from config classes, warnings and
progress on stderr."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from typing import Any, Callable, Iterator

import click

from nmtkit import signals
from nmtkit.devices import available_cores
from nmtkit.errors import ConfigError
from nmtkit.io.files import abort_pending
from nmtkit.options import (
    OptionSpec,
    cli_default,
    cli_names,
    help_text,
    option_fields,
    path_error,
)
from nmtkit.progress import NOTE
from nmtkit.signals import Terminated

_CLICK_TYPES = {"int": int, "int | None": int, "float": float, "float | None": float}


def path_callback(what: str = "directory", then: Callable | None = None) -> Callable:
    """A click callback refusing what `path_error` refuses, then running the callback `then`."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        error = path_error(param.opts[0], value, what)  # the name check_fields gives it
        if error:
            raise ConfigError(error)
        return value if then is None else then(ctx, param, value)

    return callback


def _converter(name: str, convert: Callable[[Any], Any]) -> Callable:
    """A click callback applying a field's `convert` (a ConfigError becomes a usage error)."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            return convert(value)
        except ConfigError as err:
            raise click.BadParameter(str(err).removeprefix(f"{name}: ")) from None

    return callback


def _click_option(field: dataclasses.Field, spec: OptionSpec, unset: bool) -> Callable:
    """The click option of one config field (`unset`: its default is None, "not given")."""
    default = None if unset else cli_default(field, spec)
    names = cli_names(field, spec)
    kwargs: dict[str, Any] = dict(help=help_text(field, spec), required=spec.required)
    if not spec.required:  # click >= 8.3 takes even a default None as given: a required option never went missing
        kwargs["default"] = default
    if spec.flag:
        return click.option(f"{names[0]}/--no-{names[0][2:]}", field.name, **kwargs)
    if str(field.type) == "bool":
        return click.option(*names, field.name, is_flag=True, **kwargs)
    if spec.convert is not None:
        kwargs["callback"] = _converter(names[0], spec.convert)
    if spec.path is not None:  # refused before a convert makes it the current directory
        kwargs["callback"] = path_callback(spec.path, kwargs.get("callback"))
    if spec.multiple:
        kwargs.update(multiple=True, default=() if default is None else default)
    if spec.choices is not None:
        kwargs["type"] = click.Choice(spec.choices, case_sensitive=False)
    else:  # a converted option arrives as text ("90m" for --max-time)
        kwargs["type"] = str if spec.convert is not None else _CLICK_TYPES.get(str(field.type), str)
        if spec.metavar is not None:
            kwargs["metavar"] = spec.metavar
    return click.option(*names, field.name, **kwargs)


def config_options(*classes: type, unset: bool = False, exclude: frozenset[str] = frozenset()) -> Callable:
    """Decorate a click command with one option per option field of each config class but those in
    `exclude`. `unset`: every default is None, "not given" (help still shows the field's)."""

    def decorate(fn: Callable) -> Callable:
        for cls in reversed(classes):
            for field, spec in reversed(option_fields(cls)):
                if field.name not in exclude:
                    fn = _click_option(field, spec, unset)(fn)
        return fn

    return decorate


def config_values(cls: type, options: dict[str, Any], given_only: bool = False) -> dict[str, Any]:
    """The values of `cls`'s option fields among click's `options` (`given_only`: those given). A
    `workers` not given is all cores where its CLI default is None over a number default."""
    out = {}
    for field, spec in option_fields(cls):
        if field.name not in options:
            continue
        value = options[field.name]
        if value is None and given_only:
            continue
        if field.name == "workers" and value is None and spec.cli_default is None and field.default is not None:
            value = available_cores()
        if spec.multiple:
            value = (tuple if str(field.type).startswith("tuple") else list)(value or ())
        out[field.name] = value
    return out


def quiet_option(silences: str) -> Callable:
    return click.option("--quiet", "-q", is_flag=True, help=f"{silences} (errors are still shown).")


def progress_enabled(quiet: bool) -> bool:
    return not quiet and sys.stderr.isatty()


def make_console():
    """A rich console on stderr (never stdout: stdout carries data only)."""
    from rich.console import Console

    console = Console(stderr=True, soft_wrap=True)
    if console.width < 1:  # COLUMNS=0: rich would draw nothing, and the summaries would be lost
        console.width = 80
    return console


@contextlib.contextmanager
def stage_bars(console, columns: list, labels: dict[str, str] | None = None, rate: bool = False) -> Iterator[Callable]:
    """rich progress bars, one per stage, as a verb's `nmtkit.progress.Progress`. `labels`: a stage's
    shown name; `rate`: also fill a `{task.fields[rate]}` column with the items per second."""
    from rich.progress import Progress

    tasks: dict[str, Any] = {}
    with Progress(*columns, console=console, transient=False) as bars:

        def update(stage: str, done: int, total: int | None) -> None:
            task = tasks.get(stage)
            if task is None:
                task = tasks[stage] = bars.add_task((labels or {}).get(stage, stage), total=total, rate="-")
            bars.update(task, completed=done, total=total)
            if rate:
                speed = bars.tasks[task].speed
                bars.update(task, rate=f"{speed:,.0f}" if speed else "-")

        yield update


def stage_progress(quiet: bool, make_bars: Callable[[], contextlib.AbstractContextManager]) -> contextlib.AbstractContextManager:
    return make_bars() if progress_enabled(quiet) else contextlib.nullcontext()


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within: SIGTERM or SIGHUP ends the command as Ctrl-C does, removing the outputs being written."""
    with signals.sigterm_interrupts():
        try:
            yield
        except BaseException as err:
            if isinstance(err, Terminated) or isinstance(err.__cause__ or err.__context__, Terminated):  # click: Abort
                abort_pending()  # the signal may have landed inside cleanup code, skipping some `with` exits
            raise


class _StderrHandler(logging.StreamHandler):
    """`nmtkit: warning: MESSAGE` on whatever sys.stderr is at the time (click's test runner swaps it)."""

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
        text = super().format(record)  # ours on one line whatever it quotes (a file name's line break), as errors
        return text if record.name == "py.warnings" else one_line(text)


def one_line(text: str) -> str:
    """`text` with its line breaks escaped: an error or warning line stays one line on stderr."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


WARNING_LOGGERS = ("nmtkit", "py.warnings", "matplotlib")  # ours, Python's warnings, the plots' library


def setup_warnings(muted: bool = False) -> None:
    """The `nmtkit` and matplotlib loggers' records at NOTE and above and Python's warnings through one stderr
    handler (idempotent); `muted`: it lets none through."""
    logging.captureWarnings(True)
    for name in WARNING_LOGGERS:
        logger = logging.getLogger(name)
        handlers = [h for h in logger.handlers if isinstance(h, _StderrHandler)]
        if not handlers:
            handlers = [_StderrHandler()]
            logger.addHandler(handlers[0])
        handlers[0].setLevel(logging.ERROR if muted else NOTE)
        if logger.level == logging.NOTSET or logger.level > NOTE:
            logger.setLevel(NOTE)


def quiet_warnings(quiet: bool) -> None:
    """With -q/--quiet, no warnings on stderr (errors still are, by `nmtkit.cli.main`)."""
    if quiet:
        setup_warnings(muted=True)
