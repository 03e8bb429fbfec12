"""The bad-input table, continued: translate's inputs and resources, and the validation and
messages of translate, train, serve, score and the data directory's manifest (the machinery
and the World are tests/test_bad_inputs.py's)."""
from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_checkpoint, run_cli
from tests.test_bad_inputs import (
    REPO,
    Row,
    World,
    _data_copy,
    _preprocess,
    _score,
    _select,
    _train,
    _translate,
    _with_valid,
    check_row,
)


def _protecting_checkpoint(w: World) -> str:
    """A checkpoint whose recorded pipeline protects XML tags (preprocess --protect xml)."""
    from nmtkit.text.moses import resolve_protect
    from nmtkit.text.pipeline import TextPipeline

    pipeline = TextPipeline(src_lang="en", tgt_lang="fr", protected_patterns=resolve_protect(["xml"]))
    return str(make_checkpoint(w.tmp / "protect.pt", pipeline=pipeline))


UNREACHABLE = {"looping-symlink": "Too many levels of symbolic links", "name-too-long": "File name too long",
               "file-as-folder": "Not a directory"}
UNREACHABLE_INPUTS = [  # (command, option), command line with the path; a prefix's PATH.en is as unreachable
    (("tokenize", "-i"), lambda w, p: ["tokenize", "--lang", "en", "-i", str(p), "-o", str(w.tmp / "t.txt")]),
    (("translate", "-i"), lambda w, p: _with_input(w, str(p))),
    (("translate", "-m"), lambda w, p: ["translate", "-m", str(p), "-i", str(w.src)]),
    (("translate", "--score-reference"), lambda w, p: ["translate", "-m", str(w.ckpt), "-i", str(w.src),
                                                         "--score-reference", str(p)]),
    (("translate", "--unk-dict"), lambda w, p: _translate(w, "--replace-unk", "--unk-dict", str(p))),
    (("score", "--hyp"), lambda w, p: ["score", "--hyp", str(p), "--ref", str(w.src)]),
    (("score", "--ref"), lambda w, p: ["score", "--hyp", str(w.src), "--ref", str(p)]),
    (("score", "--src"), lambda w, p: ["score", "--hyp", str(w.src), "--ref", str(w.src), "--src", str(p),
                                       "--by-length"]),
    (("score", "-m"), lambda w, p: _score(w, "--no-unk", "-m", str(p))),
    (("score", "--data"), lambda w, p: _score(w, "--no-unk", "--data", str(p))),
    (("average", "-m"), lambda w, p: ["average", "-m", str(p), "-o", str(w.tmp / "avg.pt")]),
    (("average", "--save-dir"), lambda w, p: ["average", "--last", "1", "--save-dir", str(p), "-o",
                                              str(w.tmp / "avg.pt")]),
    (("train", "--data"), lambda w, p: ["train", "--data", str(p), "--save-dir", str(w.tmp / "r-u")]),
    (("preprocess", "--train"), lambda w, p: _preprocess(w, w.tmp / "d-u", str(p))),
    (("preprocess", "--valid"), lambda w, p: _with_valid(_preprocess(w, w.tmp / "d-u"), p)),
    (("preprocess", "--test"), lambda w, p: _preprocess(w, w.tmp / "d-u", "corpus", "--test", str(p))),
    (("select-data", "--pool"), lambda w, p: [str(p) if a == str(w.tmp / "pool") else a for a in _select(w, w.tmp / "s")]),
    (("select-data", "--in-domain"), lambda w, p: [str(p) if a == str(w.tmp / "corpus") else a
                                                   for a in _select(w, w.tmp / "s")]),
]


def _folders(w: World) -> Path:
    """A folder, and PATH.en and PATH.fr folders beside it (for the options that take a prefix)."""
    for name in ("folder", "folder.en", "folder.fr"):
        (w.tmp / name).mkdir(exist_ok=True)
    return w.tmp / "folder"


def _unreachable(w: World, kind: str) -> Path:
    """A path (and PATH.en, PATH.fr) that os.stat() cannot look up, and not because it is missing."""
    if kind == "name-too-long":
        return w.tmp / ("n" * 256)
    if kind == "file-as-folder":
        return w.src / "x"
    for name in ("loop", "loop.en", "loop.fr"):
        (w.tmp / name).symlink_to(w.tmp / name)
    return w.tmp / "loop"


ROWS = [
    # ---- inputs and resources ---------------------------------------------------------------------
    Row("translate-beam-above-the-vocabulary-is-capped", lambda w: _translate(w, "--beam", "10000"), ok=True,
        needles=("--beam 10000", "target vocabulary")),
    Row("translate-nbest-above-the-vocabulary-is-capped-and-said", lambda w: _translate(w, "--beam", "10000", "--nbest",
                                                                                         "10000"), ok=True,
        needles=("--nbest 10000 lists of at most",)),
    Row("translate-i-fifo", lambda w: _with_input(w, _fifo_input(w), "-o", str(w.tmp / "o.txt")), ok=True,
        check=lambda w: _lines(w.tmp / "o.txt", 5)),
    Row("translate-i-process-substitution", lambda w: _with_input(w, _pipe_input(w), "-o", str(w.tmp / "o.txt")),
        ok=True, check=lambda w: _lines(w.tmp / "o.txt", 5)),
    Row("translate-i-directory", lambda w: _with_input(w, str(w.tmp)), needles=("is a directory",)),
    Row("translate-m-directory", lambda w: ["translate", "-m", str(w.tmp), "-i", str(w.src)],
        needles=("is a directory",)),
    Row("a-file-name-with-a-line-break-stays-in-one-error-line",
        lambda w: ["tokenize", "--lang", "en", "-i", str(w.tmp / "no\nsuch")], needles=("no\\nsuch",)),
    # '-' is a standard stream wherever nmtkit takes a file: a folder option refuses it, not makes a folder '-'
    Row("train-save-dir-dash", lambda w: _train(w, Path("-")), needles=("--save-dir '-'", "standard stream"),
        check=lambda w: _no_dash_folder()),
    Row("train-tensorboard-dash", lambda w: _train(w, w.tmp / "r-tb", "--tensorboard", "-"),
        needles=("--tensorboard '-'",), check=lambda w: _no_dash_folder()),
    Row("translate-plot-attention-dash", lambda w: _translate(w, "--plot-attention", "-"),
        needles=("--plot-attention '-'",), check=lambda w: _no_dash_folder()),
    # a folder option naming a link to nothing, or to itself: "File exists", or "train.lock ...: remove it"
    *(Row(f"{cmd}-{opt[2:]}-{kind}-symlink", lambda w, a=argv, k=kind: a(w, _bad_link(w, k)),
          needles=(f"the {opt} ", "symlink that leads to no folder")) for kind in ("dangling", "looping")
      for cmd, opt, argv in (("train", "--save-dir", lambda w, p: _train(w, p)),
                             ("train", "--tensorboard", lambda w, p: _train(w, w.tmp / "r-tbl", "--tensorboard", p)),
                             ("translate", "--plot-attention", lambda w, p: _translate(w, "--plot-attention", p)))),
    # an input path that cannot be looked up was "file not found" (or, too long, a traceback with --debug)
    *(Row(f"{opt[0]}{opt[1]}-{kind}", lambda w, a=argv, k=kind: a(w, _unreachable(w, k)), needles=(why,),
          absent=("not found",)) for kind, why in UNREACHABLE.items() for opt, argv in UNREACHABLE_INPUTS),
    # a folder given for a text input: each command says so (tokenize -i and preprocess --valid said "not a regular file")
    *(Row(f"{opt[0]}{opt[1]}-a-directory", lambda w, a=argv: a(w, _folders(w)), needles=("is a directory",))
      for opt, argv in UNREACHABLE_INPUTS if opt[1] not in ("-m", "--data", "--save-dir")),
    Row("translate-nul-byte-is-binary", lambda w: _with_input(w, _text(w, "nul.en", b"a cat\nthe\0dog\n")),
        needles=("nul.en:2:", "binary")),
    # a file of zeros without a line end (a typo for /dev/null, a file zeroed by a crash) was read whole into
    # memory as one line before its NUL byte was seen: an "out of memory" error, or the OOM killer
    Row("translate-zeros-without-a-line-end-are-refused-at-the-first-mib",
        lambda w: _with_input(w, _zeros_fifo(w, 256 << 20)), needles=("zeros.fifo:1:", "binary"),
        check=lambda w: w.zeros_written[0] < 16 << 20 or pytest.fail(f"read {w.zeros_written[0]} bytes")),
    Row("translate-utf8-bom-is-stripped",
        lambda w: _with_input(w, _text(w, "bom.en", b"\xef\xbb\xbf" + w.src.read_bytes()), "-o", str(w.tmp / "b")),
        ok=True, check=lambda w: _same_as_without_bom(w)),
    # ---- validation and messages --------------------------------------------------------------------
    Row("translate-lenpen-nan", lambda w: _translate(w, "--lenpen", "nan"), needles=("--lenpen",)),
    Row("translate-max-len-a-negative", lambda w: _translate(w, "--max-len-a", "-1"), needles=("--max-len-a",)),
    # past these bounds the search overflowed (int64 limits, length^lenpen) or ran out of memory
    Row("translate-max-len-b-huge", lambda w: _translate(w, "--max-len-b", "1e19"), needles=("--max-len-b", "10000")),
    Row("translate-max-len-a-huge", lambda w: _translate(w, "--max-len-a", "1e7"), needles=("--max-len-a", "10")),
    Row("translate-length-limit-of-nothing", lambda w: _translate(w, "--max-len-a", "0", "--max-len-b", "0"),
        needles=("allows no target token",)),  # emitted one word
    Row("translate-lenpen-huge", lambda w: _translate(w, "--lenpen", "400"), needles=("--lenpen", "[-10, 10]")),
    Row("translate-lenpen-hugely-negative", lambda w: _translate(w, "--lenpen", "-1e308"), needles=("--lenpen",)),
    Row("translate-threads-past-a-c-int", lambda w: _translate(w, "--threads", str(2**31)), needles=("--threads",)),
    Row("train-threads-past-a-c-int", lambda w: _train(w, w.tmp / "r13", "--threads", str(2**31)),
        needles=("--threads", "4096")),
    Row("serve-batch-delay-of-days", lambda w: ["serve", "-m", str(w.ckpt), "--batch-delay-ms", "1e9"],
        needles=("--batch-delay-ms", "10000")),
    Row("translate-plot-limit-negative", lambda w: _translate(w, "--plot-limit", "-1"), needles=("--plot-limit",)),
    # each was exit 0 without a plot or a word (0: an empty --plot-attention folder)
    Row("translate-plot-limit-0", lambda w: _translate(w, "--plot-attention", str(w.tmp / "pl0"), "--plot-limit", "0"),
        needles=("--plot-limit must be at least 1, got 0",), check=lambda w: not (w.tmp / "pl0").exists() or pytest.fail()),
    Row("translate-plot-limit-without-plot-attention", lambda w: _translate(w, "--plot-limit", "5"),
        needles=("--plot-limit needs --plot-attention",)),
    Row("train-manifest-format-version-99", lambda w: _train(_w_manifest(w, format_version=99), w.tmp / "r8"),
        needles=("manifest.json", "format_version 99")),
    Row("train-data-dir-of-the-format-before-word-lengths",
        lambda w: _train(_w_manifest(_w_without_words(w), format_version=1), w.tmp / "r8b"),
        needles=("manifest.json", "format_version 1", "re-run 'nmtkit preprocess'")),
    Row("train-word-lengths-file-missing", lambda w: _train(_w_without_words(w), w.tmp / "r8c"),
        needles=("train.en.words.npy", "re-run 'nmtkit preprocess'")),
    Row("train-manifest-vocab-outside-the-data-dir",
        lambda w: _train(_w_manifest(w, vocab={"src": "/etc/passwd", "tgt": "vocab.fr.txt"}), w.tmp / "r9"),
        needles=("manifest.json", "vocab.src")),
    Row("train-manifest-vocab-is-the-data-dir", lambda w: _train(_w_manifest(  # was "data: is a directory"
        w, vocab={"src": ".", "tgt": "vocab.fr.txt"}), w.tmp / "r10b"), needles=("manifest.json", "vocab.src '.'")),
    Row("train-manifest-vocab-climbing-out", lambda w: _train(_w_manifest(
        w, vocab={"src": "vocab.en.txt", "tgt": "../data/vocab.fr.txt"}), w.tmp / "r10"), needles=("vocab.tgt",)),
    Row("train-manifest-pipeline-language-contradicts",
        lambda w: _train(_w_manifest(w, pipeline_src_lang="de"), w.tmp / "r11"), needles=("pipeline.src_lang",)),
    # a model trained on these could not translate raw text, or output subwords ("@@")
    Row("train-manifest-without-a-pipeline", lambda w: _train(_w_manifest(w, pipeline=None), w.tmp / "r11b"),
        needles=("manifest.json", "'pipeline' is null", "rerun 'nmtkit preprocess'")),
    Row("train-manifest-bpe-record-with-a-pipeline-without-bpe",
        lambda w: _train(_w_manifest(w, bpe={"codes_files": {"src": "bpe.codes", "tgt": "bpe.codes"},
                                             "merges_learned": {"src": 200, "tgt": 200}}), w.tmp / "r11c"),
        needles=("manifest.json", "segmented with BPE", "pipeline.bpe is null")),
    Row("translate-random-bytes-named-pt", lambda w: ["translate", "-m", _text(w, "r.pt", random.Random(0).randbytes(4000)), "-i",
                                                      str(w.src)], needles=("r.pt", "not an nmtkit checkpoint"),
        absent=("weights_only", "arbitrary code")),
    Row("translate-pickle-named-pt", lambda w: ["translate", "-m", _pickle(w), "-i", str(w.src)],
        needles=("p.pt", "not an nmtkit checkpoint"), absent=("weights_only", "arbitrary code", "Warning")),
    Row("serve-beam-0", lambda w: ["serve", "-m", str(w.ckpt), "--beam", "0"], needles=("--beam",),
        absent=("--max-beam",)),
    Row("train-dropout-2-names-the-option", lambda w: _train(w, w.tmp / "r12", "--dropout", "2"),
        needles=("--dropout",), absent=("Config",)),
    Row("score-tokenize-ja-mecab-without-mecab", lambda w: _score(w, "--tokenize", "ja-mecab"),
        needles=("ja-mecab", "sacrebleu[ja]")),
    # a damaged array of a data directory: tracebacks in batching, or sentences silently cut wrongly
    Row("train-offsets-swapped", lambda w: _train(_w_npy(w, "train.en.offsets.npy", _swap56), w.tmp / "ra1"),
        needles=("train.en.offsets.npy", "do not cut")),
    Row("train-last-offset-short", lambda w: _train(_w_npy(w, "train.en.offsets.npy", _last_minus_1), w.tmp / "ra2"),
        needles=("train.en.offsets.npy", "do not cut")),
    Row("train-first-offset-not-0", lambda w: _train(_w_npy(w, "train.fr.offsets.npy", _first_3), w.tmp / "ra3"),
        needles=("train.fr.offsets.npy", "do not cut")),
    Row("train-negative-id", lambda w: _train(_w_npy(w, "train.en.ids.npy", _negative), w.tmp / "ra4"),
        needles=("train.en.ids.npy", "negative")),
    Row("train-id-beyond-the-vocabulary", lambda w: _train(_w_npy(w, "valid.fr.ids.npy", _past_vocab), w.tmp / "ra8"),
        needles=("valid.fr.ids.npy", "split 'valid' target", "beyond the vocabulary")),
    Row("train-id-equal-to-the-vocabulary-size", lambda w: _train(_w_id_at_vocab_size(w), w.tmp / "ra11"),
        needles=("valid.fr.ids.npy", "beyond the vocabulary (id ")),  # one past the last id: an IndexError in training
    Row("train-negative-word-length", lambda w: _train(_w_npy(w, "train.fr.words.npy", _negative), w.tmp / "ra5"),
        needles=("train.fr.words.npy", "negative")),
    # was "no training pair has both sides within --max-len 50"
    Row("train-word-lengths-all-zero", lambda w: _train(_w_npy(w, "train.en.words.npy", lambda a: a * 0), w.tmp / "ra9"),
        needles=("train.en.words.npy", "0 words but", "rerun 'nmtkit preprocess'")),
    Row("train-more-words-than-ids", lambda w: _train(_w_npy(w, "valid.fr.words.npy", lambda a: a + 100), w.tmp / "ra10"),
        needles=("valid.fr.words.npy", "words but", "rerun 'nmtkit preprocess'")),
    Row("train-float-ids", lambda w: _train(_w_npy(w, "valid.en.ids.npy", lambda a: a + 0.7), w.tmp / "ra6"),
        needles=("valid.en.ids.npy", "float64", "1-D integer")),
    Row("train-2d-ids", lambda w: _train(_w_npy(w, "train.en.ids.npy", lambda a: a[: len(a) // 2 * 2].reshape(2, -1)),
                                         w.tmp / "ra7"), needles=("train.en.ids.npy", "1-D integer")),
    Row("train-seed-past-int64", lambda w: _train(w, w.tmp / "rs1", "--seed", str(2**64)),
        needles=("--seed must be between 0 and 2^63-1",)),  # was an overflow traceback in torch
    Row("tokenize-protect-pattern-repeating-past-the-limit",
        lambda w: ["tokenize", "--lang", "en", "-i", str(w.src), "--protect", _text(w, "p.txt", b"a{99999999999}\n")],
        needles=("p.txt:1:", "invalid regular expression", "too large")),  # was an OverflowError traceback
    Row("translate-line-of-more-protected-matches-than-the-tokeniser-keeps",  # named --protect, not translate's
        lambda w: ["translate", "-m", _protecting_checkpoint(w), "-i", _text(w, "tags.txt", b"<b>x</b> " * 600)],
        needles=("tags.txt:1:", "1,200 matches", "preprocess's --protect")),
    Row("train-min-lr-above-lr", lambda w: _train(w, w.tmp / "rl1", "--lr", "0.001", "--min-lr", "1.5"),
        needles=("--min-lr 1.5 is above --lr 0.001",)),  # every update used to run at 1.5
    Row("train-plateau-options-without-the-plateau-schedule",
        lambda w: _train(w, w.tmp / "rl2", "--lr-decay", "0.1", "--lr-patience", "2"),
        needles=("--lr-decay and --lr-patience need --lr-schedule plateau",)),  # the lr stayed constant, silently
    # each was ignored, silently: SGD has no betas, Adam no rho, a run without dev BLEU no beam
    Row("train-adam-options-with-another-optimizer",
        lambda w: _train(w, w.tmp / "rl3", "--optimizer", "sgd", "--adam-beta1", "0.8", "--adam-eps", "1e-6"),
        needles=("--adam-beta1 and --adam-eps need --optimizer adam",)),
    Row("train-adadelta-option-with-another-optimizer", lambda w: _train(w, w.tmp / "rl4", "--adadelta-rho", "0.9"),
        needles=("--adadelta-rho needs --optimizer adadelta",)),
    Row("train-valid-beam-without-dev-bleu", lambda w: _train(w, w.tmp / "rl5", "--valid-beam", "5"),
        needles=("--valid-beam needs --valid-bleu-samples above 0",)),
    Row("train-dev-set-of-empty-sources", lambda w: _train(_w_blank_valid(w), w.tmp / "rb1"),
        needles=("data-copy", "'valid' split has no pair with a non-empty source")),  # was a dev loss of 0
    Row("train-dev-set-of-pairs-all-over-the-validation-bound", lambda w: _train(_w_long_valid(w), w.tmp / "rb2"),
        needles=("data-copy", "no pair validation can score", "over 250 tokens"),  # was a dev loss of 0, ppl 1
        absent=("the others with an empty source",)),
    Row("train-dev-bleu-samples-all-over-the-validation-bound",
        lambda w: _train(_w_long_valid(w, first=1), w.tmp / "rb3", "--valid-bleu-samples", "1"),
        needles=("data-copy", "--valid-bleu-samples 1: the first 1 dev pair(s)", "over 250 tokens")),
    # was dev BLEU nan at every validation, never shown, and with --best-metric bleu no checkpoint_best.pt
    # damaged vocabularies: tracebacks, or a model silently trained on another language's words
    Row("train-src-vocab-of-another-data-directory", lambda w: _train(_w_vocab(w, lambda lines, d: lines[:10]),
                                                                      w.tmp / "rv1"),
        needles=("vocab.en.txt", "holds 10 words", "src_size")),
    Row("train-vocab-word-listed-twice", lambda w: _train(_w_vocab(w, lambda lines, d: lines[:9] + [lines[8]] + lines[10:]),
                                                          w.tmp / "rv2"), needles=("vocab.en.txt:10:", "listed twice")),
    Row("train-vocab-without-unk", lambda w: _train(_w_vocab(w, lambda lines, d: lines[:1] + lines[2:]), w.tmp / "rv3"),
        needles=("vocab.en.txt", "special symbols")),
    Row("train-vocab-count-not-ascii-digits", lambda w: _train(_w_vocab(w, lambda lines, d: lines + ["foo\t\u00b2"]),
                                                               w.tmp / "rv4"), needles=("vocab.en.txt:", "token<TAB>count")),
    # score used to take a NUL byte as text (BLEU 0 for that line) and a UTF-16 file as a line count
    Row("score-hyp-with-a-nul-byte", lambda w: _score_hyp(w, "nul.fr", "\n".join(_fr(w)[:2]).encode() + b"\0x\n"
                                                          + "\n".join(_fr(w)[2:]).encode() + b"\n"),
        needles=("nul.fr:2:", "binary data")),
    Row("score-hyp-in-utf16", lambda w: _score_hyp(w, "u16.fr", ("\n".join(_fr(w)) + "\n").encode("utf-16")),
        needles=("u16.fr", "UTF-16", "iconv")),
    Row("score-hyp-with-cr-line-ends", lambda w: _score_hyp(w, "cr.fr", ("\r".join(_fr(w)) + "\r").encode()),
        needles=("cr.fr", "CR alone", "tr ")),  # was read as one line: a line-count error at best
    Row("tokenize-input-with-cr-line-ends", lambda w: ["tokenize", "--lang", "en", "-i",
                                                       _text(w, "cr.en", b"One.\rTwo.\rThree.\r")],
        needles=("cr.en", "CR alone")),  # was one sentence: "One.Two.Three ."
    # a short protected word ("it") was also replaced inside the name hiding a longer match ("NMTKITSHIELD...")
    Row("tokenize-protect-a-word-that-is-part-of-the-hiding-name",
        lambda w: ["tokenize", "--lang", "en", "-i", _text(w, "it.en", b"hello it is, IT.\n"), "--protect",
                   _text(w, "it.txt", b"hello\nit\n"), "-o", str(w.tmp / "it.tok")], ok=True,
        check=lambda w: _text_is(w.tmp / "it.tok", "hello it is , IT .\n")),  # was NMTKITSHIELDAAAAZ NMTKITSHIELDAAABZ ...
    # a combining mark right after a protected match composed with the end of the name hiding it
    Row("tokenize-protect-a-match-followed-by-a-combining-mark",
        lambda w: ["tokenize", "--lang", "fr", "-i", _text(w, "nfd.fr", "Jose\u0301 vient.\n<b>\u0301 x\n".encode()),
                   "--protect", _text(w, "nfd.txt", b"jose\n<b>\n"), "-o", str(w.tmp / "nfd.tok")], ok=True,
        check=lambda w: _text_is(w.tmp / "nfd.tok", "Jos\u00e9 vient .\n<b> \u0301 x\n")),  # was NMTKITSHIELDAAAA\u0179
    # the Moses tokeniser's own stand-in for a run of dots, typed by a user, came back as dots
    Row("tokenize-moses-multidot-marker-typed-in-the-text",
        lambda w: ["tokenize", "--lang", "en", "-i", _text(w, "dm.en", b"Set DOTMULTI to 1, then DOTDOTMULTI..\n"),
                   "-o", str(w.tmp / "dm.tok")], ok=True,
        check=lambda w: _text_is(w.tmp / "dm.tok", "Set DOTMULTI to 1 , then DOTDOTMULTI ..\n")),  # was Set . to 1 , then .. ..
    # matplotlib read a token with two "$" as a formula: a traceback on one it cannot parse, no output written
    Row("translate-plot-attention-of-a-token-with-dollar-signs",
        lambda w: _with_input(w, _text(w, "dollar.en", b"the $_$ cat\n"), "--input-format", "tok",
                              "--plot-attention", str(w.tmp / "plots"), "-o", str(w.tmp / "dollar.out")), ok=True,
        check=lambda w: _lines_and_png(w.tmp / "dollar.out", 1, w.tmp / "plots" / "000001.png")),
    Row("tokenize-input-with-a-nul-byte", lambda w: ["tokenize", "--lang", "en", "-i",
                                                     _text(w, "nul.en", b"a cat\nthe\0dog\n")],
        needles=("nul.en:2:", "binary")),
]



def _bad_link(w: World, kind: str) -> Path:
    """A symlink to a missing folder, or to itself."""
    link = w.tmp / f"{kind}-link"
    if not link.is_symlink():
        link.symlink_to(w.tmp / "missing" / "run" if kind == "dangling" else link)
    return link


def _no_dash_folder() -> None:
    assert not Path("-").exists(), "a folder named '-' was made in the current folder"

def _w_npy(w: World, name: str, edit) -> World:
    """A copy of the data directory with array `name` replaced by `edit(array)`."""
    import numpy as np

    d = _data_copy(w)
    np.save(d / name, edit(np.load(d / name)))
    w.data = d
    return w


def _w_blank_valid(w: World) -> World:
    """A copy of the data directory whose dev sources are all empty lines (as preprocess keeps them)."""
    import json

    import numpy as np

    d = _data_copy(w)
    n = len(np.load(d / "valid.en.offsets.npy")) - 1
    np.save(d / "valid.en.ids.npy", np.zeros(0, np.int32))
    np.save(d / "valid.en.offsets.npy", np.zeros(n + 1, np.int64))
    np.save(d / "valid.en.words.npy", np.zeros(n, np.int32))
    m = json.loads((d / "manifest.json").read_text())
    m["splits"]["valid"]["src_tokens"] = 0
    (d / "manifest.json").write_text(json.dumps(m))
    w.data = d
    return w


def _w_long_valid(w: World, first: int | None = None) -> World:
    """A copy of the data directory whose first `first` (all) dev targets are of 251 tokens, over
    the bound of the pairs validation scores (preprocess does not clean the valid split)."""
    import json

    import numpy as np

    d = _data_copy(w)
    offsets, ids = np.load(d / "valid.fr.offsets.npy"), np.load(d / "valid.fr.ids.npy")
    k = len(offsets) - 1 if first is None else first
    rest = ids[offsets[k]:]
    np.save(d / "valid.fr.ids.npy", np.concatenate([np.full(k * 251, 4, ids.dtype), rest]))
    np.save(d / "valid.fr.offsets.npy", np.concatenate([np.arange(k + 1) * 251, offsets[k + 1:] - offsets[k] + k * 251]))
    words = np.load(d / "valid.fr.words.npy")
    np.save(d / "valid.fr.words.npy", np.concatenate([np.full(k, 251, words.dtype), words[k:]]))
    m = json.loads((d / "manifest.json").read_text())
    m["splits"]["valid"]["tgt_tokens"] = k * 251 + len(rest)
    (d / "manifest.json").write_text(json.dumps(m))
    w.data = d
    return w


def _w_vocab(w: World, edit) -> World:
    """A copy of the data directory with vocab.en.txt's lines replaced by `edit(lines, folder)`."""
    d = _data_copy(w)
    p = d / "vocab.en.txt"
    p.write_text("\n".join(edit(p.read_text(encoding="utf-8").splitlines(), d)) + "\n", encoding="utf-8")
    w.data = d
    return w


def _swap56(a):
    a = a.copy()
    a[5], a[6] = a[6], a[5]
    return a


def _last_minus_1(a):
    a = a.copy()
    a[-1] -= 1
    return a


def _first_3(a):
    a = a.copy()
    a[0] = 3
    return a


def _negative(a):
    a = a.copy()
    a[3] = -1
    return a


def _w_id_at_vocab_size(w: World) -> World:
    """A copy of the data directory whose last dev target id is the target vocabulary's size."""
    from nmtkit.data.manifest import read_manifest_files

    size = len(read_manifest_files(w.data).tgt_vocab)
    return _w_npy(w, "valid.fr.ids.npy", lambda a: _past_vocab(a, size))


def _past_vocab(a, past=1_000_000):
    a = a.copy()
    a[-1] = past  # past any vocabulary of the fixture's data by default
    return a


def _fr(w: World) -> list[str]:
    return (w.tmp / "corpus.fr").read_text(encoding="utf-8").splitlines()


def _score_hyp(w: World, name: str, data: bytes) -> list[str]:
    argv = _score(w)
    argv[argv.index("--hyp") + 1] = _text(w, name, data)
    return argv


def _text(w: World, name: str, data: bytes) -> str:
    (w.tmp / name).write_bytes(data)
    return str(w.tmp / name)


def _pickle(w: World) -> str:
    import pickle

    (w.tmp / "p.pt").write_bytes(pickle.dumps({"a": 1}, protocol=4))
    return str(w.tmp / "p.pt")


def _with_input(w: World, path: str, *extra: str) -> list[str]:
    argv = _translate(w, *extra)
    argv[argv.index("-i") + 1] = path
    return argv


def _text_is(p: Path, want: str) -> None:
    assert p.read_text(encoding="utf-8") == want, p.read_text(encoding="utf-8")


def _lines(p: Path, n: int) -> None:
    assert p.read_text().count("\n") == n, p.read_text()


def _lines_and_png(p: Path, n: int, png: Path) -> None:
    _lines(p, n)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def _fifo_input(w: World) -> str:
    """A FIFO fed by a writer thread, as `mkfifo f; cmd > f &` gives."""
    fifo = w.tmp / "in.fifo"
    os.mkfifo(fifo)
    threading.Thread(target=lambda: fifo.write_bytes(w.src.read_bytes()), daemon=True).start()
    return str(fifo)


def _zeros_fifo(w: World, size: int) -> str:
    """A FIFO fed `size` zero bytes by a writer thread, which counts (w.zeros_written) those the
    reader took before it closed the FIFO."""
    fifo = w.tmp / "zeros.fifo"
    os.mkfifo(fifo)
    w.zeros_written = [0]

    def feed():
        with contextlib.suppress(BrokenPipeError), open(fifo, "wb", buffering=0) as f:
            block = bytes(1 << 16)
            while w.zeros_written[0] < size:
                w.zeros_written[0] += f.write(block)

    threading.Thread(target=feed, daemon=True).start()
    return str(fifo)


def _pipe_input(w: World) -> str:
    """What bash's <(cmd) gives: /proc/self/fd/N (/dev/fd/63), the read end of a pipe."""
    r, wr = os.pipe()
    os.write(wr, w.src.read_bytes())
    os.close(wr)
    return f"/proc/self/fd/{r}"


def _same_as_without_bom(w: World) -> None:
    code, _, err = run_cli(_translate(w, "-o", str(w.tmp / "plain")))
    assert code == 0, err
    assert (w.tmp / "b").read_text() == (w.tmp / "plain").read_text()


def _w_without_words(w: World) -> World:
    """A copy of the data directory without its per-sentence word lengths."""
    d = _data_copy(w)
    for f in d.glob("*.words.npy"):
        f.unlink()
    w.data = d
    return w


def _w_manifest(w: World, pipeline_src_lang: str | None = None, **changes) -> World:
    import json

    d = w.data if w.data.name == "data-copy" else _data_copy(w)
    m = json.loads((d / "manifest.json").read_text())
    m.update(changes)
    if pipeline_src_lang:
        m["pipeline"]["src_lang"] = pipeline_src_lang
    (d / "manifest.json").write_text(json.dumps(m))
    w.data = d
    return w


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input_table_inputs_and_messages(row: Row, world: World):
    check_row(row, world)


def test_sigterm_to_translate_leaves_no_temp_file(world):
    """SIGTERM, like Ctrl-C, removes the half-written OUT.*.tmp; the exit status is 143."""
    import signal
    import time

    out = world.tmp / "out.txt"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    argv = _translate(world, "-o", str(out), "--buffer-size", "1")
    del argv[argv.index("-i"):argv.index("-i") + 2]  # stdin, kept open: translate is mid-run at the signal
    proc = subprocess.Popen([sys.executable, "-m", "nmtkit", *argv], stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    with proc.stdin as feed:
        feed.write("the cat\n")
        feed.flush()
        deadline = time.monotonic() + 120
        while not list(world.tmp.glob("out.txt.*.tmp")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(world.tmp.glob("out.txt.*.tmp")), "translate never started writing"
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    err = proc.stderr.read()
    assert proc.returncode == 143 and "Traceback" not in err, err
    assert not list(world.tmp.glob("out.txt*")), list(world.tmp.iterdir())


def _tokenize_writing_with_workers(tmp_path: Path, **popen: Any) -> subprocess.Popen:
    """`tokenize --workers 2 -o tmp_path/out.tok` fed 5,000 lines on its open stdin, once it writes
    its temp output and its workers run."""
    import time

    proc = subprocess.Popen([sys.executable, "-m", "nmtkit", "tokenize", "--lang", "en", "--workers", "2", "-o",
                             str(tmp_path / "out.tok")], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), **popen)
    proc.stdin.write("Hello, world!\n" * 5000)
    proc.stdin.flush()
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("out.tok.*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.glob("out.tok.*.tmp")), "tokenize never started writing"
    time.sleep(1.0)  # the workers are running
    return proc


def test_sigterm_to_tokenize_with_workers_leaves_no_temp_file_and_no_worker_traceback(tmp_path):
    """Every command unwinds on SIGTERM as on Ctrl-C (tokenize, select-data and preprocess left
    their temp files), and the pool's workers end without a traceback each."""
    import signal

    proc = _tokenize_writing_with_workers(tmp_path)
    with proc.stdin:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    err = proc.stderr.read()
    assert proc.returncode == 143 and "Traceback" not in err and "ForkPoolWorker" not in err, err
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


def test_a_sighup_ignored_at_start_as_by_nohup_stays_ignored(tmp_path):
    """SIGHUP stops every command as SIGTERM does, unless it was ignored at start (nohup): then a
    closed terminal's SIGHUP to the group changes nothing, in the command or in its workers."""
    import signal

    proc = _tokenize_writing_with_workers(tmp_path, start_new_session=True,
                                          preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    with proc.stdin as feed:
        os.killpg(proc.pid, signal.SIGHUP)
        feed.write("Hello, world!\n" * 5000)
    proc.wait(timeout=60)
    assert proc.returncode == 0 and proc.stderr.read() == ""
    assert (tmp_path / "out.tok").read_text() == "Hello , world !\n" * 10000


def test_wmt14_smoke_honours_work_and_results(tmp_path):
    """`make smoke WORK=... RESULTS=...` writes there, not into the source tree (make -n: what it would run)."""
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    proc = subprocess.run(["make", "-n", "-C", str(REPO / "examples" / "wmt14-en-fr"), "smoke", f"DATA={tmp_path}",
                           f"WORK={tmp_path}/w", f"RESULTS={tmp_path}/res"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"{tmp_path}/w/" in proc.stdout and f"{tmp_path}/res/" in proc.stdout
    assert "work-smoke" not in proc.stdout and "results-smoke" not in proc.stdout


def test_a_zip_holding_a_foreign_pickle_is_refused_without_torchs_advice(world):
    """torch.save of an object that is not plain data: refused unread, and torch's advice to
    retry with weights_only=False (running the file's code) is never passed on."""
    import fractions

    import torch

    path = world.tmp / "foreign.pt"
    torch.save({"format_version": 1, "x": fractions.Fraction(1, 3)}, path)
    row = Row("zip-with-foreign-pickle", lambda w: ["translate", "-m", str(path), "-i", str(w.src)],
              needles=("foreign.pt", "objects other than tensors"), absent=("weights_only", "arbitrary code"))
    check_row(row, world)


def test_a_closed_terminals_sighup_unwinds_a_command_as_sigterm_does_with_status_129(tmp_path):
    import signal

    proc = _tokenize_writing_with_workers(tmp_path)
    with proc.stdin:
        proc.send_signal(signal.SIGHUP)
    proc.wait(timeout=60)
    err = proc.stderr.read()
    assert proc.returncode == 129 and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())
