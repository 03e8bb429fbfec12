"""The whole `nmtkit score` run: options, reading and checking the files, filling a ScoreReport.

Line counts are always checked: sacrebleu truncates silently when hypothesis and reference
differ in length; here that is an error naming both files and their counts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from nmtkit.errors import ConfigError, InputError
from nmtkit.outputs import check_output, check_outputs_vs_inputs
from nmtkit.score.metrics import (
    METRICS,
    MetricScore,
    corpus_scores,
    guess_lang,
    moses_tokenize_lines,
    multibleu,
)
from nmtkit.score.report import (
    ByLengthResult,
    NoUnkResult,
    ScoreReport,
    SignificanceResult,
    SystemScores,
)
from nmtkit.score.significance import paired_bootstrap
from nmtkit.score.subsets import (
    BPE_NO_UNK_NOTE,
    bleu_by_length,
    model_text_from_checkpoint,
    model_text_from_data_dir,
    no_unk_indices,
    subset,
)
from nmtkit.text.io import check_counts, read_all_lines

TRUNCATE_WHY = " (sacrebleu would silently truncate; fix the files)"


def check_same_length(hyp_path: str, hyps: Sequence[str], others: Iterable[tuple[str, Sequence[str]]],
                      what: str = "reference") -> None:
    """Raise InputError unless every (path, lines) in `others` has as many lines as `hyps`."""
    check_counts((f"hypothesis {hyp_path}", len(hyps)), [(f"{what} {p}", len(lines)) for p, lines in others],
                 TRUNCATE_WHY)


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
        check_outputs_vs_inputs(
            inputs=[*(("--hyp", p) for p in o.hyp_paths), *(("--ref", p) for p in o.ref_paths), ("--src", o.src_path),
                    ("-m", o.model_path), ("--data", o.data_dir)],
            files=[("--plot", o.plot_path)])
        check_output(o.plot_path, force=True, what="--plot file")




@dataclass
class _Inputs:
    """The files of one run, read and checked: systems as (name, lines), Moses tokens when
    --paper-bleu needs them (`hyps_tok` per system, `refs_tok` per reference)."""

    systems: list[tuple[str, list[str]]]
    refs: list[list[str]]
    src: list[str] | None
    tgt_lang: str
    src_lang: str
    hyps_tok: list[list[str]] | None = None
    refs_tok: list[list[str]] | None = None


def _read_inputs(o: ScoreOptions) -> _Inputs:
    names = _system_names(o.hyp_paths, o.labels)
    refs = [read_all_lines(p) for p in o.ref_paths]
    systems = [(n, read_all_lines(p)) for n, p in zip(names, o.hyp_paths)]
    for (_name, hyps), path in zip(systems, o.hyp_paths):
        check_same_length(path, hyps, zip(o.ref_paths, refs))
    for (_name, hyps), path in zip(systems[1:], o.hyp_paths[1:]):
        check_same_length(o.hyp_paths[0], systems[0][1], [(path, hyps)], what="hypothesis")
    src = None
    if o.src_path:
        src = read_all_lines(o.src_path)
        check_same_length(o.hyp_paths[0], systems[0][1], [(o.src_path, src)], what="source")
    if not systems[0][1]:
        raise InputError("empty file: nothing to score", o.hyp_paths[0])
    tgt_lang = o.tgt_lang or guess_lang(o.ref_paths[0])
    src_lang = o.src_lang or (guess_lang(o.src_path) if o.src_path else "en")
    inp = _Inputs(systems, refs, src, tgt_lang, src_lang)
    if o.paper_bleu:  # paper-style BLEU needs Moses tokens of everything; tokenise each file once
        inp.refs_tok = [moses_tokenize_lines(r, tgt_lang, o.workers) for r in refs]
        inp.hyps_tok = [moses_tokenize_lines(h, tgt_lang, o.workers) for _, h in systems]
    return inp


def run_score(o: ScoreOptions, warn: Callable[[str], None] = lambda msg: None) -> ScoreReport:
    """Everything `nmtkit score` computes, as a ScoreReport (render it with
    `nmtkit.score.report.format_text` or `format_json`).

    `warn` receives notes for the user (stderr in the CLI), e.g. what "No UNK" means for BPE.
    """
    _check_options(o)
    inp = _read_inputs(o)
    report = ScoreReport(refs=list(o.ref_paths), lines=len(inp.systems[0][1]), systems=[],
                         paper_lang=inp.tgt_lang if o.paper_bleu else None)
    for s, ((name, hyps), path) in enumerate(zip(inp.systems, o.hyp_paths)):
        scores = corpus_scores(hyps, inp.refs, o.metrics, o.tokenize, o.lowercase)
        if o.paper_bleu:
            scores.append(multibleu(inp.hyps_tok[s], inp.refs_tok, inp.tgt_lang))
        report.systems.append(SystemScores(name, path, scores))
    if o.no_unk:
        report.no_unk = _no_unk(o, inp, warn)
    if o.by_length:
        report.by_length = _by_length(o, inp, warn)
    if o.significance:
        sigs, rows = paired_bootstrap(inp.systems, inp.refs, o.metrics, o.bootstrap_samples, o.seed,
                                      o.tokenize, o.lowercase)
        report.significance = SignificanceResult(inp.systems[0][0], o.bootstrap_samples, o.seed, sigs, rows)
    return report


def _no_unk(o: ScoreOptions, inp: _Inputs, warn: Callable[[str], None]) -> NoUnkResult:
    assert inp.src is not None
    model = model_text_from_checkpoint(o.model_path) if o.model_path else model_text_from_data_dir(o.data_dir)
    kept = no_unk_indices(inp.src, inp.refs, model.encode_src, model.encode_tgt, model.src_vocab, model.tgt_vocab)
    if model.is_bpe:
        warn(BPE_NO_UNK_NOTE)
    systems = []
    for s, ((name, hyps), path) in enumerate(zip(inp.systems, o.hyp_paths)):
        scores: list[MetricScore] = []
        if kept:
            sub_refs = [subset(r, kept) for r in inp.refs]
            scores = corpus_scores(subset(hyps, kept), sub_refs, ["bleu"], o.tokenize, o.lowercase)
            if o.paper_bleu:
                scores.append(multibleu(subset(inp.hyps_tok[s], kept), [subset(r, kept) for r in inp.refs_tok],
                                        inp.tgt_lang))
            for m in scores:
                m.label = f"No UNK {m.label}"
        systems.append(SystemScores(name, path, scores))
    return NoUnkResult(model.origin, model.is_bpe, len(kept), len(inp.src), systems)


def _by_length(o: ScoreOptions, inp: _Inputs, warn: Callable[[str], None]) -> ByLengthResult:
    assert inp.src is not None and o.src_path
    lengths = [len(t.split()) for t in moses_tokenize_lines(inp.src, inp.src_lang, o.workers)]
    rows = bleu_by_length(inp.systems, inp.refs, lengths, o.bucket_width, o.max_length, o.tokenize, o.lowercase,
                          paper_tok=(inp.hyps_tok, inp.refs_tok) if o.paper_bleu else None)
    result = ByLengthResult(o.src_path, inp.src_lang, o.bucket_width, o.max_length, o.paper_bleu, rows)
    if o.plot_path:
        from nmtkit.score.plot import plot_by_length

        plot_by_length(rows, [n for n, _ in inp.systems], o.plot_path)
        result.plot = o.plot_path
        warn(f"wrote {o.plot_path}")
    return result
