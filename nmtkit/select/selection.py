"""Cross-entropy-difference data selection from a general-domain pool of sentence pairs.

Follows Axelrod, He & Gao (EMNLP 2011), "Domain Adaptation via Pseudo In-Domain Data
Selection", and Moore & Lewis (ACL 2010). For each pool pair (s, t):

    bilingual   (Axelrod):      [H_in(s) - H_out(s)] + [H_in(t) - H_out(t)]
    monolingual (Moore-Lewis):   H_in(s) - H_out(s)
    in-domain   (baseline):      H_in(s)

as in the paper's comparison, both baselines use the source side only. H is the per-token
cross-entropy in bits of a sentence under a 4-gram interpolated modified Kneser-Ney LM
(`ngram.NgramLM`), with `</s>` counted as a token (-log2 p(s) / (len(s) + 1)). H_in's LM is
estimated on the in-domain side; H_out's on a seeded random sample of the pool with about
as many source tokens as the in-domain text (the same pairs give the target sample). The two
LMs of a language share one vocabulary: the in-domain words seen at least `min_count` times;
everything else is `<unk>`.

Pairs are ranked by score, lowest first, ties by pool line number, and taken until the
budget is met: `lines` pairs, `words` SOURCE-side tokens (the smallest prefix of the ranking
reaching it), or a `fraction` of the pool's pairs. The selection is written in pool order,
each line byte for byte as in the pool (raw text in, raw text out).

The pool is streamed (the text is never held; per pair we keep 4 float32 cross-entropies and
2 int32 lengths) and scored in blocks of lines over `workers` processes: the parent only
reads undecoded blocks, workers decode, tokenise and score them; the LMs reach the workers
by fork, not by pickling.
"""
from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from nmtkit.errors import ConfigError, InputError, OutputExistsError
from nmtkit.outputs import Staged, check_output, name_error, writes_in_place
from nmtkit.select.ngram import LMVocab, NgramLM
from nmtkit.text.io import decode_lines, open_input, read_blocks, resolve_input
from nmtkit.text.parallel import parallel_map

log = logging.getLogger(__name__)

METHODS = ("bilingual", "monolingual", "in-domain")
INPUT_FORMATS = ("raw", "tok")
CHUNK_PAIRS = 2000

# A progress callback: (stage, done, total) with stage in "count", "sample", "score", "write".
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class SelectConfig:
    """Every option of `nmtkit select-data` (one field per option)."""

    src_lang: str
    tgt_lang: str
    in_domain: tuple[str, ...]
    pool: tuple[str, ...]
    dest: str
    lines: int | None = None
    words: int | None = None
    fraction: float | None = None
    order: int = 4
    method: str = "bilingual"
    workers: int = 1
    input_format: str = "raw"
    min_count: int = 1
    seed: int = 1
    lowercase: bool = False
    aggressive_dash_splits: bool = False
    force: bool = False
    write_arpa: bool = False

    def check(self) -> None:
        budgets = [b for b in (self.lines, self.words, self.fraction) if b is not None]
        if len(budgets) != 1:
            raise ConfigError("give exactly one budget: --lines, --words or --fraction")
        if self.lines is not None and self.lines < 1:  # 0 would write empty outputs and succeed
            raise ConfigError(f"--lines must be at least 1, got {self.lines}")
        if self.words is not None and self.words < 1:
            raise ConfigError(f"--words must be at least 1, got {self.words}")
        if self.fraction is not None and not (0.0 < self.fraction <= 1.0):
            raise ConfigError(f"--fraction must be in (0, 1], got {self.fraction}")
        if self.method not in METHODS:
            raise ConfigError(f"--method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.input_format not in INPUT_FORMATS:
            raise ConfigError(f"--input-format must be raw or tok, got {self.input_format!r}")
        if self.order < 1:
            raise ConfigError(f"--order must be >= 1, got {self.order}")
        if self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}")
        if self.min_count < 1:
            raise ConfigError(f"--min-count must be >= 1, got {self.min_count}")
        if self.src_lang == self.tgt_lang:
            raise ConfigError("--src-lang and --tgt-lang must differ")
        if not self.in_domain or not self.pool:
            raise ConfigError("need --in-domain and --pool")


# ---------------------------------------------------------------------- files
resolve = resolve_input  # PREFIX.lang, or PREFIX.lang.gz when only that exists (nmtkit.text.io)
_open_bin = open_input


def count_lines(path: str) -> tuple[int, int]:
    """(lines, bytes) of a file (gunzipped), reading big blocks; a last line without newline counts."""
    lines = nbytes = 0
    last = b"\n"
    for block in read_blocks(path, 1 << 20):
        lines += block.count(b"\n")
        nbytes += len(block)
        last = block[-1:]
    return lines + (last != b"\n"), nbytes


def _decode(raw: bytes, path: str, lineno: int) -> str:
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise InputError(f"invalid UTF-8 ({err.reason} at byte {err.start})", path, lineno) from None


@dataclass
class Corpus:
    """A parallel corpus made of one or more prefixes, read in order."""

    src_paths: list[str]
    tgt_paths: list[str]
    lines: list[int]      # per part
    src_bytes: int

    @property
    def total(self) -> int:
        return sum(self.lines)

    @classmethod
    def open(cls, prefixes: Sequence[str], src_lang: str, tgt_lang: str) -> "Corpus":
        """Resolve the files and check that each pair has as many lines on both sides."""
        srcs, tgts, counts, nbytes = [], [], [], 0
        for prefix in prefixes:
            s, t = resolve(prefix, src_lang), resolve(prefix, tgt_lang)
            (ns, bs), (nt, _) = count_lines(s), count_lines(t)
            if ns != nt:
                raise InputError(f"{s} has {ns} lines but {t} has {nt}: a parallel corpus needs equal line counts")
            srcs.append(s)
            tgts.append(t)
            counts.append(ns)
            nbytes += bs
        return cls(srcs, tgts, counts, nbytes)

    def locate(self, i: int) -> tuple[int, int]:
        """(part, 1-based line) of the 0-based pair number i."""
        for part, n in enumerate(self.lines):
            if i < n:
                return part, i + 1
            i -= n
        raise IndexError(i)

    def raw_pairs(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (src, tgt) line as bytes, newline included."""
        for s, t in zip(self.src_paths, self.tgt_paths):
            with _open_bin(s) as fs, _open_bin(t) as ft:
                n = 0
                for n, (a, b) in enumerate(zip(fs, ft), start=1):  # noqa: B007
                    yield a, b
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
                    yield _decode(a, s, n), _decode(b, t, n)


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


# ---------------------------------------------------------------------- tokenising and scoring
@dataclass(frozen=True)
class _TextOpts:
    src_lang: str
    tgt_lang: str
    input_format: str
    lowercase: bool
    aggressive_dash_splits: bool

    def tokens(self, line: str, lang: str) -> list[str]:
        if self.input_format == "tok":
            toks = line.split()
            return [t.lower() for t in toks] if self.lowercase else toks
        from nmtkit.text.moses import tokenize

        return tokenize(line, lang, aggressive_dash_splits=self.aggressive_dash_splits, lowercase=self.lowercase)


def _tokenize_chunk(opts: _TextOpts, chunk: list[tuple[str, str]]) -> list[tuple[list[str], list[str]]]:
    return [(opts.tokens(s, opts.src_lang), opts.tokens(t, opts.tgt_lang)) for s, t in chunk]


@dataclass
class Scorer:
    """The four LMs and their two vocabularies; `score_chunk` turns pairs into cross-entropies."""

    opts: _TextOpts
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


# Worker processes inherit the scorer by fork: parallel_map pickles only (key, chunk).
_SHARED: dict[int, Scorer] = {}


def _score_shared(key: int, chunk: list[tuple[str, str]] | Block) -> np.ndarray:
    scorer = _SHARED[key]
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


def method_scores(method: str, h: np.ndarray) -> np.ndarray:
    """(N,) selection score from (N, >=4) cross-entropies [in_src, out_src, in_tgt, out_tgt]."""
    h = h.astype(np.float64)
    if method == "bilingual":
        return (h[:, 0] - h[:, 1]) + (h[:, 2] - h[:, 3])
    if method == "monolingual":
        return h[:, 0] - h[:, 1]
    if method == "in-domain":
        return h[:, 0].copy()
    raise ConfigError(f"unknown method {method!r}")


def select_indices(scores: np.ndarray, src_tokens: np.ndarray, lines: int | None = None,
                   words: int | None = None, fraction: float | None = None) -> tuple[np.ndarray, bool]:
    """Rows to keep, in pool order, and whether the budget exceeded the pool.

    Ranking: lowest score first, ties by pool position (stable sort). `words` counts source
    tokens and keeps the smallest prefix of the ranking that reaches it.
    """
    n = scores.size
    order = np.argsort(scores, kind="stable")
    over = False
    if lines is not None:
        k = lines
    elif words is not None:
        cum = np.cumsum(src_tokens[order].astype(np.int64))
        total = int(cum[-1]) if n else 0
        k = n + 1 if words > total else int(np.searchsorted(cum, words, side="left")) + (1 if words > 0 else 0)
    else:
        assert fraction is not None
        k = int(round(fraction * n))
    if k > n:
        over, k = True, n
    keep = np.sort(order[:k])
    return keep, over


# ---------------------------------------------------------------------- the command
def _outputs(cfg: SelectConfig) -> dict[str, str]:
    d = cfg.dest
    out = {"src": f"{d}.{cfg.src_lang}", "tgt": f"{d}.{cfg.tgt_lang}", "scores": f"{d}.scores.tsv",
           "summary": f"{d}.summary.json"}
    if cfg.write_arpa:
        for which in ("in", "out"):
            for side, lang in (("src", cfg.src_lang), ("tgt", cfg.tgt_lang)):
                out[f"arpa_{which}_{side}"] = f"{d}.{which}.{lang}.arpa"
    return out


class _AtomicFiles:
    """One `nmtkit.outputs.Staged` per output: `tmp[k]` is where output k is written now;
    `commit()` makes them all appear, else (an error) they are removed."""

    def __init__(self, paths: dict[str, str]):
        self.paths = paths
        self.staged: dict[str, Staged] = {}
        for k, p in paths.items():
            self.staged[k] = Staged(p)
        self.tmp = {k: st.write_path for k, st in self.staged.items()}

    def __enter__(self) -> "_AtomicFiles":
        return self

    def commit(self) -> None:
        for st in self.staged.values():
            st.commit()
        self.staged = {}

    def __exit__(self, exc_type, exc, tb) -> None:
        for k, st in self.staged.items():
            st.abort()
            if isinstance(exc, OSError):
                name_error(exc, self.paths[k], self.tmp[k])


def _tokenize_all(opts: _TextOpts, pairs, workers: int) -> list[tuple[list[str], list[str]]]:
    out: list[tuple[list[str], list[str]]] = []
    for res in parallel_map(functools.partial(_tokenize_chunk, opts), _chunks(pairs, CHUNK_PAIRS), workers, 1):
        out.extend(res)
    return out


def _noop(stage: str, done: int, total: int) -> None:
    pass


def run_selection(cfg: SelectConfig, progress: Progress | None = None) -> dict:
    """Run the whole selection and write the outputs. Returns the summary (also written)."""
    cfg.check()
    progress = progress or _noop
    t0 = time.perf_counter()
    outputs = _outputs(cfg)
    existing = [p for p in outputs.values() if os.path.exists(p) and not writes_in_place(p)]
    if existing and not cfg.force:
        raise OutputExistsError("output exists (use --force to overwrite)", existing[0])
    dest_dir = os.path.dirname(os.path.abspath(cfg.dest))
    if not os.path.isdir(dest_dir):
        raise InputError("the destination's folder does not exist", dest_dir)
    for p in outputs.values():  # writable? before hours of scoring
        check_output(p, force=True, what="select-data output")

    opts = _TextOpts(cfg.src_lang, cfg.tgt_lang, cfg.input_format, cfg.lowercase, cfg.aggressive_dash_splits)
    ind = Corpus.open(cfg.in_domain, cfg.src_lang, cfg.tgt_lang)
    pool = Corpus.open(cfg.pool, cfg.src_lang, cfg.tgt_lang)
    n_pool = pool.total
    if ind.total == 0:
        raise InputError("the in-domain text is empty", ind.src_paths[0])
    if n_pool == 0:
        raise InputError("the pool is empty", pool.src_paths[0])
    timings: dict[str, float] = {}

    # In-domain text -> vocabularies and H_in LMs.
    t = time.perf_counter()
    ind_toks = _tokenize_all(opts, ind.pairs(), cfg.workers)
    src_tokens_in = sum(len(s) for s, _ in ind_toks)
    tgt_tokens_in = sum(len(t_) for _, t_ in ind_toks)
    if src_tokens_in == 0 or tgt_tokens_in == 0:
        side = ind.src_paths[0] if src_tokens_in == 0 else ind.tgt_paths[0]
        raise InputError("the in-domain text has no tokens", side)
    src_vocab = LMVocab.build((s for s, _ in ind_toks), cfg.min_count)
    tgt_vocab = LMVocab.build((t_ for _, t_ in ind_toks), cfg.min_count)
    timings["in_domain_tokenize_s"] = time.perf_counter() - t

    # Out-of-domain sample: random pool lines (seeded) with about as many source tokens.
    t = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    in_bytes = ind.src_bytes
    want = min(n_pool, int(math.ceil(2.0 * in_bytes / max(pool.src_bytes / n_pool, 1.0))) + 16)
    picked = np.sort(rng.choice(n_pool, size=want, replace=False))
    sample_lines: list[tuple[str, str]] = []
    j = 0
    for i, (a, b) in enumerate(pool.raw_pairs()):
        if picked[j] == i:  # only picked lines are decoded; the scoring pass checks them all
            part, line = pool.locate(i)
            sample_lines.append((_decode(a, pool.src_paths[part], line), _decode(b, pool.tgt_paths[part], line)))
            j += 1
            if j == picked.size:
                break
        if i % 100_000 == 0:
            progress("sample", i, n_pool)
    progress("sample", n_pool, n_pool)  # the pass stops at the last sampled line
    sample_toks = _tokenize_all(opts, sample_lines, cfg.workers)
    del sample_lines
    perm = rng.permutation(len(sample_toks))
    out_sample: list[tuple[list[str], list[str]]] = []
    got = 0
    for r in perm:
        if got >= src_tokens_in:
            break
        out_sample.append(sample_toks[r])
        got += len(sample_toks[r][0])
    del sample_toks
    timings["out_sample_s"] = time.perf_counter() - t

    t = time.perf_counter()
    order = cfg.order
    scorer = Scorer(
        opts, src_vocab, tgt_vocab,
        in_src=NgramLM.estimate([src_vocab.encode(s) for s, _ in ind_toks], len(src_vocab), order),
        out_src=NgramLM.estimate([src_vocab.encode(s) for s, _ in out_sample], len(src_vocab), order),
        in_tgt=NgramLM.estimate([tgt_vocab.encode(t_) for _, t_ in ind_toks], len(tgt_vocab), order),
        out_tgt=NgramLM.estimate([tgt_vocab.encode(t_) for _, t_ in out_sample], len(tgt_vocab), order),
    )
    timings["lm_estimate_s"] = time.perf_counter() - t
    n_ind_pairs, n_out_pairs = len(ind_toks), len(out_sample)
    out_src_tokens = sum(len(s) for s, _ in out_sample)
    out_tgt_tokens = sum(len(t_) for _, t_ in out_sample)
    del ind_toks, out_sample

    with _AtomicFiles(outputs) as files:
        if cfg.write_arpa:
            for which, side, lm, voc in (("in", "src", scorer.in_src, src_vocab), ("out", "src", scorer.out_src, src_vocab),
                                         ("in", "tgt", scorer.in_tgt, tgt_vocab), ("out", "tgt", scorer.out_tgt, tgt_vocab)):
                with open(files.tmp[f"arpa_{which}_{side}"], "w", encoding="utf-8") as fh:
                    lm.write_arpa(fh, voc.itos)

        # Score the pool, streaming.
        t = time.perf_counter()
        h = np.empty((n_pool, 4), dtype=np.float32)
        lens = np.empty((n_pool, 2), dtype=np.int32)
        key = id(scorer)
        _SHARED[key] = scorer
        try:
            done = 0
            progress("score", 0, n_pool)
            chunks = pool.blocks(CHUNK_PAIRS)
            for res in parallel_map(functools.partial(_score_shared, key), chunks, cfg.workers, 1):
                m = res.shape[0]
                h[done:done + m] = res[:, :4]
                lens[done:done + m] = res[:, 4:]
                done += m
                progress("score", done, n_pool)
        finally:
            _SHARED.pop(key, None)
        assert done == n_pool
        timings["score_s"] = time.perf_counter() - t

        scores = method_scores(cfg.method, h)
        keep, over = select_indices(scores, lens[:, 0], cfg.lines, cfg.words, cfg.fraction)
        warnings = []
        if over:
            budget = f"--lines {cfg.lines}" if cfg.lines is not None else f"--words {cfg.words}"
            msg = f"the budget ({budget}) exceeds the pool ({n_pool} pairs, {int(lens[:, 0].sum())} source tokens): selecting all of it"
            log.warning(msg)
            warnings.append(msg)
        mask = np.zeros(n_pool, dtype=bool)
        mask[keep] = True

        # Write the selection (pool order, bytes as read) and the scores.
        t = time.perf_counter()
        progress("write", 0, n_pool)
        with open(files.tmp["src"], "wb") as fs, open(files.tmp["tgt"], "wb") as ft:
            for i, (a, b) in enumerate(pool.raw_pairs()):
                if mask[i]:
                    fs.write(a if a.endswith(b"\n") else a + b"\n")
                    ft.write(b if b.endswith(b"\n") else b + b"\n")
                if i % 200_000 == 0:
                    progress("write", i, n_pool)
        _write_scores(files.tmp["scores"], scores, h, lens, mask, cfg.workers)
        progress("write", n_pool, n_pool)
        timings["write_s"] = time.perf_counter() - t
        timings["total_s"] = time.perf_counter() - t0

        part_sel, start = [], 0
        for n in pool.lines:
            part_sel.append(int(mask[start:start + n].sum()))
            start += n
        sel_scores = scores[mask]
        summary = {
            "method": cfg.method,
            "settings": asdict(cfg),
            "cross_entropy": "per-token bits, -log2 p(sentence) / (tokens + 1): </s> counts as a token",
            "words_budget_counts": "source-side tokens (after tokenisation)",
            "in_domain": {"files": ind.src_paths + ind.tgt_paths, "pairs": n_ind_pairs,
                          "src_tokens": src_tokens_in, "tgt_tokens": tgt_tokens_in},
            "out_domain_sample": {"pairs": n_out_pairs, "src_tokens": out_src_tokens, "tgt_tokens": out_tgt_tokens,
                                  "seed": cfg.seed},
            "vocab": {"src": len(src_vocab), "tgt": len(tgt_vocab), "min_count": cfg.min_count},
            "lm": {name: {"order": lm.order, "ngrams": lm.sizes(),
                          "discounts": [list(lm.uni_discounts)] + [list(o.discounts) for o in lm.orders]}
                   for name, lm in (("in_src", scorer.in_src), ("out_src", scorer.out_src),
                                    ("in_tgt", scorer.in_tgt), ("out_tgt", scorer.out_tgt))},
            "pool": {"parts": [{"src": s, "tgt": t_, "pairs": n, "selected": k}
                               for s, t_, n, k in zip(pool.src_paths, pool.tgt_paths, pool.lines, part_sel)],
                     "pairs": n_pool, "src_tokens": int(lens[:, 0].sum()), "tgt_tokens": int(lens[:, 1].sum())},
            "selected": {"pairs": int(keep.size), "src_tokens": int(lens[keep, 0].sum()),
                         "tgt_tokens": int(lens[keep, 1].sum()),
                         "max_score": float(sel_scores.max()) if keep.size else None,
                         "mean_score": float(sel_scores.mean()) if keep.size else None},
            "outputs": outputs,
            "warnings": warnings,
            "timings": {k: round(v, 3) for k, v in timings.items()},
        }
        with open(files.tmp["summary"], "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=2)
            fh.write("\n")
        files.commit()
    return summary


_SCORE_ROWS = 100_000


def _format_rows(key: int, lo: int) -> str:
    """TSV text of rows lo .. lo + _SCORE_ROWS of the arrays shared under `key` (runs in workers)."""
    scores, h, lens, mask = _SHARED_ARRAYS[key]
    hi = min(lo + _SCORE_ROWS, scores.size)
    rows = zip(range(lo + 1, hi + 1), scores[lo:hi].tolist(), *(h[lo:hi, j].tolist() for j in range(4)),
               lens[lo:hi, 0].tolist(), lens[lo:hi, 1].tolist(), mask[lo:hi].tolist())
    return "".join(f"{i}\t{s:.6f}\t{a:.6f}\t{b:.6f}\t{c:.6f}\t{d:.6f}\t{ns}\t{nt}\t{int(m)}\n"
                   for i, s, a, b, c, d, ns, nt, m in rows)


_SHARED_ARRAYS: dict[int, tuple] = {}


def _write_scores(path: str, scores: np.ndarray, h: np.ndarray, lens: np.ndarray, mask: np.ndarray,
                  workers: int = 1) -> None:
    """TSV: line (1-based pool line), score, h_in_src, h_out_src, h_in_tgt, h_out_tgt, src/tgt tokens, selected.

    Formatting (~3 us a row) runs over `workers` processes, which see the arrays by fork.
    """
    key = id(scores)
    _SHARED_ARRAYS[key] = (scores, h, lens, mask)
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("line\tscore\th_in_src\th_out_src\th_in_tgt\th_out_tgt\tsrc_tokens\ttgt_tokens\tselected\n")
            starts = range(0, scores.size, _SCORE_ROWS)
            for text in parallel_map(functools.partial(_format_rows, key), starts, workers, 1):
                fh.write(text)
    finally:
        _SHARED_ARRAYS.pop(key, None)
