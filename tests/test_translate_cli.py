"""`nmtkit translate` through the real entry point: pipes, interactive use, files, errors."""
from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import select
import subprocess
import sys
import time

import pytest

from nmtkit.checkpoint import CHECKPOINT_FORMAT
from tests.conftest import REPO, TGT_WORDS, CliResult, make_checkpoint, run_cli, tiny_model

LINES = ["the cat sat on a mat .", "", "a dog ran in the park", "the big red house", "cat"]


def _error_line(proc: CliResult) -> str:
    assert proc.code != 0
    assert "Traceback" not in proc.err
    lines = proc.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nmtkit: error:"), proc.err
    return lines[0]


def test_stdin_to_stdout_one_line_per_line_in_order(ckpt, tmp_path):
    import nmtkit

    proc = run_cli(["translate", "-m", ckpt, "--beam", "3", "--batch-size", "2", "--buffer-size", "3",
                  "--max-len-a", "1", "--max-len-b", "3"], "\n".join(LINES) + "\n", process=True)
    assert proc.code == 0, proc.err
    out = proc.out.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(LINES)
    expected = nmtkit.load(ckpt).translate(LINES, beam=3, max_len_a=1, max_len_b=3)
    assert out[:-1] == expected
    assert out[1] == ""


def test_a_dash_is_stdin_and_stdout_not_a_file_named_dash(ckpt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["translate", "-m", ckpt, "--beam", "2", "--max-len-b", "3"]
    plain = run_cli(args, "\n".join(LINES) + "\n")
    dashed = run_cli([*args, "-i", "-", "-o", "-"], "\n".join(LINES) + "\n")
    assert dashed.code == 0 and plain.code == 0, dashed.err
    assert dashed.out == plain.out and dashed.out.count("\n") == len(LINES)
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    aligned = run_cli([*args, "-i", "in.txt", "-o", "out.txt", "--alignments", "hard", "--alignments-file", "-"])
    assert aligned.code == 0, aligned.err
    assert aligned.out.count("\n") == len(LINES) and (tmp_path / "out.txt").read_text() == plain.out
    both = run_cli([*args, "-i", "in.txt", "--alignments", "hard", "--alignments-file", "-"])
    assert "cannot both be stdout" in _error_line(both)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]


def test_score_reference_dash_reads_stdin_never_a_file_named_dash(ckpt, tmp_path, monkeypatch):
    """--score-reference - read a file named '-' ('-: --score-reference file not found' without one)."""
    monkeypatch.chdir(tmp_path)
    src, refs = ["the cat", "a dog ran"], ["le chat", "un chien courait"]
    (tmp_path / "in.txt").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n", encoding="utf-8")
    (tmp_path / "-").write_text("le tapis\nla maison\n", encoding="utf-8")
    args = ["translate", "-m", ckpt, "-i", "in.txt", "--score-reference"]
    by_file = run_cli([*args, "ref.txt"])
    dashed = run_cli([*args, "-"], "\n".join(refs) + "\n")
    assert by_file.code == 0 and dashed.code == 0, dashed.err
    assert dashed.out == by_file.out and dashed.out.count("\n") == 2
    short = run_cli([*args, "-"], refs[0] + "\n")
    assert _error_line(short) == "nmtkit: error: <stdin>:2: has fewer lines (1) than in.txt: one translation per source line"
    both = run_cli(["translate", "-m", ckpt, "--score-reference", "-"], "\n".join(refs) + "\n")
    assert "-i and --score-reference cannot both be stdin" in _error_line(both)


def test_score_reference_and_input_both_reading_stdin_by_another_name_are_refused(ckpt, tmp_path):
    """-i /dev/stdin --score-reference - (or -i - --score-reference /dev/fd/0) on a pipe: two
    readers split its lines between them, as they arrived; a slow writer got pairs of its
    alternate lines scored, exit 0, and a fast one a misleading 'has fewer lines (0)'."""
    pairs = "the cat\nle chat\na dog\nun chien\n"
    for args in (["-i", "/dev/stdin", "--score-reference", "-"], ["-i", "-", "--score-reference", "/dev/fd/0"]):
        line = _error_line(run_cli(["translate", "-m", ckpt, *args], pairs, process=True))
        assert line == ("nmtkit: error: -i and --score-reference cannot both be stdin (/dev/stdin, or the pipe or FIFO "
                        "stdin comes from, is stdin too): give one of them a file"), line
    src = tmp_path / "in.txt"
    src.write_text("the cat\na dog\n", encoding="utf-8")
    ok = run_cli(["translate", "-m", ckpt, "-i", str(src), "--score-reference", "/dev/stdin"], "le chat\nun chien\n",
                 process=True)  # stdin read once, by name
    assert ok.code == 0 and ok.out.count("\n") == 2, ok.err


def test_file_input_and_output_and_overwrite_protection(ckpt, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    hyp = tmp_path / "out.txt"
    al = tmp_path / "out.align"
    proc = run_cli(["translate", "-m", ckpt, "-i", str(src), "-o", str(hyp), "--beam", "2", "--nbest", "2",
                  "--max-len-b", "3", "--alignments", "soft", "--alignments-file", str(al)], process=True)
    assert proc.code == 0, proc.err
    assert proc.out == ""
    nbest = hyp.read_text(encoding="utf-8").splitlines()
    ids = [int(line.split(" ||| ")[0]) for line in nbest]
    assert ids == [0, 0, 1, 2, 2, 3, 3, 4, 4]  # the empty line gets one empty entry
    assert all(len(line.split(" ||| ")) == 4 for line in nbest)
    soft = [json.loads(line) for line in al.read_text(encoding="utf-8").splitlines()]
    assert len(soft) == len(nbest) and soft[2] == {"src": [], "tgt": [], "attention": []}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    again = run_cli(["translate", "-m", ckpt, "-i", str(src), "-o", str(hyp), "--max-len-b", "1"], process=True)
    assert "exists" in _error_line(again)


def test_reader_that_goes_away_is_not_an_error(ckpt, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("the cat sat on a mat .\n" * 3000, encoding="utf-8")
    cmd = f"{sys.executable} -m nmtkit translate -m {ckpt} --beam 1 --max-len-a 0 --max-len-b 2 " \
          f"--buffer-size 50 -i {big} | head -n 2"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 2
    assert "Traceback" not in proc.stderr and "Exception" not in proc.stderr and "Broken" not in proc.stderr


def test_a_reader_that_goes_away_while_other_outputs_are_written_is_an_error_naming_them(ckpt, tmp_path):
    """The translations to -o, the alignments to stdout, read by head: the run stopped at the
    broken pipe with status 0, and the -o file it had not written was never mentioned."""
    big = tmp_path / "big.txt"
    big.write_text("the cat sat on a mat .\n" * 3000, encoding="utf-8")
    out = tmp_path / "out.txt"
    cmd = f"{sys.executable} -m nmtkit translate -m {ckpt} --beam 1 --max-len-a 0 --max-len-b 2 --buffer-size 50 " \
          f"-i {big} -o {out} --alignments hard --alignments-file - | head -n 2"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and len(proc.stdout.splitlines()) == 2
    assert proc.stderr.strip() == (f"nmtkit: error: stdout was closed before the end (by its reader, such as head), "
                                   f"so {out} was not written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt"]


def test_interactive_answers_each_line_before_the_next_arrives(ckpt):
    proc = subprocess.Popen([sys.executable, "-m", "nmtkit", "translate", "-m", ckpt, "--beam", "2", "--interactive",
                             "--max-len-b", "3"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        answers = []
        for line in ["the cat", "", "a dog ran"]:
            proc.stdin.write((line + "\n").encode())
            proc.stdin.flush()
            deadline = time.time() + 60
            ready, _, _ = select.select([proc.stdout], [], [], deadline - time.time())
            assert ready, "no answer to an interactive line"
            answers.append(proc.stdout.readline().decode().rstrip("\n"))
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert answers[0] and answers[1] == "" and answers[2]


def test_a_non_blocking_stdin_is_read_to_its_end_not_to_its_first_pause(ckpt):
    """A stdin pipe another program left non-blocking (O_NONBLOCK, shared by every process that
    has the pipe): the first read that found no line yet was taken for the end of the input, and
    the run ended there with status 0, the lines still to come untranslated (score --hyp -:
    a TypeError traceback)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    proc = subprocess.Popen([sys.executable, "-m", "nmtkit", "translate", "-m", ckpt, "--beam", "2", "--interactive",
                             "--max-len-b", "3"], stdin=read_end, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)
    os.close(read_end)
    try:
        with open(write_end, "wb", buffering=0) as feed:
            feed.write(b"the cat\n")
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready and proc.stdout.readline().strip()
            time.sleep(0.5)  # the command is reading the next line, which has not come yet
            with contextlib.suppress(BrokenPipeError):
                feed.write(b"a dog ran\n")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and len(out.decode().splitlines()) == 1, err
    assert err.decode().strip() == "nmtkit: translated 2 lines"


def test_bad_checkpoints_give_one_clear_line(ckpt, tmp_path):
    old = make_checkpoint(tmp_path / "old.pt", format_version=CHECKPOINT_FORMAT + 1)
    assert "format version" in _error_line(run_cli(["translate", "-m", str(old)], "a\n", process=True))  # the real binary
    cut = tmp_path / "cut.pt"
    cut.write_bytes(open(ckpt, "rb").read()[:1000])
    assert "truncated" in _error_line(run_cli(["translate", "-m", str(cut)]))
    import torch

    state = torch.load(ckpt, weights_only=True)
    del state["model_state"]["W_o.bias"]
    state["model_state"]["W_o.weight"] = state["model_state"]["W_o.weight"][:3]
    torch.save(state, tmp_path / "misfit.pt")
    line = _error_line(run_cli(["translate", "-m", str(tmp_path / "misfit.pt")]))
    assert "misfit.pt" in line and "do not fit its config" in line and "W_o.bias" in line and "W_o.weight" in line
    other = make_checkpoint(tmp_path / "other.pt", tgt_words=TGT_WORDS[:-2])
    line = _error_line(run_cli(["translate", "-m", ckpt, "-m", str(other), "--ensemble"]))
    assert "vocabulary differs" in line
    assert "--ensemble" in _error_line(run_cli(["translate", "-m", ckpt, "-m", ckpt]))
    # a model reading no source EOS attends over one position fewer: the mean attention was a traceback
    no_eos = make_checkpoint(tmp_path / "no_eos.pt", model=tiny_model(seed=3, src_eos=False))
    line = _error_line(run_cli(["translate", "-m", ckpt, "-m", str(no_eos), "--ensemble"], "the cat\n"))
    assert line == (f"nmtkit: error: {no_eos}: src_eos differs from {ckpt}'s (one appends EOS to the source, the "
                    "other not); an ensemble needs models that attend over the same source positions"), line
    os.symlink(ckpt, tmp_path / "link.pt")  # one file twice would cost twice the time for the same translations
    for twin in (ckpt, str(tmp_path / "link.pt")):
        line = _error_line(run_cli(["translate", "-m", ckpt, "-m", twin, "--ensemble"]))
        assert line == f"nmtkit: error: {twin} is given twice (as {ckpt}); an ensemble counts each model once", line
    assert "not found" in _error_line(run_cli(["translate", "-m", str(tmp_path / "nope.pt")]))
    assert "--alignments-file" in _error_line(run_cli(["translate", "-m", ckpt, "--alignments", "hard"]))


def test_alignments_through_dev_stdout_into_stdout_and_an_output_among_the_plots_are_refused(ckpt, tmp_path):
    """--alignments-file /dev/stdout mixed the alignments into the translations on stdout, and
    an -o file named as a plot in the --plot-attention folder replaced that plot, exit 0."""
    src = tmp_path / "in.txt"
    src.write_text("the cat\n", encoding="utf-8")
    args = ["translate", "-m", ckpt, "-i", str(src), "--alignments", "hard"]
    mixed = run_cli([*args, "--alignments-file", "/dev/stdout"], process=True)
    assert "-o and --alignments-file cannot both be stdout" in _error_line(mixed) and mixed.out == ""
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "000001.png").write_bytes(b"PNG")
    line = _error_line(run_cli(["translate", "-m", ckpt, "-i", str(src), "--plot-attention", str(plots), "-o",
                                str(plots / "000001.png"), "--force"]))
    assert "the -o output is a file the --plot-attention folder writes" in line
    assert (plots / "000001.png").read_bytes() == b"PNG"
    ok = run_cli(["translate", "-m", ckpt, "-i", str(src), "--plot-attention", str(plots), "-o", str(plots / "out.txt")])
    assert ok.code == 0, ok.err


def test_a_sigterm_between_the_two_outputs_commits_leaves_both_new_never_a_mismatched_pair(ckpt, tmp_path):
    """SIGTERM landing after --alignments-file was renamed into place and before -o was left the
    new alignments beside the old translations (exit 143)."""
    src, out, al = tmp_path / "in.txt", tmp_path / "p.txt", tmp_path / "p.al"
    src.write_text("the cat\na dog\n", encoding="utf-8")
    out.write_text("OLD-OUT\n")
    al.write_text("OLD-AL\n")
    code = ("import os, signal, sys\n"
            "import nmtkit.io.files as o\n"
            "real = o.Staged.commit\n"
            "def commit(self, synced=False):\n"
            "    real(self, synced)\n"
            "    if self.path.endswith('.al'):\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "o.Staged.commit = commit\n"
            "from nmtkit.cli import main\n"
            "main(sys.argv[1:])\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code, "translate", "-m", ckpt, "-i", str(src), "-o", str(out),
                           "--alignments", "hard", "--alignments-file", str(al), "--force"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 143, proc.stderr
    assert al.read_text() != "OLD-AL\n" and out.read_text() != "OLD-OUT\n"
    assert len(out.read_text().splitlines()) == len(al.read_text().splitlines()) == 2


def test_alignments_plots_and_unk_replacement_are_refused_for_a_model_without_attention(ckpt, tmp_path):
    """RNNencdec's all-zero weights became alignments of every target word to the first source
    word (and --replace-unk copied it), with exit 0; an ensemble with it too."""
    import nmtkit
    from nmtkit.errors import ConfigError

    encdec = str(make_checkpoint(tmp_path / "encdec.pt", arch="rnnencdec"))
    for extra in (["--alignments", "hard", "--alignments-file", str(tmp_path / "al")], ["--replace-unk"],
                  ["--plot-attention", str(tmp_path / "plots")]):
        line = _error_line(run_cli(["translate", "-m", encdec, "-o", str(tmp_path / "out"), *extra], "the cat\n"))
        assert f"{extra[0]} needs attention, and {encdec} is a model without it (RNNEncDec)" in line
        assert not (tmp_path / "out").exists() and not (tmp_path / "al").exists()
    assert "needs attention" in _error_line(run_cli(["translate", "-m", ckpt, "-m", encdec, "--ensemble",
                                                     "--replace-unk"], "the cat\n"))
    model = nmtkit.load(encdec, device="cpu")
    assert model.translate("the cat") is not None
    with pytest.raises(ConfigError, match="alignments=True needs attention"):
        model.generate(["the cat"], alignments=True)
    with pytest.raises(ConfigError, match="replace_unk=True needs attention"):
        model.generate(["the cat"], replace_unk=True)


def test_invalid_utf8_input_names_the_line(ckpt, tmp_path):
    src = tmp_path / "bad.txt"
    src.write_bytes(b"the cat\nthe \xff dog\n")
    line = _error_line(run_cli(["translate", "-m", ckpt, "-i", str(src), "-o", str(tmp_path / "o.txt")]))
    assert "bad.txt:2:" in line
    assert not (tmp_path / "o.txt").exists()


def test_a_gz_input_is_gunzipped_as_the_other_commands_do_and_a_damaged_one_named_in_one_line(ckpt, tmp_path):
    import gzip

    text = ("\n".join(LINES) + "\n").encode()
    (tmp_path / "in.txt").write_bytes(text)
    (tmp_path / "in.txt.gz").write_bytes(gzip.compress(text))
    (tmp_path / "cut.txt.gz").write_bytes(gzip.compress(text * 50)[:-30])
    args = ["translate", "-m", ckpt, "--beam", "2", "--max-len-b", "3", "-i"]
    plain, gz = run_cli([*args, str(tmp_path / "in.txt")]), run_cli([*args, str(tmp_path / "in.txt.gz")])
    assert plain.code == 0 and gz.code == 0, gz.err
    assert gz.out == plain.out and gz.out.count("\n") == len(LINES)
    cut = _error_line(run_cli([*args, str(tmp_path / "cut.txt.gz"), "-o", str(tmp_path / "out.txt")]))
    assert "cut.txt.gz" in cut and "gzip" in cut
    assert not (tmp_path / "out.txt").exists()


def test_help_documents_the_nbest_and_alignment_formats():
    proc = run_cli(["translate", "--help"], process=True)
    assert proc.code == 0
    text = " ".join(proc.out.split())
    assert "||| LogProb=" in text and "Pharaoh" in text and "JSON" in text


def test_the_score_reference_help_says_fairseq_prints_another_number_than_log_p():
    """fairseq-generate --score-reference prints (sum of log p) / tokens / ln 2 (SequenceScorer,
    generate.py's H- line), not log p(y | x) as OpenNMT-py's -tgt, marian-scorer and nmtkit do; the
    help and docs/commands.md said nmtkit writes what all three write."""
    from tests.conftest import REPO

    help_text = " ".join(run_cli(["translate", "--help"], process=True).out.split())
    docs = " ".join((REPO / "docs" / "commands.md").read_text(encoding="utf-8").split())
    for text in (help_text, docs):
        assert "fairseq's --score-reference prints the mean per token, in base 2" in text.replace("`", "")


@pytest.mark.slow
def test_real_news_text_streams_through_with_truncation_warnings(ckpt, shared_data, tmp_path):
    news = shared_data / "wmt14-newstest" / "newstest2014-fren.en"
    lines = news.read_text(encoding="utf-8").splitlines()[:40]
    src = tmp_path / "news.en"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    proc = run_cli(["translate", "-m", ckpt, "-i", str(src), "--beam", "4", "--batch-size", "8", "--buffer-size", "16",
                  "--max-src-len", "20", "--max-len-a", "1", "--max-len-b", "2"], process=True, timeout=300)
    assert proc.code == 0, proc.err
    assert len(proc.out.split("\n")) - 1 == len(lines)
    from nmtkit.text.moses import tokenize

    long_lines = [i for i, line in enumerate(lines, 1) if len(tokenize(line, "en")) > 20]
    warned = [int(m) for m in re.findall(r"news.en:(\d+): \d+ source tokens", proc.err)]
    assert long_lines and warned == long_lines


def test_ban_unk_keeps_the_unknown_word_out_of_every_translation(tmp_path):
    from nmtkit.checkpoint import load_checkpoint, save_checkpoint

    ckpt = load_checkpoint(make_checkpoint(tmp_path / "model.pt", seed=4))
    bias = ckpt["model_state"]["W_o.bias"]
    bias.zero_()
    bias[1] = 30.0  # UNK_ID: the most probable word at every step
    save_checkpoint(ckpt, tmp_path / "unk.pt")
    args = ["translate", "-m", str(tmp_path / "unk.pt"), "--beam", "3", "--max-len-b", "3", "-q"]
    text = "\n".join(LINES) + "\n"
    plain = run_cli([*args], text, process=True)
    assert plain.code == 0 and "<unk>" in plain.out  # the test can fail
    banned = run_cli([*args, "--ban-unk"], text, process=True)
    assert banned.code == 0, banned.err
    assert "<unk>" not in banned.out and len(banned.out.splitlines()) == len(LINES)
    assert any(banned.out.split("\n"))
    both = run_cli([*args, "--ban-unk", "--replace-unk"], text, process=True)
    assert "--ban-unk and --replace-unk exclude each other" in _error_line(both)


def test_input_in_the_target_language_is_warned_once_as_mostly_unknown_source_tokens(ckpt, tmp_path):
    """French into an en-fr model (-i the target-side file) was translated in silence, every word
    <unk>; now a warning (once) counts the tokens outside the source vocabulary and asks."""
    src = tmp_path / "test.fr"
    src.write_text("le chat assis sur un tapis .\nle chien courait dans le parc\nla grande maison rouge .\n" * 2)
    proc = run_cli(["translate", "-m", ckpt, "-i", str(src), "--max-len-b", "2"])
    warnings = [line for line in proc.err.splitlines() if "warning" in line]
    assert proc.code == 0 and len(proc.out.splitlines()) == 6, proc.err
    assert warnings == [f"nmtkit: warning: {src}: 32 of 36 source tokens are not in the en-fr model's source "
                        "vocabulary: is the input en text, given with the right --input-format? (warned once)"]
    proc = run_cli(["translate", "-m", ckpt, "--max-len-b", "2"], "\n".join(LINES * 4) + "\n")
    assert proc.code == 0 and "warning" not in proc.err, proc.err


@pytest.mark.parametrize("quiet", [False, True])
def test_warnings_reach_stderr_once_through_logging_and_quiet_silences_them(ckpt, tmp_path, capsys, quiet):
    """The truncation warning (Translator -> the `nmtkit` logger -> the CLI's one stderr handler)
    appears once as `nmtkit: warning: FILE:LINE: ...`, and not at all with -q; stdout unchanged."""
    src = tmp_path / "long.en"
    src.write_text("the cat sat on a mat and the dog ran in the big red park\ncat\n", encoding="utf-8")
    args = ["translate", "-m", ckpt, "-i", str(src), "--beam", "2", "--max-src-len", "4", "--max-len-a", "1",
            "--max-len-b", "2", "--device", "cpu"]
    from nmtkit.cli import main

    capsys.readouterr()
    main([*args, *(["-q"] if quiet else [])])  # returns on success
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2
    warnings = [line for line in err.splitlines() if "source tokens" in line]
    if quiet:
        assert err == ""
    else:
        assert len(warnings) == 1 and warnings[0].startswith(f"nmtkit: warning: {src}:1: "), err


class _Terminal(io.TextIOWrapper):
    """A stdin that says it is a terminal."""

    def isatty(self) -> bool:
        return True


IGNORED_BUFFER = "nmtkit: warning: --buffer-size is ignored with --interactive"


@pytest.mark.parametrize("flags,terminal,expected", [
    (["--interactive", "--buffer-size", "50"], False, [f"{IGNORED_BUFFER}, which translates each line as it arrives"]),
    (["--buffer-size", "50"], True,
     [f"{IGNORED_BUFFER} (implied by stdin being a terminal), which translates each line as it arrives"]),
    (["--interactive", "--buffer-size", "50", "-q"], False, []),
    (["--interactive", "--buffer-size", "1"], False, []),  # nothing overridden
    (["--interactive"], False, []),
    ([], True, []),
    (["--buffer-size", "50"], False, []),
])
def test_a_buffer_size_that_interactive_use_overrides_is_warned_once(ckpt, capsys, monkeypatch, flags, terminal,
                                                                     expected):
    """--interactive, or stdin a terminal, translates line by line: an explicit --buffer-size
    (other than 1) is then not used, which one warning says rather than dropping it silently."""
    from nmtkit.cli import main

    stdin = (_Terminal if terminal else io.TextIOWrapper)(io.BytesIO(b"the cat\n"), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    capsys.readouterr()
    main(["translate", "-m", ckpt, "--beam", "2", "--max-len-b", "3", "--device", "cpu", *flags])
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1
    assert [line for line in err.splitlines() if "--buffer-size" in line] == expected, err


@pytest.mark.parametrize("flags,beam", [(["--sampling", "--beam", "5"], 5), (["--sampling", "-k", "3"], 3),
                                        (["--sampling", "--beam", "1"], None), (["--sampling"], None),
                                        (["--sampling", "-k", "12"], None), (["--beam", "5"], None),
                                        (["--sampling", "--beam", "5", "-q"], None)])
def test_a_beam_given_with_sampling_is_warned_ignored(ckpt, flags, beam):
    """--sampling draws one translation per line whatever --beam says (fairseq's --sampling draws
    --beam of them): a given --beam was dropped without a word. fairseq's --beam 1 is what it does;
    the default, 12, is not warned (the Translator, which warns for the CLI, the API and serve,
    cannot tell it from a given 12)."""
    code, out, err = run_cli(["translate", "-m", ckpt, "--max-len-b", "3", *flags], "the cat\n")
    assert code == 0 and len(out.splitlines()) == 1, err
    ignored = f"nmtkit: warning: --beam {beam} is ignored with --sampling, which draws one translation per line"
    assert [line for line in err.splitlines() if "--beam" in line] == ([ignored] if beam else []), err


def test_translating_a_line_imports_no_plotting_scoring_or_tensorboard_library_nor_other_subcommands(ckpt):
    """The translate path's start-up: matplotlib, sacrebleu, tensorboard and rich are never
    imported (each costs import time, and none is needed to translate), nor the modules of the
    other subcommands."""
    others = tuple(f"nmtkit.cli.{m}" for m in ("preprocess", "select", "train", "score", "serve", "tokenize", "average"))
    code = ("import sys\nfrom nmtkit.cli import main\ntry:\n    main(['translate', '-m', sys.argv[1], '--beam', '2'])\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            f"heavy = ('matplotlib', 'sacrebleu', 'tensorboard', 'torch.utils.tensorboard', 'rich') + {others!r}\n"
            "print(sorted(m for m in sys.modules if m in heavy or m.startswith(tuple(h + '.' for h in heavy))),"
            " file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, ckpt], input="hello world\n", capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr


@pytest.mark.parametrize("command", ["translate", "tokenize"])
def test_an_input_redirected_from_a_file_is_never_the_output_even_with_force(ckpt, tmp_path, command):
    """`nmtkit translate -o f --force < f` replaced the text with its translations: -i f was
    refused, stdin was not compared. tokenize likewise, with --force."""
    from tests.conftest import REPO

    text = tmp_path / "in.en"
    text.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    before = text.read_bytes()
    argv = ["translate", "-m", ckpt, "--force"] if command == "translate" else ["tokenize", "--lang", "en", "--force"]
    with open(text, "rb") as stdin:
        proc = subprocess.run([sys.executable, "-m", "nmtkit", *argv, "-o", str(text)], stdin=stdin,
                              capture_output=True, text=True, cwd=REPO,
                              env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"))
    line = _error_line(CliResult(proc.returncode, proc.stdout, proc.stderr))
    assert f"{text}: the -o output is the same file as the stdin input" in line
    assert text.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["in.en"]


# how the output reaches the input file: stdout appended to it (`>> f`), or opened on it without
# truncation (`1<> f`), or a descriptor open on it for reading, written through its /dev/fd name
IN_PLACE = {"stdout-append": ([], "ab"), "dev-stdout-append": (["-o", "/dev/stdout"], "ab"),
            "stdout-read-write": ([], "r+b"), "dev-fd-read": (["-o", "/dev/fd/{fd}"], "rb")}


@pytest.mark.parametrize("command", ["translate", "tokenize"])
@pytest.mark.parametrize("how", list(IN_PLACE))
def test_an_output_written_in_place_into_an_input_file_is_refused(ckpt, tmp_path, command, how):
    """`nmtkit translate -i f >> f` read its own translations back (a file longer than a buffer:
    without end, growing f); `tokenize -i f 1<> f` wrote over f as it read it; `-o /dev/fd/3 3<f`
    truncated f and translated nothing, exit 0. Outputs written in place were never compared with
    the inputs."""
    text = tmp_path / "in.en"
    text.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    before = text.read_bytes()
    extra, mode = IN_PLACE[how]
    argv = ["translate", "-m", ckpt, "--beam", "1"] if command == "translate" else ["tokenize", "--lang", "en"]
    with open(text, mode) as f:
        extra = [a.format(fd=f.fileno()) for a in extra]
        where = {"stdout": f} if "stdout" in how else {"pass_fds": (f.fileno(),), "stdout": subprocess.DEVNULL}
        proc = subprocess.run([sys.executable, "-m", "nmtkit", *argv, "-i", str(text), *extra], **where,
                              stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=120,
                              env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"))
    line = _error_line(CliResult(proc.returncode, "", proc.stderr))
    assert f"output is the same file as the -i input {text}; nothing was written" in line
    assert text.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["in.en"]


def test_an_output_through_dev_fd_n_that_is_another_output_file_is_refused(ckpt, tmp_path):
    """`-o /dev/fd/3 --alignments-file a --force 3>>a`: the alignments replaced a, the translations
    written through the descriptor were lost, exit 0 (outputs written in place were never compared)."""
    from tests.conftest import REPO

    (tmp_path / "in.en").write_text("the cat\n", encoding="utf-8")
    both = tmp_path / "a.txt"
    both.write_text("mine\n")
    with open(both, "ab") as f:
        proc = subprocess.run([sys.executable, "-m", "nmtkit", "translate", "-m", ckpt, "-i", str(tmp_path / "in.en"),
                               "-o", f"/dev/fd/{f.fileno()}", "--alignments", "hard", "--alignments-file", str(both),
                               "--force"], pass_fds=(f.fileno(),), capture_output=True, text=True, cwd=REPO,
                              env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"))
    line = _error_line(CliResult(proc.returncode, proc.stdout, proc.stderr))
    assert f"{both}: the --alignments-file output is also the -o output; nothing was written" in line
    assert both.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "in.en"]


def test_a_failed_run_takes_back_the_plot_folder_it_created(ckpt, tmp_path):
    """--plot-attention DIR is created (with the folders above it) before the work: a run that
    failed (a missing checkpoint, a bad line, Ctrl-C, a full disk) left them, with the plots drawn
    so far beside an -o never written. A folder that was there stays as it is: with an -o file, the
    plots appear with it or not at all (an old plot was replaced by that of a run that failed)."""
    src = tmp_path / "in.en"
    src.write_bytes(b"the cat\nthe \xff dog\n")  # line 1 is translated and plotted, line 2 fails
    plots = tmp_path / "a" / "plots"
    for model in (str(tmp_path / "missing.pt"), ckpt):
        _error_line(run_cli(["translate", "-m", model, "-i", str(src), "-o", str(tmp_path / "o.txt"),
                             "--plot-attention", str(plots), "--buffer-size", "1"]))
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in.en"]
    plots.mkdir(parents=True)
    (plots / "notes.txt").write_text("mine\n")
    (plots / "000001.png").write_bytes(b"old plot")
    _error_line(run_cli(["translate", "-m", ckpt, "-i", str(src), "-o", str(tmp_path / "o.txt"),
                         "--plot-attention", str(plots), "--buffer-size", "1"]))
    assert sorted(p.name for p in plots.iterdir()) == ["000001.png", "notes.txt"]
    assert (plots / "000001.png").read_bytes() == b"old plot" and not (tmp_path / "o.txt").exists()
    _error_line(run_cli(["translate", "-m", ckpt, "-i", str(src), "--plot-attention", str(plots), "--buffer-size", "1"]))
    assert (plots / "notes.txt").read_text() == "mine\n"


def test_the_plot_folder_cannot_be_the_output_file_checked_before_decoding(ckpt, tmp_path):
    """It failed at the end, with the plots written and the translations lost, in a message
    naming neither option."""
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    both = tmp_path / "both"
    for outputs in (["-o", str(both)], ["--alignments", "hard", "--alignments-file", str(both)]):
        line = _error_line(run_cli(["translate", "-m", ckpt, "-i", str(src), *outputs, "--plot-attention", str(both)]))
        assert f"{both}: the --plot-attention output is also the {outputs[-2]} output file; nothing was written" in line
        assert not both.exists()


def test_the_outputs_an_earlier_command_of_the_process_gave_up_are_not_blamed_on_a_later_one(tmp_path):
    """The record of abandoned outputs lasts the process: a later command whose stdout reader
    went away named an earlier command's output as its own, with status 1."""
    from tests.conftest import REPO

    script = ("import sys; from nmtkit.io.files import Staged; Staged(sys.argv[1]).abort(); "
              "from nmtkit.cli import main; main(['tokenize', '--lang', 'en'])")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "earlier.txt")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    proc.stdout.close()  # the reader is gone before the first line
    _, err = proc.communicate(("Hello, world.\n" * 20000).encode(), timeout=120)
    assert proc.returncode == 0 and b"earlier.txt" not in err, err


def test_an_output_name_of_the_longest_length_a_file_name_may_have_is_written(ckpt, tmp_path):
    """The temp file beside it took the name plus 13 characters: names from ~243 bytes failed
    with "File name too long", naming the temp file, after the model had loaded."""
    for name in ("x" * 255, "é" * 127):
        out = tmp_path / name
        proc = run_cli(["translate", "-m", ckpt, "-o", str(out)], "the cat\n")
        assert proc.code == 0, proc.err
        assert out.read_text(encoding="utf-8").count("\n") == 1
    assert sorted(len(os.fsencode(p.name)) for p in tmp_path.iterdir()) == [254, 255]


def test_an_output_below_a_current_folder_past_path_max_is_refused_for_what_it_is(ckpt, tmp_path, monkeypatch):
    """Relative to a current folder whose absolute path is over PATH_MAX (4,096 bytes), the output's
    folder, looked up by its absolute path, cannot be (ENAMETOOLONG): "its folder does not exist"."""
    monkeypatch.chdir(tmp_path)
    for _ in range(21):  # 21 x 201 bytes
        os.mkdir("d" * 200)
        os.chdir("d" * 200)
    code, out, err = run_cli(["translate", "-m", ckpt, "-o", "out.txt"], "the cat\n")
    assert (code, err) == (1, "nmtkit: error: out.txt: cannot write the -o output: its folder cannot be looked up: "
                              f"{os.strerror(errno.ENAMETOOLONG)}\n")
    assert os.listdir() == []


def test_a_line_over_max_tokens_is_named_by_its_number_in_one_warning(ckpt):
    code, out, err = run_cli(["translate", "-m", ckpt, "--beam", "2", "--max-tokens", "3", "--max-len-b", "2"],
                             "the cat\nthe cat sat on a mat\na dog ran in the park\n")
    assert code == 0 and len(out.splitlines()) == 3, err
    warnings = [line for line in err.splitlines() if "--max-tokens" in line]
    assert warnings == ["nmtkit: warning: --max-tokens 3 is below the length of line 2 (6 tokens): such lines are "
                        "translated one per batch, over the budget"], err
