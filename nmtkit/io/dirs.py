"""Folders as outputs: built whole under a temporary name and renamed into place (preprocess's
data directory), replaced by --force only when nmtkit wrote everything in them, written by one
process at a time (`DirLock`: one training run per run directory), and the files of a training
run directory (checkpoint names, `train --force` setting the old run aside and putting it back,
a failed start's files removed). Files are `nmtkit.io.files`'. Nothing here imports torch.
"""
from __future__ import annotations

import errno
import glob
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Callable

from nmtkit.errors import OutputError
from nmtkit.io.files import name_error, umask

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
    for p in sorted(dest.parent.glob(f"{glob.escape(dest.name)}.tmp-*")):
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


def swap_in_dir(tmp: str | Path, dest: str | Path) -> Path | None:
    """Put the finished folder `tmp` at `dest`: a folder already there is renamed aside first, and
    deleted only once `tmp` has taken its place. Returns what is left of the old one when it could
    not be deleted whole (e.g. a read-only folder inside it), else None."""
    tmp, dest = Path(tmp), Path(dest)
    if not dest.exists():
        os.rename(tmp, dest)
        return None
    old = Path(tempfile.mkdtemp(prefix=dest.name + ".old-", dir=dest.parent))
    os.rmdir(old)
    os.rename(dest, old)
    os.rename(tmp, dest)
    shutil.rmtree(old, ignore_errors=True)
    return old if old.exists() else None


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

_A_LINK = "is a symbolic link, where nmtkit writes a file of its own: remove it"
_NOT_A_FILE = "is not a regular file, where nmtkit writes a file of its own: remove it"


def open_in_place(path: str | Path, flags: int) -> int:
    """`os.open(path, flags)` for a file written in place (not by rename: a lock, a log appended to),
    refusing what would redirect the write: a symbolic link (the file it points to would be
    truncated or appended to), a FIFO or a device. OutputError naming the file; FileNotFoundError
    as os.open raises it."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666 & ~umask())
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise OutputError(_A_LINK, str(path)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OutputError(_NOT_A_FILE, str(path))
    return fd


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
            fd = open_in_place(self.path, os.O_RDWR)
        except FileNotFoundError:
            return  # no lock file: `acquire` decides
        self._lock(fd)
        os.close(fd)

    def acquire(self) -> "DirLock":
        fd = open_in_place(self.path, os.O_RDWR | os.O_CREAT)
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


# ---- the files of a training run directory ---------------------------------------------------------

log = logging.getLogger("nmtkit.train")

LAST = "checkpoint_last.pt"
CONFIG_FILE = "config.json"  # the run's resolved configuration, written at its start (`config_text`)
BEST = "checkpoint_best.pt"
# `train --force` moves the run it replaces here, until the new run saves its first checkpoint
# (then it is deleted) or fails before it (then it is put back): nmtkit.train.run
REPLACED = ".replaced-run"
RUN_LOG = "train.log"  # nmtkit.train.metrics
RUN_FILES = (LAST, BEST, "metrics.jsonl", "curves.png", RUN_LOG, CONFIG_FILE)

LOCK_FILE = "train.lock"


def run_lock(save_dir: str | Path) -> DirLock:
    """The lock of `save_dir` (one training process per run directory): `acquire` or `check`
    raise an OutputError naming the holder's PID when another live `nmtkit train` holds it."""
    return DirLock(save_dir, LOCK_FILE, "run directory (one training run at a time)")


_KEPT = re.compile(r"checkpoint_([0-9]+)\.pt")


def kept_name(update: int) -> str:
    """The file name of the model kept at `update`."""
    return f"checkpoint_{update}.pt"


def kept_update(name: str) -> int | None:
    """The update of a kept checkpoint's file name; None for any other name."""
    m = _KEPT.fullmatch(name)
    return int(m[1]) if m else None


def kept_checkpoints(save_dir: str | Path) -> list[Path]:
    """The kept checkpoints of a run directory, oldest update first."""
    kept = [(kept_update(p.name), p) for p in Path(save_dir).glob("checkpoint_*.pt")]
    return [p for update, p in sorted((u, p) for u, p in kept if u is not None)]


def discard_replaced(save_dir: str | Path) -> None:
    """Delete the run that `train --force` set aside, once the new run has a checkpoint."""
    shutil.rmtree(Path(save_dir) / REPLACED, ignore_errors=True)


def has_checkpoint(names: list[str]) -> bool:
    """Whether a run directory's file `names` (`run_files_present`) include a checkpoint."""
    return any(f.startswith("checkpoint_") for f in names)


def check_run_files_are_files(save_dir: Path) -> None:
    """OutputError naming the first of a run's own files (and its lock) in `save_dir` that is a
    symbolic link or not a regular file: the run would write through it (truncating, appending to
    or replacing what it points to)."""
    for name in (*RUN_FILES, LOCK_FILE):
        path = save_dir / name
        if path.is_symlink():
            raise OutputError(_A_LINK, str(path))
        if path.exists() and not path.is_file():
            raise OutputError(_NOT_A_FILE, str(path))


def is_run_file(name: str) -> bool:
    """Whether a file of this name in a run directory is one the run writes (and --force deletes)."""
    return name in RUN_FILES or name in ("tensorboard", REPLACED) or kept_update(name) is not None


def run_files_present(save_dir: Path) -> list[str]:
    """The names of a run's files (RUN_FILES and kept checkpoints) present in `save_dir`."""
    return [f for f in RUN_FILES if (save_dir / f).exists()] + [p.name for p in kept_checkpoints(save_dir)]


def clear_run_dir(save_dir: Path) -> None:
    for f in RUN_FILES:
        (save_dir / f).unlink(missing_ok=True)
    for p in kept_checkpoints(save_dir):
        p.unlink(missing_ok=True)
    shutil.rmtree(save_dir / "tensorboard", ignore_errors=True)


def set_aside_run(save_dir: Path) -> None:
    """`--force`: move the old run's files into RUN/.replaced-run (see the module docstring). A
    run already set aside by a start that never saved a checkpoint (killed) stays the one kept."""
    aside = save_dir / REPLACED
    names = run_files_present(save_dir) + (["tensorboard"] if (save_dir / "tensorboard").exists() else [])
    if aside.is_dir() and not has_checkpoint(names):
        clear_run_dir(save_dir)
        return
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir()
    for name in names:
        os.replace(save_dir / name, aside / name)


def restore_replaced_run(save_dir: Path, why: str = "the --force start saved no checkpoint") -> None:
    """Put back the run `--force` set aside when the new run failed before its first checkpoint
    (`why`: for the warning)."""
    aside = save_dir / REPLACED
    if not aside.is_dir() or (save_dir / LAST).exists():
        return
    clear_run_dir(save_dir)
    for p in aside.iterdir():
        os.replace(p, save_dir / p.name)
    aside.rmdir()
    log.warning("%s: the run --force was to replace is back in place (%s)", save_dir, why)


def killed_force_start(save_dir: Path) -> bool:
    """Whether RUN/.replaced-run holds a run that a `--force` start set aside and then died
    (SIGKILL, a lost machine) before saving a checkpoint of its own: a start that fails puts the
    run back itself, and one that saves a checkpoint deletes it."""
    return (save_dir / REPLACED).is_dir() and not has_checkpoint(run_files_present(save_dir))


def discard_unstarted_run(save_dir: Path, resume: bool, before: set[str]) -> None:
    """A new run that failed before its first checkpoint (a model too large for memory, data that
    --max-len leaves empty): the run files it wrote (config.json, train.log, ...) go, so that the
    folder does not look like a run's; what was there before it started (`before`: names) stays.
    The lock file stays too (see DirLock)."""
    if resume or (save_dir / LAST).exists() or kept_checkpoints(save_dir):
        return
    for name in sorted(run_dir_names(save_dir) - before, reverse=True):
        path = save_dir / name
        if name in RUN_FILES or name.startswith("tensorboard"):
            if path.is_dir():
                path.rmdir()  # its new files, named after it, went first
            else:
                path.unlink(missing_ok=True)


def run_dir_names(save_dir: Path) -> set[str]:
    """The names in a run folder, and those in its tensorboard/ folder as tensorboard/NAME."""
    tb = save_dir / "tensorboard"
    return set(os.listdir(save_dir)) | ({f"tensorboard/{n}" for n in os.listdir(tb)} if tb.is_dir() else set())
