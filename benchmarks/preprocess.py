"""Benchmark `nmtkit preprocess` on the Tatoeba En-Fr train split against plain sacremoses.

Measures, on the same N training lines (default: the whole split, 160,128 lines):
- plain single-process sacremoses: a fresh process that reads both sides, normalises,
  tokenises (escape=False) and writes them, nothing else; the floor any Moses-based
  pipeline pays (timed, like preprocess, from after interpreter start-up); and the same split
  over 2 processes running at once: how well this machine scales that work to 2 cores right
  now, the ceiling for any 2-worker figure;
- the whole `nmtkit preprocess` (input checks and checksums, tokenise, clean, vocabulary,
  binarise; plus learn/apply BPE in the BPE mode) with 1 and with 2 workers, each run in a
  fresh process, wall time and peak RSS (the main process and the largest worker);
and prints lines/s, words/s (raw whitespace words of both sides) and the ratios that matter:
2 workers vs 1 worker (target >= 1.7x) and the pipeline's own overhead over plain
sacremoses, (t_preprocess_1_worker - t_bpe_learning - t_sacremoses) / t_sacremoses
(target < 20%), measured both across fresh processes and warm, alternating in one process
(the latter is immune to start-up costs and to the neighbours' load changing between runs).
BPE learning (subword-nmt, serial by nature) is reported on its own line.

    python benchmarks/preprocess.py              # full train split, words and BPE modes
    python benchmarks/preprocess.py --quick      # 20,000 lines, words mode only
    python benchmarks/preprocess.py --lines 50000 --modes bpe --bpe 10000
    python benchmarks/preprocess.py --lines 40000 --modes words --repeat 3   # on a busy machine

Timings depend on the machine's load: on a shared machine run it when it is quiet, or
compare only figures taken in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = Path(os.environ.get("DATA", REPO.parent / "shared" / "data")) / "tatoeba-eng-fra"

_RUNNER = r"""
import time
t0 = time.perf_counter()
import json, resource, sys
from nmtkit import preprocess
from nmtkit.preprocess import PreprocessConfig
cfg = PreprocessConfig(**json.loads(sys.argv[1]))
m = preprocess.run(cfg)
wall = time.perf_counter() - t0
ru_s, ru_c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "timings": m["timings_s"], "main_cpu_s": m["main_cpu_s"],
                  "cpu_main": ru_s.ru_utime + ru_s.ru_stime, "cpu_workers": ru_c.ru_utime + ru_c.ru_stime,
                  "rss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_children_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "train_lines": m["splits"]["train"]["lines"]}))
"""


# The baseline as a user would run it: one process, sacremoses imported and built, both sides
# read, normalised, tokenised (escape=False) and written. Timed like _RUNNER: from after start-up.
_PLAIN_RUNNER = r"""
import time
t0 = time.perf_counter()
import json, resource, sys
from sacremoses import MosesPunctNormalizer, MosesTokenizer
for lang, src, dst in json.loads(sys.argv[1]):
    n, t = MosesPunctNormalizer(lang=lang).normalize, MosesTokenizer(lang=lang).tokenize
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for line in f:
            out.write(" ".join(t(n(line.rstrip("\n")), escape=False)) + "\n")
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024}))
"""


def _prefix(src: Path, dst: Path, n: int | None) -> int:
    count = 0
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for line in f:
            if n is not None and count >= n:
                break
            out.write(line)
            count += 1
    return count


def plain_sacremoses(tmp: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of the plain sacremoses baseline in a fresh process."""
    jobs = [[lang, str(tmp / f"train.{lang}"), str(tmp / f"plain.{lang}")] for lang in ("en", "fr")]
    proc = subprocess.run([sys.executable, "-c", _PLAIN_RUNNER, json.dumps(jobs)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"plain sacremoses failed:\n{proc.stderr}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return r["wall"], r["cpu"]


def plain_sacremoses_two_processes(tmp: Path, n: int) -> float:
    """Wall seconds of the same plain baseline split over 2 processes running at once (each on
    half of the lines, timed from after its start-up like the others): how well this machine
    itself scales such work to 2 cores right now, the ceiling for the 2-worker figure."""
    halves = []
    for k in range(2):
        for lang in ("en", "fr"):
            with open(tmp / f"train.{lang}", encoding="utf-8") as f, \
                    open(tmp / f"half{k}.{lang}", "w", encoding="utf-8") as out:
                for i, line in enumerate(f):
                    if (i < n // 2) == (k == 0):
                        out.write(line)
        halves.append([[lang, str(tmp / f"half{k}.{lang}"), str(tmp / f"plain{k}.{lang}")] for lang in ("en", "fr")])
    procs = [subprocess.Popen([sys.executable, "-c", _PLAIN_RUNNER, json.dumps(jobs)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for jobs in halves]
    walls = []
    for proc in procs:
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"plain sacremoses failed:\n{err}")
        walls.append(json.loads(out.strip().splitlines()[-1])["wall"])
    return max(walls)


def warm_comparison(tmp: Path, reps: int = 3) -> tuple[float, float]:
    """Best-of-`reps` CPU seconds of (plain sacremoses loop, whole preprocess() with 1 worker,
    words), alternating in this one warm process: the pipeline's own overhead with start-up,
    imports and the neighbours' load changes between runs taken out."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    from nmtkit import preprocess
    from nmtkit.preprocess import PreprocessConfig

    lines = {lang: (tmp / f"train.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("en", "fr")}
    funcs = {lang: (MosesPunctNormalizer(lang=lang).normalize, MosesTokenizer(lang=lang).tokenize)
             for lang in ("en", "fr")}
    cfg = PreprocessConfig("en", "fr", str(tmp / "train"), str(tmp / "valid"), str(tmp / "warm"), force=True,
                           workers=1, max_len=80)
    preprocess.run(cfg)  # warm-up: imports, regex caches
    plain, pipe = [], []
    for _ in range(reps):
        c0 = time.process_time()
        for lang in ("en", "fr"):
            n, t = funcs[lang]
            for line in lines[lang]:
                " ".join(t(n(line), escape=False))
        plain.append(time.process_time() - c0)
        c0 = time.process_time()
        preprocess.run(cfg)
        pipe.append(time.process_time() - c0)
    return min(plain), min(pipe)


def run_preprocess(config: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(config)], capture_output=True, text=True,
                          cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"preprocess failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with train.en/fr and dev.en/fr")
    ap.add_argument("--lines", type=int, default=None, help="use only the first N training lines")
    ap.add_argument("--quick", action="store_true", help="20,000 lines, words mode only")
    ap.add_argument("--modes", default="words,bpe", help="comma list of words,bpe (default: both)")
    ap.add_argument("--bpe", type=int, default=10000, help="BPE merges in the bpe mode (default 10000)")
    ap.add_argument("--workers", default="1,2", help="worker counts to compare (default 1,2)")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved repetitions; the fastest run of each counts")
    args = ap.parse_args()
    if os.environ.get("NMTKIT_BENCH_QUICK"):
        args.quick = True
    if args.quick:
        args.lines = args.lines or 20000
        args.modes = "words"
    if not (args.data / "train.en").exists():
        print(f"benchmark skipped: {args.data}/train.en not found (set DATA=...)", file=sys.stderr)
        return
    workers = [int(w) for w in args.workers.split(",")]

    with tempfile.TemporaryDirectory(prefix="nmtkit-bench-") as tmp:
        tmp = Path(tmp)
        n = _prefix(args.data / "train.en", tmp / "train.en", args.lines)
        _prefix(args.data / "train.fr", tmp / "train.fr", args.lines)
        _prefix(args.data / "dev.en", tmp / "valid.en", 200)
        _prefix(args.data / "dev.fr", tmp / "valid.fr", 200)
        words = sum(len(line.split()) for lang in ("en", "fr")
                    for line in (tmp / f"train.{lang}").read_text(encoding="utf-8").splitlines())
        print(f"corpus: {args.data.name} train, {n:,} lines, {words:,} words (both sides); "
              f"cores available: {len(os.sched_getaffinity(0))}; load average {os.getloadavg()[0]:.2f}")

        # Interleaved repetitions, keeping each configuration's fastest run: on a shared machine
        # the minimum is the figure least disturbed by the neighbours.
        plain_runs: list[tuple[float, float]] = []
        plain2_runs: list[float] = []
        runs: dict = {}
        for rep in range(args.repeat):
            tag = f" [run {rep + 1}/{args.repeat}]" if args.repeat > 1 else ""
            t, c = plain_sacremoses(tmp)
            plain_runs.append((t, c))
            print(f"{'plain sacremoses (1 process)':<34} {t:8.2f} s  {n / t:9,.0f} lines/s  "
                  f"{words / t:10,.0f} words/s  CPU {c:.2f} s{tag}", flush=True)
            if 2 in workers:
                t2 = plain_sacremoses_two_processes(tmp, n)
                plain2_runs.append(t2)
                print(f"{'plain sacremoses (2 processes)':<34} {t2:8.2f} s  {n / t2:9,.0f} lines/s  "
                      f"{words / t2:10,.0f} words/s  machine scaling {t / t2:.2f}x{tag}", flush=True)
            for mode in args.modes.split(","):
                for w in workers:
                    cfg = {"src_lang": "en", "tgt_lang": "fr", "train": str(tmp / "train"),
                           "valid": str(tmp / "valid"), "dest": str(tmp / f"out-{mode}-{w}-{rep}"), "workers": w,
                           "max_len": 80}
                    if mode == "bpe":
                        cfg["bpe"] = args.bpe
                    r = run_preprocess(cfg)
                    runs.setdefault((mode, w), []).append(r)
                    learn = r["timings"].get("learn", 0.0)
                    print(f"{'preprocess ' + mode + f', {w} worker(s)':<34} {r['wall']:8.2f} s  "
                          f"{n / r['wall']:9,.0f} lines/s  {words / r['wall']:10,.0f} words/s  peak RSS main "
                          f"{r['rss_self_mb']:.0f} MB, largest worker {r['rss_children_mb']:.0f} MB; learn "
                          f"(vocab/BPE) {learn:.2f} s; CPU main {r['cpu_main']:.2f} s + workers "
                          f"{r['cpu_workers']:.2f} s{tag}", flush=True)
        t_plain = min(t for t, _ in plain_runs)
        cpu_plain = min(c for _, c in plain_runs)
        results = {k: min(v, key=lambda r: r["wall"]) for k, v in runs.items()}
        if args.repeat > 1:
            print(f"fastest of {args.repeat}: plain sacremoses {t_plain:.2f} s (CPU {cpu_plain:.2f} s); "
                  + "; ".join(f"{m} {w}w {r['wall']:.2f} s" for (m, w), r in results.items()))
        print("ratios:")
        if plain2_runs:
            print(f"  this machine now: plain sacremoses on 2 processes vs 1: {t_plain / min(plain2_runs):.2f}x "
                  f"(the ceiling for any 2-worker pipeline of the same work)")
        for mode in args.modes.split(","):
            if (mode, 1) in results:
                r1 = results[(mode, 1)]
                learn1 = r1["timings"].get("learn", 0.0)
                learn1_cpu = r1["main_cpu_s"].get("learn", 0.0)
                overhead = (r1["wall"] - learn1 - t_plain) / t_plain
                print(f"  {mode}: pipeline overhead over plain sacremoses (1 worker, learning excluded): "
                      f"{100 * overhead:+.1f}% wall, "
                      f"{100 * ((r1['cpu_main'] + r1['cpu_workers'] - learn1_cpu - cpu_plain) / cpu_plain):+.1f}% CPU time"
                      f"  (target < 20%)")
                for w in workers:
                    if w != 1 and (mode, w) in results:
                        rw = results[(mode, w)]
                        learnw = rw["timings"].get("learn", 0.0)
                        print(f"  {mode}: {w} workers vs 1: {r1['wall'] / rw['wall']:.2f}x whole run, "
                              f"{(r1['wall'] - learn1) / (rw['wall'] - learnw):.2f}x parallel stages "
                              f"(target >= 1.7x); CPU spent {rw['cpu_main'] + rw['cpu_workers']:.1f} s vs "
                              f"{r1['cpu_main'] + r1['cpu_workers']:.1f} s with 1 worker")
                        # On a busy shared machine wall-clock ratios say more about the neighbours
                        # than about us; this bound (each process on its own core) is labelled as such.
                        cpu1 = r1["cpu_main"] + r1["cpu_workers"] - r1["main_cpu_s"].get("learn", 0.0)
                        crit = max(rw["cpu_main"] - rw["main_cpu_s"].get("learn", 0.0), rw["cpu_workers"] / w)
                        print(f"  {mode}: estimate from CPU times, not a measurement: {w} workers on idle cores "
                              f"~{cpu1 / crit:.2f}x on the parallel stages")
        if "words" in args.modes.split(",") and 1 in workers:
            c_plain, c_pipe = warm_comparison(tmp)
            print(f"  words: pipeline overhead, warm and in one process (best of 3 alternating, CPU): "
                  f"plain {c_plain:.2f} s, preprocess {c_pipe:.2f} s: {100 * (c_pipe - c_plain) / c_plain:+.1f}%")
        print(f"benchmark process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
