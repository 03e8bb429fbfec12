"""Reading select-data's parallel corpora: one or more PREFIX.{src,tgt}[.gz] read in order,
streamed as raw lines, undecoded blocks (for the workers) or decoded pairs. numpy-free.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from nmtkit.errors import InputError
from nmtkit.text.io import (
    BOM,
    PARALLEL_WHY,
    check_counts,
    check_distinct,
    count_lines,
    decode_line,
    decode_lines,
    open_input,
    resolve_input,
)

# A progress callback: (stage, done, total) with stage in "count", "sample", "score", "write".
Progress = Callable[[str, int, int], None]

resolve = resolve_input  # PREFIX.lang, or PREFIX.lang.gz when only that exists (nmtkit.text.io)
_open_bin = open_input
_BOM = BOM.encode("utf-8")


@dataclass
class Corpus:
    """A parallel corpus made of one or more prefixes, read in order."""

    src_paths: list[str]
    tgt_paths: list[str]
    lines: list[int]      # per part
    src_bytes: int
    tgt_bytes: int

    @property
    def total(self) -> int:
        return sum(self.lines)

    def paths(self, side: str) -> list[str]:
        """The files of one side, "src" or "tgt", in reading order."""
        return self.src_paths if side == "src" else self.tgt_paths

    def name(self, side: str) -> str:
        """One side's files as a message names them (several are read in order)."""
        return " + ".join(self.paths(side))

    @classmethod
    def open(cls, prefixes: Sequence[str], src_lang: str, tgt_lang: str) -> "Corpus":
        """Resolve the files and check that each pair has as many lines on both sides."""
        srcs, tgts, counts, nbytes, tbytes = [], [], [], 0, 0
        for prefix in prefixes:
            s, t = resolve(prefix, src_lang), resolve(prefix, tgt_lang)
            check_distinct(s, t)
            (ns, bs), (nt, bt) = count_lines(s), count_lines(t)
            check_counts((s, ns), [(t, nt)], PARALLEL_WHY)
            srcs.append(s)
            tgts.append(t)
            counts.append(ns)
            nbytes += bs
            tbytes += bt
        return cls(srcs, tgts, counts, nbytes, tbytes)

    def locate(self, i: int) -> tuple[int, int]:
        """(part, 1-based line) of the 0-based pair number i."""
        for part, n in enumerate(self.lines):
            if i < n:
                return part, i + 1
            i -= n
        raise IndexError(i)

    def raw_pairs(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (src, tgt) line as bytes, newline included; a file's leading byte order mark is
        left out, as every reader drops it (copied, it would land inside a selection's text)."""
        for s, t in zip(self.src_paths, self.tgt_paths):
            with _open_bin(s) as fs, _open_bin(t) as ft:
                n = 0
                for n, (a, b) in enumerate(zip(fs, ft), start=1):  # noqa: B007
                    yield (a.removeprefix(_BOM), b.removeprefix(_BOM)) if n == 1 else (a, b)
                # the counts were checked up front; a file changed under us is still an error
                if fs.readline() or ft.readline():
                    raise InputError(f"{s} and {t} changed while reading (line counts differ)")

    def blocks(self, size: int) -> Iterator["Block"]:
        """The pairs in blocks of `size` lines, undecoded: the parent only reads, workers decode."""
        for s, t in zip(self.src_paths, self.tgt_paths):
            with _open_bin(s) as fs, _open_bin(t) as ft:
                first = 1
                while True:
                    a = list(itertools.islice(fs, size))
                    b = list(itertools.islice(ft, size))
                    if len(a) != len(b):
                        raise InputError(f"{s} and {t} changed while reading (line counts differ)")
                    if not a:
                        break
                    yield Block(s, t, first, len(a), b"".join(a), b"".join(b))
                    first += len(a)

    def pairs(self) -> Iterator[tuple[str, str]]:
        """Every pair decoded (invalid UTF-8 is an error naming file:line)."""
        for s, t in zip(self.src_paths, self.tgt_paths):
            with _open_bin(s) as fs, _open_bin(t) as ft:
                for n, (a, b) in enumerate(zip(fs, ft), start=1):
                    yield decode_line(a, s, n), decode_line(b, t, n)


@dataclass
class Block:
    """`n` consecutive pairs from lines `first`.. of `src_path`/`tgt_path`, as raw bytes."""

    src_path: str
    tgt_path: str
    first: int
    n: int
    src: bytes
    tgt: bytes

    def lines(self) -> tuple[list[str], list[str]]:
        src, tgt = decode_lines(self.src, self.src_path, self.first), decode_lines(self.tgt, self.tgt_path, self.first)
        assert len(src) == len(tgt) == self.n
        return src, tgt
