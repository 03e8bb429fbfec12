"""Bounded on every input: no line or pattern makes a command grow without limit in time or memory.

Each resource case runs the real command in a child process under a memory limit
(`resource.setrlimit(RLIMIT_AS)`) and a time limit, and shows the bounded behaviour: the work is done
within them, or refused with one line naming the file and line.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import load_translator, make_checkpoint, run_cli

REPO = Path(__file__).resolve().parent.parent


def _bounded(argv: list[str], *, mem_gb: float, seconds: float, stdin: bytes = b"",
             cpu_seconds: int | None = None) -> subprocess.CompletedProcess:
    """`python -m nmtkit ARGV` with at most `mem_gb` GiB of address space, killed past `seconds`
    (wall) or past `cpu_seconds` of CPU time: the bound to use where the time is the property, so
    that a loaded machine does not fail it."""
    limit = int(mem_gb * 2**30)

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if cpu_seconds is not None:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, "-m", "nmtkit", *argv], input=stdin, capture_output=True, env=env,
                          cwd=REPO, timeout=seconds, preexec_fn=limits)


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    err = proc.stderr.decode("utf-8", "replace")
    lines = [x for x in err.strip().splitlines() if not x.startswith("nmtkit: warning")]
    assert proc.returncode not in (0, -9), err
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("nmtkit: error: "), err
    return lines[0]


def test_ter_refuses_a_line_past_its_bound_with_one_line_naming_the_file_and_line(tmp_path):
    words = " ".join(f"w{i % 977}" for i in range(60_000))  # ~400 KB: TER's shift search would take hours
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("a short line\n" + words + "\n")
    ref.write_text("a short line\n" + words[::-1] + "\n")
    proc = _bounded(["score", "--hyp", str(hyp), "--ref", str(ref)], mem_gb=2, seconds=60)
    line = _one_error_line(proc)
    assert "hyp.txt:2:" in line and "--metrics" in line, line


def test_bleu_and_chrf_still_score_a_line_past_ters_bound(tmp_path):
    words = " ".join(f"w{i % 977}" for i in range(60_000))
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text(words + "\n")
    ref.write_text(words + "\n")
    proc = _bounded(["score", "--hyp", str(hyp), "--ref", str(ref), "--metrics", "bleu,chrf"], mem_gb=2, seconds=60)
    assert proc.returncode == 0, proc.stderr
    assert b"BLEU" in proc.stdout


def test_score_refuses_a_line_past_its_bound_in_characters_with_one_line_naming_the_file_and_line(tmp_path):
    """chrF holds up to ~1 KB of n-grams a character of one line, BLEU ~200 bytes: a 3 MB line took
    2.1 GB, and under 1 GB it ran out of memory after 15 s, naming no file or line."""
    import random

    text = "".join(random.Random(0).choices("abcdefghijklmnopqrstuvwxyz   ", k=3_000_000))
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("a short line\n" + text + "\n")
    ref.write_text("a short line\n" + text[::-1] + "\n")
    proc = _bounded(["score", "--hyp", str(hyp), "--ref", str(ref), "--metrics", "bleu,chrf"], mem_gb=1, seconds=60)
    line = _one_error_line(proc)
    assert "hyp.txt:2: 3,000,000 characters, past the 1,000,000" in line and "segments" in line, line


def test_score_holds_the_reference_ngrams_of_a_chunk_of_lines_not_of_the_whole_corpus(tmp_path):
    """sacrebleu keeps every reference line's n-grams until the corpus is scored (~50 KB a line
    of 150 characters for chrF): 12,000 lines took 700 MB, a million ~30 GB."""
    import random

    rng = random.Random(0)
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    for path in (hyp, ref):
        path.write_text("".join(" ".join(f"w{rng.randrange(10**6)}" for _ in range(20)) + "\n" for _ in range(12_000)))
    proc = _bounded(["score", "--hyp", str(hyp), "--ref", str(ref), "--metrics", "chrf"], mem_gb=0.5, seconds=60)
    assert proc.returncode == 0 and b"chrF2 = 25.34 " in proc.stdout, proc.stderr


def test_scores_summed_a_chunk_at_a_time_are_sacrebleus_to_the_last_bit(monkeypatch):
    from nmtkit.score import metrics

    words = "le chat assis sur un tapis chien dans parc grand petit rouge maison".split()
    lines = [[" ".join(words[(i * k + j) % len(words)] for j in range(i % 9)) for i in range(50)] for k in (1, 2, 5)]
    monkeypatch.setattr(metrics, "SCORE_CHUNK_LINES", 7)
    for key in metrics.METRICS:
        for refs in (lines[1:2], lines[1:]):
            whole = metrics.make_metric(key).corpus_score(lines[0], refs)
            got = metrics.corpus_scores(lines[0], refs, [key])[0]
            assert (got.score, got.verbose) == (whole.score, whole._verbose), key


EVIL = r"(a|aa)+$"  # catastrophic backtracking: time doubles with each "a"


@pytest.mark.parametrize("others", [0, 500], ids=["alone", "among-500"])
def test_a_catastrophic_protect_pattern_cannot_hang_tokenize(tmp_path, others):
    """...and it is the pattern the error names, also when matched in one alternation with others."""
    pats = tmp_path / "evil.re"
    pats.write_text("".join(f"ID{i}-[0-9]+\n" for i in range(others)) + EVIL + "\n")
    src = tmp_path / "in.en"
    src.write_text("hello world\n" + "a" * 60 + "!\n")
    proc = _bounded(["tokenize", "--lang", "en", "--protect", str(pats), "-i", str(src), "-o", str(tmp_path / "o")],
                    mem_gb=4, seconds=60)
    line = _one_error_line(proc)
    assert "in.en:2: the protected pattern '(a|aa)+$'" in line, line
    assert not (tmp_path / "o").exists()


def test_a_checkpoint_with_a_catastrophic_protect_pattern_cannot_hang_translate(tmp_path):
    from nmtkit.text.pipeline import TextPipeline

    pipe = TextPipeline(src_lang="en", tgt_lang="fr", protected_patterns=(EVIL,))
    model = make_checkpoint(tmp_path / "m.pt", pipeline=pipe)
    proc = _bounded(["translate", "-m", str(model)], mem_gb=6, seconds=120, stdin=b"a" * 60 + b"!\n")
    line = _one_error_line(proc)
    assert "<stdin>:1: the protected pattern" in line, line


def test_protect_patterns_match_as_they_did_one_by_one(tmp_path):
    """Many patterns are matched as one engine's work; what they protect is what each protected."""
    from nmtkit.text.moses import tokenize

    patterns = (r"%\d+\$s", r"<[a-z]+/?>", r"https?://\S+", r"\d+(?:\.\d+)+")
    lines = ["see http://x.org/a?b=1 now", "one<br/>two %1$s and %2$s", "version 1.2.3 of 4.5", "plain text"]
    got = [tokenize(line, "en", protected_patterns=patterns) for line in lines]
    assert got[0] == ["see", "http://x.org/a?b=1", "now"]
    assert got[1][0] == "one<br/>two" and "%1$s" in got[1] and "%2$s" in got[1]
    assert "1.2.3" in got[2] and "4.5" in got[2]


def _one_by_one(patterns, line):
    """The distinct matches of each pattern alone, as tokenizer.perl finds them: the oracle."""
    import regex

    found = {m.group() for p in patterns for m in regex.finditer(p, line, regex.IGNORECASE | regex.VERSION0)}
    return sorted(found - {""}, key=len, reverse=True)


def test_protect_patterns_as_one_alternation_protect_what_each_protected_alone(monkeypatch):
    from nmtkit.text.moses import Protector, resolve_protect, tokenizer_fn

    patterns = resolve_protect(["basic", "url", "email", "xml", "printf"]) + (
        r"(a)\1b", r"(?P<n>q)(?P=n)", r"(c)(d)\2", "New York", "New York City", "York City Hall")
    lines = ["see http://x.org/a?b=1 or www.x.fr now", "<b class='x'>bold</b> and <br/>", "mail me@x.com, %1$s",
             "aab cdd qq ab cd", "%(name)s and %d items at https://a.b/c_d-e#f", "plain text, nothing here",
             "New York City's mayor, in New York, at York City Hall."]
    assert len(Protector(patterns).groups) == 1
    got = [tokenizer_fn("en", protected_patterns=patterns)(line) for line in lines]
    monkeypatch.setattr(Protector, "spans", lambda self, line: _one_by_one(patterns, line))
    assert got == [tokenizer_fn("en", protected_patterns=patterns)(line) for line in lines]
    assert "http://x.org/a?b=1" in got[0] and "me@x.com" in got[2]


def test_patterns_with_their_own_global_flags_are_matched_under_them():
    from nmtkit.text.moses import Protector

    protector = Protector([r"(?x) id \d+ ", r"a b"])
    assert len(protector.groups) == 2
    assert sorted(protector.spans("id42 and a b, not id 42")) == ["a b", "id42"]


def test_five_thousand_protect_patterns_tokenise_two_thousand_lines_within_the_time_limit(tmp_path):
    pats, src = tmp_path / "pats.re", tmp_path / "in.en"
    pats.write_text("".join(f"ID{i}![0-9]+\n" for i in range(5000)))
    src.write_text("".join(f"line {i} names ID{i * 7 % 6000}!42 among other words, as text does.\n"
                           for i in range(2000)))
    proc = _bounded(["tokenize", "--lang", "en", "--protect", str(pats), "-i", str(src), "-o", str(tmp_path / "o")],
                    mem_gb=4, seconds=120, cpu_seconds=10)  # one scan a line: ~1.5 s; a scan per pattern: ~18 s
    assert proc.returncode == 0, proc.stderr
    out = (tmp_path / "o").read_text().splitlines()
    assert out[7] == "line 7 names ID49!42 among other words , as text does ."
    assert out[857] == "line 857 names ID5999 ! 42 among other words , as text does ."  # past the patterns


def test_a_long_line_gets_time_in_proportion_not_blamed_on_a_pattern_that_does_not_backtrack():
    """The patterns above scan ~80,000 characters a second: a 300,000-character line was refused
    after 1 s, naming 'ID2600![0-9]+' as a pattern that "backtracks without end"."""
    from nmtkit.text.moses import Protector

    line = " ".join(f"word{i} ID{i}!{i}" for i in range(20_000))[:300_000]
    spans = Protector([f"ID{i}![0-9]+" for i in range(5000)]).spans(line)
    assert len(spans) == 5000 and "ID4999!4999" in spans


def test_a_lock_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path, data_dir):
    from tests.conftest import tiny_train_args

    run = tmp_path / "run"
    run.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run / "train.lock").symlink_to(victim)
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *tiny_train_args()])
    assert code != 0 and "train.lock" in err and "Traceback" not in err, err
    assert victim.read_text() == "precious\n"


def test_tokenize_keeps_an_existing_output_without_force(tmp_path):
    src, out = tmp_path / "in.en", tmp_path / "out.en"
    src.write_text("Hello, world!\n")
    out.write_text("keep me\n")
    code, _, err = run_cli(["tokenize", "--lang", "en", "-i", str(src), "-o", str(out)])
    assert code != 0 and "--force" in err and out.read_text() == "keep me\n", err
    code, _, err = run_cli(["tokenize", "--lang", "en", "-i", str(src), "-o", str(out), "--force"])
    assert code == 0 and out.read_text() == "Hello , world !\n", err


def test_tokenize_reads_dev_null_as_an_empty_input(tmp_path):
    out = tmp_path / "out.en"
    code, _, err = run_cli(["tokenize", "--lang", "en", "-i", "/dev/null", "-o", str(out)])
    assert code == 0 and out.read_text() == "", err


def test_a_protect_name_that_is_also_a_file_here_is_the_named_set_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "url").write_text("foo\n")
    src = tmp_path / "in.en"
    src.write_text("see www.x.org/a-b and foo-bar\n")
    out = tmp_path / "o"
    code, _, err = run_cli(["tokenize", "--lang", "en", "--aggressive-dash-splits", "--protect", "url", "-i", str(src),
                            "-o", str(out)])
    assert code == 0 and "./url" in err and "nmtkit: warning:" in err, err
    assert out.read_text() == "see www.x.org/a-b and foo @-@ bar\n"


def test_a_corpus_present_both_plain_and_gzipped_is_read_plain_with_a_warning_naming_both(tmp_path):
    import gzip

    for lang, text in (("en", "a cat\n"), ("fr", "un chat\n")):
        (tmp_path / f"amb.{lang}").write_text(text * 3)
        with gzip.open(tmp_path / f"amb.{lang}.gz", "wt") as f:
            f.write("something else entirely\n" * 3)
    code, _, err = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(tmp_path / "amb"),
                            "--valid", str(tmp_path / "amb"), "--dest", str(tmp_path / "d")])
    assert code == 0, err
    warned = [x for x in err.splitlines() if "amb.en and " in x and "amb.en.gz both exist: reading" in x]
    assert len(warned) == 1 and warned[0].startswith("nmtkit: warning: "), err
    # a second command in the same process warns again (once a command, not once a process)
    code, _, err = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(tmp_path / "amb"),
                            "--valid", str(tmp_path / "amb"), "--dest", str(tmp_path / "d"), "--force"])
    assert code == 0 and sum("amb.fr.gz both exist" in x for x in err.splitlines()) == 1, err


def test_the_same_pool_given_twice_is_refused(tmp_path):
    for name in ("in", "pool"):
        for lang, word in (("en", "cat"), ("fr", "chat")):
            (tmp_path / f"{name}.{lang}").write_text("".join(f"the {word} {name} {i}\n" for i in range(20)))
    pool = str(tmp_path / "pool")
    code, _, err = run_cli(["select-data", "--src-lang", "en", "--tgt-lang", "fr", "--in-domain", str(tmp_path / "in"),
                            "--pool", pool, "--pool", pool, "--output-prefix",
                            str(tmp_path / "sel"), "--lines", "5"])
    assert code == 2 and "selected twice" in err and "Traceback" not in err, err
    assert not list(tmp_path.glob("sel*"))


def test_average_refuses_two_files_of_one_update_and_a_kept_checkpoint_named_for_another(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    make_checkpoint(run / "checkpoint_4.pt", seed=1, trainer={"update": 4})
    make_checkpoint(run / "checkpoint_6.pt", seed=2, trainer={"update": 6})
    copy = tmp_path / "copy.pt"
    copy.write_bytes((run / "checkpoint_6.pt").read_bytes())
    code, _, err = run_cli(["average", "-m", str(run / "checkpoint_6.pt"), "-m", str(copy), "-o", str(tmp_path / "a.pt")])
    assert code != 0 and "copy.pt: holds update 6, as" in err and "twice" in err, err
    (run / "checkpoint_6.pt").rename(run / "checkpoint_9.pt")  # renamed: --last would trust the name
    code, _, err = run_cli(["average", "--last", "2", "--save-dir", str(run), "-o", str(tmp_path / "a.pt")])
    assert code != 0 and "checkpoint_9.pt: is named for update 9 but holds update 6" in err, err
    assert not (tmp_path / "a.pt").exists()


def test_average_never_writes_over_a_file_of_a_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    make_checkpoint(run / "checkpoint_last.pt", seed=1, trainer={"update": 4})
    (run / "metrics.jsonl").write_text('{"kind": "train"}\n')
    code, _, err = run_cli(["average", "-m", str(run / "checkpoint_last.pt"), "-o", str(run / "metrics.jsonl"),
                            "--force"])
    assert code != 0 and "metrics.jsonl: is a file of the training run in" in err, err
    assert (run / "metrics.jsonl").read_text() == '{"kind": "train"}\n'


@pytest.mark.parametrize("name", ["train.log", "metrics.jsonl", "checkpoint_last.pt"])
def test_a_run_file_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path, data_dir, name):
    from tests.conftest import tiny_train_args

    run = tmp_path / "run"
    run.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run / name).symlink_to(victim)
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *tiny_train_args(), "--force"])
    assert code != 0 and f"{name}: is a symbolic link" in err and "Traceback" not in err, err
    assert victim.read_text() == "precious\n"


def test_a_run_folder_holding_an_earlier_runs_files_but_no_checkpoint_needs_force(tmp_path, data_dir):
    from tests.conftest import tiny_train_args

    run = tmp_path / "run"
    run.mkdir()
    for name in ("metrics.jsonl", "train.log"):
        (run / name).write_text("an earlier run's\n")
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *tiny_train_args()])
    assert code != 0 and "saved no checkpoint" in err and "--force" in err, err
    # --resume said "start a new run without --resume", which is the start refused above
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *tiny_train_args(), "--resume"])
    assert code != 0 and "the run that wrote its metrics.jsonl, train.log saved no checkpoint: start it again with " \
        "--force" in err, err
    assert (run / "metrics.jsonl").read_text() == "an earlier run's\n"
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *tiny_train_args(), "--force",
                            "--max-updates", "1"])
    assert code == 0 and (run / "checkpoint_last.pt").exists(), err


def _evil_translator(tmp_path):
    from nmtkit.text.pipeline import TextPipeline
    pipe = TextPipeline(src_lang="en", tgt_lang="fr", protected_patterns=(EVIL,))
    model = make_checkpoint(tmp_path / "m.pt", pipeline=pipe)
    return load_translator(model, precision="fp32")[0]


def test_serve_answers_a_line_past_the_protect_bound_with_a_400_and_only_that_request_fails(tmp_path):
    import asyncio
    import json

    from aiohttp.test_utils import TestClient, TestServer

    from nmtkit.serve import Limits, ServeConfig
    from nmtkit.serve.app import make_app

    translator = _evil_translator(tmp_path)
    config = ServeConfig(limits=Limits(max_beam=2, max_lines=10, max_line_chars=200, max_body_bytes=4096))

    async def main():
        app = make_app(translator, config)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            async def post(lines):
                resp = await client.post("/translate", data=json.dumps({"text": lines}),
                                         headers={"Content-Type": "application/json"})
                return resp.status, await resp.text()
            return await asyncio.gather(post(["a" * 60 + "!"]), post(["the cat"]), post(["a dog"]))

    (bad_status, bad), (ok1, _), (ok2, _) = asyncio.run(main())
    assert bad_status == 400 and "the protected pattern" in json.loads(bad)["error"], bad
    assert ok1 == 200 and ok2 == 200


def test_a_carriage_return_inside_a_line_separates_words_in_translate_the_api_and_serve(tmp_path, ckpt):
    import nmtkit

    model = nmtkit.load(ckpt, precision="fp32")
    spaced = model.translate(["the cat sat"], beam=2)
    assert model.translate(["the cat\rsat"], beam=2) == spaced
    src = tmp_path / "in.en"
    src.write_bytes(b"the cat\rsat\n")
    code, out, err = run_cli(["translate", "-m", ckpt, "--beam", "2", "--precision", "fp32", "-i", str(src)])
    assert code == 0 and out.splitlines() == spaced, err
    from nmtkit.serve import Limits
    from nmtkit.serve.app import check_lines

    assert check_lines(["the cat\rsat"], "text", Limits()) == ("the cat\rsat",)


def test_an_update_freq_above_the_minibatches_of_an_epoch_is_warned_once(tmp_path, data_dir):
    from tests.conftest import tiny_train_args

    run = tmp_path / "run"
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *tiny_train_args(),
                            "--max-updates", "2", "--update-freq", "1000"])
    assert code == 0, err
    warnings = [x for x in err.splitlines() if "--update-freq 1000 is above the" in x]
    assert len(warnings) == 1 and warnings[0].startswith("nmtkit: warning: "), err


def test_one_very_long_dev_line_is_left_out_of_validation_within_bounded_memory(tmp_path):
    from tests.conftest import tiny_train_args

    en = ["the cat sat on a mat .", "a dog ran in the park", "the big red house", "cat and dog"] * 10
    fr = ["le chat assis sur un tapis .", "un chien courait dans le parc", "la grande maison rouge",
          "chat et chien"] * 10
    for lang, lines in (("en", en), ("fr", fr)):
        (tmp_path / f"train.{lang}").write_text("\n".join(lines) + "\n")
        long = " ".join(lines[:4]) + " "
        (tmp_path / f"dev.{lang}").write_text("\n".join(lines[:3] + [long * 4000]) + "\n")  # ~80k tokens
    code, _, err = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(tmp_path / "train"),
                            "--valid", str(tmp_path / "dev"), "--dest", str(tmp_path / "d"), "--quiet"])
    assert code == 0, err
    proc = _bounded(["train", "--data", str(tmp_path / "d"), "--save-dir", str(tmp_path / "run"), *tiny_train_args(),
                     "--max-updates", "2", "--valid-every", "1"], mem_gb=6, seconds=240)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "1 dev pairs have a side over 250 tokens: validation leaves them out" in err, err


@pytest.mark.parametrize("name", ["*", "http://mt.example.org", "", "mt.example.org:8080", "*.example.org"])
def test_an_allow_host_that_could_never_match_is_refused(name):
    from nmtkit.errors import ConfigError
    from nmtkit.serve import ServeConfig

    with pytest.raises(ConfigError, match="--allow-host"):
        ServeConfig(allow_hosts=(name,))
    assert ServeConfig(allow_hosts=("mt.example.org", "[::1]")).allow_hosts == ("mt.example.org", "[::1]")


def test_a_checkpoint_whose_path_is_not_utf8_is_read_by_translate(tmp_path):
    path = os.fsdecode(os.fsencode(str(tmp_path)) + b"/mod\xffel.pt")
    make_checkpoint(Path(path))
    code, out, err = run_cli(["translate", "-m", path, "--beam", "2"], "the cat\n")
    assert code == 0 and len(out.splitlines()) == 1, err


def test_select_data_refuses_an_in_domain_text_and_pool_tokenised_with_other_protected_patterns(tmp_path):
    for name, protect, word in (("in", ["--protect", "url"], "cat"), ("pool", [], "dog")):
        for lang in ("en", "fr"):
            raw = tmp_path / f"{name}.raw.{lang}"
            raw.write_text("".join(f"the {word} {i} www.x.org\n" for i in range(30)))
            code, _, err = run_cli(["tokenize", "--lang", lang, *protect, "-i", str(raw), "-o",
                                    str(tmp_path / f"{name}.{lang}")])
            assert code == 0, err
    code, _, err = run_cli(["select-data", "--src-lang", "en", "--tgt-lang", "fr", "--in-domain", str(tmp_path / "in"),
                            "--pool", str(tmp_path / "pool"), "--input-format", "tok", "--output-prefix",
                            str(tmp_path / "sel"), "--lines", "5"])
    assert code != 0 and "pool.en: tokenised with 0 protected patterns" in err and "same --protect" in err, err
    assert not list(tmp_path.glob("sel*"))


def test_serve_closes_silent_and_slow_header_connections_after_the_idle_timeout(tmp_path, ckpt):
    import asyncio
    import time

    from aiohttp import web

    from nmtkit.serve import Limits, ServeConfig
    from nmtkit.serve.app import make_app, make_runner
    translator = load_translator(ckpt, precision="fp32")[0]
    config = ServeConfig(idle_timeout=1.0, limits=Limits(max_beam=2))

    async def main():
        runner = make_runner(make_app(translator, config), config)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        try:
            conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
            for _, writer in conns[10:]:  # inside their headers, a byte now and then
                writer.write(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            t0 = time.monotonic()

            async def trickle(writer):
                for _ in range(20):
                    await asyncio.sleep(0.25)
                    if writer.is_closing():
                        return
                    try:
                        writer.write(b"X-Slow: 1\r\n")
                        await writer.drain()
                    except (ConnectionError, OSError):
                        return

            trickles = [asyncio.create_task(trickle(w)) for _, w in conns[10:]]
            closed = [await asyncio.wait_for(reader.read(), 10) for reader, _ in conns]
            took = time.monotonic() - t0
            for t in trickles:
                t.cancel()
            return closed, took
        finally:
            await runner.cleanup()

    closed, took = asyncio.run(main())
    assert all(c == b"" for c in closed) and took < 5, (took, closed[:2])


def test_serve_logs_a_client_that_vanishes_inside_its_body_as_gone_not_500(ckpt):
    import asyncio

    from aiohttp import web

    from nmtkit.serve import Limits, ServeConfig
    from nmtkit.serve.app import make_app, make_runner
    translator = load_translator(ckpt, precision="fp32")[0]
    config = ServeConfig(limits=Limits(max_beam=2))
    logs: list[str] = []

    async def main():
        runner = make_runner(make_app(translator, config, log_line=logs.append), config, logs.append)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 1000\r\n\r\n{\"text\": [")
            await writer.drain()
            await asyncio.sleep(0.3)
            writer.close()
            for _ in range(50):
                if logs:
                    break
                await asyncio.sleep(0.1)
        finally:
            await runner.cleanup()

    asyncio.run(main())
    assert logs and " 499 " in logs[0] and " 500 " not in logs[0], logs


def test_a_stop_signal_ends_a_validation_at_its_next_batch_and_resume_runs_it_again(data_dir, tmp_path, monkeypatch):
    import signal

    import nmtkit.train.validate as validate_mod
    from nmtkit.checkpoint import load_checkpoint
    from nmtkit.train import TrainInterrupted
    from tests.conftest import records, tiny_options, tiny_overrides, train_run

    real, calls = validate_mod.collate, []

    def collate(*args):
        calls.append(1)
        handler = signal.getsignal(signal.SIGTERM)
        if len(calls) == 2 and type(getattr(handler, "__self__", None)).__name__ == "StopSignals":
            os.kill(os.getpid(), signal.SIGTERM)  # arrives in the middle of the validation at update 10
        return real(*args)

    opts = tiny_options(max_updates=20, valid_every=10, save_every=20, valid_batch_size=2, valid_bleu_samples=0)
    monkeypatch.setattr(validate_mod, "collate", collate)
    with pytest.raises(TrainInterrupted) as stop:
        train_run(data_dir, tmp_path / "run", opts, tiny_overrides())
    assert stop.value.result.reason == "SIGTERM" and stop.value.result.update == 10, stop.value.result
    assert len(calls) == 2  # the validation's other batches (a dozen) were never run
    assert load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")["trainer"]["update"] == 10
    assert records(tmp_path / "run", "valid") == []
    monkeypatch.setattr(validate_mod, "collate", real)
    train_run(data_dir, tmp_path / "run", opts, tiny_overrides(), resume=True)
    assert [r["update"] for r in records(tmp_path / "run", "valid")] == [10, 20]


def test_a_catastrophic_protect_pattern_in_preprocess_names_the_file_and_line(tmp_path):
    (tmp_path / "evil.re").write_text(EVIL + "\n")
    for lang in ("en", "fr"):
        (tmp_path / f"train.{lang}").write_text("hello world\n" * 3 + "a" * 60 + "!\n")
        (tmp_path / f"dev.{lang}").write_text("hello\n")
    code, _, err = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(tmp_path / "train"),
                            "--valid", str(tmp_path / "dev"), "--dest", str(tmp_path / "d"), "--protect",
                            str(tmp_path / "evil.re"), "--quiet", "--workers", "2"])
    assert code != 0 and "train.en:4: the protected pattern" in err and "Traceback" not in err, err
    assert not (tmp_path / "d").exists()
