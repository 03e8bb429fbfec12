"""Count the printf placeholders (%s, %d, %1$s, %(name)s, ...) of a source file that come out
intact in its translation: the demo's measure of `preprocess --protect printf`.

usage: python count_placeholders.py --src test.en --hyp test.hyp.fr [--ref test.fr] [--data DIR] [--json OUT]

A placeholder survives a line when the translation holds it verbatim (each occurrence counted
at most as often as the source has it). --ref counts the same for the reference translation
(what a perfect system would keep); --data DIR also sends the reference through the text
pipeline recorded in DIR/manifest.json and back (tokenise, BPE, join, detokenise), the most any
model trained on that data directory could keep. The placeholders are those of nmtkit's printf
set (nmtkit.text.moses.PRINTF), matched as the tokeniser matches them.
"""
from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from nmtkit.text.io import read_lines
from nmtkit.text.moses import PRINTF

# Python's %(name)s first, so that it is not read as "%(" ... ; case-insensitive like sacremoses
PLACEHOLDER = re.compile("|".join(f"(?:{p})" for p in reversed(PRINTF)), re.IGNORECASE)


def placeholders(line: str) -> Counter:
    return Counter(m.group() for m in PLACEHOLDER.finditer(line))


def survival(src: list[str], out: list[str]) -> tuple[int, int, int]:
    """(placeholders in src, of them found verbatim in out, lines with placeholders all kept)."""
    total = kept = whole_lines = 0
    for s, o in zip(src, out, strict=True):
        want = placeholders(s)
        if not want:
            continue
        got = placeholders(o)
        k = sum(min(n, got[p]) for p, n in want.items())
        total += sum(want.values())
        kept += k
        whole_lines += k == sum(want.values())
    return total, kept, whole_lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--hyp", required=True)
    ap.add_argument("--ref")
    ap.add_argument("--data", help="a preprocess data directory: also count the reference's round trip through its pipeline")
    ap.add_argument("--json", help="also write the counts to this file as JSON")
    args = ap.parse_args()
    src = [line.rstrip("\n") for line in read_lines(args.src)]
    rows = {"translation": [line.rstrip("\n") for line in read_lines(args.hyp)]}
    if args.ref:
        ref = [line.rstrip("\n") for line in read_lines(args.ref)]
        rows["reference"] = ref
        if args.data:
            from nmtkit.text.pipeline import TextPipeline

            manifest = json.loads((Path(args.data) / "manifest.json").read_text(encoding="utf-8"))
            pipe = TextPipeline.from_dict(manifest["pipeline"])
            rows["reference through the pipeline"] = [pipe.decode(pipe.encode(r, "tgt"), "tgt") for r in ref]
    report = {}
    for name, out in rows.items():
        total, kept, lines = survival(src, out)
        report[name] = {"placeholders": total, "kept": kept, "lines_all_kept": lines}
        pct = 100 * kept / max(1, total)
        print(f"{name}: {kept} of {total} source placeholders kept ({pct:.1f}%), lines with all kept: {lines}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
