"""`nmtkit score`: `ScoreConfig` (every option) and `run(config, progress=None) -> ScoreReport`.

Torch-free except `subsets.model_text_from_checkpoint`. Line counts are always checked: sacrebleu
truncates silently when hypothesis and reference differ in length.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence
from unicodedata import is_normalized

from nmtkit.devices import MAX_WORKERS
from nmtkit.errors import ConfigError, InputError
from nmtkit.io.checks import Output, check_given_once, check_outputs_vs_inputs
from nmtkit.io.files import is_stdin
from nmtkit.options import check_fields, off_default, option, refuse_without
from nmtkit.progress import Progress, note
from nmtkit.score.metrics import (
    BLEU_TOKENIZERS,
    BOOTSTRAP_MAX_SAMPLE_LINES,
    MAX_LINE_CHARS,
    METRICS,
    TER_MAX_WORDS,
    MetricScore,
    corpus_scores,
    guess_lang,
    moses_tokenize_lines,
    multibleu,
    paired_bootstrap,
)
from nmtkit.score.report import (
    ByLengthResult,
    NoUnkResult,
    ScoreReport,
    SignificanceResult,
    SystemScores,
)
from nmtkit.score.subsets import (
    BPE_NO_UNK_NOTE,
    ModelText,
    bleu_by_length,
    check_buckets,
    model_text_from_checkpoint,
    model_text_from_data_dir,
    no_unk_indices,
    plot_by_length,
    subset,
)
from nmtkit.text.bpe import SEPARATOR, unrecorded_subwords
from nmtkit.text.io import check_counts, read_all_lines
from nmtkit.text.moses import check_lang

TRUNCATE_WHY = " (sacrebleu would silently truncate; fix the files)"

log = logging.getLogger(__name__)


def check_same_length(hyp_path: str, hyps: Sequence[str], others: Iterable[tuple[str, Sequence[str]]],
                      what: str = "reference") -> None:
    """Raise InputError unless every (path, lines) in `others` has as many lines as `hyps`."""
    check_counts((f"hypothesis {hyp_path}", len(hyps)), [(f"{what} {p}", len(lines)) for p, lines in others],
                 TRUNCATE_WHY)


def metric_list(value: str) -> list[str]:
    """'bleu, CHRF' -> ['bleu', 'chrf']: the --metrics option's comma-separated subset of METRICS."""
    keys = [k.strip().lower() for k in value.split(",") if k.strip()]
    bad = [k for k in keys if k not in METRICS]
    if bad or not keys:
        raise ConfigError(f"--metrics: {', '.join(bad) or 'nothing'}: choose from bleu, chrf, ter (comma-separated)")
    return list(dict.fromkeys(keys))


@dataclass(frozen=True)
class ScoreConfig:
    """Every option of `nmtkit score`, one field each (its click options are generated from them)."""

    hyp_paths: list[str] = option(
        names=("--hyp",), multiple=True, required=True, metavar="FILE", path="file",
        help="System output, one detokenised sentence a line ('-' = stdin). Repeat for several systems.")
    ref_paths: list[str] = option(
        names=("--ref", "-r"), multiple=True, required=True, metavar="FILE", path="file",
        help="Reference translation(s), as many lines as each --hyp. Repeat for multiple references.")
    labels: list[str] = option(default_factory=list, names=("--label",), multiple=True, metavar="NAME",
                               help="Name of each --hyp system, in the same order (default: the file names).")
    metrics: list[str] = option(default_factory=lambda: list(METRICS), cli_default=",".join(METRICS),
                                convert=metric_list, help="Comma-separated subset of bleu,chrf,ter.")
    tokenize: str | None = option(None, names=("--tokenize", "-tok"), choices=BLEU_TOKENIZERS, shown_default="13a",
                                  help="sacrebleu BLEU tokeniser.")
    lowercase: bool = option(False, names=("--lowercase", "-lc"),
                             help="Case-insensitive BLEU (as sacrebleu -lc); chrF stays case-sensitive.")
    as_json: bool = option(False, names=("--json",), help="Write one JSON object on stdout instead of text.")
    paper_bleu: bool = option(
        False, help="Also the BLEU of the 2014-15 papers: multi-bleu.perl on Moses-tokenised, case-sensitive text.")
    tgt_lang: str | None = option(
        None, metavar="LANG",
        help="Target language for Moses tokenisation (default: from the --ref file suffix, else en).")
    src_path: str | None = option(None, names=("--src",), metavar="FILE", path="file",
                                  help="Source sentences (raw), for --no-unk and --by-length.")
    src_lang: str | None = option(None, metavar="LANG",
                                  help="Source language (default: from the --src file suffix, else en).")
    no_unk: bool = option(
        False, help="Also score the paper's 'No UNK' subset: sentences whose source and reference are covered by "
                    "the model's vocabularies. Needs --src and -m or --data.")
    model_path: str | None = option(None, names=("--model", "-m"), metavar="CHECKPOINT", path="file",
                                    help="Checkpoint whose pipeline and vocabularies define --no-unk.")
    data_dir: str | None = option(
        None, names=("--data",), metavar="DIR", path="directory",
        help="Or: an 'nmtkit preprocess' data directory (manifest + vocab files) for --no-unk.")
    by_length: bool = option(False, help="BLEU per source-length bucket (paper Figure 2). Needs --src.")
    bucket_width: int = option(10, min=1, help="With --by-length: the width of a length bucket in source words.")
    max_length: int = option(60, min=1, help="With --by-length: longer source sentences share one last bucket.")
    plot_path: str | None = option(
        None, names=("--plot",), metavar="FILE.png", path="file",
        help="Draw BLEU by length (one line per system) to this PNG (implies --by-length).")
    significance: bool = option(
        False, help="Paired bootstrap resampling of each --hyp against the first one; prints p-values.")
    bootstrap_samples: int = option(
        1000, min=1, help="With --significance: the number of bootstrap resamples (samples x lines at most "
                          f"{BOOTSTRAP_MAX_SAMPLE_LINES:,}: sacrebleu holds them all in memory).")
    seed: int = option(12345, min=1, help="With --significance: the seed of the bootstrap resampling.")
    workers: int = option(1, names=("--workers", "-j"), min=1, max=MAX_WORKERS, metavar="N", cli_default=None, shown_default="all cores",
                          help="Processes for Moses tokenisation.")

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.hyp_paths or not self.ref_paths:  # from Python: click requires both
            raise ConfigError("need --hyp and --ref (at least one file each)")
        # from Python, --metrics' text or a list of names, read as --metrics is
        metrics = self.metrics
        if not isinstance(metrics, str):
            if not isinstance(metrics, (list, tuple)) or not all(isinstance(m, str) for m in metrics):
                raise ConfigError(f"--metrics must be a list of metric names, got {metrics!r:.60}")
            metrics = ",".join(metrics)
        object.__setattr__(self, "metrics", metric_list(metrics))
        if self.plot_path is not None:  # --plot implies --by-length
            object.__setattr__(self, "by_length", True)
        for lang, name in ((self.tgt_lang, "--tgt-lang"), (self.src_lang, "--src-lang")):
            if lang is not None:  # sacremoses tokenises with them (--paper-bleu, --by-length); '' is no guess
                check_lang(lang, name)


def _system_names(paths: Sequence[str], labels: Sequence[str]) -> list[str]:
    if labels:
        if len(labels) != len(paths):
            raise ConfigError(f"{len(labels)} --label given for {len(paths)} --hyp files: give one per --hyp")
        if (bad := next((n for n in labels if not n.strip() or not n.isprintable()), None)) is not None:
            raise ConfigError(f"--label {bad!r}: give each system a name of printable text on one line (it heads the "
                              "system's scores, its table columns and its legend entry)")
        names = list(labels)
    else:
        names = [Path(p).name if p != "-" else "stdin" for p in paths]
        if len(set(names)) < len(names):
            names = list(paths)
    if len(set(names)) < len(names):
        raise ConfigError("system names must be distinct (use --label)")
    return names


def _check_options(o: ScoreConfig) -> None:
    """Refuse, among others, a setting given (other than its default) without the option it acts
    with: it would change nothing, without a word. --src-lang and --tgt-lang are accepted alone."""
    acts_with = (("--significance", o.significance, ("seed", "bootstrap_samples")),
                 ("--by-length or --plot", o.by_length, ("bucket_width", "max_length")),
                 ("a BLEU to act on (bleu in --metrics, --no-unk or --by-length; chrF and TER keep sacrebleu's own "
                  "tokenisation and case)", "bleu" in o.metrics or o.no_unk or o.by_length, ("tokenize", "lowercase")))
    for needed, on, names in acts_with:
        if not on:
            refuse_without(off_default(o, names), needed)
    if o.no_unk:
        if not o.src_path:
            raise ConfigError("--no-unk needs --src (the source sentences)")
        if bool(o.model_path) == bool(o.data_dir):
            raise ConfigError("--no-unk needs the model's vocabularies: give either -m CHECKPOINT or --data DIR")
    elif o.model_path or o.data_dir:
        raise ConfigError("-m/--data are only used with --no-unk" + (f" (-m is --model, a checkpoint; sacrebleu's -m "
                          f"{o.model_path} is --metrics {o.model_path})" if o.model_path in METRICS else ""))
    if o.by_length and not o.src_path:
        raise ConfigError("--by-length/--plot need --src (lengths are source sentence lengths)")
    if o.by_length:
        check_buckets(o.bucket_width, o.max_length)
    if o.significance and len(o.hyp_paths) < 2:
        raise ConfigError("--significance needs at least two --hyp files (the first is the baseline)")
    inputs = [p for p in [*o.hyp_paths, *o.ref_paths, o.src_path] if p]
    if sum(map(is_stdin, inputs)) > 1:  # the first reader of a pipe would take every line
        raise ConfigError("only one input can be read from stdin ('-'; /dev/stdin, or the pipe or FIFO stdin comes "
                          "from, is stdin too)")
    check_given_once(o.ref_paths, "each reference counts once (the signature's nrefs would count it twice)")
    if o.plot_path:  # checked before any scoring: score has no --force, a plot is redrawn in place
        if not o.plot_path.lower().endswith(".png"):
            raise ConfigError(f"--plot writes a PNG: give a file name ending in .png, not {o.plot_path!r}")
        check_outputs_vs_inputs(
            inputs=[*(("--hyp", p) for p in o.hyp_paths), *(("--ref", p) for p in o.ref_paths), ("--src", o.src_path),
                    ("-m", o.model_path), ("--data", o.data_dir)],
            files=[Output("--plot", o.plot_path, "--plot file", True)])


@dataclass
class _Inputs:
    """The files of one run, read and checked; Moses tokens with --paper-bleu."""

    systems: list[tuple[str, list[str]]]
    refs: list[list[str]]
    src: list[str] | None
    tgt_lang: str
    src_lang: str
    hyps_tok: list[list[str]] | None = None
    refs_tok: list[list[str]] | None = None


def _read_inputs(o: ScoreConfig) -> _Inputs:
    names = _system_names(o.hyp_paths, o.labels)
    refs = [read_all_lines(p) for p in o.ref_paths]
    systems = [(n, read_all_lines(p)) for n, p in zip(names, o.hyp_paths)]
    for (_name, hyps), path in zip(systems, o.hyp_paths):
        check_same_length(path, hyps, zip(o.ref_paths, refs))
    src = None
    if o.src_path:
        src = read_all_lines(o.src_path)
        check_same_length(o.hyp_paths[0], systems[0][1], [(o.src_path, src)], what="source")
    if not systems[0][1]:
        raise InputError("empty file: nothing to score", o.hyp_paths[0])
    if blank := next((p for p, lines in zip(o.ref_paths, refs) if not any(map(str.strip, lines))), None):
        raise InputError("every line is blank: a reference without a word scores every system 0 (beside other "
                         "references, it inflates TER); give the reference text (cut the right column?)", blank)
    _check_line_bounds([*zip(o.hyp_paths, (h for _, h in systems)), *zip(o.ref_paths, refs)], "ter" in o.metrics)
    _warn_same_text([*(("--hyp", p, h) for p, (_, h) in zip(o.hyp_paths, systems)),
                     *(("--ref", p, r) for p, r in zip(o.ref_paths, refs)), *([("--src", o.src_path, src)] * bool(src))])
    tgt_lang = o.tgt_lang or guess_lang(o.ref_paths[0])
    src_lang = o.src_lang or (guess_lang(o.src_path) if o.src_path else "en")
    inp = _Inputs(systems, refs, src, tgt_lang, src_lang)
    if o.paper_bleu:  # tokenise each file once
        if not o.tgt_lang:  # guessed from the reference's name (a given one is checked with the options)
            check_lang(tgt_lang, "--tgt-lang")
            if not guess_lang(o.ref_paths[0], ""):  # OpenNMT-py's tgt-test.txt
                log.warning(f"{o.ref_paths[0]}: its name ends in no language code (such as .fr), so --paper-bleu "
                            "Moses-tokenises as English (tok:moses-en); give --tgt-lang")
        inp.refs_tok = [moses_tokenize_lines(r, tgt_lang, o.workers) for r in refs]
        inp.hyps_tok = [moses_tokenize_lines(h, tgt_lang, o.workers) for _, h in systems]
    return inp


def _warn_same_text(files: Sequence[tuple[str, str, Sequence[str]]]) -> None:
    """Warn where a file given as --hyp, --ref or --src holds the lines of one given as another of them."""
    for i, (role, path, lines) in enumerate(files):
        same = next(((o, p) for o, p, other in files[:i] if o != role and other == lines), None)
        if same:
            log.warning(f"{path} (given as {role}) holds the very lines of {same[1]} (given as {same[0]}): is one of "
                        "them given in the wrong place?")


def _check_line_bounds(files: Sequence[tuple[str, Sequence[str]]], ter: bool) -> None:
    """An InputError naming the first line of `files` longer than a metric (or TER) is computed for."""
    for path, lines in files:
        for number, line in enumerate(lines, 1):
            if len(line) > MAX_LINE_CHARS:
                raise InputError(f"{len(line):,} characters, past the {MAX_LINE_CHARS:,} a line is scored for (chrF's "
                                 "n-grams take up to 1 KB a character); score it in segments, one a line", path, number)
            if ter and len(line) > TER_MAX_WORDS and len(line.split()) > TER_MAX_WORDS:
                raise InputError(f"{len(line.split()):,} words, past the {TER_MAX_WORDS:,} a line that TER is computed "
                                 "for (its time grows faster than the square of a line's length); leave TER out with "
                                 "--metrics bleu,chrf", path, number)


def form_mismatch(files: Sequence[tuple[str, Sequence[str]]]) -> str | None:
    """A warning when some of `files` (path, lines; "-" is stdin) hold text that is not in
    Unicode NFC and others hold none: sacrebleu compares characters, so a decomposed "é" never
    matches a composed one."""
    decomposed = {path: [i for i, line in enumerate(lines, 1) if not is_normalized("NFC", line)]
                  for path, lines in files}
    bad = [path for path, found in decomposed.items() if found]
    good = [path for path, found in decomposed.items() if not found]
    if not bad or not good:
        return None
    first = decomposed[bad[0]]
    name = {path: "stdin" if path == "-" else path for path in (bad[0], good[0])}
    lines = f"{len(first)} line{'s' if len(first) > 1 else ''}"
    return (f"{name[bad[0]]}: {lines} not in Unicode NFC (such as decomposed accents; line {first[0]} first), "
            f"{name[good[0]]} none: the metrics count the two forms as different characters; compose both, e.g. with "
            "python3 -c 'import sys, unicodedata; sys.stdout.write(unicodedata.normalize(\"NFC\", sys.stdin.read()))'")


def run(o: ScoreConfig, progress: Progress | None = None) -> ScoreReport:
    """Everything `nmtkit score` computes; `progress` is accepted for the one command shape."""
    if not isinstance(o, ScoreConfig):
        raise TypeError(f"nmtkit.score.run takes a ScoreConfig, not {type(o).__name__}")
    _check_options(o)
    inp = _read_inputs(o)
    mismatch = form_mismatch([*zip(o.hyp_paths, (h for _, h in inp.systems)), *zip(o.ref_paths, inp.refs)])
    if mismatch:
        log.warning(mismatch)
    report = ScoreReport(refs=list(o.ref_paths), lines=len(inp.systems[0][1]), systems=[],
                         paper_lang=inp.tgt_lang if o.paper_bleu else None)
    for s, ((name, hyps), path) in enumerate(zip(inp.systems, o.hyp_paths)):
        scores = corpus_scores(hyps, inp.refs, o.metrics, o.tokenize, o.lowercase)
        if o.paper_bleu:
            scores.append(multibleu(inp.hyps_tok[s], inp.refs_tok, inp.tgt_lang))
        report.systems.append(SystemScores(name, path, scores))
    if o.no_unk:
        report.no_unk = _no_unk(o, inp)
    if o.by_length:
        report.by_length = _by_length(o, inp)
    if o.significance:
        sigs, rows = paired_bootstrap(inp.systems, inp.refs, o.metrics, o.bootstrap_samples, o.seed,
                                      o.tokenize, o.lowercase)
        report.significance = SignificanceResult(inp.systems[0][0], o.bootstrap_samples, o.seed, sigs, rows)
    return report


def _no_unk(o: ScoreConfig, inp: _Inputs) -> NoUnkResult:
    assert inp.src is not None
    model = model_text_from_checkpoint(o.model_path) if o.model_path else model_text_from_data_dir(o.data_dir)
    _check_model_langs(o, model)
    kept = no_unk_indices(inp.src, inp.refs, model.encode_src, model.encode_tgt, model.src_vocab, model.tgt_vocab)
    if model.is_bpe:
        note(log, BPE_NO_UNK_NOTE)
    elif n := unrecorded_subwords(model.tgt_vocab):
        log.warning(f"{model.origin}: its target vocabulary has {n:,} subwords ending in '{SEPARATOR}', but its text "
                    "pipeline applies no BPE (the text was split before nmtkit preprocess): the No UNK subset keeps "
                    f"only sentences whose words, unsplit, are all in the vocabularies ({len(kept):,} of {len(inp.src):,})")
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


def _check_model_langs(o: ScoreConfig, model: ModelText) -> None:
    """A ConfigError where --no-unk's model was trained on another language than the one scored
    (--src-lang/--tgt-lang, else the --src/--ref file's suffix)."""
    for side, given, path, lang in (("src", o.src_lang, o.src_path, model.langs[0]),
                                    ("tgt", o.tgt_lang, o.ref_paths[0], model.langs[1])):
        used = given or guess_lang(path or "", default="")
        if used and isinstance(lang, str) and used.lower() != lang.lower():
            how = f"--{side}-lang {used}" if given else f"{used} (the suffix of {path}; --{side}-lang says otherwise)"
            raise ConfigError(f"--no-unk: {model.origin} is a {model.langs[0]}-{model.langs[1]} model, but the "
                              f"{'source' if side == 'src' else 'target'} language is {how}: give the model of the "
                              "languages scored")


def _by_length(o: ScoreConfig, inp: _Inputs) -> ByLengthResult:
    assert inp.src is not None and o.src_path
    lengths = [len(t.split()) for t in moses_tokenize_lines(inp.src, inp.src_lang, o.workers)]
    rows = bleu_by_length(inp.systems, inp.refs, lengths, o.bucket_width, o.max_length, o.tokenize, o.lowercase,
                          paper_tok=(inp.hyps_tok, inp.refs_tok) if o.paper_bleu else None)
    result = ByLengthResult(o.src_path, inp.src_lang, o.bucket_width, o.max_length, o.paper_bleu, rows)
    if o.plot_path:
        plot_by_length(rows, [n for n, _ in inp.systems], o.plot_path)
        result.plot = o.plot_path
        note(log, f"wrote {o.plot_path}")
    return result
