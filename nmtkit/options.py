"""Options declared once: `option(default, help=..., choices=..., min=..., ...)` is a dataclass
field whose metadata says everything a command-line option needs: a command's click options are
generated from it (`nmtkit.cli.common.config_options`), and `check_fields` validates every field
against it. Imports neither click nor torch.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Iterable, Iterator

from nmtkit.errors import ConfigError

_MISSING = dataclasses.MISSING
_AS_FIELD = object()  # OptionSpec.cli_default: the field's own default


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """What a config field says about its command-line option (see `option`)."""

    help: str
    choices: tuple[str, ...] | None = None
    min: float | None = None
    max: float | None = None
    min_open: bool = False  # the bound itself is refused: (min, ...
    max_open: bool = False  # ..., max)
    metavar: str | None = None
    shown_default: str | None = None  # what help shows as the default; None: the field's default
    cli: bool = True  # False: a config field with no option (set by the library, not the user)
    flag: bool = False  # a boolean --name/--no-name switch
    resume: bool = False  # may change when a run is resumed (stopping, reporting, hardware)
    convert: Callable[[Any], Any] | None = None  # the CLI's text -> the field's value
    message: str | None = None  # the range error's tail, instead of the generic one
    names: tuple[str, ...] = ()  # the option's names when not (only) --field-name: ("--ref", "-r")
    multiple: bool = False  # repeatable; the field holds a list
    required: bool = False
    cli_default: Any = _AS_FIELD  # the CLI's default when not the field's (text, or None: resolved later)
    path: str | None = None  # what a path option names ("file", "directory"): an empty value is refused


def option(default: Any = _MISSING, *, help: str, default_factory: Any = _MISSING, **spec: Any) -> Any:
    """A dataclass field with its option's description in its metadata (`OptionSpec`'s fields)."""
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"option": OptionSpec(help=help, **spec)})


def spec_of(field: dataclasses.Field) -> OptionSpec | None:
    return field.metadata.get("option")


def option_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def cli_names(field: dataclasses.Field, spec: OptionSpec) -> tuple[str, ...]:
    """The names of a field's option, the long one first."""
    return spec.names or (option_name(field.name),)


def cli_default(field: dataclasses.Field, spec: OptionSpec) -> Any:
    return field_default(field) if spec.cli_default is _AS_FIELD else spec.cli_default


def option_fields(cls: type) -> list[tuple[dataclasses.Field, OptionSpec]]:
    """The fields of config class `cls` that are command-line options, in declaration order."""
    return [(f, spec) for f in dataclasses.fields(cls) if (spec := spec_of(f)) is not None and spec.cli]


def refuse_without(given: list[str], needed: str, why: str = "") -> None:
    """ConfigError "--a needs --c" ("--a and --b need --c") for options `given` without `needed`."""
    if given:
        raise ConfigError(f"{' and '.join(given)} {'needs' if len(given) == 1 else 'need'} {needed}{why}")


def off_default(config: Any, names: Iterable[str]) -> list[str]:
    """The long names of the options of `config`'s fields `names` whose values differ from their defaults."""
    fields_ = config.__dataclass_fields__
    return [cli_names(fields_[n], spec_of(fields_[n]))[0] for n in names if getattr(config, n) != field_default(fields_[n])]


def field_default(field: dataclasses.Field) -> Any:
    if field.default is not _MISSING:
        return field.default
    if field.default_factory is not _MISSING:
        return field.default_factory()
    return None


def help_text(field: dataclasses.Field, spec: OptionSpec) -> str:
    """The option's help: its text and, in brackets, the default help shows."""
    shown = spec.shown_default
    if shown is None:
        value = cli_default(field, spec)
        if value is None or (spec.multiple and not value) or (isinstance(value, bool) and not spec.flag):
            return spec.help
        shown = ("on" if value else "off") if isinstance(value, bool) else str(value)
    return f"{spec.help} [{shown}]" if shown else spec.help


def empty_path_message(opt: str, what: str = "file", stream: bool = False) -> str:
    """The refusal of an empty path given to `opt`; `stream`: the option also takes '-'."""
    give = f"give a {what}, or '-' for the standard stream" if stream else f"give a {what}"
    return f"{opt} '' names no {what} (an unset variable?): {give}"


def path_error(opt: str, value: Any, what: str) -> str | None:
    """The refusal of path option `opt`'s value, or None: an empty path, or '-' for a directory."""
    values = value if isinstance(value, (list, tuple)) else (value,)  # a repeatable option's too
    if any(isinstance(v, (str, os.PathLike)) and os.fspath(v) == "" for v in values):
        return empty_path_message(opt, what)
    if what == "directory" and isinstance(value, (str, os.PathLike)) and os.fspath(value) == "-":
        return f"{opt} '-' names no directory: '-' is a standard stream, which a folder cannot be (./- names a folder '-')"
    return None


def _number_error(opt: str, spec: OptionSpec, value: Any) -> str | None:
    """The message for a number outside the spec's range (option `opt`), or None when it is inside."""
    lo, hi = spec.min, spec.max
    bad_lo = lo is not None and (value <= lo if spec.min_open else value < lo)
    bad_hi = hi is not None and (value >= hi if spec.max_open else value > hi)
    if not (bad_lo or bad_hi):
        return None
    if spec.message is not None:
        return f"{opt} {spec.message}, got {value}"
    if hi is None and not spec.min_open:
        return f"{opt} must be at least {lo}, got {value}" if lo != 0 else f"{opt} must be >= 0, got {value}"
    if hi is None and lo == 0:
        return f"{opt} must be positive, got {value}"
    span = f"{'(' if spec.min_open else '['}{lo}, {hi if hi is not None else 'inf'}{')' if spec.max_open else ']'}"
    return f"{opt} must be in {span}, got {value}"


_KINDS = {"float": "a finite number", "int": "an integer", "bool": "true or false", "str": "a string"}


def _type_error(opt: str, type_name: str, value: Any) -> str | None:
    """The message for a value not of its field's type (`type_name`, a string: PEP 563), or None: a
    float finite, a bool True or False (a "no" would turn a switch on), None where the type admits it."""
    if value is None:
        if "None" in type_name or type_name == "Any":
            return None
        return f"{opt} must be {_KINDS.get(type_name, 'given')}, got None"
    if type_name in ("bool", "bool | None") and not isinstance(value, bool):
        return f"{opt} must be true or false, got {value!r}"
    if type_name in ("str", "str | None") and not isinstance(value, (str, os.PathLike)):
        return f"{opt} must be a string, got {value!r}"
    if type_name in ("float", "float | None"):
        # finite, and a float can hold it (an int past 2^1024 made math.isfinite raise an OverflowError)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) < 2 ** 1024:
            return f"{opt} must be a finite number, got {value}"
    elif type_name in ("int", "int | None") and (isinstance(value, bool) or not isinstance(value, int)):
        return f"{opt} must be an integer, got {value!r}"
    return None


def plain(value: Any) -> Any:
    """A numpy or torch scalar (np.int64(3), np.float32(0.5), np.True_) as the Python value it holds,
    which the type checks take as that int, float or bool; any other value as it is."""
    return value.item() if getattr(value, "shape", None) == () and hasattr(value, "item") else value


def _items_error(opt: str, value: Any) -> str | None:
    """The message for a repeatable option's value that is not a list of strings, or None."""
    if not isinstance(value, (list, tuple)):
        return f"{opt} must be a list of strings, got {value!r:.60}"
    return next((error for v in value if (error := _type_error(opt, "str", v))), None)


def _as_path_strings(config: Any, f: dataclasses.Field, spec: OptionSpec) -> None:
    """A `Path` given from Python becomes its string (configs are stored as JSON); a repeatable
    field given one path, or an iterator, becomes a tuple of it, or of its items."""
    value = getattr(config, f.name)
    if spec.multiple and isinstance(value, (str, os.PathLike)):
        value = (value,)
    elif spec.multiple and isinstance(value, Iterator):
        value = tuple(value)
    if spec.multiple and isinstance(value, (list, tuple)):
        value = tuple(os.fspath(v) if isinstance(v, os.PathLike) else v for v in value)
    elif isinstance(value, os.PathLike):
        value = os.fspath(value)
    object.__setattr__(config, f.name, value)


def check_fields(config: Any, like: type | None = None) -> None:
    """A ConfigError naming the option unless every field of `config` has the type, choices and
    range its option (or the same-named field of class `like`) declares."""
    declared = {f.name: f for f in dataclasses.fields(like)} if like is not None else {}
    for f in dataclasses.fields(config):
        spec = spec_of(declared.get(f.name, f))
        if spec is not None:  # a Path for a language, a host, a choice too: its string
            _as_path_strings(config, f, spec)
        value = plain(getattr(config, f.name))  # a numpy scalar is stored as its Python value (JSON, repr)
        object.__setattr__(config, f.name, value)
        opt = cli_names(f, spec)[0] if spec is not None else option_name(f.name)
        error = _type_error(opt, str(f.type), value)
        if error is None and spec is not None and spec.multiple and value is not None:
            error = _items_error(opt, value)
        if error is None and spec is not None and value is not None:
            if spec.path is not None and (bad_path := path_error(opt, value, spec.path)):
                error = bad_path
            elif spec.choices is not None and value not in spec.choices:
                error = f"{opt} must be one of {', '.join(spec.choices)}, got '{value}'"
            elif (spec.min is not None or spec.max is not None) and isinstance(value, (int, float)):
                error = _number_error(opt, spec, value)
        if error is not None:
            raise ConfigError(error)


def resume_overridable(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls) if (spec_of(f) or OptionSpec("")).resume)
