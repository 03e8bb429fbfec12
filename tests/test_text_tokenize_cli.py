"""`nmtkit tokenize`: the recipes' one-off tokeniser agrees with preprocess's tokenize and rejects
bad input with one line naming file and line, writing nothing."""
from __future__ import annotations

import pytest

from nmtkit.text.moses import tokenize
from tests.conftest import run_cli

LINES = ['Hello, "world" -- it\'s 3.5 km!', "", "Une phrase à l'essai."]


def test_file_to_file_equals_moses_tokenize_line_for_line(tmp_path):
    src, out = tmp_path / "in.fr", tmp_path / "out.fr"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    proc = run_cli(["tokenize", "--lang", "fr", "-i", str(src), "-o", str(out), "--workers", "2"])
    assert proc.code == 0, proc.err
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == [" ".join(tokenize(x, "fr")) for x in LINES]


def test_invalid_utf8_in_a_file_names_file_and_line_and_writes_nothing(tmp_path):
    src, out = tmp_path / "in.en", tmp_path / "out.en"
    src.write_bytes(b"fine\nbad \xff byte\n")
    proc = run_cli(["tokenize", "--lang", "en", "-i", str(src), "-o", str(out)])
    err = proc.err
    assert proc.code == 1 and f"{src}:2:" in err and "invalid UTF-8" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == [src]


def test_invalid_utf8_on_stdin_names_the_line():
    proc = run_cli(["tokenize", "--lang", "en"], b"fine\nbad \xff\n")
    assert proc.code == 1 and "<stdin>:2: invalid UTF-8" in proc.err


def test_missing_input_file_is_one_clear_line(tmp_path):
    proc = run_cli(["tokenize", "--lang", "en", "-i", str(tmp_path / "nope.en")])
    err = proc.err
    assert proc.code == 1 and "nope.en" in err and "not found" in err and "Traceback" not in err


# ---- the tokeniser's record, and preprocess --input-format tok checking it ---------------------
EN = ["A well-known man's car.", "The X-ray was clear, wasn't it?", "Mr. Smith-Jones arrived."]
FR = ["La voiture d'un homme bien connu.", "La radio était nette, non ?", "M. Smith-Jones est arrivé."]


def _tokenise_corpus(tmp_path, *flags: str) -> str:
    """train/valid en-fr files tokenised by the tool (in this process) with `flags`; the prefix."""
    for split in ("train", "valid"):
        for lang, lines in (("en", EN), ("fr", FR)):
            raw = tmp_path / f"raw-{split}.{lang}"
            raw.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
            code, _, err = run_cli(["tokenize", "--lang", lang, "-i", str(raw), "-o",
                                    str(tmp_path / f"tok-{split}.{lang}"), "--workers", "1", *flags])
            assert code == 0, err
    return str(tmp_path / "tok")


def _tok_config(tmp_path, prefix: str, **kw):
    from nmtkit.preprocess import PreprocessConfig

    args = dict(src_lang="en", tgt_lang="fr", train=prefix + "-train", valid=prefix + "-valid",
                dest=str(tmp_path / "data"), input_format="tok", workers=1)
    return PreprocessConfig(**{**args, **kw})


def test_output_records_the_settings_it_tokenised_with(tmp_path):
    import json

    _tokenise_corpus(tmp_path, "--lowercase", "--aggressive-dash-splits")
    info = json.loads((tmp_path / "tok-train.fr.tokinfo.json").read_text(encoding="utf-8"))
    assert info == {"tool": "nmtkit tokenize", "lang": "fr", "nfc": True, "normalize_punct": True,
                    "remove_non_printing": True,
                    "aggressive_dash_splits": True, "lowercase": True, "protected_patterns": []}


def test_preprocess_refuses_tok_input_made_with_flags_it_was_not_given(tmp_path):
    from nmtkit import preprocess
    from nmtkit.errors import ConfigError

    prefix = _tokenise_corpus(tmp_path, "--lowercase", "--aggressive-dash-splits")
    with pytest.raises(ConfigError) as err:
        preprocess.run(_tok_config(tmp_path, prefix))
    msg = str(err.value)
    assert "tok-train.en" in msg and "lowercase=True there, False here" in msg and "aggressive_dash_splits" in msg
    assert not (tmp_path / "data").exists()
    # French tokenised with the English rules (--lang en): refused too
    (tmp_path / "tok-valid.fr.tokinfo.json").write_bytes((tmp_path / "tok-valid.en.tokinfo.json").read_bytes())
    with pytest.raises(ConfigError, match="tok-valid.fr: tokenised as language 'en'"):
        preprocess.run(_tok_config(tmp_path, prefix, lowercase=True, aggressive_dash_splits=True))


def test_a_gz_files_own_record_comes_first_and_patterns_are_compared_only_when_asked(tmp_path):
    """FILE.gz.tokinfo.json, where there is one, is FILE.gz's record (FILE.tokinfo.json only without it);
    select-data, which has no --protect, passes protect=False and takes a record with patterns."""
    import json

    from nmtkit.errors import ConfigError
    from nmtkit.text.pipeline import TextPipeline
    from nmtkit.text.tokenize import check_tokinfo, tokinfo, tokinfo_path

    path = str(tmp_path / "c.en.gz")
    (tmp_path / "c.en.tokinfo.json").write_text("{}")
    assert tokinfo_path(path) == str(tmp_path / "c.en.tokinfo.json")
    (tmp_path / "c.en.gz.tokinfo.json").write_text(json.dumps(tokinfo(TextPipeline("en", "en", protected_patterns=("a+",)))))
    assert tokinfo_path(path) == path + ".tokinfo.json"
    assert check_tokinfo(path, "en", TextPipeline("en", "en"), protect=False)
    with pytest.raises(ConfigError, match="1 protected patterns there, 0 here"):
        check_tokinfo(path, "en", TextPipeline("en", "en"))


def test_text_tokenised_with_its_case_may_be_lowercased_by_preprocess(tmp_path):
    """The records' lowercasing was compared both ways, so preprocess --lowercase refused text
    that kept its case (and, once select-data passed records on, its selections): translate
    then tokenises and lowercases, as preprocess does."""
    import json

    from nmtkit import preprocess
    from nmtkit.text.pipeline import TextPipeline

    prefix = _tokenise_corpus(tmp_path)
    preprocess.run(_tok_config(tmp_path, prefix, lowercase=True))
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text(encoding="utf-8"))
    replay = TextPipeline.from_dict(manifest["pipeline"])
    assert replay.lowercase and replay.case(replay.tokenize(EN[0], "src"), "src") == replay.encode(EN[0], "src")


def test_tokeniser_flags_given_to_preprocess_too_are_replayed_at_translate_time(tmp_path):
    import json

    from nmtkit import preprocess
    from nmtkit.text.pipeline import TextPipeline

    prefix = _tokenise_corpus(tmp_path, "--lowercase", "--aggressive-dash-splits")
    preprocess.run(_tok_config(tmp_path, prefix, lowercase=True, aggressive_dash_splits=True))
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text(encoding="utf-8"))
    replay = TextPipeline.from_dict(manifest["pipeline"])  # what translate applies to raw input
    tokenised = (tmp_path / "tok-train.en").read_text(encoding="utf-8").splitlines()
    assert [" ".join(replay.encode(x, "src")) for x in EN] == tokenised
    assert "@-@" in tokenised[0] and tokenised[0].startswith("a ")


def test_stdin_to_stdout_and_the_normalisation_switch_agree_with_the_pipeline():
    from nmtkit.text.pipeline import TextPipeline

    line = "Il a dit « oui »  !"
    for flags, normalize in (([], True), (["--no-normalize-punct"], False)):
        proc = run_cli(["tokenize", "--lang", "fr", "--workers", "1", *flags], (line + "\n").encode())
        assert proc.code == 0, proc.err
        want = " ".join(TextPipeline("fr", "fr", normalize_punct=normalize).tokenize(line, "src"))
        assert proc.out == want + "\n"


@pytest.mark.parametrize("workers", ["0", "100000"])  # 100,000 was a fork storm that never ended
def test_workers_out_of_range_are_refused_with_one_line(workers):
    proc = run_cli(["tokenize", "--lang", "en", "--workers", workers], b"x\n")
    err = proc.err
    assert proc.code != 0 and f"--workers must be in [1, 256], got {workers}" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("damage, needle", [
    ("truncated", "ended before the end-of-stream marker"),
    ("corrupt", "Error -3 while decompressing"),
    ("not-gzip", "Not a gzipped file"),
])
def test_a_damaged_gz_input_is_one_line_naming_it_and_writes_nothing(tmp_path, damage, needle):
    """gzip's errors surface while the lines stream: an EOFError (which read as Ctrl-C), a
    zlib.error traceback, or an OSError without a file name that named the output."""
    import gzip

    whole = gzip.compress(("\n".join(f"Line {i} of a corpus, with words." for i in range(2000)) + "\n").encode())
    data = {"truncated": whole[: len(whole) // 2], "not-gzip": b"plain text\n",
            "corrupt": whole[:200] + bytes(40) + whole[240:]}[damage]
    src, out = tmp_path / "in.en.gz", tmp_path / "out.en"
    src.write_bytes(data)
    proc = run_cli(["tokenize", "--lang", "en", "-i", str(src), "-o", str(out), "--workers", "1"])
    assert proc.code == 1, proc.err
    [line] = proc.err.strip().splitlines()
    assert line.startswith(f"nmtkit: error: {src}: cannot read (corrupt or truncated gzip?)") and needle in line, line
    assert list(tmp_path.iterdir()) == [src]


def test_a_pipe_is_read_as_a_file_is(tmp_path):
    """bash's <(cmd) is a pipe: tokenize reads its input once, so it takes one."""
    import os
    import threading

    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    threading.Thread(target=lambda: fifo.write_text("Hello, world!\n"), daemon=True).start()
    proc = run_cli(["tokenize", "--lang", "en", "-i", str(fifo)])
    assert proc.code == 0, proc.err
    assert proc.out == "Hello , world !\n"


def test_an_output_whose_reader_goes_away_ends_as_stdout_does_or_one_line_naming_it(tmp_path):
    """`-o /dev/stdout | head -n 1` ended with status 1 and not a word, where `-o - | head -n 1`
    ends with 0; `-o FIFO` whose reader went away ended with status 1 and not a word either
    (click turns any EPIPE into that)."""
    import os
    import subprocess
    import sys
    import threading

    from tests.conftest import REPO

    big = tmp_path / "big.en"
    big.write_text("Hello, world!\n" * 20000)  # more than a pipe holds
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    cmd = f"{sys.executable} -m nmtkit tokenize --lang en --workers 1 -i {big} -o /dev/stdout | head -n 1"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "Hello , world !\n", "")
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)

    def read_a_little() -> None:
        with open(fifo, "rb") as f:
            f.read(5)

    threading.Thread(target=read_a_little, daemon=True).start()
    proc = run_cli(["tokenize", "--lang", "en", "--workers", "1", "-i", str(big), "-o", str(fifo)], process=True)
    assert proc.code == 1
    assert proc.err.strip().splitlines() == [f"nmtkit: error: {fifo}: Broken pipe (its reader went away before the end)"]


@pytest.mark.parametrize("case, needle", [
    ("output-is-a-folder", "the -o output is a directory"),  # wrote FOLDER.tokinfo.json, then failed
    ("output-folder-missing", "its folder does not exist"),  # named the internal temp file
    ("empty-input-name", "-i '' names no file"),  # read stdin: an unset variable tokenised nothing
])
def test_bad_tokenize_paths_are_one_line_before_any_work_and_write_nothing(tmp_path, case, needle):
    src = tmp_path / "in.en"
    src.write_text("Hello, world!\n")
    (tmp_path / "folder.tok").mkdir()
    argv = {"output-is-a-folder": ["-i", str(src), "-o", str(tmp_path / "folder.tok")],
            "output-folder-missing": ["-i", str(src), "-o", str(tmp_path / "nodir" / "x.tok")],
            "empty-input-name": ["-i", "", "-o", str(tmp_path / "x.tok")]}[case]
    proc = run_cli(["tokenize", "--lang", "en", *argv], "stdin text\n")
    assert proc.code != 0
    [line] = proc.err.strip().splitlines()
    assert line.startswith("nmtkit: error: ") and needle in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.tok", "in.en"]


def test_a_tokeniser_record_of_another_nmtkit_is_refused_with_what_to_rerun(tmp_path):
    """A record written before the nfc and non-printing steps existed lacks their settings: one
    line naming the record and the command to re-run, whatever flags preprocess is given."""
    import json

    from nmtkit import preprocess
    from nmtkit.errors import InputError

    prefix = _tokenise_corpus(tmp_path)
    for split in ("train", "valid"):
        for lang in ("en", "fr"):
            record = tmp_path / f"tok-{split}.{lang}.tokinfo.json"
            info = json.loads(record.read_text(encoding="utf-8"))
            del info["nfc"], info["remove_non_printing"]  # as the tokeniser wrote it before the steps existed
            record.write_text(json.dumps(info), encoding="utf-8")
    for flags in ({}, dict(nfc=False, remove_non_printing=False)):
        with pytest.raises(InputError) as err:
            preprocess.run(_tok_config(tmp_path, prefix, **flags))
        line = str(err.value)
        assert "\n" not in line and "tokinfo.json" in line and "lacks ['nfc', 'remove_non_printing']" in line
        assert line.endswith("re-run 'nmtkit tokenize'")


_FULL = ('"lang": "en", "nfc": true, "normalize_punct": true, "remove_non_printing": true, '
         '"aggressive_dash_splits": false, "lowercase": false')


@pytest.mark.parametrize("record, needle", [
    ("[]", "not a tokeniser record"),
    ('{"lang": "en", "protected_patterns": 5}', "not a tokeniser record"),
    # settings missing or mistyped: the messages were "language 'None'" or "lowercase=None there" with flags to give
    ('{"tool": "nmtkit tokenize"}', r"lacks \['lang', 'nfc', 'normalize_punct', 'remove_non_printing', "
                                    r"'aggressive_dash_splits', 'lowercase'\]"),
    ('{"lang": "en"}', r"lacks \['nfc', 'normalize_punct', 'remove_non_printing', 'aggressive_dash_splits', "
                       r"'lowercase'\]"),
    ("{" + _FULL.replace('"lowercase": false', '"lowercase": "no"') + "}", "settings of the wrong type"),
    ("{" + _FULL.replace('"en"', "7") + "}", "settings of the wrong type"),
])
def test_a_damaged_tokeniser_record_is_one_line_naming_it(tmp_path, record, needle):
    from nmtkit.errors import InputError
    from nmtkit.text.pipeline import TextPipeline
    from nmtkit.text.tokenize import check_tokinfo

    tok = tmp_path / "tok.en"
    tok.write_text("a b\n", encoding="utf-8")
    (tmp_path / "tok.en.tokinfo.json").write_text(record, encoding="utf-8")
    with pytest.raises(InputError, match=needle) as err:
        check_tokinfo(str(tok), "en", TextPipeline("en", "fr"))
    assert "tok.en.tokinfo.json" in str(err.value) and "\n" not in str(err.value)


# Ctrl-C arriving while the tokenised text is synced to disk, at the end of the run
_CTRL_C_IN_THE_OUTPUTS_SYNC = """
import os, signal, sys
from nmtkit.cli import main
real = os.fsync
def fsync(fd):
    real(fd)
    if os.fstat(fd).st_size > 1000:  # the text, not its small record
        os.kill(os.getpid(), signal.SIGINT)
os.fsync = fsync
main(sys.argv[1:])
"""


@pytest.mark.parametrize("old", [False, True], ids=["new", "over-an-old-output"])
def test_ctrl_c_as_the_output_is_committed_never_leaves_a_record_without_its_text(tmp_path, old):
    """The .tokinfo.json record was renamed into place before the text: Ctrl-C between the two
    left a record beside no text, or beside the old text it does not describe (which preprocess
    and select-data then trust). Now both are committed together with the signal held."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    src, out = tmp_path / "in.en", tmp_path / "out.tok"
    src.write_text("The Cat sat on the mat .\n" * 200, encoding="utf-8")
    argv = ["tokenize", "--lang", "en", "-i", str(src), "-o", str(out), "--workers", "1", "--force"]
    if old:
        assert run_cli([*argv, "--lowercase"]).code == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    proc = subprocess.run([sys.executable, "-c", _CTRL_C_IN_THE_OUTPUTS_SYNC, *argv], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(after) == sorted(["in.en", "out.tok", "out.tok.tokinfo.json"])
    assert (after["out.tok"] == before.get("out.tok")) == (after["out.tok.tokinfo.json"] == before.get("out.tok.tokinfo.json"))
