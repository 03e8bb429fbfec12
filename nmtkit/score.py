"""Scoring translations: sacrebleu metrics, paper-style BLEU, the "No UNK" subset, BLEU by length.

What `nmtkit score` computes, as plain functions over lists of lines (no torch here):

* BLEU, chrF and TER through sacrebleu's metric classes (Post 2018, "A Call for Clarity in
  Reporting BLEU Scores"), each with its reproducibility signature.
* The BLEU that the 2014-15 NMT papers reported (Bahdanau et al. 2015, Table 1; Cho et al. 2014):
  Moses' `multi-bleu.perl` on Moses-tokenised, case-sensitive text. multi-bleu is plain corpus
  BLEU (clipped n-gram precisions for n = 1..4, geometric mean, brevity penalty against the
  closest reference length, shorter on ties, no smoothing), which is exactly sacrebleu's BLEU
  with `tokenize='none'` and `smooth_method='none'` applied to whitespace-joined Moses tokens.
* The paper's "No UNK" column: BLEU on the sentences whose source and reference(s) contain no
  token outside the model's vocabularies.
* BLEU per source-length bucket (the paper's Figure 2), as a table and a matplotlib chart.
* Paired bootstrap resampling between systems (Koehn 2004) through `sacrebleu.significance`.

Line counts are always checked: sacrebleu truncates silently when hypothesis and reference
differ in length; here that is an error naming both files and their counts.
"""
from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from nmtkit.errors import ConfigError, InputError
from nmtkit.outputs import check_output, save_figure

METRICS = ("bleu", "chrf", "ter")
BLEU_TOKENIZERS = ("13a", "intl", "none", "char", "zh", "ja-mecab", "ko-mecab", "spm", "flores101", "flores200")
PAPER_BLEU_LABEL = "BLEU (paper-style: multi-bleu.perl on Moses-tokenised text, case-sensitive)"
BPE_NO_UNK_NOTE = (
    "this model uses BPE subwords, so almost every sentence decomposes into known subwords; "
    "the 'No UNK' subset here means: sentences in which no source or reference token maps to "
    "<unk> after the model's preprocessing and BPE (usually nearly all sentences), unlike the "
    "paper's word-level 'No UNK' column"
)


# --------------------------------------------------------------------------------------------
# Reading files


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 text file, without their line ends ("\\n", "\\r\\n").

    Lines are split on "\\n" only (not on the Unicode separators that `str.splitlines` also
    honours), so the count equals `wc -l` (plus one for a last line without newline).
    "-" reads standard input. Raises InputError for a missing file or invalid UTF-8 (file:line).
    """
    path_str = str(path)
    try:
        if path_str == "-":
            data = sys.stdin.buffer.read()
            path_str = "<stdin>"
        else:
            with open(path, "rb") as f:
                data = f.read()
    except FileNotFoundError:
        raise InputError("file not found", path_str) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a text file", path_str) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", path_str) from None
    if not data:
        return []
    raw = data.split(b"\n")
    if raw[-1] == b"":
        raw.pop()
    lines = []
    for lineno, b in enumerate(raw, 1):
        try:
            s = b.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(f"invalid UTF-8 at byte {err.start} of the line", path_str, lineno) from None
        lines.append(s[:-1] if s.endswith("\r") else s)
    return lines


def check_same_length(hyp_path: str, hyps: Sequence[str], others: Iterable[tuple[str, Sequence[str]]],
                      what: str = "reference") -> None:
    """Raise InputError unless every (path, lines) in `others` has as many lines as `hyps`."""
    for path, lines in others:
        if len(lines) != len(hyps):
            raise InputError(
                f"line counts differ: hypothesis {hyp_path} has {len(hyps)} lines, "
                f"{what} {path} has {len(lines)} (sacrebleu would silently truncate; fix the files)"
            )


def subset(lines: Sequence[str], indices: Sequence[int]) -> list[str]:
    """`[lines[i] for i in indices]`."""
    return [lines[i] for i in indices]


# --------------------------------------------------------------------------------------------
# Metrics


@dataclass
class MetricScore:
    """One corpus-level score with everything needed to reproduce it.

    `name` is sacrebleu's metric name ("BLEU", "chrF2", "TER"), `label` a human description
    that says which BLEU this is, `signature` sacrebleu's signature string, `details` extra
    figures (n-gram precisions, brevity penalty, lengths for BLEU).
    """

    key: str
    name: str
    label: str
    score: float
    signature: str
    verbose: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def format(self) -> str:
        """One line: `LABEL|signature = score verbose`, sacrebleu's own layout."""
        text = f"{self.label} = {self.score:.2f}"
        if self.verbose:
            text += f" {self.verbose}"
        return f"{text}  [{self.signature}]"

    def to_dict(self) -> dict[str, Any]:
        d = {"metric": self.key, "name": self.name, "label": self.label, "score": round(self.score, 4),
             "signature": self.signature}
        if self.verbose:
            d["verbose"] = self.verbose
        d.update(self.details)
        return d


def make_metric(key: str, tokenize: str | None = None, lowercase: bool = False):
    """A fresh sacrebleu metric object for "bleu", "chrf" or "ter".

    `tokenize` and `lowercase` apply to BLEU (and `lowercase` to chrF) as in sacrebleu's CLI;
    TER keeps sacrebleu's defaults (it is case-insensitive by default).
    """
    from sacrebleu.metrics import BLEU, CHRF, TER

    if key == "bleu":
        try:
            return BLEU(tokenize=tokenize, lowercase=lowercase)
        except Exception as err:  # e.g. a tokenizer whose optional dependency is missing
            raise ConfigError(f"cannot use BLEU tokenizer {tokenize!r}: {err}") from None
    if key == "chrf":
        return CHRF(lowercase=lowercase)
    if key == "ter":
        return TER()
    raise ConfigError(f"unknown metric {key!r}; choose from {', '.join(METRICS)}")


def _bleu_details(score) -> dict[str, Any]:
    return {
        "precisions": [round(p, 4) for p in score.precisions],
        "counts": list(score.counts),
        "totals": list(score.totals),
        "bp": round(score.bp, 4),
        "ratio": round(score.sys_len / score.ref_len, 4) if score.ref_len else 0.0,
        "hyp_len": score.sys_len,
        "ref_len": score.ref_len,
    }


def _verbose(score) -> str:
    # sacrebleu's own verbose string (BLEU: precisions, BP, ratio, lengths).
    return getattr(score, "_verbose", "") or ""


def corpus_scores(hyps: Sequence[str], refs: Sequence[Sequence[str]], metrics: Sequence[str] = METRICS,
                  tokenize: str | None = None, lowercase: bool = False) -> list[MetricScore]:
    """sacrebleu corpus scores of `hyps` against the reference streams `refs`.

    `refs` is a list of streams, each as long as `hyps` (several references per sentence).
    Returns one MetricScore per entry of `metrics`, in that order.
    """
    _check_streams(hyps, refs)
    out = []
    for key in metrics:
        metric = make_metric(key, tokenize=tokenize, lowercase=lowercase)
        score = metric.corpus_score(list(hyps), [list(r) for r in refs])
        sig = metric.get_signature().format()
        label = score.name
        if key == "bleu":
            tok = metric.tokenizer_signature
            label = f"BLEU (sacrebleu on detokenised text, tok {tok}{', lowercased' if lowercase else ''})"
        details = _bleu_details(score) if key == "bleu" else {}
        out.append(MetricScore(key, score.name, label, float(score.score), sig, _verbose(score), details))
    return out


def _check_streams(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> None:
    if not refs:
        raise ConfigError("at least one reference is needed")
    for r in refs:
        if len(r) != len(hyps):  # internal callers check files first; this guards the API
            raise InputError(f"line counts differ: {len(hyps)} hypotheses, {len(r)} references")


def moses_tokenize_lines(lines: Iterable[str], lang: str, workers: int = 1) -> list[str]:
    """Moses-tokenise each line exactly as `tokenizer.perl -l LANG -no-escape` (no punctuation
    normalisation, case kept); tokens joined by spaces."""
    from functools import partial

    from nmtkit.text.parallel import parallel_map

    lines = list(lines)
    if len(lines) < 2000:  # one chunk anyway: a process pool would only add start-up time
        workers = 1
    return list(parallel_map(partial(_moses_line, lang=lang), lines, workers=workers))


def _moses_line(line: str, lang: str) -> str:
    from nmtkit.text.moses import tokenize_like_perl

    return " ".join(tokenize_like_perl(line, lang))


def multibleu(hyps_tok: Sequence[str], refs_tok: Sequence[Sequence[str]], lang: str | None = None) -> MetricScore:
    """multi-bleu.perl on already tokenised text: whitespace tokens, case-sensitive, no smoothing.

    Same figures as `multi-bleu.perl REF < HYP`: clipped n-gram precisions (n = 1..4) summed over
    the corpus, their geometric mean (0 when any is 0), brevity penalty exp(1 - r/c) when c < r
    with r the sum of the closest reference lengths (the shorter on ties). `lang` (the Moses
    tokeniser's language, when known) goes into the signature.
    """
    from sacrebleu.metrics import BLEU

    _check_streams(hyps_tok, refs_tok)
    metric = BLEU(tokenize="none", smooth_method="none", force=True)
    score = metric.corpus_score(list(hyps_tok), [list(r) for r in refs_tok])
    sig = metric.get_signature()
    sig.update("tok", f"moses-{lang}" if lang else "moses")
    return MetricScore("paper_bleu", "BLEU", PAPER_BLEU_LABEL, float(score.score),
                       sig.format() + "|multi-bleu.perl", _verbose(score), _bleu_details(score))


def paper_bleu(hyps: Sequence[str], refs: Sequence[Sequence[str]], lang: str, workers: int = 1) -> MetricScore:
    """The 2014-15 papers' BLEU: Moses-tokenise hypotheses and references (language `lang`), then multi-bleu."""
    _check_streams(hyps, refs)
    hyps_tok = moses_tokenize_lines(hyps, lang, workers)
    refs_tok = [moses_tokenize_lines(r, lang, workers) for r in refs]
    return multibleu(hyps_tok, refs_tok, lang)


def guess_lang(path: str | Path, default: str = "en") -> str:
    """The language code from a file name ending in `.xx` (e.g. `newstest2014-fren.fr` -> "fr")."""
    suffix = Path(str(path)).suffix.lstrip(".").lower()
    return suffix if len(suffix) == 2 and suffix.isalpha() else default


# --------------------------------------------------------------------------------------------
# "No UNK" subset


def no_unk_indices(src: Sequence[str], refs: Sequence[Sequence[str]],
                   encode_src: Callable[[str], list[str]], encode_tgt: Callable[[str], list[str]],
                   src_vocab: Iterable[str] | set[str], tgt_vocab: Iterable[str] | set[str]) -> list[int]:
    """Indices of sentences whose source and every reference have no out-of-vocabulary token.

    `encode_src` / `encode_tgt` turn a raw line into the tokens the vocabulary sees (the model's
    pipeline: normalise, tokenise, case, BPE). The special symbols (<unk>, <pad>, ...) count as
    unknown: a literal "<unk>" in the text is the model's UNK too.
    """
    from nmtkit.text.vocab import SPECIALS

    src_known = set(src_vocab) - set(SPECIALS)
    tgt_known = set(tgt_vocab) - set(SPECIALS)
    for r in refs:
        if len(r) != len(src):
            raise InputError(f"line counts differ: {len(src)} source lines, {len(r)} reference lines")
    kept = []
    for i, line in enumerate(src):
        if not all(t in src_known for t in encode_src(line)):
            continue
        if all(all(t in tgt_known for t in encode_tgt(r[i])) for r in refs):
            kept.append(i)
    return kept


def vocab_is_bpe(*vocabs: Iterable[str]) -> bool:
    """True when a vocabulary holds subword-nmt continuation tokens ("xx@@")."""
    return any(tok.endswith("@@") for v in vocabs for tok in v)


@dataclass
class ModelText:
    """What the "No UNK" subset needs from a model: its two encoders and two vocabularies."""

    encode_src: Callable[[str], list[str]]
    encode_tgt: Callable[[str], list[str]]
    src_vocab: list[str]
    tgt_vocab: list[str]
    is_bpe: bool
    origin: str


def _pipeline_text(pipeline: dict, src_vocab: list[str], tgt_vocab: list[str], origin: str) -> ModelText:
    try:
        from nmtkit.text.pipeline import TextPipeline
    except ImportError as err:  # pragma: no cover - the preprocess module is part of the package
        raise ConfigError(f"text pipeline unavailable: {err}") from None
    pipe = TextPipeline.from_dict(pipeline)
    uses_bpe = bool(pipeline.get("bpe")) or vocab_is_bpe(src_vocab, tgt_vocab)
    return ModelText(lambda s: pipe.encode(s, "src"), lambda s: pipe.encode(s, "tgt"),
                     list(src_vocab), list(tgt_vocab), uses_bpe, origin)


def model_text_from_checkpoint(path: str | Path) -> ModelText:
    """Pipeline and vocabularies recorded in a checkpoint (imports torch to read the file)."""
    from nmtkit.checkpoint import load_checkpoint
    from nmtkit.errors import CheckpointError

    ckpt = load_checkpoint(path)
    try:
        return _pipeline_text(ckpt["pipeline"], ckpt["src_vocab"], ckpt["tgt_vocab"], str(path))
    except KeyError as err:
        raise CheckpointError(f"checkpoint lacks field {err}", str(path)) from None


def model_text_from_data_dir(data_dir: str | Path) -> ModelText:
    """Pipeline (manifest.json) and vocabulary files of a `nmtkit preprocess` data directory (torch-free)."""
    import json

    from nmtkit.text.vocab import Vocab

    data_dir = Path(data_dir)
    manifest_path = data_dir / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        raise InputError("no manifest.json: not an 'nmtkit preprocess' data directory", str(data_dir)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"invalid JSON: {err}", str(manifest_path)) from None
    try:
        pipeline = manifest["pipeline"]
        src_vocab = Vocab.load(data_dir / manifest["vocab"]["src"]).itos
        tgt_vocab = Vocab.load(data_dir / manifest["vocab"]["tgt"]).itos
    except (KeyError, TypeError) as err:
        raise InputError(f"manifest lacks field {err}", str(manifest_path)) from None
    return _pipeline_text(pipeline, src_vocab, tgt_vocab, str(data_dir))


# --------------------------------------------------------------------------------------------
# BLEU by source length (Figure 2)


def bucket_of(length: int, width: int, max_length: int) -> int:
    """Bucket index of a sentence of `length` words: (0, w] -> 0, (w, 2w] -> 1, ..., > max -> last.

    Empty sentences fall in the first bucket. With width 10 and max 60 the buckets are
    1-10, 11-20, ..., 51-60, >60 (seven buckets).
    """
    if length > max_length:
        return (max_length + width - 1) // width
    return max(0, (length - 1) // width)


def bucket_labels(width: int, max_length: int) -> list[str]:
    """Labels of the buckets `bucket_of` assigns, e.g. ["1-10", "11-20", ..., "51-60", ">60"]."""
    n = (max_length + width - 1) // width
    labels = [f"{i * width + 1}-{min((i + 1) * width, max_length)}" for i in range(n)]
    labels[0] = "0" + labels[0][1:]  # the first bucket also holds empty sentences
    return labels + [f">{max_length}"]


@dataclass
class LengthBucket:
    """One row of the by-length table: the sentences of one length range and each system's BLEU."""

    label: str
    lo: int
    hi: int | None  # inclusive upper bound; None for the open last bucket
    indices: list[int]
    bleu: dict[str, float | None]  # system name -> sacrebleu BLEU (None when the bucket is empty)
    paper_bleu: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {"bucket": self.label, "min_len": self.lo, "max_len": self.hi, "sentences": len(self.indices),
             "bleu": self.bleu}
        if self.paper_bleu:
            d["paper_bleu"] = self.paper_bleu
        return d


def bleu_by_length(systems: Sequence[tuple[str, Sequence[str]]], refs: Sequence[Sequence[str]],
                   src_lengths: Sequence[int], width: int = 10, max_length: int = 60,
                   tokenize: str | None = None, lowercase: bool = False,
                   paper_tok: tuple[Sequence[Sequence[str]], Sequence[Sequence[str]]] | None = None
                   ) -> list[LengthBucket]:
    """Corpus BLEU of each system on the sentences of each source-length bucket.

    `systems` is a list of (name, hypotheses); `src_lengths[i]` the length of source sentence i
    in words. `paper_tok = (hyps_tok per system, refs_tok)` adds paper-style BLEU per bucket.
    Every bucket is listed, empty ones with BLEU None.
    """
    if width < 1 or max_length < 1:
        raise ConfigError("--bucket-width and --max-length must be positive")
    for name, hyps in systems:
        if len(hyps) != len(src_lengths):
            raise InputError(f"line counts differ: {name} has {len(hyps)} lines, source has {len(src_lengths)}")
    labels = bucket_labels(width, max_length)
    members: list[list[int]] = [[] for _ in labels]
    for i, n in enumerate(src_lengths):
        members[bucket_of(n, width, max_length)].append(i)
    rows = []
    for b, (label, idx) in enumerate(zip(labels, members)):
        lo = 0 if b == 0 else b * width + 1
        hi = None if b == len(labels) - 1 else min((b + 1) * width, max_length)
        bleu: dict[str, float | None] = {}
        pbleu: dict[str, float | None] = {}
        for s, (name, hyps) in enumerate(systems):
            if not idx:
                bleu[name] = None
                if paper_tok is not None:
                    pbleu[name] = None
                continue
            metric = make_metric("bleu", tokenize=tokenize, lowercase=lowercase)
            bleu[name] = float(metric.corpus_score(subset(hyps, idx), [subset(r, idx) for r in refs]).score)
            if paper_tok is not None:
                hyps_tok, refs_tok = paper_tok
                pbleu[name] = multibleu(subset(hyps_tok[s], idx), [subset(r, idx) for r in refs_tok]).score
        rows.append(LengthBucket(label, lo, hi, idx, bleu, pbleu))
    return rows


def format_length_table(rows: Sequence[LengthBucket], names: Sequence[str]) -> str:
    """An aligned plain-text table: bucket, sentence count, one BLEU column per system (and flavour)."""
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
    widths = [max(len(row[c]) for row in [header] + body) for c in range(len(header))]
    lines = []
    for row in [header] + body:
        lines.append("  ".join(cell.ljust(w) if c == 0 else cell.rjust(w)
                               for c, (cell, w) in enumerate(zip(row, widths))).rstrip())
    return "\n".join(lines)


def plot_by_length(rows: Sequence[LengthBucket], names: Sequence[str], path: str | Path,
                   title: str = "BLEU by source sentence length") -> None:
    """Draw BLEU against source-length bucket, one line per system (paper Figure 2), to a PNG.

    Solid lines: sacrebleu BLEU. When the rows carry paper-style BLEU, each system also gets a
    dashed line of the same colour for it.

    Written to a temporary name and renamed, so a failed run leaves no partial file.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    path = Path(path)
    paper = any(r.paper_bleu for r in rows)
    x = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    try:
        markers = "os^vDx*+"
        for k, name in enumerate(names):
            ys = [r.bleu.get(name) for r in rows]
            ys = [float("nan") if y is None else y for y in ys]
            (line,) = ax.plot(x, ys, marker=markers[k % len(markers)], label=name)
            if paper:
                ps = [r.paper_bleu.get(name) for r in rows]
                ps = [float("nan") if y is None else y for y in ps]
                ax.plot(x, ps, marker=markers[k % len(markers)], linestyle="--", color=line.get_color(),
                        label=f"{name} (paper-style BLEU)")
        ax.set_xticks(x)
        ax.set_xticklabels([r.label for r in rows])
        ax.set_xlabel("source sentence length (words)")
        ax.set_ylabel("BLEU (solid: sacrebleu, dashed: paper-style)" if paper else "BLEU (sacrebleu)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        save_figure(fig, path, format="png")
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------
# Paired bootstrap resampling


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
    sets for all systems; p = (#{|diff*| - mean >= |diff|} + 1) / (n + 1). Deterministic for a
    given `seed` (>= 1; sacrebleu treats 0 as "unseeded"). Returns (signature per metric, rows).
    """
    from sacrebleu.significance import PairedTest

    if len(systems) < 2:
        raise ConfigError("--significance needs at least two --hyp files (the first is the baseline)")
    if seed < 1:
        raise ConfigError("the bootstrap seed must be a positive integer")
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
        for name, res in zip(names, results):
            rows.append(SignificanceRow(name, metric_name, float(res.score), res.mean, res.ci, res.p_value))
    return {k: v.format() for k, v in sigs.items()}, rows


def format_significance(rows: Sequence[SignificanceRow], n_samples: int, seed: int, alpha: float = 0.05) -> str:
    """A plain table per metric: system, score, bootstrap mean ± 95% CI, p-value vs baseline."""
    out = [f"Paired bootstrap resampling: {n_samples} samples, seed {seed}; "
           f"baseline = first system; * = p < {alpha}"]
    metrics = list(dict.fromkeys(r.metric for r in rows))
    for m in metrics:
        mrows = [r for r in rows if r.metric == m]
        out.append("")
        header = ["system", m, "mean ± 95% CI", "p-value"]
        body = []
        for r in mrows:
            ci = "-" if r.mean is None else f"{r.mean:.2f} ± {r.ci:.2f}"
            if r.p_value is None:
                p = "(baseline)"
            else:
                p = f"{r.p_value:.4f}" + (" *" if r.p_value < alpha else "")
            body.append([r.system, f"{r.score:.2f}", ci, p])
        widths = [max(len(row[c]) for row in [header] + body) for c in range(4)]
        for row in [header] + body:
            out.append("  ".join(cell.ljust(w) if c == 0 else cell.rjust(w)
                                 for c, (cell, w) in enumerate(zip(row, widths))).rstrip())
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# The whole `nmtkit score` run


@dataclass(frozen=True)
class ScoreOptions:
    """Every option of `nmtkit score` (one field per CLI option)."""

    hyp_paths: list[str]
    ref_paths: list[str]
    labels: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=lambda: list(METRICS))
    tokenize: str | None = None
    lowercase: bool = False
    as_json: bool = False
    paper_bleu: bool = False
    tgt_lang: str | None = None
    src_path: str | None = None
    src_lang: str | None = None
    no_unk: bool = False
    model_path: str | None = None
    data_dir: str | None = None
    by_length: bool = False
    bucket_width: int = 10
    max_length: int = 60
    plot_path: str | None = None
    significance: bool = False
    bootstrap_samples: int = 1000
    seed: int = 12345
    workers: int = 1


def _system_names(paths: Sequence[str], labels: Sequence[str]) -> list[str]:
    if labels:
        if len(labels) != len(paths):
            raise ConfigError(f"{len(labels)} --label given for {len(paths)} --hyp files: give one per --hyp")
        names = list(labels)
    else:
        names = [Path(p).name if p != "-" else "stdin" for p in paths]
        if len(set(names)) < len(names):
            names = list(paths)
    if len(set(names)) < len(names):
        raise ConfigError("system names must be distinct (use --label)")
    return names


def _check_options(o: ScoreOptions) -> None:
    if o.no_unk:
        if not o.src_path:
            raise ConfigError("--no-unk needs --src (the source sentences)")
        if bool(o.model_path) == bool(o.data_dir):
            raise ConfigError("--no-unk needs the model's vocabularies: give either -m CHECKPOINT or --data DIR")
    elif o.model_path or o.data_dir:
        raise ConfigError("-m/--data are only used with --no-unk")
    if o.by_length and not o.src_path:
        raise ConfigError("--by-length/--plot need --src (lengths are source sentence lengths)")
    if o.significance and len(o.hyp_paths) < 2:
        raise ConfigError("--significance needs at least two --hyp files (the first is the baseline)")
    if sum(p == "-" for p in list(o.hyp_paths) + list(o.ref_paths) + [o.src_path or ""]) > 1:
        raise ConfigError("only one input can be read from stdin ('-')")
    if o.plot_path and not o.plot_path.lower().endswith(".png"):
        raise ConfigError(f"--plot writes a PNG: give a file name ending in .png, not {o.plot_path!r}")
    if o.plot_path:  # before any scoring: score has no --force, a plot is redrawn in place
        check_output(o.plot_path, force=True, what="--plot file")


def run_score(o: ScoreOptions, warn: Callable[[str], None] = lambda msg: None) -> str:
    """Everything `nmtkit score` does; returns the stdout text (JSON or a plain report).

    `warn` receives notes for the user (stderr in the CLI), e.g. what "No UNK" means for BPE.
    """
    import json

    _check_options(o)
    names = _system_names(o.hyp_paths, o.labels)
    refs = [read_lines(p) for p in o.ref_paths]
    systems = [(n, read_lines(p)) for n, p in zip(names, o.hyp_paths)]
    for (_name, hyps), path in zip(systems, o.hyp_paths):
        check_same_length(path, hyps, zip(o.ref_paths, refs))
    n_lines = len(systems[0][1])
    for (_name, hyps), path in zip(systems[1:], o.hyp_paths[1:]):
        check_same_length(o.hyp_paths[0], systems[0][1], [(path, hyps)], what="hypothesis")
    src = None
    if o.src_path:
        src = read_lines(o.src_path)
        check_same_length(o.hyp_paths[0], systems[0][1], [(o.src_path, src)], what="source")
    if n_lines == 0:
        raise InputError("empty file: nothing to score", o.hyp_paths[0])
    tgt_lang = o.tgt_lang or guess_lang(o.ref_paths[0])
    src_lang = o.src_lang or (guess_lang(o.src_path) if o.src_path else "en")

    report: dict[str, Any] = {"refs": list(o.ref_paths), "lines": n_lines, "systems": []}
    text: list[str] = []
    multi = len(systems) > 1

    # Paper-style BLEU needs Moses tokens of everything; tokenise each file once.
    refs_tok: list[list[str]] | None = None
    hyps_tok: list[list[str]] | None = None
    if o.paper_bleu:
        refs_tok = [moses_tokenize_lines(r, tgt_lang, o.workers) for r in refs]
        hyps_tok = [moses_tokenize_lines(h, tgt_lang, o.workers) for _, h in systems]
        report["paper_bleu"] = {"lang": tgt_lang, "tokenizer": "tokenizer.perl -l "
                                f"{tgt_lang} -no-escape (sacremoses, no punctuation normalisation)", "definition": PAPER_BLEU_LABEL}

    for s, ((name, hyps), path) in enumerate(zip(systems, o.hyp_paths)):
        scores = corpus_scores(hyps, refs, o.metrics, o.tokenize, o.lowercase)
        if o.paper_bleu:
            scores.append(multibleu(hyps_tok[s], refs_tok, tgt_lang))
        report["systems"].append({"name": name, "hyp": path, "scores": [m.to_dict() for m in scores]})
        if multi:
            text.append(f"# {name} ({path})")
        text.extend(m.format() for m in scores)
        if multi:
            text.append("")

    if o.no_unk:
        assert src is not None
        model = (model_text_from_checkpoint(o.model_path) if o.model_path
                 else model_text_from_data_dir(o.data_dir))
        kept = no_unk_indices(src, refs, model.encode_src, model.encode_tgt, model.src_vocab, model.tgt_vocab)
        info: dict[str, Any] = {"model": model.origin, "bpe": model.is_bpe, "kept": len(kept), "total": n_lines,
                                "definition": (BPE_NO_UNK_NOTE if model.is_bpe else
                                               "sentences whose source and reference(s) have no word "
                                               "outside the model's source/target vocabularies"),
                                "systems": []}
        if model.is_bpe:
            warn(BPE_NO_UNK_NOTE)
        text.append(f"No UNK subset: {len(kept)} of {n_lines} sentences "
                    f"({'no token maps to <unk> after BPE' if model.is_bpe else 'no out-of-vocabulary word'} "
                    f"in source or reference; vocabularies of {model.origin})")
        for s, (name, hyps) in enumerate(systems):
            entry: dict[str, Any] = {"name": name, "scores": []}
            if kept:
                sub_refs = [subset(r, kept) for r in refs]
                scores = corpus_scores(subset(hyps, kept), sub_refs, ["bleu"], o.tokenize, o.lowercase)
                if o.paper_bleu:
                    scores.append(multibleu(subset(hyps_tok[s], kept), [subset(r, kept) for r in refs_tok],
                                            tgt_lang))
                for m in scores:
                    m.label = f"No UNK {m.label}"
                entry["scores"] = [m.to_dict() for m in scores]
                text.extend((f"{name}: " if multi else "") + m.format() for m in scores)
            info["systems"].append(entry)
        if not kept:
            text.append("(no sentence qualifies: nothing to score)")
        report["no_unk"] = info
        text.append("")

    if o.by_length:
        assert src is not None
        lengths = [len(t.split()) for t in moses_tokenize_lines(src, src_lang, o.workers)]
        rows = bleu_by_length(systems, refs, lengths, o.bucket_width, o.max_length, o.tokenize, o.lowercase,
                              paper_tok=(hyps_tok, refs_tok) if o.paper_bleu else None)
        report["by_length"] = {"src": o.src_path, "src_lang": src_lang, "length_unit": "Moses tokens of the source",
                               "bucket_width": o.bucket_width, "max_length": o.max_length,
                               "rows": [r.to_dict() for r in rows]}
        text.append(f"BLEU by source sentence length (Moses tokens of {o.src_path}; sacrebleu BLEU"
                    f"{', and paper-style BLEU' if o.paper_bleu else ''})")
        text.append(format_length_table(rows, names))
        text.append("")
        if o.plot_path:
            plot_by_length(rows, names, o.plot_path)
            report["by_length"]["plot"] = o.plot_path
            warn(f"wrote {o.plot_path}")

    if o.significance:
        sigs, rows_sig = paired_bootstrap(systems, refs, o.metrics, o.bootstrap_samples, o.seed,
                                          o.tokenize, o.lowercase)
        report["significance"] = {"test": "paired bootstrap resampling", "baseline": names[0],
                                  "samples": o.bootstrap_samples, "seed": o.seed, "signatures": sigs,
                                  "rows": [r.to_dict() for r in rows_sig]}
        text.append(format_significance(rows_sig, o.bootstrap_samples, o.seed))
        text.append("")

    if o.as_json:
        return json.dumps(report, indent=1, ensure_ascii=False) + "\n"
    while text and text[-1] == "":
        text.pop()
    return "\n".join(text) + "\n"
