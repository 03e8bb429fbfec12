"""select-data's scoring: lines -> LM tokens (`TextOpts`), and tokens -> the four
cross-entropies per pair (`Scorer`), in parallel over blocks of the pool (`score_pool`), each
worker process holding the scorer `parallel_map` gave it (`worker_state`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from nmtkit.select.corpus import Block, Corpus
from nmtkit.select.lmvocab import LMVocab
from nmtkit.select.ngram import NgramLM
from nmtkit.text.parallel import parallel_map, worker_state
from nmtkit.text.pipeline import TextPipeline

CHUNK_PAIRS = 2000  # pairs per block sent to a worker
Pairs = list[tuple[list[str], list[str]]]  # tokenised (src, tgt) pairs


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


def _tokenize_chunk(opts: TextOpts, chunk: list[tuple[str, str]]) -> list[tuple[list[str], list[str]]]:
    return [(opts.tokens(s, "src"), opts.tokens(t, "tgt")) for s, t in chunk]


@dataclass
class Scorer:
    """The four LMs and their two vocabularies; `score_chunk` turns pairs into cross-entropies."""

    opts: TextOpts
    src_vocab: LMVocab
    tgt_vocab: LMVocab
    in_src: NgramLM
    out_src: NgramLM
    in_tgt: NgramLM
    out_tgt: NgramLM

    def score_tokens(self, toks: list[tuple[list[str], list[str]]]) -> np.ndarray:
        """(N, 6) float64: H_in(src), H_out(src), H_in(tgt), H_out(tgt), src tokens, tgt tokens."""
        return self._score(self.src_vocab.encode_batch([s for s, _ in toks]),
                           self.tgt_vocab.encode_batch([t for _, t in toks]))

    def _score(self, src, tgt) -> np.ndarray:
        out = np.empty((src.lens.size, 6))
        out[:, 0] = self.in_src.batch_cross_entropies(src)
        out[:, 1] = self.out_src.batch_cross_entropies(src)
        out[:, 2] = self.in_tgt.batch_cross_entropies(tgt)
        out[:, 3] = self.out_tgt.batch_cross_entropies(tgt)
        out[:, 4] = src.lens - 1
        out[:, 5] = tgt.lens - 1
        return out

    def score_lines(self, src: list[str], tgt: list[str]) -> np.ndarray:
        """(N, 6) as `score_tokens`, from lines in the configured input format."""
        o = self.opts
        if o.input_format == "tok":  # fast path: split and look up the whole chunk at once
            return self._score(self.src_vocab.encode_lines(src, o.lowercase),
                               self.tgt_vocab.encode_lines(tgt, o.lowercase))
        return self.score_tokens(_tokenize_chunk(o, list(zip(src, tgt))))

    def score_chunk(self, chunk: list[tuple[str, str]]) -> np.ndarray:
        return self.score_lines([s for s, _ in chunk], [t for _, t in chunk])

    def score_block(self, block: Block) -> np.ndarray:
        return self.score_lines(*block.lines())


def score_block(chunk: list[tuple[str, str]] | Block) -> np.ndarray:
    """(n, 6) cross-entropies and lengths of a block of pool lines (or of decoded pairs), by the
    map's scorer: a forked worker gets the LMs from its parent's memory, not pickled with each block."""
    scorer: Scorer = worker_state()
    return scorer.score_block(chunk) if isinstance(chunk, Block) else scorer.score_chunk(chunk)


def _chunks(items, size: int):
    buf = []
    for x in items:
        buf.append(x)
        if len(buf) >= size:
            yield buf
            buf = []
    if buf:
        yield buf


def tokenize_all(opts: TextOpts, pairs, workers: int) -> list[tuple[list[str], list[str]]]:
    out: list[tuple[list[str], list[str]]] = []
    for res in parallel_map(functools.partial(_tokenize_chunk, opts), _chunks(pairs, CHUNK_PAIRS), workers, 1):
        out.extend(res)
    return out


def score_pool(scorer: Scorer, pool: Corpus, workers: int,
               progress: Callable[[str, int, int], None]) -> tuple[np.ndarray, np.ndarray]:
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

    Formatting (~3 us a row) runs over `workers` processes, which see the arrays by fork.
    """
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("line\tscore\th_in_src\th_out_src\th_in_tgt\th_out_tgt\tsrc_tokens\ttgt_tokens\tselected\n")
        starts = range(0, scores.size, _SCORE_ROWS)
        for text in parallel_map(_format_rows, starts, workers, 1, state=(scores, h, lens, mask)):
            fh.write(text)
