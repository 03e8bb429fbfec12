"""Reading text corpora: UTF-8 lines with `file:line` errors, line counts and checksums.

Every reader streams. A file named .gz is gunzipped on the fly; gzip or binary bytes in a plain
file are refused. Lines end at `\\n` only (a stray `\\r` or U+2028 does not split one), so line
numbers agree with `wc -l`. A UTF-8 byte order mark at a file's start is dropped.
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import logging
import os
import sys
import zlib
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from nmtkit.errors import InputError
from nmtkit.io.checks import check_found

log = logging.getLogger(__name__)

GZIP_MAGIC = b"\x1f\x8b"
BOM = "\ufeff"  # a UTF-8 byte order mark (EF BB BF) decoded
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # little- and big-endian UTF-16 byte order marks


def _check_file(path: str | Path, pipes: bool = False) -> None:
    """A readable regular file (with `pipes`, also a FIFO, a pipe or a device); else an InputError."""
    check_found(path)
    p = Path(path)
    if not (p.is_file() or (pipes and (p.is_fifo() or p.is_char_device()))):
        raise InputError("is a directory, expected a text file" if p.is_dir() else "not a regular file", str(path))
    if not os.access(p, os.R_OK):
        raise InputError("file is not readable", str(path))


def warn_both_exist(prefixes: Iterable[str], langs: Iterable[str]) -> None:
    """A warning for each PREFIX.lang with a PREFIX.lang.gz beside it (`resolve_input` reads the first)."""
    langs = list(langs)
    for prefix in dict.fromkeys(p for p in prefixes if p):
        for lang in langs:
            plain, gz = input_candidates(prefix, lang)
            if os.path.exists(plain) and os.path.exists(gz):
                log.warning(f"{plain} and {gz} both exist: reading {plain}")


def resolve_input(prefix: str, lang: str) -> str:
    """PREFIX.lang, or PREFIX.lang.gz when only that exists; InputError when neither does."""
    plain, gz = input_candidates(prefix, lang)
    for path in (plain, gz):
        if os.path.isfile(path):
            return path
    for path in (plain, gz):  # there, but what a corpus (read twice) cannot be
        if os.path.isdir(path):
            raise InputError("is a directory, expected a text file", path)
        if os.path.exists(path):
            raise InputError("not a regular file (a corpus is read more than once: a pipe or FIFO cannot be)", path)
    root = prefix[:-3] if prefix.endswith(".gz") else prefix
    hint = f": {prefix} is a file, and PREFIX names PREFIX.{lang}: give {os.path.splitext(root)[0]}?" * os.path.isfile(prefix)
    check_found(plain, f"no such file (nor {gz}){hint}")
    return plain  # made meanwhile


def input_candidates(prefix: str, lang: str) -> tuple[str, str]:
    """The files `resolve_input` may read for PREFIX and lang (for the outputs-vs-inputs check)."""
    return f"{prefix}.{lang}", f"{prefix}.{lang}.gz"


def open_input(path: str | Path) -> IO[bytes]:
    """A binary stream of a corpus file: gunzipped on the fly when its name ends in .gz."""
    try:
        return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")
    except OSError as err:
        raise InputError(f"cannot open: {err.strerror or err}", str(path)) from None


def check_text_block(block: bytes, path: str | Path, offset: int = 0, first_line: int | None = None) -> None:
    """Refuse bytes that are not text: gzip data in a file not named .gz, CR line ends, UTF-16, a NUL
    byte. `offset`: the block's position in the file; `first_line`: its first line, where known."""
    if offset == 0 and block[:2] == GZIP_MAGIC and not str(path).endswith(".gz"):
        raise InputError("holds gzip-compressed data: name it with a .gz suffix (read as gzip) or gunzip it",
                         str(path))
    if offset == 0 and b"\n" not in block and block.count(b"\r") > 1:
        raise InputError("ends its lines with CR alone (classic Mac OS), which would read as one line: convert them, "
                         "e.g. tr '\\r' '\\n'", str(path))
    if offset == 0 and block[:2] in UTF16_BOMS:
        raise InputError("is UTF-16 text (it starts with a UTF-16 byte order mark): convert it to UTF-8, e.g. "
                         "iconv -f UTF-16 -t UTF-8", str(path))
    nul = block.find(b"\0")
    if nul >= 0:
        line = 1 + block.count(b"\n", 0, nul)
        where = f"a NUL byte at byte {offset + nul + 1}"
        if first_line is not None:
            line, offset, where = first_line + line - 1, None, "a NUL byte"
        raise InputError(f"holds binary data ({where}); expected UTF-8 text, one sentence a line", str(path),
                         line if not offset else None)


def read_blocks(path: str | Path, block_size: int = 1 << 22) -> Iterator[bytes]:
    """The (gunzipped) bytes of a corpus file in blocks, checked to be text (`check_text_block`)."""
    _check_file(path)
    offset = 0
    with open_input(path) as f:
        while True:
            try:
                block = f.read(block_size)
            except (OSError, EOFError, zlib.error) as err:
                raise _read_error(err, path) from None
            if not block:
                break
            check_text_block(block, path, offset)
            offset += len(block)
            yield block


def _read_error(err: BaseException, path: str | Path) -> InputError:
    """What a failed read of a corpus file says (gzip reports a damaged file in three ways)."""
    return InputError(f"cannot read (corrupt or truncated gzip?): {err}", str(path))


def count_lines(path: str | Path, block_size: int = 1 << 22, h=None) -> tuple[int, int]:
    """(lines, bytes) of a file's (gunzipped) text, feeding `h` (a hashlib object) if given; a last
    line without a newline counts too."""
    n = nbytes = 0
    last = b"\n"
    for block in read_blocks(path, block_size):
        if h is not None:
            h.update(block)
        n += block.count(b"\n")
        nbytes += len(block)
        last = block[-1:]
    return n + (last != b"\n"), nbytes


def count_lines_and_hash(path: str | Path, block_size: int = 1 << 22) -> tuple[int, str]:
    """(number of lines, sha256 hex digest) of a file's (gunzipped) text, in one pass."""
    h = hashlib.sha256()
    return count_lines(path, block_size, h)[0], h.hexdigest()


def read_lines_and_hash(path: str | Path) -> tuple[list[str], str]:
    """`read_lines` of a (small) file, as a list, and `count_lines_and_hash`'s sha256, from one read."""
    data = b"".join(read_blocks(path))
    return decode_lines(data, str(path)), hashlib.sha256(data).hexdigest()


def check_counts(first: tuple[str, int], others: Iterable[tuple[str, int]], why: str = "") -> None:
    """Each (name, lines) in `others` must have as many lines as `first`, else an InputError."""
    name0, n0 = first
    for name, n in others:
        if n != n0:
            raise InputError(f"line counts differ: {name0} has {n0} lines, {name} has {n} lines{why}")


def read_lines(path: str | Path) -> Iterator[str]:
    """Lines of a UTF-8 file without their line ending, streamed; InputError naming the first bad line."""
    _check_file(path, pipes=True)
    with open_input(path) as f:
        try:
            yield from stream_lines(f, str(path))
        except (OSError, EOFError, zlib.error) as err:
            raise _read_error(err, path) from None


def decode_lines(data: bytes, path: str | Path, first: int = 1, file_start: bool | None = None) -> list[str]:
    """Whole lines as bytes -> the lines without their `\\n` (and one `\\r` before it): the one UTF-8
    line decoder. `first`: the block's first line number, for errors; `file_start`: whether the block
    begins the file (default: first == 1), where a byte order mark is dropped."""
    if not data:
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = first + data.count(b"\n", 0, err.start)
        col = err.start - data.rfind(b"\n", 0, err.start)  # counted from 1, as cmp and editors count
        raise InputError(f"invalid UTF-8 ({err.reason} at byte {col} of the line)", str(path), line) from None
    if (first == 1 if file_start is None else file_start) and text.startswith(BOM):
        text = text[1:]
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    if "\r" in text:
        lines = [x[:-1] if x.endswith("\r") else x for x in lines]
    return lines


def decode_line(raw: bytes, path: str | Path, lineno: int) -> str:
    """One line of bytes, with or without its line end, as text (`decode_lines` of one line)."""
    lines = decode_lines(raw, path, lineno)
    return lines[0] if lines else ""


LINE_CHUNK = 1 << 20  # `stream_lines` reads a line this many bytes at a time


def stream_lines(stream: IO[bytes], name: str) -> Iterator[str]:
    """The lines of an open binary stream (e.g. stdin), each decoded (`decode_line`) as soon as it
    arrives. A line is read no further than its first NUL byte: a file of zeros is refused at once."""
    pos = 0  # the line's first byte in the stream: only the first line can start a gzip or UTF-16 file
    lineno = 0
    while raw := stream.readline(LINE_CHUNK):
        lineno += 1
        parts = [raw]
        while not raw.endswith(b"\n") and b"\0" not in raw and (raw := stream.readline(LINE_CHUNK)):
            parts.append(raw)
        line = b"".join(parts)
        check_text_block(line, name, pos, first_line=lineno)  # binary data is never silently dropped or scored
        pos += len(line)
        yield decode_line(line, name, lineno)


def read_all_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 text file at once, without their line ends; "-" reads standard input."""
    name = str(path)
    if name != "-":
        check_found(name)
    if os.path.isdir(name):
        raise InputError("is a directory, expected a text file", name)
    try:
        if name == "-":
            data, name = sys.stdin.buffer.read(), "<stdin>"
        else:
            with open_input(path) as f:
                data = f.read()
    except (OSError, EOFError, zlib.error) as err:
        raise InputError(f"cannot read: {getattr(err, 'strerror', None) or err}", name) from None
    check_text_block(data, name)
    return decode_lines(data, name)


def check_parallel(src: str | Path, tgt: str | Path, count=count_lines_and_hash) -> tuple[int, Any, Any]:
    """(lines, x of src, x of tgt) of two different parallel files of as many lines, where `count`
    gives (lines, x) of a file: by default x is its sha256."""
    with contextlib.suppress(OSError):  # one file given as both sides is refused (through symlinks too)
        if os.path.samefile(src, tgt):
            raise InputError(f"is the same file as {tgt}: the source and target sides must be different files",
                             str(src))
    n_src, x_src = count(src)
    n_tgt, x_tgt = count(tgt)
    check_counts((str(src), n_src), [(str(tgt), n_tgt)], ": a parallel corpus needs equal line counts")
    return n_src, x_src, x_tgt
