"""Write results.md for the Tatoeba recipe from the run's metrics.jsonl and the score JSON.

usage: python write_results.py --run work/run --scores results/scores.json [--dev-scores results/dev.scores.json]
       --seconds results/seconds --attention results/attention --command CMD ... -o results/results.md

--seconds: a folder with one file per step the Makefile timed (preprocess, train, average,
translate-test, score-test, translate-dev, score-dev), each holding the step's wall seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

STEPS = ("preprocess", "train", "average", "translate-test", "score-test", "translate-dev", "score-dev")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--scores", required=True)
    ap.add_argument("--dev-scores", help="nmtkit score --json of the dev split's translation")
    ap.add_argument("--seconds", required=True, help="the folder of the steps' wall seconds")
    ap.add_argument("--attention", required=True)
    ap.add_argument("--command", action="append", default=[])
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()

    train, valid = [], []
    with open(Path(args.run) / "metrics.jsonl", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            (train if rec.get("kind") == "train" else valid if rec.get("kind") == "valid" else []).append(rec)
    report = json.loads(Path(args.scores).read_text(encoding="utf-8"))
    scores = {s["metric"]: s for s in report["systems"][0]["scores"]}
    files = {step: Path(args.seconds) / step for step in STEPS}
    timed = {step: float(f.read_text().strip()) for step, f in files.items() if f.exists()}
    seconds = timed.pop("translate-test")  # its own row below, with the rate
    n_lines = report["lines"]

    last = train[-1] if train else {}
    tok_rates = [r["tgt_tokens_per_s"] for r in train if r.get("tgt_tokens_per_s")]
    best = min((v for v in valid if v.get("loss") is not None), key=lambda v: v["loss"], default=None)
    pics = sorted(p.name for p in Path(args.attention).glob("*.png"))

    out = [f"# Tatoeba English→French: a small RNNsearch trained on {_device(Path(args.run))}", ""]
    out += ["| measure | value |", "|---|---|"]
    for key in ("bleu", "chrf", "ter"):
        if key in scores:
            out.append(f"| {scores[key]['name']} (test, {n_lines} sentences) | {scores[key]['score']:.2f} |")
    if args.dev_scores:
        dev = json.loads(Path(args.dev_scores).read_text(encoding="utf-8"))
        for s in dev["systems"][0]["scores"]:
            if s["metric"] in ("bleu", "chrf"):
                out.append(f"| {s['name']} (dev, {dev['lines']} sentences) | {s['score']:.2f} |")
    out.append(f"| training wall time | {last.get('elapsed', float('nan')) / 60:.1f} min |")
    out.append(f"| updates / epochs | {last.get('update', '?')} / {last.get('epoch', '?')} |")
    if tok_rates:
        out.append(f"| training target tokens/s (mean of log intervals) | {sum(tok_rates) / len(tok_rates):.0f} |")
    if best:
        out.append(f"| best dev loss / ppl (update) | {best['loss']:.3f} / {best['ppl']:.2f} ({best['update']}) |")
        if best.get("bleu") is not None:
            out.append(f"| dev BLEU at that checkpoint (greedy, sample) | {best['bleu']:.2f} |")
    out.append(f"| translating the test split | {seconds:.1f} s ({n_lines / max(seconds, 1e-9):.1f} sentences/s, start-up included) |")
    out += [f"| wall time of `{step}` (start-up included) | {t:.1f} s |" for step, t in timed.items()]
    out += ["", "Signatures:", ""]
    out += [f"- {s['label']}: `{s['signature']}`" for s in scores.values()]
    out += ["", "Commands:", "", "```sh"] + args.command + ["```", ""]
    if pics:
        out += ["Attention (the paper's Figure 3):", ""]
        out += [f"![attention]({os.path.relpath(Path(args.attention) / p, Path(args.output).parent)})" for p in pics[:3]]
    tmp = args.output + ".part"
    Path(tmp).write_text("\n".join(out) + "\n", encoding="utf-8")
    os.replace(tmp, args.output)


def _device(run: Path) -> str:
    """The device the run trained on, from train.log's first line ("... on cuda x1: ...")."""
    log = run / "train.log"
    m = re.search(r" on (\S+) x(\d+):", log.read_text(encoding="utf-8")) if log.exists() else None
    if not m:
        return "an unknown device"
    return m.group(1) if m.group(2) == "1" else f"{m.group(2)} x {m.group(1)}"


if __name__ == "__main__":
    main()
