"""Folders as outputs: built whole under a temporary name and swapped into place, replaced by
--force only when nmtkit wrote everything in them, written by one process at a time (`DirLock`);
and the files of a training run directory. Nothing here imports torch.
"""
from __future__ import annotations

import contextlib
import errno
import glob
import os
import re
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from nmtkit import signals
from nmtkit.errors import InputError, OutputError
from nmtkit.io.files import file_identity, folders_locked, name_error, name_stem, umask

T = TypeVar("T")
_TMP_DIR = re.compile(r"\.tmp-(?P<host>.+)-(?P<pid>\d+)-[a-z0-9_]+$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stem(dest: Path, tail: str = "") -> str:
    """`dest`'s name cut to leave room for `tail` (default: the longest .tmp-HOST-PID-XXXXXXXX)."""
    return name_stem(dest.name, tail or f".tmp-{socket.gethostname()}-4194304-12345678")


def make_temp_dir(dest: str | Path) -> Path:
    """An empty `DEST.tmp-HOST-PID-XXXX` beside `dest`, with the mode `mkdir` would give; an OSError
    where that mode keeps this process out of it (umask 777)."""
    dest = Path(dest)
    tmp = Path(tempfile.mkdtemp(prefix=f"{_stem(dest)}.tmp-{socket.gethostname()}-{os.getpid()}-", dir=dest.parent))
    os.chmod(tmp, 0o777 & ~umask())
    if not os.access(tmp, os.R_OK | os.W_OK | os.X_OK):
        os.rmdir(tmp)
        raise PermissionError(errno.EACCES, f"umask {umask():04o} keeps its owner out of the folders it makes (try "
                              "umask 022)", str(dest))
    return tmp


def make_parents(path: str | Path) -> list[Path]:
    """Create the missing folders above `path`; those created, outermost first (one another process
    creates meanwhile is used, not counted)."""
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


def new_folders(path: str | Path) -> list[Path]:
    """`path` and the folders above it that do not exist yet, the outermost first."""
    p = Path(path).absolute()
    return [q for q in reversed([p, *p.parents]) if not q.exists()]


def take_back_folders(created: list[Path], owns: Callable[[str], bool]) -> None:
    """Remove the folders `new_folders` listed as far as they hold nothing but the files of the
    innermost that `owns(name)` says a failed run wrote."""
    with contextlib.suppress(OSError):  # one this process cannot list (umask 777) holds nothing
        for name in os.listdir(created[-1]) if created else ():
            if owns(name):
                (created[-1] / name).unlink(missing_ok=True)
    remove_folders(created)


def remove_folders(created: list[Path]) -> None:
    """Remove the folders `make_parents` created, innermost first, where empty (each is tried: under
    umask 777 one inside a folder of mode 000 cannot be reached, while that folder can)."""
    for p in reversed(created):
        with contextlib.suppress(OSError):
            p.rmdir()


def clean_stale_temp_dirs(dest: str | Path, warn: Callable[[str], None], locked: bool = False) -> list[Path]:
    """Remove (and return) the `DEST.tmp-*` directories left by a killed run of this host (pid dead
    or none holding them; with `locked` all of this host's); `warn` about the others."""
    dest = Path(dest)
    removed: list[Path] = []  # a missing parent globs nothing
    host = socket.gethostname()
    for p in sorted(dest.parent.glob(f"{glob.escape(_stem(dest))}.tmp-*")):
        if not p.is_dir():
            continue
        m = _TMP_DIR.search(p.name)
        if m and m["host"] == host and (locked or int(m["pid"]) != os.getpid() and not _pid_alive(int(m["pid"]))
                                        or not _held(p)):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
        elif m and m["host"] == host and _pid_alive(int(m["pid"])):
            warn(f"{p} is being written by process {m['pid']} (another run to the same destination?)")
        else:
            warn(f"{p} looks like the temp directory of an interrupted run; remove it if no run is using it")
    return removed


def _held(folder: Path) -> bool:
    """Whether a process holds an flock on `folder`; True where that cannot be told."""
    import fcntl

    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


@contextlib.contextmanager
def held_temp_dir(dest: str | Path, warn: Callable[[str], None]) -> Iterator[Path]:
    """A new temp folder beside `dest`, flocked within, made once the stale ones are removed; both
    under their folder's lock, so that another run's cleaning never sees it before it is held."""
    with contextlib.ExitStack() as held:
        with folders_locked([Path(dest).parent]):
            for stale in clean_stale_temp_dirs(dest, warn):
                warn(f"removed {stale}, left by an interrupted run")
            tmp = make_temp_dir(dest)
            held.enter_context(folders_locked([tmp]))
        yield tmp


def swap_in_dir(tmp: str | Path, dest: str | Path, check: Callable[[], None] = lambda: None) -> Path | None:
    """Put the finished folder `tmp` at `dest` once `check()` passes, the folder there renamed aside
    and deleted after, all under their folder's lock (two runs at once leave the later one's).
    Returns what is left of the old one where it could not be deleted whole, else None. The new
    folder takes the old one's mode, as a file written over keeps its own."""
    tmp, dest = Path(tmp), Path(dest)
    # never stopped between the renames: the old folder aside, no folder at dest
    with folders_locked([dest.parent]), signals.blocked():
        check()
        if not dest.exists():
            os.rename(tmp, dest)
            return None
        os.chmod(tmp, stat.S_IMODE(os.stat(dest).st_mode))
        old = Path(tempfile.mkdtemp(prefix=_stem(dest, ".old-12345678") + ".old-", dir=dest.parent))
        os.rmdir(old)
        os.rename(dest, old)
        os.rename(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
    return old if old.exists() else None


def read_one_folder(path: str | Path, read: Callable[[], T], tries: int = 3) -> T:
    """`read()` of files of the folder `path`, again where `swap_in_dir` replaced it meanwhile, so
    that all it returns comes from one folder; an InputError where it was replaced at every try."""
    for _ in range(tries):
        before = file_identity(path)
        result = read()
        if file_identity(path) == before:
            return result
    raise InputError(f"was replaced {tries} times while being read (another 'nmtkit preprocess --force' writing it?): "
                     "run again once it is done", str(path))


def check_replaceable_dir(path: str | Path, owned: Callable[[str], bool], what: str) -> None:
    """OutputError naming a file (or empty folder) in `path` that `owned(relative path)` says
    nmtkit did not write: --force would delete it."""
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
    """`os.open(path, flags)` for a file written in place (a lock, a log), refusing with an
    OutputError a symbolic link, a FIFO or a device, which would redirect the write."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666 & ~umask())
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise OutputError(_A_LINK, str(path)) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise OutputError(_NOT_A_FILE, str(path))
    if not mode & stat.S_IWUSR:  # made under umask 0222: its owner's next run, under any umask, could not open it
        with contextlib.suppress(OSError):
            os.fchmod(fd, stat.S_IMODE(mode) | stat.S_IWUSR)
    return fd


class DirLock:
    """An exclusive `flock` on `path/name`, which holds the holder's PID, so that one process at a
    time writes in `path`; released by the kernel when its process dies. The file stays (removing
    it would race with a process that has just opened it)."""

    def __init__(self, path: str | Path, name: str, what: str):
        self.path = Path(path) / name
        self.what = what
        self.fd: int | None = None

    def check(self) -> None:
        """Refuse now, as `acquire` would, creating nothing."""
        if not self.path.parent.is_dir():  # no folder to hold one (a link to nothing or to itself too)
            return  # `acquire` decides, after the caller's checks
        try:
            fd = open_in_place(self.path, os.O_RDWR)
        except FileNotFoundError:
            return  # no lock file
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

LAST = "checkpoint_last.pt"
CONFIG_FILE = "config.json"  # the run's resolved configuration, written at its start (`config_text`)
BEST = "checkpoint_best.pt"
STAGING = ".run"  # a new run is built in RUN/.run.tmp-HOST-PID-XXXX until its first checkpoint
RUN_LOG = "train.log"  # nmtkit.train.metrics
RUN_FILES = (LAST, BEST, "metrics.jsonl", "curves.png", RUN_LOG, CONFIG_FILE)
TB_EVENTS = "events.out.tfevents"  # the start of the names of the files --tensorboard writes

LOCK_FILE = "train.lock"


def run_lock(save_dir: str | Path) -> DirLock:
    return DirLock(save_dir, LOCK_FILE, "run directory (one training run at a time)")


_KEPT = re.compile(r"checkpoint_([0-9]+)\.pt")


def kept_name(update: int) -> str:
    return f"checkpoint_{update}.pt"


def kept_update(name: str) -> int | None:
    """The update of a kept checkpoint's file name; None for any other name."""
    m = _KEPT.fullmatch(name)
    return int(m[1]) if m else None


def kept_checkpoints(save_dir: str | Path) -> list[Path]:
    """The kept checkpoints of a run directory, oldest update first."""
    kept = [(kept_update(p.name), p) for p in Path(save_dir).glob("checkpoint_*.pt")]
    return [p for update, p in sorted((u, p) for u, p in kept if u is not None)]


def has_checkpoint(names: list[str]) -> bool:
    """Whether a run directory's file `names` (`run_files_present`) include a checkpoint."""
    return any(f.startswith("checkpoint_") for f in names)


def check_run_files_are_files(save_dir: Path) -> None:
    """OutputError naming a run file (or the lock) that is a symbolic link or not a regular file."""
    for name in (*RUN_FILES, LOCK_FILE):
        path = save_dir / name
        if path.is_symlink():
            raise OutputError(_A_LINK, str(path))
        if path.exists() and not path.is_file():
            raise OutputError(_NOT_A_FILE, str(path))


def is_run_file(name: str) -> bool:
    """Whether a file of this name in a run directory is one the run writes (and --force deletes)."""
    return (name in RUN_FILES or name == "tensorboard" or name.startswith(f"{STAGING}.tmp-")
            or kept_update(name) is not None)


def run_files_present(save_dir: Path) -> list[str]:
    """The names of a run's files (RUN_FILES and kept checkpoints) present in `save_dir`."""
    return [f for f in RUN_FILES if (save_dir / f).exists()] + [p.name for p in kept_checkpoints(save_dir)]


def commit_run(staging: Path, save_dir: Path, replace: bool) -> Path:
    """Rename the files of `staging` (a new run's, at its first checkpoint) into `save_dir` with
    SIGINT/SIGTERM blocked; with `replace` (--force) the old run's other files and tensorboard
    events are deleted first, never the user's. Returns `save_dir`."""
    with signals.blocked():
        new = sorted(os.listdir(staging))
        if replace:
            for name in run_files_present(save_dir):  # one the new run has is replaced in one step, never missing
                if name not in new:
                    (save_dir / name).unlink(missing_ok=True)
            old_events = list((save_dir / "tensorboard").glob(f"{TB_EVENTS}*"))
            for event_file in old_events:  # the old run's curves; anything else there is the user's
                event_file.unlink(missing_ok=True)
            if old_events:
                with contextlib.suppress(OSError):  # a folder holding the user's files stays
                    (save_dir / "tensorboard").rmdir()
        for name in new:
            if name == "tensorboard" and (save_dir / name).is_dir():  # an earlier run's curves a start allows
                for event_file in os.listdir(staging / name):
                    os.replace(staging / name / event_file, save_dir / name / event_file)
                (staging / name).rmdir()
            else:
                os.replace(staging / name, save_dir / name)
        staging.rmdir()
    return save_dir
