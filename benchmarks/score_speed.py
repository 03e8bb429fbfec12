"""Forced-decoding speed: `Translator.score` of given translations beside `translate` of the same
sources, sentences/s and peak RSS, each in a process of its own (peak RSS is per process).

On the peer benchmark's model and dev set (BENCHMARKS.md: BPE'd text in and out):

    python benchmarks/score_speed.py --checkpoint $BENCH_WORK/runs/nmtkit/run/checkpoint_last.pt \\
        --src $BENCH_WORK/data/dev.bpe.en --ref $BENCH_WORK/data/dev.bpe.fr --input-format bpe

Each mode runs --reps times in alternation (translate, score, translate, ...) after one warm-up
call in its process; the median wall time of a call over all the lines is reported. Time
includes the text pipeline, as a caller of the API sees it.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def one(args: argparse.Namespace) -> dict:
    import nmtkit

    src = open(args.src, encoding="utf-8").read().splitlines()[: args.lines]
    ref = open(args.ref, encoding="utf-8").read().splitlines()[: args.lines]
    model = nmtkit.load(args.checkpoint, device="cpu", threads=args.threads, input_format=args.input_format,
                        output_format=args.input_format)
    if args.mode == "translate":
        def call():
            return model.translate(src, beam=args.beam)
    else:
        def call():
            return model.score(src, ref)
    call()  # warm-up
    t0 = time.perf_counter()
    call()
    secs = time.perf_counter() - t0
    return {"mode": args.mode, "lines": len(src), "seconds": round(secs, 3), "sents_per_s": round(len(src) / secs, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), "precision": model.precision}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--input-format", default="raw", choices=("raw", "tok", "bpe"))
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mode", choices=("translate", "score"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(one(args)))
        return
    runs: dict[str, list[dict]] = {"translate": [], "score": []}
    for _ in range(args.reps):
        for mode in runs:
            out = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--mode", mode], capture_output=True,
                                 text=True, check=True).stdout
            runs[mode].append(json.loads(out.splitlines()[-1]))
    for mode, rs in runs.items():
        secs = statistics.median(r["seconds"] for r in rs)
        print(f"{mode:9s} {rs[0]['lines']} lines  {secs:6.2f} s  {rs[0]['lines'] / secs:7.1f} sentences/s  "
              f"peak RSS {max(r['peak_rss_mb'] for r in rs)} MB  ({rs[0]['precision']})")
    ratio = statistics.median(r["seconds"] for r in runs["translate"]) / statistics.median(
        r["seconds"] for r in runs["score"])
    print(f"score / translate (beam {args.beam}) sentences/s: {ratio:.2f}x")


if __name__ == "__main__":
    main()
