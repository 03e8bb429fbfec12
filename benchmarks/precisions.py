"""Decoding precisions on the CPU, in one run: fp32, bf16 and int8 (`nmtkit translate --precision`).

Translates the Tatoeba en-fr dev set (2,000 lines) at beam 5 with each precision as a fresh
`nmtkit translate` process, --rounds times in turn (fp32, bf16, int8, fp32, ...), and reports per
precision: sentences/s end to end (model load included; the median round, and each round's
seconds, since on a shared machine the load changes from one round to the next), sentences per
CPU-second (user + system time of the process, the measure that other load disturbs least:
2 threads busy means 2 CPU-seconds a second), the process's peak RSS
(wait4's ru_maxrss), sacrebleu BLEU against dev.fr, and how many lines differ from fp32's.
The speed figures are meant as ratios within one run: on a shared machine absolute figures move.

The rule it decides (docs/int8.md): int8 is worth offering only when it is faster
than fp32 and its BLEU is within 0.3 of fp32's.

    python benchmarks/precisions.py --model RUN/checkpoint_best.pt
    python benchmarks/precisions.py            # trains the small preset for --train-minutes first
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tatoeba_model import REPO, TATOEBA, train_small_model  # noqa: E402 - the benchmarks' one trained model


def translate(model: str, src: Path, out: Path, precision: str, args) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS MB) of one `nmtkit translate` process writing `out`."""
    cmd = [sys.executable, "-m", "nmtkit", "translate", "-m", model, "-i", str(src), "-o", str(out), "--force",
           "--beam", str(args.beam), "--precision", precision, "--device", "cpu", "--threads", str(args.threads),
           "--batch-size", str(args.batch_size), "--quiet"]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONPATH=str(REPO))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed with status {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint (default: train a small one in --work)")
    ap.add_argument("--work", default="/tmp/nmtkit-serve-bench", help="where a trained model goes")
    ap.add_argument("--train-minutes", type=float, default=5)
    ap.add_argument("--precisions", default="fp32,bf16,int8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--src", default=str(TATOEBA / "dev.en"), help="source lines [Tatoeba en-fr dev.en]")
    ap.add_argument("--ref", default=str(TATOEBA / "dev.fr"), help="their references [Tatoeba en-fr dev.fr]")
    ap.add_argument("--lines", type=int, default=None, help="only the first N lines [all]")
    args = ap.parse_args()

    import sacrebleu

    model = args.model or str(train_small_model(Path(args.work), args.train_minutes, args.threads))
    src_lines = Path(args.src).read_text(encoding="utf-8").splitlines()[: args.lines]
    refs = Path(args.ref).read_text(encoding="utf-8").splitlines()[: len(src_lines)]
    precisions = args.precisions.split(",")
    walls: dict[str, list[float]] = {p: [] for p in precisions}
    cpus: dict[str, list[float]] = {p: [] for p in precisions}
    rss: dict[str, float] = {}
    hyps: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "dev.en"
        src.write_text("\n".join(src_lines) + "\n", encoding="utf-8")
        for _ in range(args.rounds):
            for p in precisions:
                out = Path(tmp) / f"hyp.{p}"
                wall, cpu, peak = translate(model, src, out, p, args)
                walls[p].append(wall)
                cpus[p].append(cpu)
                rss[p] = max(rss.get(p, 0.0), peak)
                hyps[p] = out.read_text(encoding="utf-8").splitlines()
    n = len(src_lines)
    base = "fp32" if "fp32" in precisions else precisions[0]
    print(f"model {model}; {n} lines of {args.src}, beam {args.beam}, batch {args.batch_size}, "
          f"{args.threads} threads; median of {args.rounds} rounds; speed ratios are to {base} in this run")
    print(f"| precision | sent/s end to end | x {base} | seconds per round | sent per CPU-s | x {base} (CPU) | "
          f"peak RSS (MB) | BLEU | BLEU - {base} | lines unlike {base} |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    wall = {p: statistics.median(walls[p]) for p in precisions}
    cpu = {p: statistics.median(cpus[p]) for p in precisions}
    bleu = {p: sacrebleu.corpus_bleu(hyps[p], [refs]).score for p in precisions}
    for p in precisions:
        differ = sum(a != b for a, b in zip(hyps[p], hyps[base]))
        rounds = ", ".join(f"{w:.0f}" for w in walls[p])
        print(f"| {p} | {n / wall[p]:.1f} | {wall[base] / wall[p]:.2f} | {rounds} | {n / cpu[p]:.1f} | "
              f"{cpu[base] / cpu[p]:.2f} | {rss[p]:.0f} | {bleu[p]:.2f} | "
              f"{bleu[p] - bleu[base]:+.2f} | {differ} |")
    if "int8" in precisions and base == "fp32":
        faster = wall["int8"] < wall["fp32"]
        close = abs(bleu["int8"] - bleu["fp32"]) <= 0.3
        print(f"int8: {'faster' if faster else 'NOT faster'} than fp32, BLEU {'within' if close else 'NOT within'} "
              f"0.3 of fp32's -> {'ships' if faster and close else 'does not ship'}")


if __name__ == "__main__":
    main()
