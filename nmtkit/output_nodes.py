"""Outputs that are no regular files: FIFOs, devices, sockets and /dev or /proc paths such as
/dev/stdout, which `nmtkit.outputs` opens and writes in place (never replaced by a renamed
temp file), and the redirected standard stream such a path may name. Nothing here imports torch.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

_SPECIAL_ROOTS = ("/dev/", "/proc/")


def _link_chain_special(path: str) -> bool:
    """True when `path` is, or is a symlink chain through, /dev or /proc (e.g. /dev/stdout)."""
    p = os.path.abspath(path)
    for _ in range(40):
        if p.startswith(_SPECIAL_ROOTS):
            return True
        if not os.path.islink(p):
            return False
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return False


def writes_in_place(path: str | Path) -> bool:
    """True when `path` must be opened and written in place, never replaced: an existing
    FIFO, character or block device, socket, or a /dev or /proc path such as /dev/stdout."""
    path = os.fspath(path)
    if _link_chain_special(path):
        return True
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)


def standard_stream_fd(path: str | Path) -> int | None:
    """1 or 2 where `path` (e.g. /dev/stdout, /proc/self/fd/1) names the regular file this
    process's stdout or stderr was redirected to, else None. Such a file is written through that
    descriptor: opened again by name it would be truncated and written from its start, over what
    the shell or an earlier command had written there (`{ echo x; nmtkit ... -o /dev/stdout; } > f`)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):  # a pipe, a terminal, /dev/null: opened again, nothing is lost
        return None
    for fd in (1, 2):
        try:
            if os.path.samestat(st, os.fstat(fd)):
                return fd
        except OSError:
            continue
    return None


def is_stdout(path: str | Path | None) -> bool:
    """Whether `path` ("-" or None included) writes where this process's stdout goes (/dev/stdout,
    /proc/self/fd/1, the file or pipe stdout was redirected to); /dev/null never counts, where
    two outputs mix harmlessly."""
    if path is None or os.fspath(path) == "-":
        return True
    try:
        st = os.stat(path)
        return os.path.samestat(st, os.fstat(1)) and not os.path.samestat(st, os.stat(os.devnull))
    except OSError:
        return False
