"""`nmtkit preprocess` end to end on tiny made-up files: data dir, manifest, round trips, errors."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nmtkit import preprocess
from nmtkit.cli import command as cli_command
from nmtkit.data.binarized import ParallelData
from nmtkit.data.manifest import MANIFEST_VERSION
from nmtkit.errors import ConfigError, InputError, OutputExistsError
from nmtkit.preprocess import PreprocessConfig
from nmtkit.text.pipeline import TextPipeline
from nmtkit.text.vocab import SPECIALS, UNK, Vocab
from tests.conftest import run_cli

EN = ["the cat sleeps", "a dog runs in the park", "my friend reads a book", "the children play outside",
      "she is writing a letter", "we eat bread and cheese", "it's raining today", "the old man walks slowly"]
FR = ["le chat dort", "un chien court dans le parc", "mon ami lit un livre", "les enfants jouent dehors",
      "elle écrit une lettre", "nous mangeons du pain et du fromage", "il pleut aujourd'hui",
      "le vieil homme marche lentement"]


def _corpus(n: int, offset: int = 0) -> tuple[list[str], list[str]]:
    en, fr = [], []
    for k in range(n):
        i = (k + offset) % len(EN)
        en.append(f"{EN[i].capitalize()}, number {k + offset}!")
        fr.append(f"{FR[i].capitalize()}, numéro {k + offset} !")
    return en, fr


def _write(prefix: Path, en: list[str], fr: list[str]) -> str:
    prefix.with_suffix(".en").write_text("".join(x + "\n" for x in en), encoding="utf-8")
    prefix.with_suffix(".fr").write_text("".join(x + "\n" for x in fr), encoding="utf-8")
    return str(prefix)


# Training lines with known faults, each dropped for exactly one reason.
BAD_TRAIN = [
    ("", "phrase sans source", "empty"),
    ("sentence without target", "   ", "empty"),
    (" ".join(["word"] * 30), " ".join(["mot"] * 30), "too_long"),      # 30 tokens > --max-len 20
    ("one", "un deux trois quatre cinq six sept huit neuf dix", "ratio"),  # 1 vs 10 tokens > ratio 9
]


@pytest.fixture()
def corpus(tmp_path: Path) -> dict:
    en, fr = _corpus(60)
    for s, t, _ in BAD_TRAIN:
        en.append(s)
        fr.append(t)
    en += en[:2]  # two exact duplicates of earlier pairs
    fr += fr[:2]
    train = _write(tmp_path / "train", en, fr)
    valid = _write(tmp_path / "valid", *_corpus(10, offset=100))
    test = _write(tmp_path / "test", *_corpus(7, offset=200))
    return {"train": train, "valid": valid, "test": test, "n_train": len(en), "tmp": tmp_path}


def _config(c: dict, dest: Path, **kw) -> PreprocessConfig:
    args = dict(src_lang="en", tgt_lang="fr", train=c["train"], valid=c["valid"], test=(c["test"],), dest=str(dest),
                max_len=20, bpe=40, bpe_min_frequency=1, workers=1, chunk_size=16)
    if kw.get("bpe", 40) is None:
        del args["bpe_min_frequency"]  # a BPE option: refused without --bpe
    args.update(kw)
    return PreprocessConfig(**args)


def _decoded(dest: Path, split: str) -> tuple[list[list[str]], list[list[str]]]:
    data = ParallelData(dest, split, "en", "fr")
    ve, vf = Vocab.load(dest / "vocab.en.txt"), Vocab.load(dest / "vocab.fr.txt")
    src = [ve.decode(data.src[k], strip_specials=False) for k in range(len(data))]
    tgt = [vf.decode(data.tgt[k], strip_specials=False) for k in range(len(data))]
    return src, tgt


def _unk(tokens: list[str], vocab: Vocab) -> list[str]:
    return [t if t in vocab else UNK for t in tokens]


# ---- the data directory ---------------------------------------------------------------------
def test_cli_writes_a_complete_data_dir_and_nothing_on_stdout(corpus):
    dest = corpus["tmp"] / "data"
    code, out, err = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", corpus["train"],
                              "--valid", corpus["valid"], "--test", corpus["test"], "--bpe", "40",
                              "--max-len", "20", "--dedup", "--workers", "2", "--dest", str(dest)])
    assert code == 0, err
    assert out == ""
    assert "train" in err and "vocabularies" in err  # the summary table
    names = {p.name for p in dest.iterdir()}
    for split in ("train", "valid", "test"):
        for lang in ("en", "fr"):
            assert {f"{split}.{lang}.ids.npy", f"{split}.{lang}.offsets.npy"} <= names
    assert {"manifest.json", "vocab.en.txt", "vocab.fr.txt", "bpe.codes"} <= names
    assert not [p for p in corpus["tmp"].iterdir() if ".tmp-" in p.name]


def test_cleaning_drops_each_bad_pair_for_its_reason_and_counts_it(corpus):
    m = preprocess.run(_config(corpus, corpus["tmp"] / "d", dedup=True))
    train = m["splits"]["train"]
    expected = {"duplicate": 2, "empty": 2, "too_long": 1, "ratio": 1}
    assert train["dropped"] == expected
    assert train["lines_in"] == corpus["n_train"]
    assert train["lines"] == corpus["n_train"] - sum(expected.values())
    assert m["splits"]["valid"]["dropped"] == {} and m["splits"]["valid"]["lines"] == 10


def test_a_repeated_pair_that_cleaning_drops_is_counted_for_its_reason_not_as_a_duplicate(corpus):
    """As clean-corpus-n, then a dedup of what it kept: each repeat of a bad pair (in a later chunk) is
    dropped for the same reason as the first; only repeats of kept pairs are duplicates."""
    for k, lang in enumerate(("en", "fr")):
        with open(f"{corpus['train']}.{lang}", "a", encoding="utf-8") as f:
            f.write("".join(bad[k] + "\n" for bad in BAD_TRAIN))
    m = preprocess.run(_config(corpus, corpus["tmp"] / "d", dedup=True))
    assert m["splits"]["train"]["dropped"] == {"duplicate": 2, "empty": 4, "too_long": 2, "ratio": 2}


def test_without_dedup_duplicates_are_kept(corpus):
    m = preprocess.run(_config(corpus, corpus["tmp"] / "d"))
    assert m["splits"]["train"]["dropped"]["duplicate"] == 0
    assert m["splits"]["train"]["lines"] == corpus["n_train"] - 4


@pytest.mark.parametrize("kw", [{}, {"truecase": True}, {"lowercase": True, "aggressive_dash_splits": True},
                                {"bpe_separate": True, "bpe_vocab_threshold": 3, "workers": 2}])
def test_binarised_ids_decode_to_the_recorded_pipelines_tokens(corpus, kw):
    dest = corpus["tmp"] / "d"
    m = preprocess.run(_config(corpus, dest, **kw))
    p = TextPipeline.from_dict(json.loads((dest / "manifest.json").read_text())["pipeline"])
    ve, vf = Vocab.load(dest / "vocab.en.txt"), Vocab.load(dest / "vocab.fr.txt")
    for split in ("valid", "test"):
        src_raw = Path(f"{corpus[split]}.en").read_text(encoding="utf-8").splitlines()
        tgt_raw = Path(f"{corpus[split]}.fr").read_text(encoding="utf-8").splitlines()
        src, tgt = _decoded(dest, split)
        assert src == [_unk(p.encode(x, "src"), ve) for x in src_raw]
        assert tgt == [_unk(p.encode(x, "tgt"), vf) for x in tgt_raw]
    # train: the kept pairs, in input order, every token known (vocab built on train)
    src_raw = Path(f"{corpus['train']}.en").read_text(encoding="utf-8").splitlines()[:60]
    src, _ = _decoded(dest, "train")
    assert src[:60] == [p.encode(x, "src") for x in src_raw]
    assert any(t.endswith("@@") for s in src for t in s)  # BPE was applied
    assert m["splits"]["train"]["unk_rate"] == {"src": 0.0, "tgt": 0.0}
    back = p.decode(p.encode(src_raw[3], "src"), "src")
    assert back == (src_raw[3].lower() if kw.get("lowercase") else src_raw[3])  # lowercasing cannot be undone


def test_pretokenised_input_gives_the_same_data_as_raw_input(corpus):
    raw = corpus["tmp"] / "raw"
    preprocess.run(_config(corpus, raw))
    p = TextPipeline("en", "fr")
    for split in ("train", "valid", "test"):
        for lang, side in (("en", "src"), ("fr", "tgt")):
            lines = Path(f"{corpus[split]}.{lang}").read_text(encoding="utf-8").splitlines()
            tok = corpus["tmp"] / f"tok-{split}.{lang}"
            tok.write_text("".join(" ".join(p.tokenize(x, side)) + "\n" for x in lines), encoding="utf-8")
    tokd = corpus["tmp"] / "tokd"
    preprocess.run(_config(corpus, tokd, input_format="tok", train=str(corpus["tmp"] / "tok-train"),
                       valid=str(corpus["tmp"] / "tok-valid"), test=(str(corpus["tmp"] / "tok-test"),)))
    for name in sorted(x.name for x in raw.iterdir() if x.suffix == ".npy" or x.name.startswith("vocab")):
        assert (raw / name).read_bytes() == (tokd / name).read_bytes(), name


def test_manifest_records_settings_checksums_counts_and_vocab_sizes(corpus):
    dest = corpus["tmp"] / "d"
    cfg = _config(corpus, dest, truecase=True)
    preprocess.run(cfg)
    m = json.loads((dest / "manifest.json").read_text(encoding="utf-8"))
    assert m["format_version"] == MANIFEST_VERSION and (m["src_lang"], m["tgt_lang"]) == ("en", "fr")
    for field in ("train", "valid", "test", "max_len", "max_ratio", "dedup", "bpe", "bpe_separate",
                  "bpe_vocab_threshold", "lowercase", "truecase", "aggressive_dash_splits", "workers",
                  "src_vocab_size", "tgt_vocab_size", "input_format"):
        assert field in m["settings"], field
    assert m["settings"]["max_len"] == 20 and m["settings"]["truecase"] is True
    assert PreprocessConfig.from_dict(m["settings"]) == cfg  # every setting, and nothing else
    with pytest.raises(ConfigError, match="unknown preprocess settings"):
        PreprocessConfig.from_dict({**m["settings"], "max_lenn": 3})
    for prefix in (corpus["train"], corpus["valid"], corpus["test"]):
        for lang in ("en", "fr"):
            path = f"{prefix}.{lang}"
            assert m["inputs"][path] == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    assert m["vocab"]["src"] == "vocab.en.txt" and m["vocab"]["tgt"] == "vocab.fr.txt"
    assert m["vocab"]["src_size"] == len(Vocab.load(dest / "vocab.en.txt"))
    assert m["vocab"]["tgt_size"] == len((dest / "vocab.fr.txt").read_text(encoding="utf-8").splitlines())
    assert m["pipeline"]["bpe"]["codes"] == (dest / "bpe.codes").read_text(encoding="utf-8")
    assert m["pipeline"]["truecase"]["src"]  # the truecasing model travels with the pipeline
    for name in ("train", "valid", "test"):
        s = m["splits"][name]
        data = ParallelData(dest, name, "en", "fr")
        assert s["lines"] == len(data)
        assert s["src_tokens"] == int(data.src.lengths.sum()) and s["tgt_tokens"] == int(data.tgt.lengths.sum())
        assert s["unk_rate"]["src"] == pytest.approx(s["unk_tokens"]["src"] / s["src_tokens"])
        assert s["src_words"] <= s["src_tokens"]
        for side, text in (("src", data.src), ("tgt", data.tgt)):  # each sentence's words, as --max-len counts
            assert s[f"{side}_words"] == int(text.word_lengths.sum())
            assert (text.word_lengths <= text.lengths).all()


def test_truecase_cases_the_training_data_as_truecase_perl(tmp_path):
    """Each word as train-truecaser.perl + truecase.perl case it (tests/test_text_moses_pipeline.py):
    "us" inside a sentence stays beside the more frequent "US", a sentence-initial "The" is lowered."""
    from tests.test_text_moses_pipeline import US_CORPUS, US_TRUECASED

    lines = [s.replace(" .", ".").replace(" ?", "?") for s in US_CORPUS]
    c = {"train": _write(tmp_path / "train", lines, lines), "valid": _write(tmp_path / "valid", lines, lines),
         "test": _write(tmp_path / "test", lines, lines)}
    preprocess.run(_config(c, tmp_path / "d", bpe=None, truecase=True))
    src, tgt = _decoded(tmp_path / "d", "train")
    assert [" ".join(s) for s in src] == [" ".join(t) for t in tgt] == US_TRUECASED[:len(US_CORPUS)]


@pytest.mark.parametrize("bpe", [None, 30])
def test_a_truecased_vocabulary_counts_each_token_as_often_as_the_binarised_training_data_holds_it(tmp_path, bpe):
    """A sentence-initial word is counted in the form truecasing gives it there: "Apple", seen inside
    a sentence too, as its best form "apple"."""
    from collections import Counter

    lines = ["Apple pie is good.", "I like apple pie.", "An apple a day.", "The apple fell.", "I bought Apple shares."]
    c = {split: _write(tmp_path / split, lines, lines) for split in ("train", "valid", "test")}
    preprocess.run(_config(c, tmp_path / "d", bpe=bpe, truecase=True))
    src, _ = _decoded(tmp_path / "d", "train")
    ve = Vocab.load(tmp_path / "d" / "vocab.en.txt")
    assert dict(zip(ve.itos[4:], ve.counts[4:])) == Counter(t for s in src for t in s)
    assert "".join(src[0]).replace("@@", "").startswith("applepie")  # and binarised so


def test_word_vocabulary_keeps_the_most_frequent_words_and_counts_unks(corpus):
    dest = corpus["tmp"] / "d"
    m = preprocess.run(_config(corpus, dest, bpe=None, src_vocab_size=12, tgt_vocab_size=15))
    ve, vf = Vocab.load(dest / "vocab.en.txt"), Vocab.load(dest / "vocab.fr.txt")
    assert len(ve) == 12 and len(vf) == 15 and ve.itos[:4] == list(SPECIALS)
    assert ve.counts[4:] == sorted(ve.counts[4:], reverse=True)
    src, _ = _decoded(dest, "train")
    n_unk = sum(t == UNK for s in src for t in s)
    assert n_unk > 0
    assert m["splits"]["train"]["unk_tokens"]["src"] == n_unk
    assert m["splits"]["train"]["unk_rate"]["src"] == pytest.approx(n_unk / sum(len(s) for s in src))
    assert m["pipeline"]["bpe"] is None


@pytest.mark.parametrize("flags", [dict(nfc=False, remove_non_printing=False, normalize_punct=False,
                                        aggressive_dash_splits=True, lowercase=True, protect=("printf",)),
                                   dict(nfc=True, remove_non_printing=True, normalize_punct=True,
                                        aggressive_dash_splits=False, lowercase=False, protect=())])
def test_the_text_pipeline_takes_each_tokenising_flag_given(flags):
    """--no-nfc and --no-remove-non-printing reach the tokeniser (and the record), as the other flags do."""
    p = PreprocessConfig(src_lang="en", tgt_lang="fr", train="t", valid="v", dest="d", **flags).base_pipeline()
    assert {k: getattr(p, k) for k in flags if k != "protect"} == {k: v for k, v in flags.items() if k != "protect"}
    assert bool(p.protected_patterns) == bool(flags["protect"])


def test_default_word_vocabulary_is_the_papers_30000():
    cfg = PreprocessConfig("en", "fr", "a", "b", "c")
    assert cfg.vocab_size("src") == 30000 and cfg.vocab_size("tgt") == 30000
    assert PreprocessConfig("en", "fr", "a", "b", "c", bpe=100).vocab_size("src") is None


def test_separate_bpe_and_lowercase_write_one_codes_file_per_language(corpus):
    dest = corpus["tmp"] / "d"
    m = preprocess.run(_config(corpus, dest, bpe_separate=True, lowercase=True, bpe_vocab_threshold=2))
    assert (dest / "bpe.codes.en").exists() and (dest / "bpe.codes.fr").exists()
    p = TextPipeline.from_dict(m["pipeline"])
    assert p.bpe["codes"]["src"] != p.bpe["codes"]["tgt"]
    assert all(t == t.lower() for t in p.encode("The Cat SLEEPS", "src"))


def test_two_workers_give_byte_identical_output(corpus):
    outs = []
    for workers in (1, 2):
        dest = corpus["tmp"] / f"d{workers}"
        preprocess.run(_config(corpus, dest, workers=workers, chunk_size=5, dedup=True))
        outs.append({p.name: p.read_bytes() for p in dest.iterdir() if p.name != "manifest.json"})
    assert outs[0] == outs[1]


def test_progress_callback_reports_every_stage(corpus):
    calls = []
    preprocess.run(_config(corpus, corpus["tmp"] / "d"), lambda stage, done, total: calls.append((stage, done, total)))
    stages = list(dict.fromkeys(s for s, _, _ in calls))
    assert stages == ["check inputs", "tokenise + clean train", "learn BPE", "encode + binarise train",
                      "encode + binarise valid", "encode + binarise test"]
    last = {s: (d, t) for s, d, t in calls}
    assert last["tokenise + clean train"] == (corpus["n_train"], corpus["n_train"])


def test_streaming_writer_output_matches_numpy_save_format(corpus):
    dest = corpus["tmp"] / "d"
    preprocess.run(_config(corpus, dest))
    ids = np.load(dest / "valid.en.ids.npy")
    offsets = np.load(dest / "valid.en.offsets.npy")
    assert ids.dtype == np.int32 and offsets.dtype == np.int64
    assert offsets[0] == 0 and offsets[-1] == len(ids) and len(offsets) == 11
    assert np.all(np.diff(offsets) > 0)


# ---- bad input: one line on stderr, non-zero exit, nothing that looks complete ---------------
def _assert_clean_failure(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.code != 0
    assert "Traceback" not in proc.err
    lines = proc.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nmtkit: error: "), proc.err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def _base_args(c: dict, dest: Path) -> list[str]:
    return ["--src-lang", "en", "--tgt-lang", "fr", "--train", c["train"], "--valid", c["valid"], "--dest", str(dest),
            "--quiet", "--workers", "1"]


def _no_leftovers(tmp: Path) -> None:
    assert not [p.name for p in tmp.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_missing_file_fails_cleanly(corpus):
    dest = corpus["tmp"] / "d"
    args = _base_args(corpus, dest)
    args[args.index("--valid") + 1] = str(corpus["tmp"] / "nope")
    proc = run_cli(["preprocess", *args])
    _assert_clean_failure(proc, "nope.en", "file not found")
    assert not dest.exists()


def test_different_line_counts_name_both_files_and_counts(corpus):
    Path(f"{corpus['valid']}.fr").write_text("une ligne\n", encoding="utf-8")
    dest = corpus["tmp"] / "d"
    proc = run_cli(["preprocess", *_base_args(corpus, dest)])
    _assert_clean_failure(proc, f"{corpus['valid']}.en has 10 lines", f"{corpus['valid']}.fr has 1 lines")
    assert not dest.exists()


def test_invalid_utf8_names_file_and_line_and_leaves_nothing(corpus):
    path = Path(f"{corpus['valid']}.fr")
    lines = path.read_bytes().split(b"\n")
    lines[6] = b"caf\xe9 cr\xe8me"
    path.write_bytes(b"\n".join(lines))
    dest = corpus["tmp"] / "d"
    proc = run_cli(["preprocess", *_base_args(corpus, dest)], process=True)
    _assert_clean_failure(proc, f"{path}:7: invalid UTF-8")
    assert not dest.exists()
    _no_leftovers(corpus["tmp"])


def test_empty_training_split_after_cleaning_fails(corpus):
    dest = corpus["tmp"] / "d"
    proc = run_cli(["preprocess", *_base_args(corpus, dest) + ["--max-len", "2"]])
    _assert_clean_failure(proc, "no training pairs left after cleaning", "too_long")
    assert not dest.exists()
    _no_leftovers(corpus["tmp"])


def test_non_empty_dest_is_refused_without_force_and_a_data_dir_replaced_with_it(corpus):
    dest = corpus["tmp"] / "d"
    dest.mkdir()
    (dest / "old.txt").write_text("keep me")
    proc = run_cli(["preprocess", *_base_args(corpus, dest)])
    _assert_clean_failure(proc, str(dest), "--force")
    assert (dest / "old.txt").read_text() == "keep me"
    proc = run_cli(["preprocess", *_base_args(corpus, dest) + ["--force"]])  # not a file nmtkit wrote: never deleted
    _assert_clean_failure(proc, str(dest), "old.txt")
    assert (dest / "old.txt").read_text() == "keep me"
    (dest / "old.txt").unlink()
    assert run_cli(["preprocess", *_base_args(corpus, dest)]).code == 0
    first = os.stat(dest).st_ino
    proc = run_cli(["preprocess", *_base_args(corpus, dest) + ["--force"]])
    assert proc.code == 0, proc.err
    assert os.stat(dest).st_ino != first  # a new data dir, renamed into place
    _no_leftovers(corpus["tmp"])


def test_force_says_where_a_replaced_data_dir_it_could_not_delete_is_left(corpus, monkeypatch, caplog):
    """Deleting the old directory can fail part way (a read-only folder inside it): what is
    left, under a temporary name, was kept without a word, a copy of the data per run."""
    import nmtkit.preprocess.build as run

    dest = corpus["tmp"] / "d"
    preprocess.run(_config(corpus, dest))
    rmtree = run.shutil.rmtree
    monkeypatch.setattr(run.shutil, "rmtree", lambda path, ignore_errors=False:  # the old one stays whole
                        None if ".old-" in Path(path).name else rmtree(path, ignore_errors=ignore_errors))
    with caplog.at_level("WARNING", logger=run.log.name):
        preprocess.run(_config(corpus, dest, force=True))
    left = [p for p in corpus["tmp"].iterdir() if p.name.startswith("d.old-")]
    assert len(left) == 1 and (left[0] / "manifest.json").exists()
    assert f"what is left of it is {left[0]}: delete it by hand" in caplog.text


def test_failure_with_force_keeps_the_old_data_dir(corpus):
    dest = corpus["tmp"] / "d"
    assert run_cli(["preprocess", *_base_args(corpus, dest)]).code == 0
    old = (dest / "manifest.json").read_text()
    Path(f"{corpus['train']}.en").write_bytes(Path(f"{corpus['train']}.en").read_bytes() + b"\xff\xfe\n")
    Path(f"{corpus['train']}.fr").write_bytes(Path(f"{corpus['train']}.fr").read_bytes() + b"x\n")
    proc = run_cli(["preprocess", *_base_args(corpus, dest) + ["--force"]])
    _assert_clean_failure(proc, "invalid UTF-8", f":{corpus['n_train'] + 1}:")
    assert (dest / "manifest.json").read_text() == old
    _no_leftovers(corpus["tmp"])


def test_ctrl_c_stops_cleanly_and_leaves_nothing(tmp_path):
    import signal
    import time

    en, fr = _corpus(40000)
    train = _write(tmp_path / "big", en, fr)
    dest = tmp_path / "d"
    proc = subprocess.Popen([sys.executable, "-m", "nmtkit", "preprocess", "--src-lang", "en", "--tgt-lang", "fr",
                             "--train", train, "--valid", train, "--dest", str(dest), "--workers", "2", "--quiet"],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while not [p for p in tmp_path.iterdir() if ".tmp-" in p.name] and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert not dest.exists()
    _no_leftovers(tmp_path)


def test_a_killed_runs_temp_folder_whose_pid_is_another_process_now_is_removed(corpus, caplog):
    """A killed run's DEST.tmp-HOST-PID-X, whose PID the system has since given to another process
    (here: this test's): every later run warned that it "is being written by process PID (another
    run to the same destination?)" and left it for good. A run holds its temp folder (an flock)
    while it writes it: one that no process holds is removed; one a live run holds stays."""
    import socket

    from nmtkit.io.files import folders_locked

    dest = corpus["tmp"] / "d"
    stale, live = (corpus["tmp"] / f"d.tmp-{socket.gethostname()}-{os.getpid()}-{x}"
                   for x in ("abcd1234", "live1234"))
    (stale / "work").mkdir(parents=True)
    live.mkdir()
    with folders_locked([live]):  # as the run writing it holds it
        preprocess.run(_config(corpus, dest))
    assert (dest / "manifest.json").is_file() and not stale.exists() and live.is_dir()
    assert f"removed {stale}, left by an interrupted run" in caplog.text
    assert f"{live} is being written by process {os.getpid()}" in caplog.text


def test_another_runs_data_dir_that_lands_just_before_the_swap_is_not_replaced_without_force(corpus, monkeypatch):
    """Two runs into one new --dest: the later one checked --dest again only before it took the
    lock of the swap, so where the earlier one's swap landed in between, it replaced that run's
    data directory without --force. The check is made under the lock now."""
    import contextlib

    from nmtkit.io import dirs

    dest = corpus["tmp"] / "d"
    real = dirs.folders_locked

    @contextlib.contextmanager
    def other_run_swaps_first(folders):
        if folders == [dest.parent] and list(dest.parent.glob("d.tmp-*/manifest.json")):  # this run's swap
            dest.mkdir(exist_ok=True)
            (dest / "manifest.json").write_text('{"files": []}\n')  # the other run's
        with real(folders):
            yield

    monkeypatch.setattr(dirs, "folders_locked", other_run_swaps_first)
    with pytest.raises(OutputExistsError, match="not empty; use --force"):
        preprocess.run(_config(corpus, dest))
    assert os.listdir(dest) == ["manifest.json"] and (dest / "manifest.json").read_text() == '{"files": []}\n'
    _no_leftovers(corpus["tmp"])


def test_empty_existing_dest_is_fine(corpus):
    dest = corpus["tmp"] / "d"
    dest.mkdir()
    preprocess.run(_config(corpus, dest))
    assert (dest / "manifest.json").exists()


def test_unknown_option_is_rejected(corpus):
    proc = run_cli(["preprocess", *_base_args(corpus, corpus["tmp"] / "d") + ["--bpe-mergez", "10"]], process=True)
    assert proc.code != 0 and "Traceback" not in proc.err
    assert "No such option" in proc.err and "--bpe-mergez" in proc.err
    assert not (corpus["tmp"] / "d").exists()


@pytest.mark.parametrize("kw,match", [
    ({"lowercase": True, "truecase": True}, "exclude each other"),
    ({"tgt_lang": "en"}, "must differ"),
    ({"bpe": None, "bpe_separate": True}, "^--bpe-separate needs --bpe MERGES"),
    ({"bpe": None, "bpe_min_frequency": 3}, "^--bpe-min-frequency needs --bpe MERGES"),  # was ignored
    ({"bpe": None, "bpe_vocab_threshold": 5, "bpe_min_frequency": 1}, "^--bpe-vocab-threshold and "
                                                                      "--bpe-min-frequency need --bpe"),
    ({"max_len": 0}, "--max-len"),
    ({"src_vocab_size": 3}, "--src-vocab-size"),
    ({"vocab_min_count": 0}, "--vocab-min-count"),
    ({"workers": 0}, "--workers"),
    ({"input_format": "bpe"}, "--input-format"),
])
def test_inconsistent_options_are_config_errors(corpus, kw, match):
    with pytest.raises(ConfigError, match=match):
        preprocess.run(_config(corpus, corpus["tmp"] / "d", **kw))


def test_a_dev_set_of_blank_lines_is_refused_before_training_data_is_read(corpus):
    """train refuses a dev set without sentences; preprocess wrote it, exit 0, after its whole
    pass over the training data."""
    blank = _write(corpus["tmp"] / "blank", ["", "  ", "\t", "\u200b\u00ad"], ["x", "", "y", "z"])
    dest = corpus["tmp"] / "d"
    with pytest.raises(InputError, match=r"blank\.en: the valid split's 4 lines hold no word"):
        preprocess.run(_config(corpus, dest, valid=blank))
    assert not dest.exists()
    one = _write(corpus["tmp"] / "one", ["", "a cat"], ["", "un chat"])  # one sentence is enough
    assert preprocess.run(_config(corpus, dest, valid=one))["splits"]["valid"]["lines"] == 2


def test_library_errors_are_typed(corpus):
    dest = corpus["tmp"] / "d"
    dest.mkdir()
    (dest / "manifest.json").write_text('{"files": []}')  # its own file: replaced with force (a foreign one never)
    with pytest.raises(OutputExistsError):
        preprocess.run(_config(corpus, dest))
    with pytest.raises(InputError, match="file not found"):
        preprocess.run(_config(corpus, corpus["tmp"] / "e", train=str(corpus["tmp"] / "missing")))


def test_help_documents_every_option():
    code, out, _ = run_cli(["preprocess", "--help"])
    assert code == 0
    cmd = cli_command("preprocess")
    for param in cmd.params:
        if param.name == "help":
            continue
        assert param.help, param.name
        assert param.opts[0] in out


def test_split_writer_streams_across_block_boundaries_into_the_binarized_format(tmp_path):
    from nmtkit.data.binarized import BinarizedText, SplitWriter

    rng = np.random.default_rng(0)
    w = SplitWriter(tmp_path, tmp_path, "train", "en")
    w.BLOCK = 3  # force many blocks
    sents, words = [], []
    for _ in range(9):
        lens = rng.integers(0, 6, size=5)
        ids = [rng.integers(0, 1000, size=int(n)).astype(np.int32) for n in lens]
        sents += ids
        words += [int(n) - (n > 1) for n in lens]  # fewer words than ids where BPE would have split one
        w.add(np.concatenate(ids), lens, np.asarray(words[-5:]))
    w.close()
    text = BinarizedText(tmp_path, "train", "en")
    assert len(text) == len(sents)
    assert all(np.array_equal(text[k], s) for k, s in enumerate(sents))
    assert text.word_lengths.tolist() == words
    assert not list(tmp_path.glob("*.raw"))


def test_unwritable_dest_is_one_clean_error(corpus):
    """A --dest below a file: one line naming the file (it said 'cannot create the data
    directory here: File exists', after reading every input)."""
    blocker = corpus["tmp"] / "a-file"
    blocker.write_text("not a directory")
    proc = run_cli(["preprocess", *_base_args(corpus, blocker / "sub" / "d")])
    _assert_clean_failure(proc, f"{blocker} is a file, not a folder")
    _no_leftovers(corpus["tmp"])


def test_bpe_on_a_corpus_where_no_pair_repeats_learns_no_merges_and_splits_into_characters(tmp_path):
    """subword-nmt cannot load codes without merges (it printed its error and exited the
    command); such codes now segment every word into characters, and the summary says how
    many merges were learned."""
    en, fr = ["ab"], ["cd"]
    train, valid = _write(tmp_path / "train", en, fr), _write(tmp_path / "valid", en, fr)
    r = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", train, "--valid", valid,
                 "--bpe", "100", "--dest", str(tmp_path / "d")])
    assert r.code == 0, r.err
    assert "BPE 0 of 100 merges" in r.out + r.err
    p = TextPipeline.from_dict(json.loads((tmp_path / "d" / "manifest.json").read_text())["pipeline"])
    assert p.encode("ab", "src") == ["a@@", "b"]


def test_summary_of_separate_bpe_that_stops_at_different_counts_names_each_side(tmp_path):
    """With --bpe-separate each language may run out of pairs at another count: the summary said
    the smaller one ("BPE 1 of 100 merges") as if both sides had learned it."""
    en, fr = ["ab ab"], ["cdcd cdcd"]  # en: 1 merge; fr: 3
    train, valid = _write(tmp_path / "train", en, fr), _write(tmp_path / "valid", en, fr)
    r = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", train, "--valid", valid,
                 "--bpe", "100", "--bpe-separate", "--dest", str(tmp_path / "d")])
    assert r.code == 0, r.err
    learned = json.loads((tmp_path / "d" / "manifest.json").read_text())["bpe"]["merges_learned"]
    assert learned == {"src": 1, "tgt": 3}
    assert "BPE 1 en / 3 fr of 100 merges, separate" in r.out + r.err


def test_a_held_out_split_with_the_training_text_is_warned_about(tmp_path):
    """--valid or --test holding the very text of --train (the same prefix, or a copy) was taken
    silently: validation and test scores then measured the training data."""
    en, fr = _corpus(30)
    train, copy = _write(tmp_path / "train", en, fr), _write(tmp_path / "copy", en, fr)
    other = _write(tmp_path / "other", *_corpus(10, offset=50))
    r = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", train, "--valid", copy,
                 "--test", other, "--test", train, "--dest", str(tmp_path / "d")])
    assert r.code == 0, r.err
    warned = [line for line in r.err.splitlines() if "the same text as --train" in line]
    assert [w.split(": the ")[1].split()[0] for w in warned] == ["valid", "test1"], r.err
    assert warned[0].startswith(f"nmtkit: warning: {copy}.en:")


def test_a_test_split_that_is_the_dev_text_and_a_train_split_smaller_than_dev_are_warned_about(tmp_path):
    """--train DEV --valid TRAIN (swapped) and --test the --valid text were built in silence: the
    model then trained on the dev set, and the test scores measured the text checkpoints were chosen on."""
    small, big = _write(tmp_path / "small", *_corpus(10, offset=50)), _write(tmp_path / "big", *_corpus(30))
    r = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", small, "--valid", big,
                 "--test", big, "--dest", str(tmp_path / "d")])
    warned = [line for line in r.err.splitlines() if "warning" in line]
    assert r.code == 0 and warned == [
        f"nmtkit: warning: {big}.en: the test split is the same text as --valid ({big}): its scores measure the dev "
        "data checkpoint_best.pt is chosen on, not held-out text (held-out splits are never compared with valid)",
        f"nmtkit: warning: {small}.en: --train has 10 lines, fewer than --valid's 30: are --train and --valid the "
        "wrong way round?"], r.err
    r = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", big, "--valid", small,
                 "--test", str(tmp_path / "small"), "--dest", str(tmp_path / "d2")])  # the same text, re-read
    assert r.code == 0 and "the same text as --valid" in r.err and "wrong way round" not in r.err, r.err


def test_the_text_of_a_control_token_in_a_corpus_is_an_unknown_word_not_padding_or_a_sentence_end(tmp_path):
    """Tokenised input can carry "<s>", "</s>" and "<pad>" as words: they used to be stored as
    the control ids, a sentence end or padding in the middle of a training sentence."""
    en, fr = _corpus(30)
    en[0] = "the </s> cat <pad> sat <s> on <unk> the mat"
    fr[0] = "le </s> chat <s> assis"
    c = {"train": _write(tmp_path / "train", en, fr), "valid": _write(tmp_path / "valid", *_corpus(5, offset=50))}
    preprocess.run(_config(c | {"test": None}, tmp_path / "d", test=(), bpe=None, input_format="tok", max_len=50))
    src, tgt = _decoded(tmp_path / "d", "train")
    first = [i for i, s in enumerate(src) if "cat" in s and "mat" in s and len(s) == 10]
    assert len(first) == 1, src[:3]
    assert src[first[0]] == ["the", UNK, "cat", UNK, "sat", UNK, "on", UNK, "the", "mat"]
    assert tgt[first[0]] == ["le", UNK, "chat", UNK, "assis"]
    assert Vocab(list(SPECIALS) + ["a"]).encode(["</s>", "<pad>", "<s>", "<unk>", "a"]) == [1, 1, 1, 1, 4]


def test_a_vocabulary_min_count_above_every_token_is_refused_naming_the_most_frequent_count(corpus):
    """It wrote vocabularies of the special symbols only: every token <unk>, and exit status 0."""
    dest = corpus["tmp"] / "d"
    proc = run_cli(["preprocess", *_base_args(corpus, dest), "--vocab-min-count", "1000000"])
    _assert_clean_failure(proc, "--vocab-min-count 1000000 is above the count of every en token")
    assert not dest.exists()
    _no_leftovers(corpus["tmp"])


@pytest.mark.parametrize("n", [0, 1, 6, 7, 8, 9, 23])
def test_value_range_equals_min_and_max_across_block_edges(n):
    from nmtkit.data.binarized import value_range

    values = np.random.default_rng(n).integers(-50, 50, size=n)
    want = (int(values.min()), int(values.max())) if n else (0, -1)
    assert value_range(values, block=4) == want
    assert value_range(values) == want


@pytest.mark.parametrize("lowercase", [False, True], ids=["cased", "lowercase"])
def test_dev_bleu_references_are_the_raw_dev_text_from_any_folder_and_cased_as_the_model_writes(
        corpus, tmp_path, monkeypatch, lowercase):
    """Preprocessed with relative paths, the raw references were found only from the folder
    preprocess ran in (elsewhere BLEU silently scored against the binarised text); and with
    --lowercase, the model's lowercase output was scored against the cased text."""
    from nmtkit.train.data import DataDir

    monkeypatch.chdir(corpus["tmp"])
    c = {**corpus, "train": "train", "valid": "valid", "test": "test"}
    preprocess.run(_config(c, tmp_path / "data", lowercase=lowercase))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    fr = (corpus["tmp"] / "valid.fr").read_text(encoding="utf-8").splitlines()
    assert DataDir.open(tmp_path / "data").raw_references("valid") == ([x.lower() for x in fr] if lowercase else fr)


def test_bped_text_given_with_bpe_is_warned_about_as_split_twice(tmp_path):
    """subword-nmt's output ("out@@ live") with --input-format tok --bpe was split again without a word
    ("ou@@ t@@ li@@ ve"), its training segmentation unlike what translate makes of raw text; without
    --bpe it is the supported text BPE'd before preprocess."""
    en = [f"he may out{c}@@ live you ." for c in "abcdefghijklmnopqrstuvwxyz"]
    fr = [f"il peut vous sur{c}@@ vivre ." for c in "abcdefghijklmnopqrstuvwxyz"]
    train = _write(tmp_path / "bpe", en, fr)
    for bpe, warned in ((["--bpe", "20"], [f"{train}.en", f"{train}.fr"]), ([], [])):
        r = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", train, "--valid", train,
                     "--input-format", "tok", "--dest", str(tmp_path / "d"), "--force", *bpe])
        assert r.code == 0, r.err
        lines = [line for line in r.err.splitlines() if "already split by BPE" in line]
        assert [line.split(": ")[2] for line in lines] == warned, r.err
        assert all("26 distinct words end in '@@'" in line for line in lines)


def test_a_tokenised_corpus_with_tokenizer_perls_xml_escapes_is_warned_about(tmp_path):
    """tokenizer.perl's output (without -no-escape: "&quot;", "&apos;s", as in OpenNMT-py's toy data) was
    taken silently by --input-format tok: the vocabulary learned "&quot;", while translate tokenises raw
    text without escapes, so every " ' & of its input missed those words."""
    en, fr = ["&quot; Hi &quot; , he said .", "It &apos;s fine ."], ["&quot; Salut &quot; , dit-il .", "C' est bien ."]
    escaped, plain = _write(tmp_path / "esc", en, fr), _write(tmp_path / "plain", ["It 's fine ."], ["C' est bien ."])
    for train, warned in ((escaped, [f"{escaped}.en", f"{escaped}.fr"]), (plain, [])):
        r = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", train, "--valid", plain,
                     "--input-format", "tok", "--dest", str(tmp_path / "d"), "--force"])
        assert r.code == 0, r.err
        lines = [line for line in r.err.splitlines() if "XML escapes" in line]
        assert [line.split(": ")[2] for line in lines] == warned, r.err
        assert all("the words &quot; are tokenizer.perl's" in line for line in lines)
