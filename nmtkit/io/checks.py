"""Outputs against inputs (`check_outputs_vs_inputs`): no output destroys what the command reads,
every output file can be written; and the path helpers it rests on."""
from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from nmtkit.errors import ConfigError, InputError, NmtkitError, OutputError
from nmtkit.io.files import check_output, file_identity, writes_in_place
from nmtkit.options import empty_path_message


def real_path(path: str | Path) -> str:
    """The path a write would reach: symlinks resolved, also for a name that does not exist yet."""
    return os.path.realpath(path)  # not abspath first: it takes "link/.." apart by its text


def check_found(path: str | Path, missing: str = "file not found", error: type[NmtkitError] = InputError) -> None:
    """`error(missing, path)` where nothing is there, else the cause os.path.exists() hides (a
    symlink loop, a name too long, a folder not searchable)."""
    try:
        os.stat(path)
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the name
        lost = getattr(err, "errno", errno.ENOENT) == errno.ENOENT
        raise error(missing if lost else f"cannot open: {err.strerror}", os.fspath(path)) from None


def is_inside(child: str, folder: str) -> bool:
    return child == folder or child.startswith(folder.rstrip(os.sep) + os.sep)


def _same_file(a: str, b: str, real_a: str, real_b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return real_a == real_b


def check_given_once(paths: Iterable[str | Path], why: str) -> None:
    """Refuse one existing file named twice, by any path (links included); a path that cannot be
    read is left to its reader."""
    seen: dict[tuple[int, int], str] = {}
    for p in map(str, paths):
        key = file_identity(p)
        if key in seen:
            raise ConfigError(f"{p} is given twice (as {seen[key]}); {why}")
        if key is not None:
            seen[key] = p


def file_path(path: str | Path | None, option: str | None = None) -> str | None:
    """The file a file option names, or None for a standard stream (not given, or "-"); an empty
    name is refused for the command-line `option` when given, else a stream."""
    if path is not None and os.fspath(path) == "" and option is not None:
        raise ConfigError(empty_path_message(option, stream=True))
    if path is None or os.fspath(path) in ("", "-"):
        return None
    return os.fspath(path)


def _resolved(pairs: Iterable[tuple[str, str | Path | None]]) -> list[tuple[str, str, str]]:
    return [(opt, path, real_path(path)) for opt, p in pairs if (path := file_path(p)) is not None]


STDIN = ("stdin", "/dev/stdin")


@dataclass(frozen=True)
class Output:
    """An output file of `check_outputs_vs_inputs` (path None: none; "-": stdout), `what` messages
    call it, and whether an existing file may be replaced (--force)."""
    option: str
    path: str | Path | None
    what: str
    force: bool


def check_outputs_vs_inputs(
    inputs: Iterable[tuple[str, str | Path | None]],
    files: Iterable[Output] = (),
    replaced_dirs: Iterable[tuple[str, str | Path | None]] = (),
    folders: Iterable[tuple[str, str | Path | None, Callable[[str], bool]]] = (),
) -> None:
    """An OutputError, with or without --force, where an output would destroy what the command
    reads: each command declares here, before any work, its `inputs` as (option, path or None)
    pairs (stdin as `STDIN`) and its outputs: `files` (not an input, through any link, another
    output or an input's folder; then `check_output`), `replaced_dirs` holding no input, and
    `folders` written into, with `owns(name)` telling the names written there."""
    ins, files = _resolved(inputs), list(files)
    for f in files:
        if f.path is not None and (os.fspath(f.path) == "-" or writes_in_place(f.path)):
            _check_in_place(f.option, os.fspath(f.path), ins)
    seen: list[tuple[str, str, str]] = []
    for opt, out, real_out in _resolved((f.option, f.path) for f in files):
        if writes_in_place(out) and not os.path.isfile(out):  # /dev/null or a FIFO twice loses nothing
            continue
        out_exists = os.path.exists(out)
        for in_opt, inp, real_in in ins:
            if real_out == real_in and os.path.isdir(inp):
                _refuse(opt, out, f"is the {in_opt} input folder")
            if out_exists and os.path.exists(inp) and _same_file(out, inp, real_out, real_in):
                _refuse(opt, out, f"is the same file as the {in_opt} input {inp}")
        for other_opt, other, real_other in seen:
            if _same_file(out, other, real_out, real_other):
                _refuse(opt, out, f"is also the {other_opt} output")
        seen.append((opt, out, real_out))
    for opt, folder, real_folder in _resolved(replaced_dirs):
        for in_opt, inp, real_in in ins:
            if real_in == real_folder:
                _refuse(opt, folder, f"is the {in_opt} input")
            if is_inside(real_in, real_folder):
                _refuse(opt, folder, f"would replace the folder holding the {in_opt} input {inp}")
    for opt, folder, owns in [(o, os.fspath(p), f) for o, p, f in folders if p is not None]:
        real_folder = real_path(folder)
        for in_opt, inp, real_in in ins:
            if real_in == real_folder:
                _refuse(opt, folder, f"is the {in_opt} input")
            if os.path.dirname(real_in) == real_folder and owns(os.path.basename(real_in)):
                _refuse(opt, folder, f"would overwrite the {in_opt} input {inp}")
        for file_opt, out, real_out in seen:
            if real_out == real_folder:
                _refuse(opt, folder, f"is also the {file_opt} output file")
            if os.path.dirname(real_out) == real_folder and owns(os.path.basename(real_out)):
                _refuse(file_opt, out, f"is a file the {opt} folder writes")
    for f in files:
        if (path := file_path(f.path)) is not None:
            check_output(path, f.force, f.what)


def _check_in_place(opt: str, out: str, ins: list[tuple[str, str, str]]) -> None:
    """Refuse an output written in place that is the regular file of an input (`translate -i f >> f`
    would read its own translations back, without end)."""
    try:
        st = os.fstat(1) if out == "-" else os.stat(out)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        return
    for in_opt, inp, _ in ins:
        with contextlib.suppress(OSError):
            if os.path.samestat(st, os.stat(inp)):
                _refuse(opt, "<stdout>" if out == "-" else out, f"is the same file as the {in_opt} input {inp}")


def _refuse(out_opt: str, out: str, why: str) -> None:
    raise OutputError(f"the {out_opt} output {why}; nothing was written", out)
