"""Speed of `nmtkit select-data`: LM estimation, tokenisation and LM scoring throughput.

Workload: pool = Tatoeba train + giga-fren sample train + Multi30k train (216,128
pairs), in-domain = Multi30k val (1,014 pairs), from ../shared/data (or $DATA).

Prints:
- tokenisation (sacremoses, both sides) pairs/s and tokens/s with 1 and 2 workers;
- LM estimation time: the four selection LMs, and a 4-gram on the whole pool's source side;
- LM scoring of tokenised text (the `--input-format tok` path: split, vocabulary look-up and
  the four 4-gram LMs) pairs/s and tokens/s with 1 and 2 workers, wall clock and per CPU
  second (the machine may be shared; CPU seconds are what one core delivers);
- an end-to-end `nmtkit select-data --input-format tok` run: wall time and peak RSS.

The raw pool split on whitespace stands in for tokenised text in the scoring figures (the
cost depends on the token count, not on how the tokens were made).

    python benchmarks/select_speed.py            # full pool
    python benchmarks/select_speed.py --quick    # 20,000 pairs scored, 1,000 tokenised
"""
from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from nmtkit.select import scoring
from nmtkit.select.ngram import LMVocab, NgramLM
from nmtkit.select.scoring import Block
from nmtkit.text.parallel import parallel_map
from nmtkit.text.pipeline import TextPipeline

DATA = Path(os.environ.get("DATA", Path(__file__).resolve().parent.parent.parent / "shared" / "data"))
POOL = ["tatoeba-eng-fra/train", "giga-fren-sample/train", "multi30k-en-fr/train"]
IN_DOMAIN = "multi30k-en-fr/val"


def read(prefix: str, lang: str) -> list[str]:
    path = DATA / f"{prefix}.{lang}"
    if not path.exists():
        path = Path(f"{path}.gz")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [line.rstrip("\n") for line in fh]


def tokenize_all(opts: scoring.TextOpts, pairs: list[tuple[str, str]], workers: int) -> list:
    """Both sides of `pairs` as tokens, over `workers` processes as select-data tokenises."""
    return list(parallel_map(functools.partial(scoring._tokenize_pair, opts), pairs, workers, scoring.CHUNK_PAIRS))


def cpu() -> float:
    """CPU seconds of this process and its reaped children."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def timed(fn):
    c0, w0 = cpu(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - w0, cpu() - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", default=bool(os.environ.get("NMTKIT_BENCH_QUICK")))
    args = ap.parse_args()
    if not (DATA / "multi30k-en-fr").is_dir():
        print(f"skipped: corpora not found at {DATA} (set DATA=...)")
        return 0
    load = os.getloadavg()[0]
    print(f"select_speed: {os.cpu_count()} cores, load average {load:.1f} (shared machine: wall figures vary; "
          f"per-CPU-second figures are steadier)")
    # End to end through the CLI (the raw pool read as if tokenised), first: a child forked
    # later would inherit this process's peak RSS.
    if not args.quick:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "nmtkit", "select-data", "--src-lang", "en", "--tgt-lang", "fr",
                   "--in-domain", str(DATA / IN_DOMAIN), "--output-prefix", f"{tmp}/sel", "--lines", "29000",
                   "--input-format", "tok", "--workers", "2", "--quiet"]
            for p in POOL:
                cmd += ["--pool", str(DATA / p)]
            w0 = time.perf_counter()
            proc = subprocess.Popen(cmd)
            _, status, ru = os.wait4(proc.pid, 0)   # this command's own usage (and its workers')
            wall = time.perf_counter() - w0
            proc.returncode = os.waitstatus_to_exitcode(status)
            assert proc.returncode == 0, status
            n = json.loads(Path(f"{tmp}/sel.summary.json").read_text())["pool"]["pairs"]
            print(f"end-to-end select-data --input-format tok --workers 2 on {n} pairs: {wall:.1f} s wall, "
                  f"{ru.ru_utime + ru.ru_stime:.1f} cpu-s, {n / wall:,.0f} pairs/s, "
                  f"peak RSS {ru.ru_maxrss / 1024:.0f} MiB")
    src = [x for p in POOL for x in read(p, "en")]
    tgt = [x for p in POOL for x in read(p, "fr")]
    pairs = list(zip(src, tgt))
    n_tok, n_score = (1000, 20000) if args.quick else (5000, len(pairs))
    rng = np.random.default_rng(0)
    print(f"pool {len(pairs)} pairs; tokenising {n_tok}, scoring {n_score}")

    # Tokenisation (sacremoses), both sides.
    raw = scoring.TextOpts(TextPipeline("en", "fr"), "raw")
    sub = [pairs[i] for i in rng.choice(len(pairs), n_tok, replace=False)]
    for workers in (1, 2):
        toks, wall, cpus = timed(lambda w=workers: tokenize_all(raw, sub, w))
        ntoks = sum(len(a) + len(b) for a, b in toks)
        print(f"tokenise  workers={workers}: {n_tok / wall:8.0f} pairs/s {ntoks / wall:9.0f} tokens/s wall"
              + (f" | {n_tok / cpus:8.0f} pairs/cpu-s" if workers == 1 else ""))

    # LM estimation: the four selection LMs (in-domain and an equal-size pool sample) ...
    ind = list(zip(read(IN_DOMAIN, "en"), read(IN_DOMAIN, "fr")))
    ind_toks = tokenize_all(raw, ind, 2)
    ntarget = sum(len(s) for s, _ in ind_toks)
    sample, got = [], 0
    for i in rng.permutation(len(pairs)):
        if got >= ntarget:
            break
        sample.append((pairs[i][0].split(), pairs[i][1].split()))
        got += len(sample[-1][0])
    vs = LMVocab.build(s for s, _ in ind_toks)
    vt = LMVocab.build(t for _, t in ind_toks)

    def four():
        return [NgramLM.estimate([v.encode(x[side]) for x in data], len(v), 4)
                for data in (ind_toks, sample) for side, v in ((0, vs), (1, vt))]

    lms, wall, _ = timed(four)
    print(f"estimate  4 selection LMs (order 4, {ntarget} + {got} source tokens): {wall:.3f} s, "
          f"n-grams in_src={lms[0].sizes()}")
    # ... and one on the whole pool's source side, to show how estimation scales.
    big_src = [src[i].split() for i in (rng.choice(len(src), 50000, replace=False) if args.quick else range(len(src)))]
    big_vocab = LMVocab.build(big_src)
    ids = [big_vocab.encode(s) for s in big_src]
    ntoks = sum(map(len, ids))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    big, wall, _ = timed(lambda: NgramLM.estimate(ids, len(big_vocab), 4))
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"estimate  4-gram on {len(ids)} pool sentences ({ntoks} tokens, V={len(big_vocab)}): {wall:.2f} s, "
          f"{ntoks / wall:,.0f} tokens/s, n-grams {big.sizes()}, peak RSS now {rss1 / 1024:.0f} MiB (+{(rss1 - rss0) / 1024:.0f})")

    # Scoring tokenised text, through the same chunking and worker path as the command: the source
    # side with its two LMs, then the target side with its two. lms: in_src, in_tgt, out_src, out_tgt
    opts = scoring.TextOpts(TextPipeline("en", "fr"), "tok")
    scorers = (scoring.Scorer(opts, "src", vs, lms[0], lms[2]), scoring.Scorer(opts, "tgt", vt, lms[1], lms[3]))
    score_pairs = [pairs[i] for i in np.sort(rng.choice(len(pairs), n_score, replace=False))]
    ntoks = sum(len(a.split()) + len(b.split()) for a, b in score_pairs)

    # Undecoded blocks of lines, as the command's reader hands them to the workers.
    blocks: tuple[list[Block], list[Block]] = ([], [])
    for i in range(0, n_score, scoring.CHUNK_PAIRS):
        part = score_pairs[i:i + scoring.CHUNK_PAIRS]
        for side, name in ((0, "pool.en"), (1, "pool.fr")):
            blocks[side].append(Block(name, i + 1, len(part), "".join(p[side] + "\n" for p in part).encode()))

    for workers in (1, 2):
        def go(w=workers):
            n = 0
            for side in (0, 1):
                for res in parallel_map(scoring.score_block, iter(blocks[side]), w, 1, state=scorers[side]):
                    n += res.shape[0]
            return n // 2
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        n, wall, cpus = timed(go)
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        parent = (self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime)
        assert n == n_score
        print(f"score     workers={workers}: {n / wall:8.0f} pairs/s {ntoks / wall:10.0f} tokens/s wall | "
              f"{n / cpus:8.0f} pairs/cpu-s {ntoks / cpus:10.0f} tokens/cpu-s (target >= 20,000 pairs/s per core)"
              + (f"; parent process {parent / n * 1e6:.1f} cpu-us/pair (sending blocks, receiving scores)" if workers > 1 else ""))

    print(f"peak RSS of this benchmark: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
