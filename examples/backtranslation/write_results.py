"""Write results.md for the back-translation recipe: test scores of the French->English model
that back-translates and of the two English->French systems, their training, the synthetic
corpus, and the paired significance test between the two systems.

usage: python write_results.py --work work --results results --bt-command CMD --updates N
       --bt-updates N --beam K -o results/results.md
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

SYSTEMS = [("fr-en", "French→English (back-translates)"), ("real", "English→French, real pairs"),
           ("real+bt", "English→French, real + back-translated pairs")]


def _records(run: Path) -> tuple[list[dict], list[dict]]:
    train, valid = [], []
    with open(run / "metrics.jsonl", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            (train if rec.get("kind") == "train" else valid if rec.get("kind") == "valid" else []).append(rec)
    return train, valid


def _count_lines(path: Path) -> tuple[int, int]:
    """(lines, non-empty lines)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")[:-1]  # as nmtkit reads lines: only a newline ends one
    return len(lines), sum(1 for x in lines if x.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--bt-command", required=True)
    ap.add_argument("--updates", required=True)
    ap.add_argument("--bt-updates", required=True)
    ap.add_argument("--beam", required=True)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    work, results = Path(args.work), Path(args.results)

    out = ["# Back-translation by sampling (Edunov et al. 2018), small, on a CPU", ""]
    out += ["| system | training pairs | updates | last dev loss | test BLEU | test chrF2 |", "|---|---|---|---|---|---|"]
    for name, label in SYSTEMS:
        train, valid = _records(work / name / "run")
        manifest = json.loads((work / name / "data" / "manifest.json").read_text(encoding="utf-8"))
        pairs = manifest["splits"]["train"]["lines"]  # pairs kept by preprocess
        report = json.loads((results / f"{name}.scores.json").read_text(encoding="utf-8"))
        scores = {s["metric"]: s for s in report["systems"][0]["scores"]}
        loss = f"{valid[-1]['loss']:.3f}" if valid and valid[-1].get("loss") is not None else "-"
        update = train[-1].get("update", "?") if train else "?"
        out.append(f"| {label} | {pairs:,} | {update} | {loss} | {scores['bleu']['score']:.2f} | "
                   f"{scores['chrf']['score']:.2f} |")
    mono_lines, _ = _count_lines(work / "bt" / "mono.fr")
    synth_lines, synth_nonempty = _count_lines(work / "bt" / "synth.en")
    seconds = float((work / "bt" / "seconds").read_text().strip())
    out += ["", f"Synthetic corpus: {mono_lines:,} French lines sampled into {synth_lines:,} English lines "
            f"({synth_nonempty:,} non-empty) in {seconds:.1f} s. Test set: the Tatoeba test split "
            f"({report['lines']:,} sentences), beam {args.beam}, last checkpoints "
            f"({args.updates} updates each for English→French, {args.bt_updates} for French→English).", ""]
    compare = results / "compare.txt"
    if compare.exists():
        out += ["Paired bootstrap resampling (`nmtkit score --significance`):", "", "```",
                compare.read_text(encoding="utf-8").rstrip(), "```", ""]
    sample = work / "bt" / "synth.en"
    with open(work / "bt" / "mono.fr", encoding="utf-8") as fr, open(sample, encoding="utf-8") as en:
        pairs = [(f.rstrip("\n"), e.rstrip("\n")) for f, e, _ in zip(fr, en, range(5))]
    out += ["First synthetic pairs (French original → sampled English):", ""]
    out += [f"- {f} → {e}" for f, e in pairs]
    out += ["", "Back-translation command:", "", "```", args.bt_command, "```"]
    Path(args.output).write_text("\n".join(out) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
