"""Peak memory of `nmtkit select-data` at the WMT'14 recipe's size, and that a change keeps the selection.

Builds, from ../shared/data (or $DATA), an in-domain text of about --in-tokens tokens a side (giga-fren
sample and Multi30k train, repeated) and a pool of --pool-pairs pairs (Tatoeba, giga-fren and Multi30k
train, repeated), whitespace-tokenised, and runs `select-data --input-format tok` (--raw: raw) on them with each
--tree given (a checkout's root; default: this one), printing wall time and peak RSS per tree and
whether the selections are byte for byte the same.

    python benchmarks/select_memory.py                                   # 7M tokens, 1.6M pairs
    python benchmarks/select_memory.py --vary     # repeats shuffled: as many distinct n-grams as fresh text
    python benchmarks/select_memory.py --in-tokens 1000000 --pool-pairs 200000 --tree /old/checkout --tree .
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("DATA", REPO.parent / "shared" / "data"))


def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [" ".join(line.split()) for line in f.read().splitlines()]


def _pairs(*prefixes: tuple[Path, str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for folder, name in prefixes:
        gz = ".gz" if (folder / f"{name}.en.gz").exists() else ""
        out += list(zip(_lines(folder / f"{name}.en{gz}"), _lines(folder / f"{name}.fr{gz}")))
    return [p for p in out if p[0] and p[1]]


def _write(prefix: Path, pairs: list[tuple[str, str]]) -> None:
    for k, lang in enumerate(("en", "fr")):
        with open(f"{prefix}.{lang}", "w", encoding="utf-8") as f:
            f.writelines(p[k] + "\n" for p in pairs)


def _varied(pair: tuple[str, str], copy: int) -> tuple[str, str]:
    """Copy `copy` of a pair: the first as it is, later ones with the words of each side shuffled
    (seeded by the copy and the text), so that a repeat brings new n-grams as fresh text would
    (more of them than fresh text does: a pessimistic corpus for the LMs' tables)."""
    if copy == 0:
        return pair
    out = []
    for side in pair:
        words = side.split()
        random.Random(f"{copy}:{side}").shuffle(words)
        out.append(" ".join(words))
    return out[0], out[1]


def build(work: Path, in_tokens: int, pool_pairs: int, vary: bool = False) -> None:
    ind = _pairs((DATA / "giga-fren-sample", "train"), (DATA / "multi30k-en-fr", "train"))
    pool = _pairs((DATA / "tatoeba-eng-fra", "train"), (DATA / "giga-fren-sample", "train"),
                  (DATA / "multi30k-en-fr", "train"))
    out, n, copy = [], 0, 0
    while n < in_tokens:
        for p in ind:
            out.append(_varied(p, copy) if vary else p)
            n += len(p[0].split())
            if n >= in_tokens:
                break
        copy += 1
    _write(work / "in", out)
    _write(work / "pool", [_varied(pool[i % len(pool)], i // len(pool)) if vary else pool[i % len(pool)]
                           for i in range(pool_pairs)])
    print(f"in-domain: {len(out):,} pairs, {n:,} source tokens; pool: {pool_pairs:,} pairs", flush=True)


def run(tree: Path, work: Path, name: str, workers: int, raw: bool = False) -> tuple[float, float, str]:
    prefix = work / f"sel-{name}"
    argv = [sys.executable, "-m", "nmtkit", "select-data", "--src-lang", "en", "--tgt-lang", "fr",
            "--in-domain", str(work / "in"), "--pool", str(work / "pool"), "--input-format", "raw" if raw else "tok",
            "--output-prefix", str(prefix), "--fraction", "0.1", "--workers", str(workers), "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(tree))
    # a wrapper process per run, so that its children's peak RSS is this run's alone
    wrapper = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    t0 = time.perf_counter()
    # run from the work folder: from a checkout, `-m` would import the checkout's nmtkit before PYTHONPATH's
    done = subprocess.run([sys.executable, "-c", wrapper, *argv], env=env, check=True, capture_output=True, text=True,
                          cwd=work)
    wall = time.perf_counter() - t0
    peak = int(done.stdout.split()[-1])
    digest = hashlib.sha256(b"".join(Path(f"{prefix}.{lang}").read_bytes() for lang in ("en", "fr"))).hexdigest()
    return wall, peak / 1024, digest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--in-tokens", type=int, default=7_000_000)
    ap.add_argument("--pool-pairs", type=int, default=1_600_000)
    ap.add_argument("--tree", action="append", type=Path, help="checkout root to run (repeatable)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--raw", action="store_true", help="Moses-tokenise the text (--input-format raw), not split it")
    ap.add_argument("--vary", action="store_true",
                    help="shuffle the words of each repeat of the data, so that repeats bring new n-grams")
    ns = ap.parse_args()
    trees = ns.tree or [REPO]
    with tempfile.TemporaryDirectory(prefix="nmtkit-selmem-") as tmp:
        work = Path(tmp)
        build(work, ns.in_tokens, ns.pool_pairs, ns.vary)
        digests = set()
        for i, tree in enumerate(trees):
            wall, peak_mb, digest = run(tree.resolve(), work, str(i), ns.workers, ns.raw)
            digests.add(digest)
            print(f"{tree}: {wall:.1f} s, peak RSS {peak_mb:,.0f} MB (the largest process), selection {digest[:12]}",
                  flush=True)
        if len(trees) > 1:
            print("selections identical" if len(digests) == 1 else "SELECTIONS DIFFER")


if __name__ == "__main__":
    main()
