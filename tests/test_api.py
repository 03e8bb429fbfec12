"""The Python API (`nmtkit.load` -> `Translator`): what `nmtkit translate` writes, from Python;
n-best lists and alignments as typed values; `import nmtkit` stays free of torch; the Python
examples of the README and docs/python-api.md run as shown."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_checkpoint, run_cli

REPO = Path(__file__).resolve().parent.parent
LINES = ["the cat sat on a mat .", "", "a dog ran in the park", "the big red house", "cat"]
DECODE = dict(device="cpu", beam=3, max_len_a=1.0, max_len_b=3.0)


def test_import_nmtkit_does_not_import_torch():
    code = ("import sys, nmtkit; nmtkit.load; nmtkit.Translator; nmtkit.Translation; "
            "import nmtkit.translate; print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_load_translates_as_the_cli_does(ckpt, tmp_path):
    import nmtkit

    src = tmp_path / "in.en"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    align = tmp_path / "align.txt"
    proc = run_cli(["translate", "-m", ckpt, "--beam", "3", "--max-len-a", "1", "--max-len-b", "3", "-i", str(src),
               "--alignments", "hard", "--alignments-file", str(align), "--quiet"], process=True)
    assert proc.code == 0, proc.err
    model = nmtkit.load(ckpt, **DECODE)
    assert isinstance(model, nmtkit.Translator)
    assert model.translate(LINES) == proc.out.split("\n")[:-1]
    assert model.translate(LINES[0]) == proc.out.split("\n")[0]  # a string in, a string out
    results = model.generate(LINES, alignments=True)
    pharaoh = [" ".join(f"{i}-{j}" for i, j in r.nbest[0].alignment()) if r.nbest else "" for r in results]
    assert pharaoh == align.read_text(encoding="utf-8").split("\n")[:-1]


def test_generate_gives_the_nbest_list_best_first_with_scores_and_tokens(ckpt, tmp_path):
    import nmtkit

    model = nmtkit.load(ckpt, **DECODE)
    results = model.generate(LINES, nbest=3)
    assert [r.index for r in results] == [1, 2, 3, 4, 5]
    assert results[1].nbest == [] and results[1].text == "" and results[1].score == 0.0
    first = results[0]
    assert len(first.nbest) == 3 and first.text == first.nbest[0].text == model.translate(LINES[0])
    scores = [t.score for t in first.nbest]
    assert scores == sorted(scores, reverse=True) and first.score == scores[0]
    for t in first.nbest:
        assert t.score == pytest.approx(t.log_prob / (len(t.tokens) + 1))
        assert t.src_tokens == ["the", "cat", "sat", "on", "a", "mat", "."]
        with pytest.raises(ValueError, match="alignments=True"):
            t.alignment()
    # the CLI's n-best list holds the same hypotheses
    proc = run_cli(["translate", "-m", ckpt, "--beam", "3", "--nbest", "3", "--max-len-a", "1", "--max-len-b", "3"],
                   LINES[0] + "\n", process=True)
    texts = [line.split(" ||| ")[1] for line in proc.out.splitlines()]
    assert texts == [t.text for t in first.nbest]


def test_per_call_beam_and_load_options_reach_the_search(ckpt):
    import nmtkit

    model = nmtkit.load(ckpt, **DECODE)
    wide = nmtkit.load(ckpt, **dict(DECODE, beam=1))
    assert model.translate(LINES, beam=1) == wide.translate(LINES)
    assert nmtkit.load(ckpt, **dict(DECODE, output_format="bpe")).config.output_format == "bpe"


def test_a_list_of_checkpoints_is_an_ensemble(ckpt, tmp_path):
    import nmtkit

    other = str(make_checkpoint(tmp_path / "other.pt", seed=4))
    pair = nmtkit.load([ckpt, other], **DECODE)
    assert pair.config.ensemble and len(pair.models) == 2
    assert len(pair.translate(LINES)) == len(LINES)


@pytest.mark.parametrize("kwargs,error,needle", [
    (dict(beem=5), "ConfigError", "unknown option(s) beem; valid ones: "),
    (dict(beam=0), "ConfigError", "--beam must be at least 1, got 0"),
    (dict(temperature=0.0, sampling=True), "ConfigError", "--temperature must be > 0"),
    # a switch given "no" was on (any truthy value), and None for a required option failed deep inside
    (dict(sampling="no"), "ConfigError", "--sampling must be true or false, got 'no'"),
    (dict(replace_unk="false"), "ConfigError", "--replace-unk must be true or false, got 'false'"),
    (dict(beam=None), "ConfigError", "--beam must be an integer, got None"),
    (dict(lenpen=None), "ConfigError", "--lenpen must be a finite number, got None"),
    (dict(shortlist=None), "ConfigError", "--shortlist must be a string, got None"),
    (dict(plot_attention=3), "ConfigError", "--plot-attention must be a string, got 3"),  # failed at the first plot
])
def test_bad_options_raise_one_clear_error(ckpt, kwargs, error, needle):
    import nmtkit
    from nmtkit import errors

    with pytest.raises(getattr(errors, error)) as exc:
        nmtkit.load(ckpt, **kwargs)
    assert needle in str(exc.value)


def test_bad_per_call_values_and_a_missing_checkpoint_are_refused(ckpt, tmp_path):
    import nmtkit
    from nmtkit.errors import CheckpointError, ConfigError

    model = nmtkit.load(ckpt, **DECODE)
    with pytest.raises(ConfigError, match="nbest must be between 1 and the beam"):
        model.generate(LINES, nbest=4)
    with pytest.raises(TypeError, match="list of lines"):
        model.generate("the cat")
    with pytest.raises(CheckpointError):
        nmtkit.load(tmp_path / "missing.pt")


@pytest.mark.parametrize("call, error, needle", [
    (lambda m: m.generate(LINES, beam="3"), "ConfigError", "beam must be an integer, got '3'"),
    (lambda m: m.generate(LINES, beam=True), "ConfigError", "beam must be an integer, got True"),
    (lambda m: m.generate(LINES, nbest=2.5), "ConfigError", "nbest must be an integer, got 2.5"),
    (lambda m: m.generate(LINES, nbest=0), "ConfigError", "nbest must be between 1"),  # was the default, silently
    (lambda m: m.generate(LINES, alignments="no"), "ConfigError", "alignments must be True or False"),
    (lambda m: m.translate([b"the cat"]), "TypeError", "line 1 is bytes, not str: decode it first"),
    (lambda m: m.translate(b"the cat"), "TypeError", "lines must be a list of str, not bytes"),
    (lambda m: m.translate(["the cat", None]), "TypeError", "line 2 is NoneType, not str"),
    (lambda m: m.translate({"the cat": 1}), "TypeError", "not dict"),
    (lambda m: m.translate(None), "TypeError", "not NoneType"),
    (lambda m: m.translate(["the cat", "a\x00dog"]), "InputError", "line 2 holds binary data (a NUL character at "
                                                                    "character 1)"),  # the CLI refuses it in a file
    (lambda m: m.translate(["the cat\na dog"]), "InputError", "line 1 holds a line break"),
])
def test_per_call_values_and_lines_of_the_wrong_type_are_refused_naming_them(ckpt, call, error, needle):
    """They were translated into plausible rubbish (bytes, a dict's keys), ignored (nbest=0),
    or failed deep inside with an AttributeError; the translator stays usable after."""
    import builtins

    import nmtkit
    from nmtkit import errors

    model = nmtkit.load(ckpt, **DECODE)
    with pytest.raises(getattr(errors, error, None) or getattr(builtins, error), match=re.escape(needle)):
        call(model)
    assert model.translate(["the cat"]) == nmtkit.load(ckpt, **DECODE).translate(["the cat"])


def test_a_leading_byte_order_mark_is_no_word_even_without_non_printing_removal(tmp_path):
    """Text read with encoding="utf-8" keeps a file's BOM on its first line; `nmtkit translate`
    drops it, and --remove-non-printing deletes it, but a pipeline without that step kept it as a word."""
    import nmtkit
    from nmtkit.text.pipeline import TextPipeline

    plain = TextPipeline(src_lang="en", tgt_lang="fr", nfc=False, remove_non_printing=False)
    model = nmtkit.load(str(make_checkpoint(tmp_path / "plain.pt", seed=3, pipeline=plain)), **DECODE)
    [with_bom, without] = model.generate(["\ufeffthe cat", "the cat"])
    assert with_bom.nbest[0].src_tokens == without.nbest[0].src_tokens == ["the", "cat"]
    assert with_bom.text == without.text


def _python_examples() -> list[tuple[str, str]]:
    """Every ```python block of the README and docs/python-api.md, as (where, code); the training
    examples (`train.run(`) are run by tests/test_train.py instead."""
    examples = []
    for page in ("README.md", "docs/python-api.md"):
        blocks = re.findall(r"```python\n(.*?)```", (REPO / page).read_text(encoding="utf-8"), flags=re.S)
        examples += [(f"{page}#{i}", b) for i, b in enumerate(blocks, 1) if "train.run(" not in b]
    return examples


def test_the_docs_have_python_examples_of_nmtkit_load():
    pages = {where.split("#")[0] for where, code in _python_examples() if "nmtkit.load(" in code}
    assert pages == {"README.md", "docs/python-api.md"}


@pytest.mark.parametrize("code", [c for _, c in _python_examples()], ids=[w for w, _ in _python_examples()])
def test_the_readme_snippet_runs_as_shown(ckpt, tmp_path, code):
    """The README's and docs/python-api.md's Python examples, run against a tiny checkpoint at their path."""
    (tmp_path / "work" / "run").mkdir(parents=True)
    os.link(ckpt, tmp_path / "work" / "run" / "checkpoint_best.pt")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("checkpoints, needle", [
    (lambda p: str(p).encode(), "checkpoints must be a path or a list of paths, not bytes"),  # was "47: not found"
    (lambda p: None, "not NoneType"),
    (lambda p: [str(p), 3], "checkpoint paths must be str or os.PathLike, not int"),
])
def test_checkpoints_that_are_not_paths_are_a_type_error_naming_them(ckpt, checkpoints, needle):
    import nmtkit

    with pytest.raises(TypeError, match=re.escape(needle)):
        nmtkit.load(checkpoints(ckpt), **DECODE)


def test_average_takes_one_path_a_list_or_a_generator_of_paths(tmp_path):
    """A generator was read twice (an IndexError); a string was taken apart into characters."""
    from nmtkit.average import AverageConfig, run

    a, b = make_checkpoint(tmp_path / "a.pt", seed=1), make_checkpoint(tmp_path / "b.pt", seed=2)
    run(AverageConfig(models=(p for p in [a, b]), output=tmp_path / "gen.pt"))
    run(AverageConfig(models=[a, b], output=tmp_path / "list.pt"))
    assert (tmp_path / "gen.pt").read_bytes() != b"" and (tmp_path / "list.pt").is_file()
    run(AverageConfig(models=str(a), output=tmp_path / "one.pt"))
    with pytest.raises(TypeError, match="not bytes"):
        AverageConfig(models=str(a).encode(), output=tmp_path / "bytes.pt")


def test_a_warn_that_cannot_be_called_is_refused_at_load(ckpt):
    """It was accepted, and the first warning (a line over --max-src-len) raised 'int is not callable'."""
    import nmtkit

    with pytest.raises(TypeError, match="warn must be a function"):
        nmtkit.load(ckpt, warn=3, **DECODE)
