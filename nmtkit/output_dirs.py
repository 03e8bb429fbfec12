"""Directories as outputs: built whole under a temporary name and renamed into place
(preprocess's data directory), replaced by --force only when nmtkit wrote everything in them,
and written by one process at a time (`DirLock`: one training run per run directory). Files
are `nmtkit.outputs`'. Nothing here imports torch.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Callable

from nmtkit.errors import OutputError
from nmtkit.outputs import name_error, umask

_TMP_DIR = re.compile(r"\.tmp-(?P<host>.+)-(?P<pid>\d+)-[a-z0-9_]+$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def make_temp_dir(dest: str | Path) -> Path:
    """An empty `DEST.tmp-HOST-PID-XXXX` beside `dest`, with the mode `mkdir` would give."""
    dest = Path(dest)
    tmp = Path(tempfile.mkdtemp(prefix=f"{dest.name}.tmp-{socket.gethostname()}-{os.getpid()}-", dir=dest.parent))
    os.chmod(tmp, 0o777 & ~umask())
    return tmp


def make_parents(path: str | Path) -> list[Path]:
    """Create the missing folders above `path`; returns those created, the outermost first, for
    `remove_folders` to take back when the run fails. One that another process creates meanwhile
    (two runs of a parallel make into the same new folder) is used, not counted as created."""
    created = []
    for p in reversed([p for p in Path(path).absolute().parents if not p.exists()]):
        try:
            p.mkdir()
        except FileExistsError:
            if not p.is_dir():
                raise
            continue
        created.append(p)
    return created


def remove_folders(created: list[Path]) -> None:
    """Remove the folders `make_parents` created, innermost first, as far as they are empty."""
    for p in reversed(created):
        try:
            p.rmdir()
        except OSError:
            return


def clean_stale_temp_dirs(dest: str | Path, warn: Callable[[str], None]) -> list[Path]:
    """Remove the `DEST.tmp-*` directories left by a killed run of this host (their pid is
    dead); `warn` about the others (another host's, a live process's, an old name). Returns
    the directories removed."""
    dest = Path(dest)
    removed: list[Path] = []
    if not dest.parent.is_dir():
        return removed
    host = socket.gethostname()
    for p in sorted(dest.parent.glob(f"{glob_escape(dest.name)}.tmp-*")):
        if not p.is_dir():
            continue
        m = _TMP_DIR.search(p.name)
        if m and m["host"] == host and int(m["pid"]) != os.getpid() and not _pid_alive(int(m["pid"])):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
        elif m and m["host"] == host and _pid_alive(int(m["pid"])):
            warn(f"{p} is being written by process {m['pid']} (another run to the same destination?)")
        else:
            warn(f"{p} looks like the temp directory of an interrupted run; remove it if no run is using it")
    return removed


def glob_escape(name: str) -> str:
    """`name` with glob metacharacters escaped."""
    import glob

    return glob.escape(name)


def check_replaceable_dir(path: str | Path, owned: Callable[[str], bool], what: str) -> None:
    """`--force` replaces the folder `path` only when it holds nothing but what nmtkit wrote
    there: `owned(relative path)` says which files those are (an empty folder counts as a
    file: one nmtkit did not write is the user's). Otherwise OutputError naming a file or
    folder that replacing it would have deleted."""
    root = Path(path)
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        names = sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        if not dirnames and not filenames and os.path.normpath(dirpath) != os.path.normpath(root):
            names.append("")  # the empty folder itself
        for name in names:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if not owned(rel):
                raise OutputError(f"--force would delete {rel}, which nmtkit did not write there: refusing to "
                                  f"replace the {what}; move it or choose another destination", str(root))


# ---- one process per directory ------------------------------------------------------------------

class DirLock:
    """An exclusive lock on a directory (`fcntl.flock` on `path/name`, holding the holder's PID),
    so that one process at a time writes there (one training run per run directory).

    The kernel releases the lock when its process dies, so a lock file left by a killed
    process never blocks. `acquire` raises OutputError naming the holder's PID when another
    live process holds it. The file itself stays (removing it would race with a process that
    has just opened it).
    """

    def __init__(self, path: str | Path, name: str, what: str):
        self.path = Path(path) / name
        self.what = what
        self.fd: int | None = None

    def check(self) -> None:
        """Refuse now (as `acquire` would) when a live process holds the lock, creating nothing."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return  # no lock file (or none readable): `acquire` decides
        self._lock(fd)
        os.close(fd)

    def acquire(self) -> "DirLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666 & ~umask())
        self._lock(fd)
        self.fd = fd
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as err:  # a full disk: the PID is for others' messages; say which file failed
            self.release()
            raise name_error(err, str(self.path)) from None
        return self

    def _lock(self, fd: int) -> None:
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise OutputError(f"another process (PID {holder}) is using this {self.what}; wait for it to "
                              "finish or stop it", str(self.path.parent)) from None
        except BaseException:
            os.close(fd)
            raise

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the last descriptor releases the flock
            self.fd = None

    def __enter__(self) -> "DirLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
