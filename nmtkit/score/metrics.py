"""Corpus metrics: sacrebleu's BLEU, chrF and TER with signatures (Post 2018), the 2014-15 papers'
BLEU (Moses' `multi-bleu.perl` on Moses-tokenised, case-sensitive text, which is sacrebleu's BLEU
with `tokenize='none'` and `smooth_method='none'`), and paired bootstrap resampling (Koehn 2004).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Iterable, Sequence

from nmtkit.errors import ConfigError
from nmtkit.text.io import check_counts
from nmtkit.text.moses import tokenize_like_perl
from nmtkit.text.parallel import parallel_map

log = logging.getLogger(__name__)

# sacrebleu's paired bootstrap holds every resample's sentence statistics at once (under ~4 GB)
BOOTSTRAP_MAX_SAMPLE_LINES = 50_000_000
TER_MAX_WORDS = 1000  # TER's time past it: docs/experiments.md
MAX_LINE_CHARS = 1_000_000  # chrF holds ~1 KB of n-grams a character of a line (CJK; 450 B ASCII), BLEU 200 B
SCORE_CHUNK_LINES = 1000  # lines whose reference n-grams sacrebleu holds at once
METRICS = ("bleu", "chrf", "ter")
BLEU_TOKENIZERS = ("13a", "intl", "none", "char", "zh", "ja-mecab", "ko-mecab", "spm", "flores101", "flores200")
# "spm" is sacrebleu's old name of "flores101" (the same model and signature): it logs a deprecation line
SACREBLEU_TOKENIZER_NAMES = {"spm": "flores101"}
TOKENISED_PERIODS = 100  # hypotheses ending in " ." from which sacrebleu warns that they look tokenised
PAPER_BLEU_LABEL = "BLEU (paper-style: multi-bleu.perl on Moses-tokenised text, case-sensitive)"


@dataclass
class MetricScore:
    """One corpus-level score with everything needed to reproduce it; `label` says which BLEU."""

    key: str
    name: str
    label: str
    score: float
    signature: str
    verbose: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def format(self) -> str:
        """One line, sacrebleu's own layout."""
        verbose = f" {self.verbose}" if self.verbose else ""
        return f"{self.label} = {self.score:.2f}{verbose}  [{self.signature}]"

    def to_dict(self) -> dict[str, Any]:
        d = {"metric": self.key, "name": self.name, "label": self.label, "score": round(self.score, 4),
             "signature": self.signature}
        if self.verbose:
            d["verbose"] = self.verbose
        d.update(self.details)
        return d


def make_metric(key: str, tokenize: str | None = None, lowercase: bool = False):
    """A fresh sacrebleu metric object for "bleu", "chrf" or "ter"; `tokenize` and `lowercase` apply
    to BLEU only, as sacrebleu's -tok and -lc do. BLEU's `force`: its check for tokenised
    hypotheses (three lines on stderr) is `corpus_scores`' one-line warning here."""
    from sacrebleu.metrics import BLEU, CHRF, TER

    if key == "bleu":
        try:
            return BLEU(tokenize=SACREBLEU_TOKENIZER_NAMES.get(tokenize, tokenize), lowercase=lowercase, force=True)
        except Exception as err:  # e.g. a tokenizer whose optional dependency is missing; one line of it
            reason = " ".join(str(err).split()) or type(err).__name__
            raise ConfigError(f"cannot use BLEU tokenizer {tokenize!r}: {reason}") from None
    if key == "chrf":
        return CHRF()
    if key == "ter":
        return TER()
    raise ConfigError(f"unknown metric {key!r}; choose from {', '.join(METRICS)}")


def _bleu_details(score) -> dict[str, Any]:
    return {
        "precisions": [round(p, 4) for p in score.precisions],
        "counts": list(score.counts),
        "totals": list(score.totals),
        "bp": round(score.bp, 4),
        "ratio": round(float(score.ratio), 4),  # sacrebleu gives an int 0 for an empty reference
        "hyp_len": score.sys_len,
        "ref_len": score.ref_len,
    }


def corpus_scores(hyps: Sequence[str], refs: Sequence[Sequence[str]], metrics: Sequence[str] = METRICS,
                  tokenize: str | None = None, lowercase: bool = False) -> list[MetricScore]:
    """sacrebleu corpus scores of `hyps` against the reference streams `refs`, one per `metrics`."""
    _check_streams(hyps, refs)
    tokenised = sum(h.endswith(" .") for h in hyps)
    if "bleu" in metrics and tokenised >= TOKENISED_PERIODS:  # sacrebleu's own test, as one line
        log.warning("%d hypothesis lines end in a tokenised period (' .'): BLEU expects detokenised text (what "
                    "'nmtkit translate' writes); detokenise it, or use --paper-bleu for tokenised text", tokenised)
    out = []
    for key in metrics:
        metric = make_metric(key, tokenize=tokenize, lowercase=lowercase)
        score = corpus_score(metric, hyps, refs)
        sig = metric.get_signature().format()
        label = score.name
        if key == "bleu":
            tok = dict(kv.split(":", 1) for kv in sig.split("|"))["tok"]
            label = f"BLEU (sacrebleu on detokenised text, tok {tok}{', lowercased' if lowercase else ''})"
        details = _bleu_details(score) if key == "bleu" else {}
        out.append(MetricScore(key, score.name, label, float(score.score), sig, _verbose(score), details))
    return out


def corpus_score(metric, hyps: Sequence[str], refs: Sequence[Sequence[str]]):
    """`metric.corpus_score(hyps, refs)`, its line statistics summed SCORE_CHUNK_LINES lines at a
    time in sacrebleu's order (the same sums), not every reference line's n-grams held at once."""
    line_stats, score_of = _stats_methods(metric)
    total = None
    for i in range(0, len(hyps), SCORE_CHUNK_LINES):
        for stats in line_stats(hyps[i:i + SCORE_CHUNK_LINES], [r[i:i + SCORE_CHUNK_LINES] for r in refs]):
            total = stats if total is None else [a + b for a, b in zip(total, stats)]
    return score_of(total)


def _stats_methods(metric):
    """sacrebleu's private per-line statistics and score of their sums (checked with sacrebleu 2.3.2 to 2.6.0)."""
    try:
        return metric._extract_corpus_statistics, metric._compute_score_from_stats
    except AttributeError:
        from sacrebleu import __version__

        raise ConfigError(f"sacrebleu {__version__} lacks the line statistics nmtkit score sums (it works with "
                          "sacrebleu 2.3.2 to 2.6: pip install 'sacrebleu>=2.3.2,<2.7')") from None


def _verbose(score) -> str:
    """What sacrebleu's score line (`str(score)`: "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = ...)") says after the score."""
    return str(score).partition(" = ")[2].partition(" ")[2]


def _check_streams(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> None:
    """The API's guard: a list of lines, and a list of such lists for the references, as long as it."""
    if isinstance(hyps, str) or isinstance(refs, str) or any(isinstance(r, str) for r in refs):
        raise ConfigError("the hypotheses are a list of lines, and the references a list of such lists (one per "
                          "reference), not strings")
    if not refs:
        raise ConfigError("at least one reference is needed")
    if not hyps:
        raise ConfigError("there are no hypotheses to score")
    check_counts(("the hypotheses", len(hyps)), [("the references", len(r)) for r in refs])
    for what, lines in (("hypothesis", hyps), *(("reference", r) for r in refs)):
        bad = next((k for k, line in enumerate(lines) if not isinstance(line, str)), None)
        if bad is not None:
            raise ConfigError(f"{what} line {bad + 1} is {type(lines[bad]).__name__}, not a string")


def moses_tokenize_lines(lines: Iterable[str], lang: str, workers: int = 1) -> list[str]:
    """Moses-tokenise each line exactly as `tokenizer.perl -l LANG -no-escape`; tokens joined by spaces."""
    lines = list(lines)  # under 2,000 lines, one chunk anyway: a process pool would only add start-up time
    return list(parallel_map(partial(_moses_line, lang=lang), lines, workers=workers if len(lines) >= 2000 else 1))


def _moses_line(line: str, lang: str) -> str:
    return " ".join(tokenize_like_perl(line, lang))


def multibleu(hyps_tok: Sequence[str], refs_tok: Sequence[Sequence[str]], lang: str | None = None) -> MetricScore:
    """`multi-bleu.perl REF < HYP` on already tokenised text: clipped n-gram precisions (n = 1..4)
    summed over the corpus, their geometric mean (0 when any is 0), brevity penalty exp(1 - r/c)
    when c < r, r the sum of the closest reference lengths (the shorter on ties). `lang` goes into
    the signature."""
    from sacrebleu.metrics import BLEU

    _check_streams(hyps_tok, refs_tok)
    metric = BLEU(tokenize="none", smooth_method="none", force=True)
    score = corpus_score(metric, hyps_tok, refs_tok)
    sig = metric.get_signature()
    sig.update("tok", f"moses-{lang}" if lang else "moses")
    return MetricScore("paper_bleu", "BLEU", PAPER_BLEU_LABEL, float(score.score),
                       sig.format() + "|multi-bleu.perl", _verbose(score), _bleu_details(score))


def paper_bleu(hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str, workers: int = 1) -> MetricScore:
    """The 2014-15 papers' BLEU: Moses-tokenise hypotheses and references, then multi-bleu."""
    _check_streams(hyps, refs)
    hyps_tok = moses_tokenize_lines(hyps, lang, workers)
    refs_tok = [moses_tokenize_lines(r, lang, workers) for r in refs]
    return multibleu(hyps_tok, refs_tok, lang)


def guess_lang(path: str | Path, default: str = "en") -> str:
    """The language code from a file name ending in `.xx` or `.xx.gz`."""
    suffix = Path(str(path).removesuffix(".gz")).suffix.lstrip(".").lower()
    return suffix if len(suffix) == 2 and suffix.isalpha() else default


@dataclass
class SignificanceRow:
    """One system in a paired test: its score, bootstrap mean ± 95% CI, and p-value vs the baseline."""

    system: str
    metric: str
    score: float
    mean: float | None
    ci: float | None
    p_value: float | None  # None for the baseline itself

    def to_dict(self) -> dict[str, Any]:
        return {"system": self.system, "metric": self.metric, "score": round(self.score, 4),
                "mean": None if self.mean is None else round(float(self.mean), 4),
                "ci95": None if self.ci is None else round(float(self.ci), 4),
                "p_value": None if self.p_value is None else float(self.p_value)}


def paired_bootstrap(systems: Sequence[tuple[str, Sequence[str]]], refs: Sequence[Sequence[str]],
                     metrics: Sequence[str] = ("bleu",), n_samples: int = 1000, seed: int = 12345,
                     tokenize: str | None = None, lowercase: bool = False
                     ) -> tuple[dict[str, str], list[SignificanceRow]]:
    """Paired bootstrap resampling (Koehn 2004) of every system against the first, by sacrebleu's
    `PairedTest(test_type='bs')`: the same `n_samples` resampled sentence sets for all systems;
    p = (#{|diff*| - mean > |diff|} + 1) / (n + 1), where Moses counts >= (see the p = 1 below).
    Deterministic for a given `seed` (>= 1; sacrebleu treats 0 as "unseeded"). Returns (signature
    per metric, rows)."""
    from unittest import mock

    from sacrebleu.significance import PairedTest

    if len(systems) < 2:
        raise ConfigError("--significance needs at least two --hyp files (the first is the baseline)")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 1:
        raise ConfigError(f"the bootstrap seed must be a positive integer, got {seed!r}")
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:  # sacrebleu takes <= 0 as 1000
        raise ConfigError(f"the number of bootstrap samples must be a positive integer, got {n_samples!r}")
    for _name, hyps in systems:
        _check_streams(hyps, refs)
    lines = len(systems[0][1])
    if n_samples * lines > BOOTSTRAP_MAX_SAMPLE_LINES:
        raise ConfigError(f"{n_samples:,} bootstrap samples of {lines:,} lines: sacrebleu holds every sample's sentence "
                          f"statistics in memory, so samples x lines may be at most {BOOTSTRAP_MAX_SAMPLE_LINES:,} "
                          f"(here at most {BOOTSTRAP_MAX_SAMPLE_LINES // lines:,} samples)")
    metric_objs = {key: make_metric(key, tokenize=tokenize, lowercase=lowercase) for key in metrics}
    with mock.patch.dict(os.environ, {"SACREBLEU_SEED": str(seed)}):  # its seed, for this call only
        test = PairedTest([(n, list(h)) for n, h in systems], metric_objs, [list(r) for r in refs],
                          test_type="bs", n_samples=n_samples, n_jobs=1)
        sigs, scores = test()
    rows = []
    names = scores.pop("System")
    for metric_name, results in scores.items():
        baseline = float(results[0].score)
        for name, res in zip(names, results):
            p = res.p_value
            if p is not None and float(res.score) == baseline:  # no difference: p = 1 by Moses' >=
                p = 1.0
            rows.append(SignificanceRow(name, metric_name, float(res.score), res.mean, res.ci, p))
    return {k: v.format() for k, v in sigs.items()}, rows
