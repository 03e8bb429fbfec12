"""Write the paper's Table 1 (BLEU on newstest2014, all sentences and "No UNK") from the JSON
that `nmtkit score --paper-bleu --no-unk --json` wrote for each system, beside the paper's numbers:
"All" from SYSTEM.json (plain decoding), "No UNK" from SYSTEM.nounk.json (decoded with
`translate --ban-unk`, as the paper did) when it exists, else from SYSTEM.json's no-UNK subset.

usage: python make_table.py --eval EVAL_DIR --systems rnnencdec-30 ... -o results/table1.md
"""
from __future__ import annotations

import argparse
import json
import os

# Bahdanau et al. (2015), Table 1: BLEU on news-test-2014 (all / no UNK).
PAPER = {
    "rnnencdec-30": ("RNNencdec-30", 13.93, 24.19),
    "rnnsearch-30": ("RNNsearch-30", 21.50, 31.44),
    "rnnencdec-50": ("RNNencdec-50", 17.82, 26.71),
    "rnnsearch-50": ("RNNsearch-50", 26.75, 34.16),
    "rnnsearch-50star": ("RNNsearch-50*", 28.45, 36.15),
    "moses": ("Moses", 33.30, 35.63),
}


def _score(scores: list[dict], metric: str) -> float | None:
    for s in scores:
        if s.get("metric") == metric:
            return float(s["score"])
    return None


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _no_unk_note(subsets: dict[str, tuple]) -> list[str]:
    """The footnote on the No-UNK column: which sentences it scores, one subset for all the
    systems where they share their vocabularies (as the recipe's do), else each system's."""
    if len(set(subsets.values())) == 1:
        (kept, total), = set(subsets.values())
        which = f"the {kept} of {total} sentences"
        whose = "the systems' word vocabularies (one pair, which every system shares)"
    else:
        which = "the sentences (" + ", ".join(f"{n}: {k} of {t}" for n, (k, t) in subsets.items()) + ")"
        whose = "each system's word vocabularies (they differ, so the subsets differ)"
    return [f"No UNK: {which} whose source and reference have no word outside",
            f"{whose}, decoded with the unknown word disallowed",
            "(`nmtkit translate --ban-unk`), as in the paper."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval", required=True, help="folder with SYSTEM.json files")
    ap.add_argument("--systems", nargs="+", required=True)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()

    rows = []
    subsets = {}  # system -> (kept, total) of its No-UNK subset
    for name in args.systems:
        with open(os.path.join(args.eval, f"{name}.json"), encoding="utf-8") as f:
            report = json.load(f)
        scores = report["systems"][0]["scores"]
        no_unk = report.get("no_unk", {})
        banned = os.path.join(args.eval, f"{name}.nounk.json")
        if os.path.exists(banned):
            with open(banned, encoding="utf-8") as f:
                no_unk = json.load(f).get("no_unk", {})
        nu_scores = no_unk.get("systems", [{}])[0].get("scores", [])
        subsets[name] = (no_unk.get("kept"), no_unk.get("total"))
        label, paper_all, paper_nounk = PAPER.get(name, (name, None, None))
        rows.append((label, _score(scores, "paper_bleu"), _score(nu_scores, "paper_bleu"),
                     _score(scores, "bleu"), _score(nu_scores, "bleu"), paper_all, paper_nounk))
    label, paper_all, paper_nounk = PAPER["moses"]
    rows.append((label + " (paper)", None, None, None, None, paper_all, paper_nounk))

    lines = [
        "# Table 1: BLEU on newstest2014 (English→French)",
        "",
        "| Model | All (ours) | No UNK (ours) | All (paper) | No UNK (paper) | sacreBLEU all | sacreBLEU No UNK |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, a, nu, sa, snu, pa, pnu in rows:
        lines.append(f"| {label} | {_fmt(a)} | {_fmt(nu)} | {_fmt(pa)} | {_fmt(pnu)} | {_fmt(sa)} | {_fmt(snu)} |")
    lines += [
        "",
        "\"ours\" is paper-style BLEU (multi-bleu.perl on Moses-tokenised, case-sensitive text), the",
        "measure the paper reports; sacreBLEU (detokenised, 13a) is given for comparison with later work.",
        *_no_unk_note(subsets),
    ]
    tmp = args.output + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
