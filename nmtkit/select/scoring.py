"""select-data's reading and scoring: the parallel corpora (`Corpus`), lines -> LM tokens
(`TextOpts`), and one side's lines -> its in- and out-of-domain cross-entropies (`Scorer`), in
parallel over blocks of the pool (`score_pool`).
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
from nmtkit.select.ngram import LM_UNK_ID, FlatBatch, LMVocab, NgramLM, flat_batch
from nmtkit.text.io import (
    BOM,
    check_parallel,
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
        parts = []
        for prefix in prefixes:
            s, t = resolve_input(prefix, src_lang), resolve_input(prefix, tgt_lang)
            parts.append((s, t, *check_parallel(s, t, count_lines)))
        srcs, tgts, counts, sbytes, tbytes = zip(*parts)
        return cls(list(srcs), list(tgts), list(counts), sum(sbytes), sum(tbytes))

    def locate(self, i: int) -> tuple[int, int]:
        """(part, 1-based line) of the 0-based pair number i."""
        for part, n in enumerate(self.lines):
            if i < n:
                return part, i + 1
            i -= n
        raise IndexError(i)

    def raw_pairs(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (src, tgt) line as bytes, newline included, a file's leading byte order mark left out."""
        for s, t in zip(self.src_paths, self.tgt_paths):
            with open_input(s) as fs, open_input(t) as ft:
                for n, (a, b) in enumerate(zip(fs, ft), start=1):
                    yield (a.removeprefix(_BOM), b.removeprefix(_BOM)) if n == 1 else (a, b)
                if fs.readline() or ft.readline():
                    raise InputError(f"{s} and {t} changed while reading (line counts differ)")

    def blocks(self, size: int, side: str) -> Iterator["Block"]:
        """One side's lines in blocks of `size`, undecoded: the parent only reads, workers decode."""
        for path, counted in zip(self.paths(side), self.lines):
            with open_input(path) as fh:
                first = 1
                while a := list(itertools.islice(fh, size)):
                    yield Block(path, first, len(a), b"".join(a))
                    first += len(a)
            if first - 1 != counted:  # the counts were checked up front, but a file may change under us
                raise InputError(f"changed while reading ({first - 1} lines, not {counted})", path)

    def pairs(self) -> Iterator[tuple[str, str]]:
        """Every pair decoded (invalid UTF-8 is an error naming file:line)."""
        for s, t in zip(self.src_paths, self.tgt_paths):
            with open_input(s) as fs, open_input(t) as ft:
                for n, (a, b) in enumerate(zip(fs, ft), start=1):
                    yield decode_line(a, s, n), decode_line(b, t, n)


@dataclass
class Block:
    """`n` consecutive lines from line `first` of `path`, as raw bytes."""

    path: str
    first: int
    n: int
    text: bytes

    def lines(self) -> list[str]:
        lines = decode_lines(self.text, self.path, self.first)
        assert len(lines) == self.n
        return lines


@dataclass(frozen=True)
class TextOpts:
    """How select-data turns a line into LM tokens: the text pipeline's steps 0-3, no BPE."""

    pipeline: TextPipeline
    input_format: str

    def tokens(self, line: str, side: str) -> list[str]:
        p = self.pipeline
        return p.case(p.tokenize_from(line, side, self.input_format), side)


def _tokenize_pair(opts: TextOpts, pair: tuple[str, str]) -> tuple[list[str], list[str]]:
    return opts.tokens(pair[0], "src"), opts.tokens(pair[1], "tgt")


@dataclass
class Scorer:
    """One side's two LMs (in-domain and out-of-domain) and vocabulary: lines -> cross-entropies."""

    opts: TextOpts
    side: str  # "src" or "tgt"
    vocab: LMVocab
    lm_in: NgramLM
    lm_out: NgramLM

    def score_lines(self, lines: list[str]) -> np.ndarray:
        """(N, 4) float64: H_in, H_out, tokens, tokens in the vocabulary (not `<unk>`)."""
        o = self.opts
        if o.input_format == "tok":  # fast path
            toks = [(line.lower() if o.pipeline.lowercase else line).split() for line in lines]
        else:
            toks = [o.tokens(line, self.side) for line in lines]
        batch = self.vocab.encode_batch(toks)
        known = np.add.reduceat((batch.toks > LM_UNK_ID).astype(np.int64), batch.starts)
        return np.stack([self.lm_in.batch_cross_entropies(batch), self.lm_out.batch_cross_entropies(batch),
                         batch.lens - 1, known], axis=1)


def score_block(block: Block) -> np.ndarray:
    """`Scorer.score_lines` of a block by the map's scorer, which a forked worker holds from its parent."""
    scorer: Scorer = worker_state()
    return scorer.score_lines(block.lines())


@dataclass
class IdPairs:
    """Tokenised pairs: per side (0 src, 1 tgt) a flat int32 array of ids and each pair's length."""

    ids: tuple[np.ndarray, np.ndarray]
    lens: tuple[np.ndarray, np.ndarray]

    def sizes(self) -> dict[str, int]:
        return {"pairs": len(self.lens[0]), "src_tokens": int(self.lens[0].sum()),
                "tgt_tokens": int(self.lens[1].sum())}

    def batch(self, side: int) -> FlatBatch:
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
    """Every (src, tgt) line pair as LM tokens over `workers` processes, each side's tokens turned
    into ids by `encode[side]` as they come: the text is never held."""
    ids, lens = (array("i"), array("i")), (array("i"), array("i"))
    for pair in parallel_map(functools.partial(_tokenize_pair, opts), pairs, workers, CHUNK_PAIRS):
        for side in (0, 1):
            ids[side].extend(encode[side](pair[side]))
            lens[side].append(len(pair[side]))
    as_np = [np.frombuffer(a, dtype=np.int32) if len(a) else np.zeros(0, np.int32) for a in (*ids, *lens)]
    return IdPairs((as_np[0], as_np[1]), (as_np[2], as_np[3]))


def score_pool(scorer: Scorer, pool: Corpus, workers: int, progress: Progress,
               h: np.ndarray, lens: np.ndarray) -> int:
    """Score the pool's `scorer.side` over `workers` processes into h (n, 2) float32 (H_in, H_out)
    and lens (n,) int32 tokens; -> how many of its tokens are in the vocabulary."""
    n_pool = pool.total
    before = 0 if scorer.side == "src" else n_pool
    done = known = 0
    progress("score", before // 2, n_pool)  # pairs: half the work a side
    for res in parallel_map(score_block, pool.blocks(CHUNK_PAIRS, scorer.side), workers, 1, state=scorer):
        m = res.shape[0]
        h[done:done + m] = res[:, :2]
        lens[done:done + m] = res[:, 2]
        known += int(res[:, 3].sum())
        done += m
        progress("score", (before + done) // 2, n_pool)
    assert done == n_pool
    return known


# ---- PREFIX.scores.tsv, formatted over the same worker processes

_SCORE_ROWS = 100_000


def _format_rows(lo: int) -> str:
    """TSV text of rows lo .. lo + _SCORE_ROWS of the map's arrays."""
    scores, h, lens, mask = worker_state()
    hi = min(lo + _SCORE_ROWS, scores.size)
    rows = zip(range(lo + 1, hi + 1), scores[lo:hi].tolist(), *(h[lo:hi, j].tolist() for j in range(4)),
               lens[lo:hi, 0].tolist(), lens[lo:hi, 1].tolist(), mask[lo:hi].tolist())
    return "".join(f"{i}\t{s:.6f}\t{a:.6f}\t{b:.6f}\t{c:.6f}\t{d:.6f}\t{ns}\t{nt}\t{int(m)}\n"
                   for i, s, a, b, c, d, ns, nt, m in rows)


def write_scores(path: str, scores: np.ndarray, h: np.ndarray, lens: np.ndarray, mask: np.ndarray,
                  workers: int = 1) -> None:
    """PREFIX.scores.tsv, formatted over `workers` processes, which see the arrays by fork."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("line\tscore\th_in_src\th_out_src\th_in_tgt\th_out_tgt\tsrc_tokens\ttgt_tokens\tselected\n")
        starts = range(0, scores.size, _SCORE_ROWS)
        for text in parallel_map(_format_rows, starts, workers, 1, state=(scores, h, lens, mask)):
            fh.write(text)
