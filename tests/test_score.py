"""`nmtkit score`: equal to sacrebleu, paper-style multi-bleu, No-UNK subset, by-length, plots, bootstrap.

Expected values come from direct sacrebleu calls (its functional API, a different path from the
metric classes nmtkit uses), from a small independent multi-bleu.perl reimplementation below,
from n-gram counts worked out by hand, or from the Moses scripts themselves. Most cases are rows
of tables: command lines whose scores must equal sacrebleu's, and bad command lines.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import sacrebleu

from nmtkit.data.manifest import new_manifest
from nmtkit.errors import ConfigError, InputError
from nmtkit.score.metrics import corpus_scores, moses_tokenize_lines, paired_bootstrap, paper_bleu
from nmtkit.score.report import format_length_table
from nmtkit.score.subsets import (
    bleu_by_length,
    bucket_labels,
    bucket_of,
    model_text_from_checkpoint,
    model_text_from_data_dir,
    no_unk_indices,
)
from nmtkit.text.moses import tokenize as moses_tokenize
from nmtkit.text.pipeline import TextPipeline
from nmtkit.text.vocab import SPECIALS
from tests.conftest import make_data_dir, run_cli

REF = [
    "Le chat est assis sur le tapis.",
    "Il fait beau aujourd'hui à Paris.",
    "Nous avons mangé des pommes et des poires hier soir.",
    "La réunion commence à neuf heures précises.",
    "Je ne sais pas où il habite maintenant.",
    "Le train de Lyon arrive en retard, comme d'habitude.",
    "Elle lit un livre très intéressant sur l'histoire de France.",
    "Les enfants jouent dans le jardin depuis ce matin.",
]
HYP = [
    "Le chat est assis sur un tapis.",
    "Il fait beau à Paris aujourd'hui.",
    "Nous avons mangé des pommes et poires hier.",
    "La réunion commence à neuf heures.",
    "Je ne sais pas où il vit maintenant.",
    "Le train de Lyon est en retard, comme d'habitude.",
    "Elle lit un livre intéressant sur l'histoire de la France.",
    "Les enfants jouent au jardin depuis ce matin.",
]
REF2 = [
    "Le chat est assis sur un tapis.",
    "Aujourd'hui il fait beau à Paris.",
    "Hier soir nous avons mangé des pommes et des poires.",
    "La réunion commence à 9 heures.",
    "Je ne sais pas où il vit maintenant.",
    "Le train de Lyon est en retard, comme toujours.",
    "Elle lit un livre passionnant sur l'histoire de France.",
    "Les enfants jouent au jardin depuis ce matin.",
]
UPPER = [h.upper() for h in HYP]
U2028 = ["a b\u2028c d", "e f"]  # a Unicode line separator inside a line: still 2 lines
BL_SRC = ["one", "one two three", "one two three four five six", "one two", "one two three four",
          "one, two", "a b c d e f g h"]  # Moses lengths 1, 3, 6, 2, 4, 3, 8
# No-UNK subset: 1: "dog" OOV; 2: "chien" OOV in the reference; 3: "The" (case kept); 4: literal <unk>
SRC_VOCAB = ["the", "cat", "sat", "on", "mat", "."]
TGT_VOCAB = ["le", "chat", "dort", "sur", "tapis", "."]
NU_SRC = ["the cat sat.", "the dog sat.", "the cat sat on the mat.", "The cat.", "the cat <unk>", "the mat."]
NU_REF = ["le chat dort.", "le chat dort.", "le chien dort sur le tapis.", "le chat.", "le chat", "le tapis."]
NU_HYP = ["le chat dort .", "le chat dort.", "le chat dort sur le tapis.", "chat.", "le chat", "le tapis dort."]
NU_KEPT = [0, 5]
TEXTS = {"hyp.fr": HYP, "ref.fr": REF, "ref2.fr": REF2, "upper.fr": UPPER, "short.fr": HYP[:-1],
         "src2.en": ["one", "two"], "u2028.fr": U2028, "empty.fr": [], "blank.fr": [""] * (len(HYP) - 1) + [" "], "bl.en": BL_SRC + ["x"],
         "nu.en": NU_SRC, "nuref.fr": NU_REF, "nuhyp.fr": NU_HYP, "nusrc.de": NU_SRC}


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def write_vocab(path: Path, tokens: list[str]) -> str:
    path.write_text("".join(f"{t}\t1\n" for t in list(SPECIALS) + tokens), encoding="utf-8")
    return path.name


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    """Every text of TEXTS as a file, a file with invalid UTF-8 on line 4, a missing file, a file
    that is no checkpoint, and a data directory over SRC_VOCAB/TGT_VOCAB: name -> path."""
    out = {name.split(".")[0]: write(tmp_path / name, lines) for name, lines in TEXTS.items()}
    bad = tmp_path / "bad.fr"
    bad.write_bytes(("\n".join(HYP[:3]) + "\n").encode() + b"caf\xe9\n" + ("\n".join(HYP[4:]) + "\n").encode())
    (tmp_path / "model.pt").write_bytes(b"not a checkpoint")
    data = tmp_path / "data"
    data.mkdir()
    manifest = new_manifest("en", "fr", {"src": write_vocab(data / "vocab.en.txt", SRC_VOCAB),
                                         "tgt": write_vocab(data / "vocab.fr.txt", TGT_VOCAB)},
                            pipeline=TextPipeline("en", "fr").to_dict())
    (data / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return dict(out, bad=str(bad), missing=str(tmp_path / "nope.fr"), badckpt=str(tmp_path / "model.pt"),
                data=str(data), tmp=str(tmp_path))


def score(args: list[str], files: dict[str, str], stdin: str = ""):
    """`nmtkit score ARGS` with {name} placeholders filled from `files` -> (code, stdout, stderr)."""
    return run_cli(["score", *(a.format(**files) for a in args)], stdin)


def score_json(args: list[str], files: dict[str, str], stdin: str = "") -> dict:
    code, out, err = score([*args, "--json"], files, stdin)
    assert code == 0, err
    return json.loads(out)


def by_metric(scores: list[dict]) -> dict[str, dict]:
    return {s["metric"]: s for s in scores}


def sacrebleu_score(metric: str, hyps: list[str], refs: list[list[str]], tokenize: str = "13a",
                    lowercase: bool = False) -> float:
    """The metric straight from sacrebleu's functional API."""
    if metric == "bleu":
        return sacrebleu.corpus_bleu(hyps, refs, tokenize=tokenize, lowercase=lowercase).score
    return {"chrf": sacrebleu.corpus_chrf, "ter": sacrebleu.corpus_ter}[metric](hyps, refs).score  # -lc is BLEU's


# ---------------------------------------------------------------------------------------------
# Scores equal sacrebleu's: (id, args, stdin, [(system name or None, its lines)], references,
# sacrebleu options, signature fields per metric)
SB = dict(tokenize="13a", lowercase=False)
AGREE = [
    ("defaults", ["--hyp", "{hyp}", "--ref", "{ref}"], "", [("hyp.fr", HYP)], [REF], SB,
     {"bleu": ["nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp"], "chrf": ["nc:6"], "ter": ["tok:tercom"]}),
    ("two-refs-intl-lowercase", ["--hyp", "{upper}", "--ref", "{ref}", "--ref", "{ref2}", "--tokenize", "intl",
                                 "--lowercase", "--metrics", "bleu,chrf"], "", [("upper.fr", UPPER)], [REF, REF2],
     dict(tokenize="intl", lowercase=True), {"bleu": ["nrefs:2", "case:lc", "tok:intl"], "chrf": []}),
    ("hypothesis-from-stdin", ["--hyp", "-", "--ref", "{ref}", "--metrics", "bleu"], "".join(h + "\n" for h in HYP),
     [(None, HYP)], [REF], SB, {"bleu": []}),
    ("systems-under-their-labels", ["--hyp", "{hyp}", "--hyp", "{ref2}", "--label", "A", "--label", "B", "--ref",
                                    "{ref}", "--metrics", "bleu"], "", [("A", HYP), ("B", REF2)], [REF], SB,
     {"bleu": []}),
    ("same-file-twice-with-labels", ["--hyp", "{hyp}", "--hyp", "{hyp}", "--label", "x", "--label", "y", "--ref",
                                     "{ref}", "--metrics", "bleu"], "", [("x", HYP), ("y", HYP)], [REF], SB,
     {"bleu": []}),
    ("u2028-inside-a-line-does-not-split-it", ["--hyp", "{u2028}", "--ref", "{u2028}", "--metrics", "bleu"], "",
     [("u2028.fr", U2028)], [U2028], SB, {"bleu": []}),
]


@pytest.mark.parametrize("args, stdin, systems, refs, options, signatures", [r[1:] for r in AGREE],
                         ids=[r[0] for r in AGREE])
def test_scores_equal_direct_sacrebleu_calls(files, args, stdin, systems, refs, options, signatures):
    out = score_json(args, files, stdin)
    assert out["lines"] == len(refs[0]) and len(out["systems"]) == len(systems)
    for got_system, (name, hyps) in zip(out["systems"], systems, strict=True):
        assert name is None or got_system["name"] == name
        got = by_metric(got_system["scores"])
        assert set(got) == set(signatures)
        for metric, fields in signatures.items():
            want = sacrebleu_score(metric, hyps, refs, **options)
            assert got[metric]["score"] == pytest.approx(want, abs=1e-4), metric
            assert all(f"|{f}" in "|" + got[metric]["signature"] for f in fields), got[metric]["signature"]
        assert 0 < got["bleu"]["score"] <= 100


def test_two_inputs_reading_stdin_by_different_names_are_refused(files):
    """--hyp - --ref /dev/stdin on a pipe: the first reader took every line and the other none,
    "line counts differ: hypothesis - has 0 lines" (or, with nothing more to read, a score of
    empty text)."""
    stdin = "".join(h + "\n" for h in HYP)
    for args in (["--hyp", "-", "--ref", "/dev/stdin"], ["--hyp", "{hyp}", "--ref", "{ref}", "--src", "/dev/fd/0",
                                                          "--hyp", "-"]):
        argv = ["score", *(a.format(**files) for a in args)]
        code, out, err = run_cli(argv, stdin, process=True)
        assert code == 2 and out == "", err
        assert err.strip().splitlines() == ["nmtkit: error: only one input can be read from stdin ('-'; /dev/stdin, or "
                                            "the pipe or FIFO stdin comes from, is stdin too)"]


def test_lowercase_makes_bleu_case_insensitive_and_leaves_chrf_case_sensitive_as_sacrebleu_lc(files):
    """sacrebleu's -lc is BLEU's option; its chrF has its own (--chrf-lowercase)."""
    from sacrebleu.metrics import BLEU, CHRF

    got = by_metric(score_json(["--hyp", "{upper}", "--ref", "{ref}", "-lc", "--metrics", "bleu,chrf"],
                               files)["systems"][0]["scores"])
    assert got["bleu"]["score"] == pytest.approx(BLEU(lowercase=True).corpus_score(UPPER, [REF]).score, abs=1e-4)
    chrf = CHRF().corpus_score(UPPER, [REF]).score
    assert chrf != pytest.approx(CHRF(lowercase=True).corpus_score(UPPER, [REF]).score, abs=1)  # case matters here
    assert got["chrf"]["score"] == pytest.approx(chrf, abs=1e-4)
    assert "case:lc" in got["bleu"]["signature"] and "lc" not in got["chrf"]["signature"]


@pytest.mark.slow
def test_real_newstest_scores_equal_sacrebleu(shared_data, tmp_path):
    ref_path = shared_data / "wmt14-newstest" / "newstest2014-fren.fr"
    ref = ref_path.read_text(encoding="utf-8").splitlines()
    hyp = [" ".join(w for i, w in enumerate(line.split()) if i % 5 != 3) for line in ref]
    got = by_metric(score_json(["--hyp", write(tmp_path / "hyp.fr", hyp), "--ref", str(ref_path)],
                               {})["systems"][0]["scores"])
    for metric in ("bleu", "chrf", "ter"):
        assert got[metric]["score"] == pytest.approx(sacrebleu_score(metric, hyp, [ref]), abs=1e-4)


def test_text_output_prints_each_metric_with_its_signature(files):
    code, out, err = score(["--hyp", "{hyp}", "--ref", "{ref}"], files)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 3
    want = sacrebleu.corpus_bleu(HYP, [REF]).score
    assert lines[0].startswith(f"BLEU (sacrebleu on detokenised text, tok 13a) = {want:.2f}") and "version:" in lines[0]
    assert lines[1].startswith("chrF2 = ") and lines[2].startswith("TER = ")


# ---------------------------------------------------------------------------------------------
# Bad command lines: (id, args, exit status (None: any failure), needles of the one error line)
CONFIG, INPUT, USAGE = ConfigError.exit_code, InputError.exit_code, 2
BAD = [
    ("hyp-line-count", ["--hyp", "{short}", "--ref", "{ref}"], None, ["{short}", "{ref}", "7 lines", "has 8"]),
    ("second-ref-line-count", ["--hyp", "{hyp}", "--ref", "{ref}", "--ref", "{short}"], None, ["{short}"]),
    ("second-hyp-line-count", ["--hyp", "{hyp}", "--hyp", "{short}", "--ref", "{ref}"], None, ["{short}"]),
    ("src-line-count", ["--hyp", "{hyp}", "--ref", "{ref}", "--src", "{src2}", "--by-length"], None, ["{src2}", "2"]),
    ("invalid-utf8", ["--hyp", "{bad}", "--ref", "{ref}"], None, ["{bad}:4:", "UTF-8"]),
    ("missing-file", ["--hyp", "{hyp}", "--ref", "{missing}"], None, ["{missing}: file not found"]),
    ("empty-input", ["--hyp", "{empty}", "--ref", "{empty}"], None, ["empty"]),
    ("reference-all-blank", ["--hyp", "{hyp}", "--ref", "{blank}"], INPUT,  # was BLEU 0, chrF 0 and TER 0
     ["{blank}: every line is blank"]),
    # a reference of blank lines (cut -f3 of two columns) scored BLEU 0, or doubled TER as a second reference
    ("blank-second-reference", ["--hyp", "{hyp}", "--ref", "{ref}", "--ref", "{blank}"], INPUT,
     ["{blank}: every line is blank"]),
    ("no-unk-without-src", ["--hyp", "{hyp}", "--ref", "{ref}", "--no-unk"], CONFIG, ["--src"]),
    # sacrebleu's -m is its metrics, nmtkit's the --no-unk model: the message named only the latter
    ("sacrebleu-metrics-as-m", ["--hyp", "{hyp}", "--ref", "{ref}", "-m", "chrf"], CONFIG,
     ["only used with --no-unk", "sacrebleu's -m chrf is --metrics chrf"]),
    ("by-length-without-src", ["--hyp", "{hyp}", "--ref", "{ref}", "--by-length"], CONFIG, ["--src"]),
    ("significance-of-one-system", ["--hyp", "{hyp}", "--ref", "{ref}", "--significance"], CONFIG, ["two --hyp"]),
    ("seed-without-significance", ["--hyp", "{hyp}", "--ref", "{ref}", "--seed", "5", "--bucket-width", "3"], CONFIG,
     ["--seed needs --significance"]),
    ("bootstrap-samples-without-significance", ["--hyp", "{hyp}", "--hyp", "{ref2}", "--ref", "{ref}",
                                                "--bootstrap-samples", "20"], CONFIG,
     ["--bootstrap-samples needs --significance"]),
    ("bucket-options-without-by-length", ["--hyp", "{hyp}", "--ref", "{ref}", "--src", "{bl}", "--bucket-width", "3",
                                          "--max-length", "9"], CONFIG,
     ["--bucket-width and --max-length need --by-length or --plot"]),
    # --max-length 100000000 built a table of as many rows: minutes and gigabytes before the first line
    ("by-length-buckets-past-the-bound", ["--hyp", "{hyp}", "--ref", "{ref}", "--src", "{bl}", "--by-length",
                                          "--bucket-width", "2", "--max-length", "2001"], CONFIG,
     ["--max-length 2001 in buckets of --bucket-width 2 makes 1,001 buckets, over the 1,000"]),
    # sacrebleu's -tok and -lc act on BLEU only: chrF and TER alone were scored as without them, without a word
    ("lowercase-without-bleu", ["--hyp", "{hyp}", "--ref", "{ref}", "--metrics", "chrf,ter", "-lc"], CONFIG,
     ["--lowercase needs a BLEU to act on"]),
    ("tokenize-without-bleu", ["--hyp", "{hyp}", "--ref", "{ref}", "--metrics", "chrf", "-tok", "zh"], CONFIG,
     ["--tokenize needs a BLEU to act on"]),
    ("more-labels-than-systems", ["--hyp", "{hyp}", "--ref", "{ref}", "--label", "A", "--label", "B"], CONFIG,
     ["--label"]),
    # a blank system in the report and tables, or one whose name broke its heading over two lines
    ("blank-label", ["--hyp", "{hyp}", "--ref", "{ref}", "--label", ""], CONFIG, ["--label '': give each system"]),
    ("label-with-a-line-break", ["--hyp", "{hyp}", "--ref", "{ref}", "--label", "a\nb"], CONFIG, ["--label 'a\\nb'"]),
    ("plot-not-png", ["--hyp", "{hyp}", "--ref", "{ref}", "--plot", "x.pdf", "--src", "{hyp}"], CONFIG, [".png"]),
    ("same-file-twice-without-labels", ["--hyp", "{hyp}", "--hyp", "{hyp}", "--ref", "{ref}"], CONFIG, ["--label"]),
    ("no-unk-without-model-or-data", ["--hyp", "{nuhyp}", "--ref", "{nuref}", "--src", "{nu}", "--no-unk"], CONFIG,
     ["-m CHECKPOINT or --data DIR"]),
    ("no-unk-data-not-a-data-dir", ["--hyp", "{nuhyp}", "--ref", "{nuref}", "--src", "{nu}", "--no-unk", "--data",
                                    "{nu}"], INPUT, ["manifest.json"]),
    # the en-fr data directory's vocabularies picked a "No UNK" subset of German text, without a word
    ("no-unk-model-of-another-language", ["--hyp", "{nuhyp}", "--ref", "{nuref}", "--src", "{nu}", "--no-unk", "--data",
                                          "{data}", "--tgt-lang", "de"], CONFIG,
     ["--no-unk: {data} is a en-fr model, but the target language is --tgt-lang de"]),
    ("no-unk-model-of-another-language-by-suffix", ["--hyp", "{nuhyp}", "--ref", "{nuref}", "--src", "{nusrc}",
                                                    "--no-unk", "--data", "{data}"], CONFIG,
     ["the source language is de (the suffix of {nusrc}; --src-lang says otherwise)"]),
    ("no-unk-unreadable-checkpoint", ["--hyp", "{hyp}", "--ref", "{ref}", "--src", "{bl}", "--no-unk", "-m",
                                      "{badckpt}"], None, ["{badckpt}", "checkpoint"]),
]


@pytest.mark.parametrize("args, exit_code, needles", [r[1:] for r in BAD], ids=[r[0] for r in BAD])
def test_bad_command_lines_fail_with_one_line_and_no_output(files, args, exit_code, needles):
    code, out, err = score(args, files)
    assert code != 0 and (exit_code is None or code == exit_code), (code, err)
    assert out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nmtkit: error: "), err
    for needle in needles:
        assert needle.format(**files) in lines[0], (needle, err)


def test_unknown_metric_is_a_usage_error_naming_it(files):
    code, out, err = score(["--hyp", "{hyp}", "--ref", "{ref}", "--metrics", "bleu,meteor"], files)
    assert code == USAGE and out == "" and "meteor" in err and "Traceback" not in err


def test_tokenize_spm_leaves_stderr_to_nmtkits_own_lines(files, monkeypatch):
    """sacrebleu logs a deprecation line for its old name "spm" (its "flores101": the same model and
    signature), which reached stderr before nmtkit's one error line, and on every run that scores."""
    import types

    args = ["--hyp", "{hyp}", "--ref", "{ref}", "--metrics", "bleu", "-tok", "spm", "--json"]
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # not installed: an ImportError
    code, out, err = score(args, files)
    assert code == CONFIG and out == "", err
    assert len(err.splitlines()) == 1 and err.startswith("nmtkit: error: cannot use BLEU tokenizer 'spm'"), err

    class Pieces:  # a stand-in for sentencepiece and its model file: whitespace tokens
        def Load(self, path):
            pass

        def EncodeAsPieces(self, line):
            return line.split()

    monkeypatch.setitem(sys.modules, "sentencepiece", types.SimpleNamespace(SentencePieceProcessor=Pieces))
    from sacrebleu.tokenizers import tokenizer_spm

    monkeypatch.setattr(tokenizer_spm, "download_file", lambda url, path: None)
    code, out, err = score(args, files)
    assert code == 0 and err == "", err
    assert "|tok:flores101|" in json.loads(out)["systems"][0]["scores"][0]["signature"]


def test_a_sacrebleu_without_the_private_line_statistics_score_sums_is_one_error_line(files, monkeypatch):
    """score sums sacrebleu's per-line statistics through two private methods: a release that
    renamed them ended score with an AttributeError traceback."""
    from sacrebleu.metrics.base import Metric

    monkeypatch.delattr(Metric, "_extract_corpus_statistics")
    code, out, err = score(["--hyp", "{hyp}", "--ref", "{ref}"], files)
    assert code == CONFIG and out == "", err
    assert len(err.splitlines()) == 1 and "lacks the line statistics nmtkit score sums" in err, err


# ---------------------------------------------------------------------------------------------
# Paper-style BLEU (multi-bleu.perl on Moses tokens)


def multi_bleu_reference(hyps: list[str], refs: list[list[str]]) -> float:
    """An independent transcription of Moses' multi-bleu.perl (whitespace tokens, case-sensitive)."""
    correct, total = [0] * 5, [0] * 5
    hyp_len = ref_len = 0
    for i, hyp in enumerate(hyps):
        words = hyp.split()
        hyp_len += len(words)
        closest = None
        max_ref: Counter = Counter()
        for r in refs:
            rw = r[i].split()
            if closest is None or abs(len(words) - len(rw)) < abs(len(words) - closest) or (
                    abs(len(words) - len(rw)) == abs(len(words) - closest) and len(rw) < closest):
                closest = len(rw)
            grams = Counter(tuple(rw[k:k + n]) for n in range(1, 5) for k in range(len(rw) - n + 1))
            for g, c in grams.items():
                max_ref[g] = max(max_ref[g], c)
        ref_len += closest
        grams = Counter(tuple(words[k:k + n]) for n in range(1, 5) for k in range(len(words) - n + 1))
        for g, c in grams.items():
            total[len(g)] += c
            correct[len(g)] += min(c, max_ref.get(g, 0))
    if any(correct[n] == 0 for n in range(1, 5)):
        return 0.0
    bp = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(sum(math.log(correct[n] / total[n]) for n in range(1, 5)) / 4)


def _moses(lines: list[str], lang: str) -> list[str]:
    return [" ".join(moses_tokenize(x, lang)) for x in lines]


HAND_HYP, HAND_REF = ["the cat sat on the mat", "a b c d e"], ["the cat is on the mat", "a b c d f g"]
# sentence 1: 1-grams 5/6, 2-grams 3/5 (the cat, on the, the mat), 3-grams 1/4, 4-grams 0/3
# sentence 2: 1-grams 4/5, 2-grams 3/4, 3-grams 2/3, 4-grams 1/2; c = 11, r = 12
HAND = 100 * math.exp(1 - 12 / 11) * (9 / 11 * 6 / 9 * 3 / 7 * 1 / 5) ** 0.25
# (id, hypotheses, references, language, expected score)
PAPER = [
    ("hand-computed-ngram-precisions", HAND_HYP, [HAND_REF], "en", HAND),
    ("a-missing-4-gram-gives-0-no-smoothing", HAND_HYP[:1], [HAND_REF[:1]], "en", 0.0),
    ("independent-multi-bleu-on-moses-tokens-two-refs", HYP, [REF, REF2], "fr",
     multi_bleu_reference(_moses(HYP, "fr"), [_moses(REF, "fr"), _moses(REF2, "fr")])),
    ("punctuation-tokenised-raw-matches-tokenised", ["Hello, world! How are you?"],
     [["Hello , world ! How are you ?"]], "en", 100.0),
]


@pytest.mark.parametrize("hyps, refs, lang, want", [r[1:] for r in PAPER], ids=[r[0] for r in PAPER])
def test_paper_bleu_equals_its_expected_value(hyps, refs, lang, want):
    assert paper_bleu(hyps, refs, lang).score == pytest.approx(want, abs=1e-6)


def test_paper_bleu_details_and_what_sets_it_apart_from_sacrebleu(files, tmp_path):
    got = paper_bleu(HAND_HYP, [HAND_REF], "en")
    assert got.details["counts"] == [9, 6, 3, 1] and got.details["totals"] == [11, 9, 7, 5]
    assert (got.details["hyp_len"], got.details["ref_len"]) == (11, 12)
    assert sacrebleu.corpus_bleu(HAND_HYP[:1], [HAND_REF[:1]]).score > 0  # smoothed, unlike multi-bleu
    assert "aujourd' hui" in _moses(REF, "fr")[1] or "aujourd'hui" in _moses(REF, "fr")[1]  # Moses, not 13a
    assert paper_bleu(HYP, [REF, REF2], "fr").score != pytest.approx(
        sacrebleu.corpus_bleu(HYP, [REF, REF2]).score, abs=1e-3)
    assert paper_bleu(["hello , world ! how are you ?"], [["Hello , world ! How are you ?"]], "en").score < 100.0
    paths = dict(files, h=write(tmp_path / "h.en", HAND_HYP), r=write(tmp_path / "r.en", HAND_REF))
    scores = by_metric(score_json(["--hyp", "{h}", "--ref", "{r}", "--paper-bleu", "--metrics", "bleu"],
                                  paths)["systems"][0]["scores"])
    assert scores["paper_bleu"]["score"] == pytest.approx(HAND, abs=1e-4)
    assert "multi-bleu" in scores["paper_bleu"]["label"] and "sacrebleu" in scores["bleu"]["label"]


def test_paper_bleu_of_a_reference_named_without_a_language_warns_that_it_tokenises_as_english(tmp_path):
    """OpenNMT-py's tgt-test.txt: --paper-bleu Moses-tokenised French as English without a word (42.76
    for 43.11 on the Tatoeba test set), only its signature saying tok:moses-en."""
    for name, lang, warned in (("tgt-test.txt", [], True), ("tgt-test.txt", ["--tgt-lang", "fr"], False),
                               ("ref.fr", [], False)):
        ref = write(tmp_path / name, REF)
        code, _, err = run_cli(["score", "--hyp", write(tmp_path / "h.txt", HYP), "--ref", ref, "--paper-bleu",
                                "--metrics", "bleu", *lang])
        assert code == 0 and ("its name ends in no language code" in err) == warned, err
        assert not warned or f"{ref}: " in err and "give --tgt-lang" in err


# Expected figures below come from the Moses scripts themselves (moses-smt/mosesdecoder master:
# scripts/tokenizer/tokenizer.perl and scripts/generic/multi-bleu.perl, perl 5), run as
#   perl tokenizer.perl -l fr -no-escape -q < FILE > FILE.tok
#   perl multi-bleu.perl REF.tok < HYP.tok
# The raw lines are Tatoeba dev.fr lines 85, 122, 550, 1318 and 1350 (shared/data/tatoeba-eng-fra).
MOSES_FR = [
    ("Mon groupe se produira cette semaine à la brasserie «Chez Ginette». Venez nous voir nombreux.",
     "Mon groupe se produira cette semaine à la brasserie « Chez Ginette » . Venez nous voir nombreux ."),
    ("Mon ami s’est souvenu où aller.", "Mon ami s ’ est souvenu où aller ."),  # no punctuation normalisation
    ("Je travaille chez McDonald's.", "Je travaille chez McDonald' s ."),  # a line's last word: "s." split
    ("La fabrication du fromage est un art.", "La fabrication du fromage est un art ."),  # "art." is a prefix
    ("« As-tu mangé ? » « Oui. »", "« As-tu mangé ? » « Oui . »"),
]


def test_a_file_given_in_two_roles_is_warned_about(files):
    """--hyp REF --ref REF scored 100 and --src SRC --ref SRC (the source as the reference) near 0,
    both without a word; a --hyp, --ref or --src holding the lines of another role's file is warned."""
    code, out, err = score(["--hyp", "{ref}", "--ref", "{ref}", "--metrics", "bleu"], files)
    assert code == 0 and "= 100.00" in out and err.splitlines() == [
        f"nmtkit: warning: {files['ref']} (given as --ref) holds the very lines of {files['ref']} (given as --hyp): "
        "is one of them given in the wrong place?"], err
    code, _, err = score(["--hyp", "{hyp}", "--ref", "{bl}", "--src", "{bl}", "--by-length"], files)
    assert code == 0 and f"{files['bl']} (given as --src) holds the very lines of {files['bl']} (given as --ref)" in err
    code, _, err = score(["--hyp", "{hyp}", "--hyp", "{hyp}", "--label", "a", "--label", "b", "--ref", "{ref}"], files)
    assert code == 0 and "warning" not in err, err


def test_paper_bleu_tokenises_exactly_as_tokenizer_perl():
    got = moses_tokenize_lines([raw for raw, _ in MOSES_FR], "fr")
    assert got == [tok for _, tok in MOSES_FR]


# Where sacremoses 0.2 departs from tokenizer.perl (Moses master, perl 5.36; the right column is
# its output): letters its tables lack, the -l fi/sv/ca/ga rules, the controls Perl's \s lacks.
MOSES_OTHER = [
    ("de", "Akira Tagoh (田郷明) sagt, dass sie和食Tiffany mag.", "Akira Tagoh ( 田郷明 ) sagt , dass sie和食Tiffany mag ."),
    ("fr", "Le 한국어 et 𝐀𝐁 sont là.", "Le 한국어 et 𝐀𝐁 sont là ."),
    ("fi", "USA:n ja EU:ssa, kello 10:30.", "USA:n ja EU:ssa , kello 10 : 30 ."),
    ("sv", "S:t Eriks väg: USA:s.", "S:t Eriks väg : USA:s ."),
    ("ca", "La il·lusió d'a·B.", "La il·lusió d' a·B ."),
    ("ga", "Ba mhaith liom d'ól.", "Ba mhaith liom d' ól ."),
    ("en", "a\x1cb c\x1fd", "ab cd"),
]


@pytest.mark.parametrize("lang, raw, tok", MOSES_OTHER, ids=[f"{lang}-{k}" for k, (lang, _, _) in enumerate(MOSES_OTHER)])
def test_paper_bleu_tokenises_as_tokenizer_perl_where_sacremoses_departs_from_it(lang, raw, tok):
    assert moses_tokenize_lines([raw], lang) == [tok]


def test_paper_bleu_equals_the_moses_scripts_on_tatoeba_dev(shared_data, tmp_path):
    ref = shared_data / "tatoeba-eng-fra" / "dev.fr"
    lines = ref.read_text(encoding="utf-8").split("\n")[:-1]
    # a fixed, degraded "system": every 4th line is the next line, every 3rd word dropped
    hyp = []
    for i, line in enumerate(lines):
        words = (lines[(i + 1) % len(lines)] if i % 4 == 0 else line).split(" ")
        hyp.append(" ".join(w for k, w in enumerate(words) if k % 3 != 2))
    # multi-bleu.perl: BLEU = 12.09, 82.6/53.5/14.9/1.7 (BP=0.665, ratio=0.710, hyp_len=11429, ref_len=16089)
    out = score_json(["--hyp", write(tmp_path / "hyp.fr", hyp), "--ref", str(ref), "--paper-bleu", "--metrics",
                      "bleu", "-j", "1"], {})
    paper = by_metric(out["systems"][0]["scores"])["paper_bleu"]
    assert (paper["hyp_len"], paper["ref_len"]) == (11429, 16089)
    assert round(paper["score"], 2) == 12.09
    assert [round(p, 1) for p in paper["precisions"]] == [82.6, 53.5, 14.9, 1.7]


# ---------------------------------------------------------------------------------------------
# No UNK subset


@pytest.mark.parametrize("second_ref, kept", [(None, NU_KEPT), ("le tapis rouge.", [0])],
                         ids=["one-reference", "an-oov-in-a-second-reference-drops-its-sentence"])
def test_no_unk_subset_keeps_only_fully_covered_sentences(second_ref, kept):
    refs = [NU_REF] if second_ref is None else [NU_REF, NU_REF[:5] + [second_ref]]
    assert no_unk_indices(NU_SRC, refs, lambda s: moses_tokenize(s, "en"), lambda s: moses_tokenize(s, "fr"),
                            SRC_VOCAB, TGT_VOCAB) == kept


def test_no_unk_encodes_each_side_with_its_own_pipeline_and_a_literal_special_is_unknown():
    assert no_unk_indices(["a", "b"], [["c", "d"]], lambda s: [s + "-src"], lambda s: [s + "-tgt"],
                          ["a-src", "b-src"], ["c-tgt", "d-tgt"]) == [0, 1]
    vocabs = (list(SPECIALS) + SRC_VOCAB, list(SPECIALS) + TGT_VOCAB)  # a model's vocabularies list them
    assert no_unk_indices(["the cat <unk>", "the cat", "the cat"], [["le chat", "le <unk>", "le chat"]], str.split,
                          str.split, *vocabs) == [2]


def test_no_unk_cli_with_data_dir_scores_the_subset_like_sacrebleu(files):
    out = score_json(["--hyp", "{nuhyp}", "--ref", "{nuref}", "--src", "{nu}", "--no-unk", "--data", "{data}",
                      "--paper-bleu"], files)
    nu = out["no_unk"]
    assert (nu["kept"], nu["total"], nu["bpe"]) == (len(NU_KEPT), len(NU_SRC), False)
    scores = by_metric(nu["systems"][0]["scores"])
    sub_h, sub_r = [NU_HYP[i] for i in NU_KEPT], [NU_REF[i] for i in NU_KEPT]
    assert scores["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(sub_h, [sub_r]).score, abs=1e-4)
    assert scores["paper_bleu"]["score"] == pytest.approx(paper_bleu(sub_h, [sub_r], "fr").score, abs=1e-4)
    full = by_metric(out["systems"][0]["scores"])["bleu"]["score"]
    assert full != pytest.approx(scores["bleu"]["score"], abs=1e-3)


def test_a_gzipped_reference_takes_its_language_from_the_suffix_before_gz(files, tmp_path):
    """ref.fr.gz was language 'gz': paper BLEU tokenised with Moses' generic rules (another figure,
    'tok:moses-gz'), and --no-unk refused an fr model ('the target language is gz')."""
    import gzip

    for name in ("ref", "nuref"):
        files[f"{name}gz"] = str(tmp_path / f"{name}.fr.gz")
        Path(files[f"{name}gz"]).write_bytes(gzip.compress(Path(files[name]).read_bytes()))
    plain, gz = (by_metric(score_json(["--hyp", "{hyp}", "--ref", ref, "--paper-bleu", "--metrics", "bleu"],
                                      files)["systems"][0]["scores"])["paper_bleu"] for ref in ("{ref}", "{refgz}"))
    assert gz == plain and "tok:moses-fr" in gz["signature"]
    out = score_json(["--hyp", "{nuhyp}", "--ref", "{nurefgz}", "--src", "{nu}", "--no-unk", "--data", "{data}"], files)
    assert out["no_unk"]["kept"] == len(NU_KEPT)


def test_no_unk_cli_with_checkpoint_reads_its_vocabularies(files, tmp_path):
    from nmtkit.checkpoint import save_checkpoint

    save_checkpoint({"arch": "rnnsearch", "pipeline": TextPipeline("en", "fr").to_dict(), "src_lang": "en",
                     "tgt_lang": "fr", "src_vocab": list(SPECIALS) + SRC_VOCAB,
                     "tgt_vocab": list(SPECIALS) + TGT_VOCAB}, tmp_path / "vocab.pt")
    code, out, err = score(["--hyp", "{nuhyp}", "--ref", "{nuref}", "--src", "{nu}", "--no-unk", "-m",
                            str(tmp_path / "vocab.pt"), "--metrics", "bleu"], files)
    assert code == 0, err
    assert f"No UNK subset: {len(NU_KEPT)} of {len(NU_SRC)} sentences" in out
    sub = sacrebleu.corpus_bleu([NU_HYP[i] for i in NU_KEPT], [[NU_REF[i] for i in NU_KEPT]]).score
    assert f"No UNK BLEU (sacrebleu on detokenised text, tok 13a) = {sub:.2f}" in out


def test_no_unk_with_bpe_model_explains_the_subset(files, tmp_path):
    codes = "#version: 0.2\nc a\nca t</w>\n"
    pipe = TextPipeline("en", "fr", bpe={"joint": True, "codes": {"src": codes, "tgt": codes}, "vocab": None,
                                         "vocab_threshold": None, "merges": 2, "separator": "@@"})
    data = Path(files["data"])
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["pipeline"] = pipe.to_dict()
    (data / "manifest.json").write_text(json.dumps(manifest))
    write_vocab(data / "vocab.en.txt", ["cat", "ca@@", "t@@", "s", "a", "."])
    write_vocab(data / "vocab.fr.txt", ["cat", "."])
    paths = dict(files, s=write(tmp_path / "bsrc.en", ["cats.", "a cat.", "a dog."]),  # ca@@ t@@ s . | a cat . | a d@@ o@@ g .
                 r=write(tmp_path / "bref.fr", ["cat.", "cat.", "cat."]),  # cat .
                 h=write(tmp_path / "bhyp.fr", ["cat.", "cat.", "dog."]))
    code, out, err = score(["--hyp", "{h}", "--ref", "{r}", "--src", "{s}", "--no-unk", "--data", "{data}",
                            "--metrics", "bleu", "--json"], paths)
    assert code == 0, err
    nu = json.loads(out)["no_unk"]
    assert nu["bpe"] is True and nu["kept"] == 2 and "BPE" in nu["definition"]
    assert "BPE" in err and "<unk>" in err


def test_no_unk_with_subwords_split_before_preprocess_is_no_bpe_subset(files):
    # text BPE'd before preprocess --input-format tok: the pipeline applies no BPE, so whole words are
    # checked against the subwords; it was called "after BPE, usually nearly all sentences"
    data = Path(files["data"])
    write_vocab(data / "vocab.fr.txt", TGT_VOCAB + [f"s{i}@@" for i in range(20)])
    code, out, err = score(["--hyp", "{nuhyp}", "--ref", "{nuref}", "--src", "{nu}", "--no-unk", "--data", "{data}",
                            "--metrics", "bleu", "--json"], files)
    assert code == 0, err
    nu = json.loads(out)["no_unk"]
    assert nu["bpe"] is False and nu["kept"] == len(NU_KEPT) and "BPE" not in nu["definition"]
    assert "20 subwords ending in '@@'" in err and "applies no BPE" in err and "nearly all" not in err


def test_no_unk_with_a_data_dir_written_by_nmtkit_preprocess(tmp_path):
    train_en = ["the cat sat.", "the mat is red.", "a dog sat on the mat."]
    train_fr = ["le chat dort.", "le tapis est rouge.", "un chien dort sur le tapis."]
    for prefix in ("train", "valid"):
        write(tmp_path / f"{prefix}.en", train_en)
        write(tmp_path / f"{prefix}.fr", train_fr)
    code, _, err = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(tmp_path / "train"),
                            "--valid", str(tmp_path / "valid"), "--dest", str(tmp_path / "data"), "--workers", "1",
                            "-q"])
    assert code == 0, err
    paths = {"s": write(tmp_path / "test.en", ["the dog is red.", "the bird sat.", "a cat sat on the mat.",
                                               "The cat sat."]),
             "r": write(tmp_path / "test.fr", ["le chien est rouge.", "l'oiseau dort.", "un chat dort sur un tapis.",
                                               "le chat dort."]),
             "h": write(tmp_path / "hyp.fr", ["le chien est rouge.", "le oiseau dort.", "un chat dort sur le tapis.",
                                              "le chat dort."]), "data": str(tmp_path / "data")}
    # 0: "chien" and "dog" are both known; 1: bird/l'oiseau unknown; 2: fine; 3: "The" unseen (case kept)
    out = score_json(["--hyp", "{h}", "--ref", "{r}", "--src", "{s}", "--no-unk", "--data", "{data}", "--metrics",
                      "bleu"], paths)
    assert (out["no_unk"]["kept"], out["no_unk"]["bpe"]) == (2, False)
    kept_h = ["le chien est rouge.", "un chat dort sur le tapis."]
    kept_r = ["le chien est rouge.", "un chat dort sur un tapis."]
    assert out["no_unk"]["systems"][0]["scores"][0]["score"] == pytest.approx(
        sacrebleu.corpus_bleu(kept_h, [kept_r]).score, abs=1e-4)


def _edit_manifest(data, **changes):
    """data's manifest.json with top-level keys replaced (pipeline_X: the pipeline's setting X)."""
    m = json.loads((data / "manifest.json").read_text())
    for key, value in changes.items():
        if key.startswith("pipeline_"):
            m["pipeline"][key[len("pipeline_"):]] = value
        else:
            m[key] = value
    (data / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("damage", [
    lambda d: (d / "manifest.json").write_text("{not json"),
    lambda d: (d / "manifest.json").write_text('{"src_lang": "en", "vocab": {}}'),
    lambda d: (d / "manifest.json").unlink(),
    lambda d: (d / "vocab.fr.txt").unlink(),
    lambda d: _edit_manifest(d, splits="train"),
    lambda d: _edit_manifest(d, settings=5),
    lambda d: _edit_manifest(d, pipeline=[1]),
    lambda d: _edit_manifest(d, pipeline_lowercase="yes"),
], ids=["invalid-json", "lacks-tgt-lang", "no-manifest", "no-vocab-file", "splits-not-object", "settings-not-object",
        "pipeline-not-object", "pipeline-setting"])
def test_score_and_train_read_a_data_dir_through_one_manifest_reader(tmp_path, damage):
    """score's --data and train's DataDir.open accept and refuse the same data directories, alike."""
    from nmtkit.train.data import DataDir

    data = make_data_dir(tmp_path / "data", n_train=8, n_valid=4)
    model, opened = model_text_from_data_dir(data), DataDir.open(data)
    assert model.src_vocab == opened.src_vocab.itos and model.tgt_vocab == opened.tgt_vocab.itos
    damage(data)
    with pytest.raises(InputError) as from_score:
        model_text_from_data_dir(data)
    with pytest.raises(InputError) as from_train:
        DataDir.open(data)
    assert str(from_score.value) == str(from_train.value)


# ---------------------------------------------------------------------------------------------
# BLEU by source length (Figure 2) and plots


@pytest.mark.parametrize("width, max_length, labels, buckets", [
    (10, 60, ["0-10", "11-20", "21-30", "31-40", "41-50", "51-60", ">60"],
     {0: 0, 1: 0, 10: 0, 11: 1, 20: 1, 21: 2, 59: 5, 60: 5, 61: 6, 200: 6}),
    (10, 55, ["0-10", "11-20", "21-30", "31-40", "41-50", "51-55", ">55"], {55: 5, 56: 6}),
])
def test_bucket_boundaries_follow_the_labels(width, max_length, labels, buckets):
    assert bucket_labels(width, max_length) == labels
    assert {n: bucket_of(n, width, max_length) for n in buckets} == buckets


def test_by_length_buckets_and_bleu_equal_sacrebleu_and_paper_bleu_on_each_subset():
    tok = [moses_tokenize_lines(lines[:7], "fr") for lines in (HYP, REF2, REF)]
    rows = bleu_by_length([("A", HYP[:7]), ("B", REF2[:7])], [REF[:7]],
                            [len(moses_tokenize(s, "en")) for s in BL_SRC], width=2, max_length=4,
                            paper_tok=(tok[:2], [tok[2]]))
    assert [r.label for r in rows] == ["0-2", "3-4", ">4"]
    assert [r.indices for r in rows] == [[0, 3], [1, 4, 5], [2, 6]]
    for r in rows:
        for name, hyps in (("A", HYP), ("B", REF2)):
            want = sacrebleu.corpus_bleu([hyps[i] for i in r.indices], [[REF[i] for i in r.indices]]).score
            assert r.bleu[name] == pytest.approx(want, abs=1e-9)
            paper = paper_bleu([hyps[i] for i in r.indices], [[REF[i] for i in r.indices]], "fr").score
            assert r.paper_bleu[name] == pytest.approx(paper, abs=1e-9)


def test_by_length_cli_prints_an_aligned_table_and_json(files):
    args = ["--hyp", "{hyp}", "--ref", "{ref}", "--src", "{bl}", "--by-length", "--bucket-width", "2",
            "--max-length", "4", "--metrics", "bleu"]
    code, out, err = score(args, files)
    assert code == 0, err
    table = out[out.index("src length"):].strip().splitlines()
    assert table[0].split() == ["src", "length", "sentences", "BLEU", "hyp.fr"]
    assert [line.split()[:2] for line in table[1:]] == [["0-2", "3"], ["3-4", "3"], [">4", "2"]]
    assert len({len(line) for line in table}) == 1  # aligned columns
    rows = score_json(args, files)["by_length"]["rows"]
    want = sacrebleu.corpus_bleu([HYP[i] for i in (0, 3, 7)], [[REF[i] for i in (0, 3, 7)]]).score
    assert rows[0]["sentences"] == 3 and rows[0]["bleu"]["hyp.fr"] == pytest.approx(want, abs=1e-9)


def test_empty_bucket_is_listed_without_a_score():
    rows = bleu_by_length([("A", ["a b c d e"])], [["a b c d e"]], [25], width=10, max_length=60)
    assert [len(r.indices) for r in rows] == [0, 0, 1, 0, 0, 0, 0]
    assert rows[0].bleu["A"] is None and rows[2].bleu["A"] == pytest.approx(100.0)
    assert "-" in format_length_table(rows, ["A"]).splitlines()[1].split()


def test_plot_is_a_png_with_one_line_per_system(files, tmp_path):
    png = tmp_path / "fig2.png"
    out = score_json(["--hyp", "{hyp}", "--hyp", "{ref2}", "--label", "RNNsearch", "--label", "RNNencdec",
                      "--ref", "{ref}", "--src", "{bl}", "--plot", str(png), "--bucket-width", "2",
                      "--max-length", "4", "--metrics", "bleu", "--paper-bleu"], files)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    assert out["by_length"]["plot"] == str(png)
    assert set(out["by_length"]["rows"][0]["bleu"]) == {"RNNsearch", "RNNencdec"}
    assert set(out["by_length"]["rows"][0]["paper_bleu"]) == {"RNNsearch", "RNNencdec"}
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("name", ["a_b$x$", "_base"])
def test_a_system_name_with_dollar_signs_is_drawn_as_written_not_as_a_formula(tmp_path, monkeypatch, name):
    """matplotlib reads "$...$" as a formula: the label "a_b$x$" was drawn as "a_bx"; and it
    leaves a name starting with "_" (--label _base, or a file _base.fr) out of the legend."""
    from nmtkit.score import subsets

    drawn: list[tuple[str, object]] = []
    monkeypatch.setattr(subsets, "save_figure", lambda fig, path, format: drawn.extend(
        t._preprocess_math(t.get_text()) for t in fig.axes[0].get_legend().get_texts()))
    rows = bleu_by_length([(name, ["a b c d e"])], [["a b c d e"]], [25], width=10, max_length=60)
    subsets.plot_by_length(rows, [name], tmp_path / "p.png")
    assert drawn == [(name, False)]  # (the text drawn, not mathtext)


@pytest.mark.parametrize("name, shown", [("h\udcffp.fr", "h\ufffdp.fr"), ("donn\udcc3\udca9es", "données")])
def test_a_system_named_by_a_file_name_that_is_not_utf8_is_drawn(tmp_path, monkeypatch, name, shown):
    """A --hyp named in Latin-1, or in UTF-8 under LC_ALL=C with PYTHONUTF8=0, holds surrogates:
    `score --plot` ended in a TypeError traceback from matplotlib's font code."""
    from nmtkit.score import subsets

    drawn: list[str] = []
    monkeypatch.setattr(subsets, "save_figure", lambda fig, path, format: drawn.extend(
        t.get_text() for t in fig.axes[0].get_legend().get_texts()))
    rows = bleu_by_length([(name, ["a b c d e"])], [["a b c d e"]], [25], width=10, max_length=60)
    subsets.plot_by_length(rows, [name], tmp_path / "p.png")
    assert drawn == [shown]


@pytest.mark.parametrize("width, max_length", [(10, 60), (5, 60), (1, 1000)])
def test_the_plots_length_labels_never_overlap(tmp_path, monkeypatch, width, max_length):
    """13 buckets (--bucket-width 5) ran their labels into each other; 1,001 into a black smear."""
    from nmtkit.score import subsets

    boxes: list = []

    def save(fig, path, format):
        fig.canvas.draw()
        boxes.extend(t.get_window_extent() for t in fig.axes[0].get_xticklabels() if t.get_text())

    monkeypatch.setattr(subsets, "save_figure", save)
    rows = bleu_by_length([("A", ["a b c d e"])], [["a b c d e"]], [25], width=width, max_length=max_length)
    subsets.plot_by_length(rows, ["A"], tmp_path / "p.png")
    assert 7 <= len(boxes) <= 20 and all(a.x1 + 8 <= b.x0 for a, b in zip(boxes, boxes[1:]))  # a letter apart


# ---------------------------------------------------------------------------------------------
# Paired bootstrap resampling


def test_paired_bootstrap_gives_p_values_in_unit_interval_and_is_seeded():
    worse = [" ".join(h.split()[: max(1, len(h.split()) // 2)]) for h in HYP]
    systems = [("base", HYP * 4), ("worse", worse * 4)]
    sigs, rows = paired_bootstrap(systems, [REF * 4], ["bleu", "chrf"], n_samples=200, seed=7)
    assert {r.metric for r in rows} == {"BLEU", "chrF2"} and "bs:200" in sigs["BLEU"] and "seed:7" in sigs["BLEU"]
    assert all(r.p_value is None for r in rows if r.system == "base")
    assert all(0.0 <= r.p_value < 0.05 for r in rows if r.system == "worse")  # halving every sentence matters
    _, again = paired_bootstrap(systems, [REF * 4], ["bleu", "chrf"], n_samples=200, seed=7)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in rows]
    close = HYP * 4  # one changed sentence out of 32 is not significant
    close = close[:-1] + ["Les enfants jouent dans un jardin depuis ce matin."]
    _, rows2 = paired_bootstrap([("base", HYP * 4), ("close", close)], [REF * 4], ["bleu"], 200, 7)
    assert rows2[1].p_value > 0.05


def test_bootstrap_samples_times_lines_past_the_memory_bound_is_one_line_before_any_resampling(files, monkeypatch):
    """sacrebleu holds every resample's sentence statistics at once (~45 bytes a sample and line for
    BLEU): --bootstrap-samples 100000000 ran for hours towards hundreds of gigabytes."""
    import nmtkit.score.metrics as metrics

    monkeypatch.setattr(metrics, "BOOTSTRAP_MAX_SAMPLE_LINES", 80)  # 8 lines: 10 samples fit, 11 do not
    args = ["--hyp", "{hyp}", "--hyp", "{ref2}", "--ref", "{ref}", "--significance", "--metrics", "bleu"]
    code, out, err = score([*args, "--bootstrap-samples", "11"], files)
    assert code == ConfigError.exit_code and out == "", err
    assert err.strip() == ("nmtkit: error: 11 bootstrap samples of 8 lines: sacrebleu holds every sample's sentence "
                           "statistics in memory, so samples x lines may be at most 80 (here at most 10 samples)"), err
    code, out, err = score([*args, "--bootstrap-samples", "10"], files)
    assert code == 0 and "bootstrap resampling: 10 samples" in out, err


def test_a_system_against_itself_is_not_significantly_different(files):
    """sacrebleu counts only resampled differences larger than the real one, so a difference of
    exactly 0 got its smallest p (1/1001) and a star; Moses' script counts >=, giving p = 1."""
    sigs, rows = paired_bootstrap([("a", HYP * 4), ("b", HYP * 4)], [REF * 4], ["bleu", "chrf"], 200, 7)
    assert [r.p_value for r in rows if r.system == "b"] == [1.0, 1.0]
    code, out, err = score(["--hyp", "{hyp}", "--hyp", "{hyp}", "--label", "a", "--label", "b", "--ref", "{ref}",
                            "--significance", "--bootstrap-samples", "100", "--metrics", "bleu"], files)
    assert code == 0, err
    [row] = [line for line in out.splitlines() if line.lstrip().startswith("b ")]
    assert "1.0000" in row and "*" not in row


def test_significance_cli_prints_p_values_and_json(files):
    args = ["--hyp", "{hyp}", "--hyp", "{ref2}", "--ref", "{ref}", "--significance", "--bootstrap-samples", "100",
            "--metrics", "bleu"]
    code, out, err = score(args, files)
    assert code == 0, err
    assert "Paired bootstrap resampling: 100 samples, seed 12345" in out and "(baseline)" in out
    sig = score_json(args, files)["significance"]
    assert sig["baseline"] == "hyp.fr" and len(sig["rows"]) == 2
    assert 0.0 <= sig["rows"][1]["p_value"] <= 1.0


# ---------------------------------------------------------------------------------------------
# Start-up cost


def test_score_does_not_import_torch(files, tmp_path):
    code = (
        "import sys\n"
        "from nmtkit.cli import cli\n"
        f"args = ['score', '--hyp', {files['hyp']!r}, '--hyp', {files['ref2']!r}, '--ref', {files['ref']!r},\n"
        f"        '--src', {files['bl']!r}, '--paper-bleu', '--by-length', '--plot', {str(tmp_path / 'p.png')!r},\n"
        "        '--significance', '--bootstrap-samples', '20', '--json']\n"
        "try:\n    cli.main(args, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch imported by nmtkit score'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["systems"][0]["name"] == "hyp.fr"


def test_a_damaged_pipeline_in_a_checkpoint_or_data_dir_is_one_error_naming_its_file(tmp_path):
    """score's --model and --data read the recorded pipeline: a setting of the wrong type is a
    one-line error naming the checkpoint or the manifest, not a traceback at the first line."""
    from nmtkit.checkpoint import load_checkpoint, save_checkpoint
    from nmtkit.errors import CheckpointError
    from tests.conftest import make_checkpoint

    ckpt = make_checkpoint(tmp_path / "m.pt")
    damaged = load_checkpoint(ckpt)
    damaged["pipeline"] = dict(damaged["pipeline"], lowercase="yes")
    save_checkpoint(damaged, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=r"bad\.pt: text pipeline setting lowercase is 'yes'"):
        model_text_from_checkpoint(tmp_path / "bad.pt")
    data = make_data_dir(tmp_path / "data", n_train=8, n_valid=4)
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["pipeline"]["lowercase"] = "no"
    (data / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"manifest\.json: text pipeline setting lowercase is 'no'"):
        model_text_from_data_dir(data)


def test_references_in_another_unicode_form_than_the_hypotheses_are_warned_about_once(tmp_path):
    import unicodedata

    composed = ["le café est fermé", "un été à São Paulo", "rien"]
    hyp, ref_nfd, ref_nfc = tmp_path / "hyp.fr", tmp_path / "ref-nfd.fr", tmp_path / "ref-nfc.fr"
    hyp.write_text("\n".join(composed) + "\n", encoding="utf-8")
    ref_nfd.write_text("\n".join(unicodedata.normalize("NFD", x) for x in composed) + "\n", encoding="utf-8")
    ref_nfc.write_text(hyp.read_text(encoding="utf-8"), encoding="utf-8")
    code, out, err = run_cli(["score", "--hyp", str(hyp), "--ref", str(ref_nfd)])
    assert code == 0 and "BLEU" in out
    warnings = [line for line in err.splitlines() if "NFC" in line]
    assert warnings == [f"nmtkit: warning: {ref_nfd}: 2 lines not in Unicode NFC (such as decomposed accents; line 1 "
                        f"first), {hyp} none: the metrics count the two forms as different characters; compose "
                        "both, e.g. with python3 -c 'import sys, unicodedata; "
                        "sys.stdout.write(unicodedata.normalize(\"NFC\", sys.stdin.read()))'"], err
    for ref in (ref_nfc,):  # the same form on both sides: nothing to say
        code, _, err = run_cli(["score", "--hyp", str(hyp), "--ref", str(ref)])
        assert code == 0 and "decomposed" not in err
    code, _, err = run_cli(["score", "--hyp", str(ref_nfd), "--ref", str(ref_nfd)])
    assert code == 0 and "decomposed" not in err
    code, _, err = run_cli(["score", "--hyp", "-", "--ref", str(ref_nfd)], hyp.read_text(encoding="utf-8"))
    assert code == 0 and f"{ref_nfd}: 2 lines not in Unicode NFC" in err and "), stdin none:" in err


def test_tokenised_hypotheses_get_one_warning_line_not_sacrebleus_three(tmp_path):
    """sacrebleu printed its three lines ("That's 100 lines that end in a tokenized period...")
    bare on stderr, past -q; the score and signature stay sacrebleu's."""
    hyps = [f"sentence number {i} ." for i in range(120)]
    refs = [f"sentence number {i}." for i in range(120)]
    (tmp_path / "hyp").write_text("\n".join(hyps) + "\n")
    (tmp_path / "ref").write_text("\n".join(refs) + "\n")
    code, out, err = run_cli(["score", "--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref"), "--metrics",
                              "bleu", "--json"])
    assert code == 0 and err.splitlines() == [
        "nmtkit: warning: 120 hypothesis lines end in a tokenised period (' .'): BLEU expects detokenised text "
        "(what 'nmtkit translate' writes); detokenise it, or use --paper-bleu for tokenised text"]
    want = sacrebleu.metrics.BLEU()
    (got,) = json.loads(out)["systems"][0]["scores"]
    assert got["score"] == round(want.corpus_score(hyps, [refs]).score, 4)
    assert got["signature"] == want.get_signature().format()
    assert run_cli(["score", "-q", "--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref")]).err == ""


@pytest.mark.parametrize("kw, needle", [
    ({"n_samples": 0}, "bootstrap samples must be a positive integer, got 0"),  # sacrebleu ran 1000 instead
    ({"n_samples": -5}, "got -5"),
    ({"n_samples": 2.5}, "got 2.5"),
    ({"seed": "1"}, "seed must be a positive integer, got '1'"),  # a TypeError inside sacrebleu
    ({"seed": 1.5}, "got 1.5"),
])
def test_paired_bootstrap_refuses_a_sample_count_or_seed_it_would_not_use_as_given(kw, needle):
    hyps = ["the cat sat on the mat .", "a dog ran ."] * 10
    refs = ["the cat sat on a mat .", "the dog ran ."] * 10
    with pytest.raises(ConfigError, match=needle):
        paired_bootstrap([("a", hyps), ("b", refs)], [refs], **kw)


@pytest.mark.parametrize("hyps, refs, needle", [
    ("abc", [["a", "b", "c"]], "not strings"),  # was scored as three lines: chrF 100
    (["a b", "c d"], ["ab"], "not strings"),  # flat references of a matching length: scored silently
    ([], [[]], "no hypotheses"),  # IndexError inside sacrebleu
    (["a", None], [["a", "b"]], "hypothesis line 2 is NoneType"),  # AttributeError
    (["a", "b"], [["a", 3]], "reference line 2 is int"),
])
def test_corpus_scores_refuses_what_is_not_lists_of_lines(hyps, refs, needle):
    with pytest.raises(ConfigError, match=needle):
        corpus_scores(hyps, refs)
