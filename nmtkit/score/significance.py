"""Paired bootstrap resampling between systems (Koehn 2004) through `sacrebleu.significance`."""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from nmtkit.errors import ConfigError
from nmtkit.score.metrics import _check_streams, make_metric


@contextlib.contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """sacrebleu reads its resampling seed from $SACREBLEU_SEED; set it only for this call."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = old


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
    """Paired bootstrap resampling (Koehn 2004) of every system against the first (the baseline).

    Calls sacrebleu's `PairedTest(test_type='bs')`, which replicates Moses'
    `bootstrap-hypothesis-difference-significance.pl`: the same `n_samples` resampled sentence
    sets for all systems; p = (#{|diff*| - mean > |diff|} + 1) / (n + 1), where Moses counts >=.
    The two differ only for a difference of exactly 0 (a system against itself, or one whose
    every sentence scores the same), which gets p = 1 here, as in Moses. Deterministic for a
    given `seed` (>= 1; sacrebleu treats 0 as "unseeded"). Returns (signature per metric, rows).
    """
    from sacrebleu.significance import PairedTest

    if len(systems) < 2:
        raise ConfigError("--significance needs at least two --hyp files (the first is the baseline)")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 1:
        raise ConfigError(f"the bootstrap seed must be a positive integer, got {seed!r}")
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:  # sacrebleu takes <= 0 as 1000
        raise ConfigError(f"the number of bootstrap samples must be a positive integer, got {n_samples!r}")
    for _name, hyps in systems:
        _check_streams(hyps, refs)
    metric_objs = {key: make_metric(key, tokenize=tokenize, lowercase=lowercase) for key in metrics}
    with _sacrebleu_seed(seed):
        test = PairedTest([(n, list(h)) for n, h in systems], metric_objs, [list(r) for r in refs],
                          test_type="bs", n_samples=n_samples, n_jobs=1)
        sigs, scores = test()
    rows = []
    names = scores["System"]
    for metric_name, results in scores.items():
        if metric_name == "System":
            continue
        baseline = float(results[0].score)
        for name, res in zip(names, results):
            p = res.p_value
            if p is not None and float(res.score) == baseline:
                # no difference: every resample's is at least as large (Moses' >=), so p = 1. sacrebleu
                # counts only larger ones, which made a system scored against itself "significant"
                p = 1.0
            rows.append(SignificanceRow(name, metric_name, float(res.score), res.mean, res.ci, p))
    return {k: v.format() for k, v in sigs.items()}, rows

