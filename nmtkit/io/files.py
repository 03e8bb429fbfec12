"""One output file, whole or not at all: `OutputFile` (`Staged` under it) writes a regular file
under a temporary name beside it and renames it over the destination; a FIFO, a device or
/dev/stdout is written in place. `commit_all` makes several appear together with SIGINT/SIGTERM
blocked; `check_output` refuses an unwritable destination before any work.
"""
from __future__ import annotations

import contextlib
import errno
import gzip
import io
import os
import stat
import sys
import tempfile
import weakref
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

from nmtkit import signals
from nmtkit.errors import OutputError, OutputExistsError

_SPECIAL_ROOTS = ("/dev/", "/proc/")


def _link_chain(path: str | Path) -> Iterator[str]:
    """`path` (absolute) and each name its symlinks lead to in turn, 40 at most."""
    p = os.path.abspath(path)
    for _ in range(40):
        yield p
        if not os.path.islink(p):
            return
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))


def name_stem(name: str, tail: str) -> str:
    """`name` cut by bytes so that it and `tail` (the longest a temp name adds) fit in 255 bytes."""
    return os.fsdecode(os.fsencode(name)[: 255 - len(os.fsencode(tail))])


def writes_in_place(path: str | Path) -> bool:
    """True for an existing FIFO, device or socket, or a /dev or /proc path: written in place."""
    path = os.fspath(path)
    if any(p.startswith(_SPECIAL_ROOTS) for p in _link_chain(path)):
        return True
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)


def inherited_fd(path: str | Path) -> int | None:
    """N where `path` (/dev/stdout, /dev/fd/N, /proc/self/fd/N) names this process's descriptor N
    on a regular file, else None: written through it, as the shell writes `-`, since reopening it
    by name would truncate what the shell wrote there (`{ echo x; nmtkit ... -o /dev/stdout; } > f`)."""
    for p in _link_chain(path):
        folder, name = os.path.split(p)
        if name.isdigit() and os.path.realpath(folder) == f"/proc/{os.getpid()}/fd":
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.fstat(int(name)).st_mode):  # a pipe, a terminal: opened again, nothing is lost
                    return int(name)
            return None
    return None


def is_stdout(path: str | Path | None) -> bool:
    """Whether `path` ("-" or None included) writes where this process's stdout goes; /dev/null,
    where two outputs mix harmlessly, never counts."""
    if path is None or os.fspath(path) == "-":
        return True
    try:
        st = os.stat(path)
        return os.path.samestat(st, os.fstat(1)) and not os.path.samestat(st, os.stat(os.devnull))
    except OSError:
        return False


def file_identity(path: str | Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`, the same by any name or link; None where os.stat fails."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def is_stdin(path: str | Path | None) -> bool:
    """Whether reading `path` ("-" or None included) reads this process's stdin where two readers
    would split its lines (a regular file or /dev/null reads whole for each)."""
    if path is None or os.fspath(path) == "-":
        return True
    try:
        st = os.stat(path)
        return (os.path.samestat(st, os.fstat(0)) and not stat.S_ISREG(st.st_mode)
                and not os.path.samestat(st, os.stat(os.devnull)))
    except OSError:
        return False


def umask() -> int:
    """The process umask, read without changing it where /proc allows (no race with threads)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    old = os.umask(0o022)
    os.umask(old)
    return old


def check_output(path: str | Path, force: bool, what: str = "output") -> None:
    """Refuse, before any work, an output file that could not be written at the end: an existing
    one without `force` (OutputExistsError), a directory, a missing or unwritable folder."""
    path = os.fspath(path)
    if writes_in_place(path):
        if os.path.exists(path) and stat.S_ISSOCK(os.stat(path).st_mode):  # open() fails on one: ENXIO
            raise OutputError(f"the {what} is a socket, which cannot be written as a file; give a file name", path)
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise OutputError(f"cannot write the {what}: {os.strerror(errno.EACCES)}", path)
        return
    if os.path.isdir(path):
        raise OutputError(f"the {what} is a directory; give a file name", path)
    if os.path.exists(path) and not force:
        raise OutputExistsError("exists (use --force to overwrite)", path)
    folder = os.path.dirname(os.path.realpath(path))
    # and as open() reaches it: realpath takes away a `missing/..` that the kernel does not
    for f in (folder, os.path.dirname(path) or "."):
        try:
            found = stat.S_ISDIR(os.stat(f).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            found = False
        except OSError as err:  # what isdir() hides: e.g. a name past PATH_MAX once absolute (a deep current folder)
            raise OutputError(f"cannot write the {what}: its folder cannot be looked up: {err.strerror}", path) from None
        if not found:
            raise OutputError(f"cannot write the {what}: its folder does not exist", path)
    _probe_folder(folder, path, what)


def check_output_dir(path: str | Path, what: str = "output folder", create: bool = True) -> None:
    """Refuse an output folder that could not be written: created (with `create`), then probed."""
    path = os.fspath(path)
    if os.path.lexists(path) and not os.path.isdir(path):  # a link to nothing (or to itself) too
        raise OutputError(f"the {what} exists and is not a directory" if os.path.exists(path) else
                          f"the {what} is a symlink that leads to no folder", path)
    if not os.path.exists(path):
        if not create:
            raise OutputError(f"the {what} does not exist", path)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as err:
            raise OutputError(f"cannot create the {what}: {err.strerror}", err.filename or path) from None
    _probe_folder(path, path, what)


def _probe_folder(folder: str, name: str, what: str) -> None:
    try:
        fd, probe = tempfile.mkstemp(prefix=".nmtkit-probe-", dir=folder)
    except OSError as err:
        raise OutputError(f"cannot write the {what}: {err.strerror}", name) from None
    os.close(fd)
    os.unlink(probe)


# The temp files being written now, for `abort_pending` (a signal in cleanup code skips `with` exits)
_PENDING: "weakref.WeakSet[Staged]" = weakref.WeakSet()
# The outputs whose temp file was removed unfinished: a command whose stdout went away says so
_ABANDONED: list[str] = []


def abandoned_outputs() -> list[str]:
    """The paths of the outputs given up unfinished so far in this process (`Staged.abort`)."""
    return list(_ABANDONED)


def abort_pending() -> None:
    """Remove every temp file still being written (see `sigterm_unwinds` in nmtkit.cli.common)."""
    for staged in list(_PENDING):
        staged.abort()


class _Output:
    """Committed on leaving, aborted on an exception (an OSError then names `path`, `name_error`)."""

    path: str
    write_path: str

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self.commit()
            except BaseException as err:  # Ctrl-C in the final fsync (seconds for a big file) too
                self.abort()
                if isinstance(err, OSError):
                    raise name_error(err, self.path, self.write_path) from None
                raise
        else:
            self.abort()
            if isinstance(exc, OSError):
                name_error(exc, self.path, self.write_path)


class Staged(_Output):
    """Where the bytes for `path` go (`write_path`): an empty temp file beside a regular destination,
    which `commit()` fsyncs, gives the final mode and renames over it; for a node written in place
    `path` itself (commit and abort no-ops)."""

    def __init__(self, path: str | Path):
        self.path = os.fspath(path)
        self.in_place = writes_in_place(self.path)
        self.tmp: str | None = None
        if self.in_place:
            self.write_path = self.path
            return
        self.target = os.path.realpath(self.path)  # write through a symlink, as open() does
        try:  # the mode `open(target, "w")` would leave: the old file's, else 0666 minus the umask
            self.mode = stat.S_IMODE(os.stat(self.target).st_mode)
        except FileNotFoundError:
            self.mode = 0o666 & ~umask()
        folder, name = os.path.split(self.target)
        prefix = name_stem(name, ".12345678.tmp") + "."
        fd, self.tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=folder)
        try:  # the final mode, writable by us until the commit: a library reopens it by name to write
            os.fchmod(fd, self.mode | stat.S_IRUSR | stat.S_IWUSR)
        finally:
            os.close(fd)
        self.write_path = self.tmp
        _PENDING.add(self)

    def commit(self, synced: bool = False) -> None:
        """Make the written bytes appear at `path` (fsync first unless `synced`)."""
        if self.tmp is None:
            return
        if not synced:
            with open(self.tmp, "rb") as f:
                os.fsync(f.fileno())
        os.chmod(self.tmp, self.mode)
        os.replace(self.tmp, self.target)
        self.tmp = None
        _PENDING.discard(self)

    def abort(self) -> None:
        if self.tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
            self.tmp = None
            _ABANDONED.append(self.path)
        _PENDING.discard(self)


def name_error(err: OSError, path: str, tmp: str | None = None) -> OSError:
    """`err` naming `path` where it named no file or the temp file: the CLI prints `path: strerror`."""
    if err.filename is None or (tmp is not None and err.filename == tmp):
        err.filename = path
    return err


class OutputFile(_Output):
    """An output file object for `path`: `with OutputFile(path, "w") as out: out.file.write(text)`."""

    def __init__(self, path: str | Path, mode: str = "w"):  # text: UTF-8, "\n" line ends
        self.path = os.fspath(path)
        self._committed = False
        self._staged = Staged(self.path)
        self.write_path = self._staged.write_path
        binary = "b" in mode
        fd = inherited_fd(self.path) if self._staged.in_place else None
        try:
            if fd is not None:  # after what the stream holds, never over it
                for stream in (sys.stdout, sys.stderr):
                    if stream is not None:
                        stream.flush()
                target: Any = os.dup(fd)
            else:
                target = self.write_path
            if self.path.endswith(".gz"):  # compressed, as every reader gunzips a .gz name
                self._raw: IO[Any] = open(target, "wb")
                gz: Any = gzip.GzipFile(os.path.basename(self.path), "wb", fileobj=self._raw)
                self.file: IO[Any] = gz if binary else io.TextIOWrapper(gz, "utf-8", newline="\n")
            else:
                self.file = self._raw = open(target, mode, encoding=None if binary else "utf-8",
                                             newline=None if binary else "\n")
        except BaseException:
            self._staged.abort()
            raise

    def commit(self) -> None:
        if self._committed:
            return
        self._committed = True
        if self.file is not self._raw:
            self.file.close()  # writes the gzip trailer into the raw file
        self._raw.flush()
        if not self._staged.in_place:
            os.fsync(self._raw.fileno())
        self._raw.close()
        self._staged.commit(synced=True)

    def abort(self) -> None:
        for f in (self.file, self._raw):
            with contextlib.suppress(OSError, ValueError):  # e.g. a full disk's final flush: the temp file goes anyway
                f.close()
        self._staged.abort()


class StagedFiles:
    """One `Staged` per output (`paths`: key -> path), written at `tmp[k]`: `commit()` makes them all
    appear and removes the `stale` files (`commit_all`); an error removes them instead."""

    def __init__(self, paths: dict[str, str], stale: Sequence[str] = ()):
        self.paths, self.stale = paths, list(stale)
        self.staged: dict[str, Staged] = {}
        self.tmp: dict[str, str] = {}
        try:
            for k, p in paths.items():
                self.staged[k] = Staged(p)
                self.tmp[k] = self.staged[k].write_path
        except BaseException as err:  # a temp file that cannot be made (a full disk): none stays
            self.__exit__(type(err), err, None)
            raise

    def __enter__(self) -> "StagedFiles":
        return self

    def commit(self) -> None:
        staged, self.staged = list(self.staged.values()), {}
        commit_all(staged, remove=self.stale)

    def __exit__(self, exc_type, exc, tb) -> None:
        for k, st in self.staged.items():
            st.abort()
            if isinstance(exc, OSError):
                name_error(exc, self.paths[k], self.tmp[k])


@contextlib.contextmanager
def folders_locked(folders: Sequence[str | Path]) -> Any:
    """Within: an exclusive `flock` on each of `folders` (once each, in one order: no deadlock), so
    that another process's `commit_all` there never interleaves with ours; one that cannot be
    opened or locked (some network file systems) is not waited for."""
    import fcntl

    fds = []
    try:
        for folder in sorted({os.path.realpath(f) for f in folders}):
            try:
                fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            fds.append(fd)
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in fds:
            os.close(fd)  # releases its flock


def _folder_of(out: Staged | OutputFile) -> str | None:
    """The folder an output is renamed into at its commit; None for one written in place."""
    staged = out._staged if isinstance(out, OutputFile) else out
    return None if staged.tmp is None else os.path.dirname(staged.tmp)


def commit_all(outputs: Sequence[Staged | OutputFile], remove: Sequence[str] = ()) -> None:
    """Make `outputs` appear, in order, then delete the `remove` files, with SIGINT and SIGTERM
    blocked and their folders locked (two runs writing the same outputs leave one's, never a mix).
    An output that fails to commit is removed with those after it, and its OSError names it."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(folders_locked([f for f in map(_folder_of, outputs) if f is not None]))
        except BaseException:  # Ctrl-C while another run commits there: nothing of this one appears
            for out in outputs:
                out.abort()
            raise
        stack.enter_context(signals.blocked())
        for i, out in enumerate(outputs):
            try:
                out.commit()
            except BaseException as err:
                for rest in outputs[i:]:
                    rest.abort()
                if isinstance(err, OSError):
                    raise name_error(err, out.path, out.write_path) from None
                raise
        for path in remove:
            with contextlib.suppress(FileNotFoundError):  # another run's commit removed it
                os.unlink(path)


def write_text(path: str | Path, text: str) -> None:
    with OutputFile(path, "w") as out:
        out.file.write(text)


def use_agg() -> None:
    """matplotlib imported to draw to files (Agg), whatever MPLBACKEND says: one it does not know (a
    notebook's "module://matplotlib_inline.backend_inline" outside one, a typo) failed the import."""
    from unittest import mock

    with mock.patch.dict(os.environ, {"MPLBACKEND": "agg"}):
        import matplotlib
    matplotlib.use("Agg")


def save_figure(fig: Any, path: str | Path, **savefig_kwargs: Any) -> None:
    """`fig.savefig` to `path` through `OutputFile` (format from the suffix unless given)."""
    savefig_kwargs.setdefault("format", Path(path).suffix.lstrip(".").lower() or "png")
    with OutputFile(path, "wb") as out:
        fig.savefig(out.file, **savefig_kwargs)
