"""What `nmtkit score` found, as one object (`ScoreReport`), and its two renderings: plain text and
JSON. Neither formatter computes anything: both read the same report.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from nmtkit.score.metrics import PAPER_BLEU_LABEL, MetricScore, SignificanceRow
from nmtkit.score.subsets import BPE_NO_UNK_NOTE, LengthBucket

WORD_NO_UNK_DEFINITION = ("sentences whose source and reference(s) have no word "
                          "outside the model's source/target vocabularies")


@dataclass
class SystemScores:
    """The scores of one system (`name`, read from `hyp`) on all sentences or on a subset."""

    name: str
    hyp: str
    scores: list[MetricScore]


@dataclass
class NoUnkResult:
    """The "No UNK" subset: `kept` of `total` sentences, and each system's scores on them."""

    model: str
    bpe: bool
    kept: int
    total: int
    systems: list[SystemScores]


@dataclass
class ByLengthResult:
    """BLEU per source-length bucket; `plot` is the PNG drawn, if any."""

    src: str
    src_lang: str
    bucket_width: int
    max_length: int
    paper_bleu: bool
    rows: list[LengthBucket]
    plot: str | None = None


@dataclass
class SignificanceResult:
    """Paired bootstrap of every system against `baseline` (the first)."""

    baseline: str
    samples: int
    seed: int
    signatures: dict[str, str]
    rows: list[SignificanceRow]


@dataclass
class ScoreReport:
    """Everything one `nmtkit score` run computed; `paper_lang` is set with --paper-bleu."""

    refs: list[str]
    lines: int
    systems: list[SystemScores]
    paper_lang: str | None = None
    no_unk: NoUnkResult | None = None
    by_length: ByLengthResult | None = None
    significance: SignificanceResult | None = None


def format_json(report: ScoreReport) -> str:
    out: dict[str, Any] = {"refs": list(report.refs), "lines": report.lines,
                           "systems": [{"name": s.name, "hyp": s.hyp, "scores": [m.to_dict() for m in s.scores]}
                                       for s in report.systems]}
    if report.paper_lang is not None:
        lang = report.paper_lang
        out["paper_bleu"] = {"lang": lang, "tokenizer": f"tokenizer.perl -l {lang} -no-escape (sacremoses, "
                             "no punctuation normalisation)", "definition": PAPER_BLEU_LABEL}
    if report.no_unk is not None:
        u = report.no_unk
        out["no_unk"] = {"model": u.model, "bpe": u.bpe, "kept": u.kept, "total": u.total,
                         "definition": BPE_NO_UNK_NOTE if u.bpe else WORD_NO_UNK_DEFINITION,
                         "systems": [{"name": s.name, "scores": [m.to_dict() for m in s.scores]}
                                     for s in u.systems]}
    if report.by_length is not None:
        b = report.by_length
        out["by_length"] = {"src": b.src, "src_lang": b.src_lang, "length_unit": "Moses tokens of the source",
                            "bucket_width": b.bucket_width, "max_length": b.max_length,
                            "rows": [r.to_dict() for r in b.rows]}
        if b.plot:
            out["by_length"]["plot"] = b.plot
    if report.significance is not None:
        g = report.significance
        out["significance"] = {"test": "paired bootstrap resampling", "baseline": g.baseline,
                               "samples": g.samples, "seed": g.seed, "signatures": g.signatures,
                               "rows": [r.to_dict() for r in g.rows]}
    return json.dumps(out, indent=1, ensure_ascii=False) + "\n"


def format_text(report: ScoreReport) -> str:
    """The plain report: one sacrebleu-style line per score, then each section."""
    multi = len(report.systems) > 1
    text: list[str] = []
    for s in report.systems:
        if multi:
            text.append(f"# {s.name} ({s.hyp})")
        text.extend(m.format() for m in s.scores)
        if multi:
            text.append("")
    if report.no_unk is not None:
        text.extend(_no_unk_text(report.no_unk, multi))
    if report.by_length is not None:
        b = report.by_length
        text.append(f"BLEU by source sentence length (Moses tokens of {b.src}; sacrebleu BLEU"
                    f"{', and paper-style BLEU' if b.paper_bleu else ''})")
        text.append(format_length_table(b.rows, [s.name for s in report.systems]))
        text.append("")
    if report.significance is not None:
        g = report.significance
        text.append(format_significance(g.rows, g.samples, g.seed))
        text.append("")
    return "\n".join(text).rstrip("\n") + "\n"  # no blank line at the end


def _no_unk_text(u: NoUnkResult, multi: bool) -> list[str]:
    what = "no token maps to <unk> after BPE" if u.bpe else "no out-of-vocabulary word"
    text = [f"No UNK subset: {u.kept} of {u.total} sentences ({what} in source or reference; "
            f"vocabularies of {u.model})"]
    for s in u.systems:
        text.extend((f"{s.name}: " if multi else "") + m.format() for m in s.scores)
    if not u.kept:
        text.append("(no sentence qualifies: nothing to score)")
    text.append("")
    return text


def format_length_table(rows: Sequence[LengthBucket], names: Sequence[str]) -> str:
    """An aligned plain-text table: bucket, sentence count, one BLEU column per system and flavour."""
    header = ["src length", "sentences"] + [f"BLEU {n}" for n in names]
    paper = any(r.paper_bleu for r in rows)
    if paper:
        header += [f"paper-BLEU {n}" for n in names]

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    body = []
    for r in rows:
        cells = [r.label, str(len(r.indices))] + [fmt(r.bleu[n]) for n in names]
        if paper:
            cells += [fmt(r.paper_bleu.get(n)) for n in names]
        body.append(cells)
    return "\n".join(_aligned([header] + body))


def _aligned(rows: list[list[str]]) -> list[str]:
    """Rows of cells as lines of aligned columns: the first left-aligned, the others right-aligned."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in enumerate(zip(row, widths))).rstrip()
            for row in rows]


def format_significance(rows: Sequence[SignificanceRow], n_samples: int, seed: int, alpha: float = 0.05) -> str:
    """A plain table per metric: system, score, bootstrap mean ± 95% CI, p-value vs baseline."""
    out = [f"Paired bootstrap resampling: {n_samples} samples, seed {seed}; "
           f"baseline = first system; * = p < {alpha}"]
    for m in dict.fromkeys(r.metric for r in rows):
        out.append("")
        body = [["system", m, "mean ± 95% CI", "p-value"]]
        for r in [x for x in rows if x.metric == m]:
            ci = "-" if r.mean is None else f"{r.mean:.2f} ± {r.ci:.2f}"
            p = "(baseline)" if r.p_value is None else f"{r.p_value:.4f}" + (" *" if r.p_value < alpha else "")
            body.append([r.system, f"{r.score:.2f}", ci, p])
        out.extend(_aligned(body))
    return "\n".join(out)

