"""select-data's reading and scoring: the parallel corpora (`Corpus`: one or more
PREFIX.{src,tgt}[.gz] read in order, as raw lines, undecoded blocks for the workers or decoded
pairs), lines -> LM tokens (`TextOpts`), and tokens -> the four cross-entropies per pair
(`Scorer`), in parallel over blocks of the pool (`score_pool`), each worker process holding the
scorer `parallel_map` gave it (`worker_state`).
"""
from __future__ import annotations

import functools
import itertools
from array import array
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from nmtkit.errors import InputError
from nmtkit.progress import Progress
from nmtkit.select.ngram import FlatBatch, LMVocab, NgramLM, flat_batch
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
from nmtkit.text.parallel import parallel_map, worker_state
from nmtkit.text.pipeline import TextPipeline

CHUNK_PAIRS = 2000  # pairs per block sent to a worker
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
            s, t = resolve_input(prefix, src_lang), resolve_input(prefix, tgt_lang)
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
            with open_input(s) as fs, open_input(t) as ft:
                n = 0
                for n, (a, b) in enumerate(zip(fs, ft), start=1):  # noqa: B007
                    yield (a.removeprefix(_BOM), b.removeprefix(_BOM)) if n == 1 else (a, b)
                # the counts were checked up front; a file changed under us is still an error
                if fs.readline() or ft.readline():
                    raise InputError(f"{s} and {t} changed while reading (line counts differ)")

    def blocks(self, size: int) -> Iterator["Block"]:
        """The pairs in blocks of `size` lines, undecoded: the parent only reads, workers decode."""
        for s, t in zip(self.src_paths, self.tgt_paths):
            with open_input(s) as fs, open_input(t) as ft:
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
            with open_input(s) as fs, open_input(t) as ft:
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


@dataclass(frozen=True)
class TextOpts:
    """How select-data turns a line into LM tokens: the text pipeline's steps 0-3 (Moses
    normalisation and tokenisation unless the input is "tok", then lowercasing), no BPE."""

    pipeline: TextPipeline
    input_format: str

    @property
    def lowercase(self) -> bool:
        return self.pipeline.lowercase

    def tokens(self, line: str, side: str) -> list[str]:
        p = self.pipeline
        return p.case(p.tokenize_from(line, side, self.input_format), side)


def _tokenize_pair(opts: TextOpts, pair: tuple[str, str]) -> tuple[list[str], list[str]]:
    return opts.tokens(pair[0], "src"), opts.tokens(pair[1], "tgt")


@dataclass
class Scorer:
    """The four LMs and their two vocabularies; `score_lines` turns pairs into cross-entropies."""

    opts: TextOpts
    src_vocab: LMVocab
    tgt_vocab: LMVocab
    in_src: NgramLM
    out_src: NgramLM
    in_tgt: NgramLM
    out_tgt: NgramLM

    def _score(self, src: FlatBatch, tgt: FlatBatch) -> np.ndarray:
        """(N, 6) float64: H_in(src), H_out(src), H_in(tgt), H_out(tgt), src tokens, tgt tokens."""
        out = np.empty((src.lens.size, 6))
        out[:, 0] = self.in_src.batch_cross_entropies(src)
        out[:, 1] = self.out_src.batch_cross_entropies(src)
        out[:, 2] = self.in_tgt.batch_cross_entropies(tgt)
        out[:, 3] = self.out_tgt.batch_cross_entropies(tgt)
        out[:, 4] = src.lens - 1
        out[:, 5] = tgt.lens - 1
        return out

    def score_lines(self, src: list[str], tgt: list[str]) -> np.ndarray:
        """(N, 6) as `_score`, from lines in the configured input format."""
        o = self.opts
        if o.input_format == "tok":  # fast path: split and look up the whole chunk at once
            return self._score(self.src_vocab.encode_lines(src, o.lowercase),
                               self.tgt_vocab.encode_lines(tgt, o.lowercase))
        toks = [_tokenize_pair(o, pair) for pair in zip(src, tgt)]
        return self._score(self.src_vocab.encode_batch([s for s, _ in toks]),
                           self.tgt_vocab.encode_batch([t for _, t in toks]))


def score_block(block: Block) -> np.ndarray:
    """(n, 6) cross-entropies and lengths of a block of pool lines, by the map's scorer: a forked
    worker gets the LMs from its parent's memory, not pickled with each block."""
    scorer: Scorer = worker_state()
    return scorer.score_lines(*block.lines())


@dataclass
class IdPairs:
    """Tokenised (src, tgt) pairs held as ids, not text (4 bytes a token): per side (0 src, 1 tgt)
    a flat int32 array of ids and each pair's length in tokens."""

    ids: tuple[np.ndarray, np.ndarray]
    lens: tuple[np.ndarray, np.ndarray]

    def sizes(self) -> dict[str, int]:
        return {"pairs": len(self.lens[0]), "src_tokens": int(self.lens[0].sum()),
                "tgt_tokens": int(self.lens[1].sum())}

    def batch(self, side: int) -> FlatBatch:
        """One side's sentences as a FlatBatch (what `NgramLM.estimate` counts)."""
        return flat_batch(self.ids[side], self.lens[side])

    def take(self, order: np.ndarray) -> "IdPairs":
        """The pairs `order` (indices), in that order."""
        ids, lens = [], []
        for side in (0, 1):
            ends = np.cumsum(self.lens[side], dtype=np.int64)
            starts = ends - self.lens[side]
            parts = [self.ids[side][starts[r]:ends[r]] for r in order]
            ids.append(np.concatenate(parts) if parts else np.zeros(0, np.int32))
            lens.append(self.lens[side][order])
        return IdPairs((ids[0], ids[1]), (lens[0], lens[1]))


def tokenize_ids(opts: TextOpts, pairs: Iterable[tuple[str, str]], workers: int,
                 encode: Sequence[Callable[[list[str]], list[int]]]) -> IdPairs:
    """Every (src, tgt) line pair as LM tokens, over `workers` processes in chunks of CHUNK_PAIRS,
    each side's tokens turned into ids by `encode[side]` as they come: the text is never held."""
    ids, lens = (array("i"), array("i")), (array("i"), array("i"))
    for pair in parallel_map(functools.partial(_tokenize_pair, opts), pairs, workers, CHUNK_PAIRS):
        for side in (0, 1):
            ids[side].extend(encode[side](pair[side]))
            lens[side].append(len(pair[side]))
    as_np = [np.frombuffer(a, dtype=np.int32) if len(a) else np.zeros(0, np.int32) for a in (*ids, *lens)]
    return IdPairs((as_np[0], as_np[1]), (as_np[2], as_np[3]))


def score_pool(scorer: Scorer, pool: Corpus, workers: int,
               progress: Progress) -> tuple[np.ndarray, np.ndarray]:
    """Score the pool, streaming blocks of lines over `workers` processes: (h (n, 4) float32
    cross-entropies in_src, out_src, in_tgt, out_tgt; lens (n, 2) int32 src/tgt tokens)."""
    n_pool = pool.total
    h = np.empty((n_pool, 4), dtype=np.float32)
    lens = np.empty((n_pool, 2), dtype=np.int32)
    done = 0
    progress("score", 0, n_pool)
    for res in parallel_map(score_block, pool.blocks(CHUNK_PAIRS), workers, 1, state=scorer):
        m = res.shape[0]
        h[done:done + m] = res[:, :4]
        lens[done:done + m] = res[:, 4:]
        done += m
        progress("score", done, n_pool)
    assert done == n_pool
    return h, lens


# ---- PREFIX.scores.tsv, formatted over the same worker processes

_SCORE_ROWS = 100_000


def _format_rows(lo: int) -> str:
    """TSV text of rows lo .. lo + _SCORE_ROWS of the map's arrays (runs in workers)."""
    scores, h, lens, mask = worker_state()
    hi = min(lo + _SCORE_ROWS, scores.size)
    rows = zip(range(lo + 1, hi + 1), scores[lo:hi].tolist(), *(h[lo:hi, j].tolist() for j in range(4)),
               lens[lo:hi, 0].tolist(), lens[lo:hi, 1].tolist(), mask[lo:hi].tolist())
    return "".join(f"{i}\t{s:.6f}\t{a:.6f}\t{b:.6f}\t{c:.6f}\t{d:.6f}\t{ns}\t{nt}\t{int(m)}\n"
                   for i, s, a, b, c, d, ns, nt, m in rows)


def write_scores(path: str, scores: np.ndarray, h: np.ndarray, lens: np.ndarray, mask: np.ndarray,
                  workers: int = 1) -> None:
    """TSV: line (1-based pool line), score, h_in_src, h_out_src, h_in_tgt, h_out_tgt, src/tgt tokens, selected.

    Formatting runs over `workers` processes, which see the arrays by fork.
    """
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("line\tscore\th_in_src\th_out_src\th_in_tgt\th_out_tgt\tsrc_tokens\ttgt_tokens\tselected\n")
        starts = range(0, scores.size, _SCORE_ROWS)
        for text in parallel_map(_format_rows, starts, workers, 1, state=(scores, h, lens, mask)):
            fh.write(text)
