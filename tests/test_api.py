"""The Python API (`nmtkit.load` -> `Translator`): what `nmtkit translate` writes, from Python,
with the search options of each call; n-best lists and alignments as frozen values; forced-
decoding scores; a small public surface; `import nmtkit` stays free of torch; the Python
examples of the README and docs/python-api.md run as shown."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_checkpoint, run_cli

REPO = Path(__file__).resolve().parent.parent
LINES = ["the cat sat on a mat .", "", "a dog ran in the park", "the big red house", "cat"]
LOAD = dict(device="cpu")
SEARCH = dict(beam=3, max_len_a=1.0, max_len_b=3.0)


def test_import_nmtkit_does_not_import_torch():
    code = ("import sys, nmtkit; nmtkit.load; nmtkit.Translator; nmtkit.Translation; nmtkit.SearchConfig; "
            "nmtkit.presets(); import nmtkit.translate; print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_two_threads_loading_at_once_in_a_fresh_process_both_load(ckpt):
    """The first nmtkit.load of a process imports torch; a second thread's load meanwhile took the
    half-imported module from sys.modules: AttributeError: partially initialized module 'torch' has
    no attribute 'get_num_threads'. It now waits for that import to finish."""
    code = ("import sys, threading, time, nmtkit\n"
            "kw = dict(device='cpu', workers=1, warn=lambda m: None)\n"
            "t = threading.Thread(target=nmtkit.load, args=(sys.argv[1],), kwargs=kw); t.start()\n"
            "while 'torch' not in sys.modules: time.sleep(0.0005)\n"
            "print(nmtkit.load(sys.argv[1], **kw).translate('w1 w2', beam=2) is not None); t.join()\n")
    proc = subprocess.run([sys.executable, "-c", code, ckpt], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr[-800:]


def test_load_translates_as_the_cli_does(ckpt, tmp_path):
    import nmtkit

    src = tmp_path / "in.en"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    align = tmp_path / "align.txt"
    proc = run_cli(["translate", "-m", ckpt, "--beam", "3", "--max-len-a", "1", "--max-len-b", "3", "-i", str(src),
                    "--alignments", "hard", "--alignments-file", str(align), "--quiet"], process=True)
    assert proc.code == 0, proc.err
    model = nmtkit.load(ckpt, **LOAD)
    assert isinstance(model, nmtkit.Translator)
    assert model.translate(LINES, **SEARCH) == proc.out.split("\n")[:-1]
    assert model.translate(LINES[0], **SEARCH) == proc.out.split("\n")[0]  # a string in, a string out
    results = model.generate(LINES, alignments=True, **SEARCH)
    pharaoh = [" ".join(f"{i}-{j}" for i, j in r.nbest[0].alignment()) if r.nbest else "" for r in results]
    assert pharaoh == align.read_text(encoding="utf-8").split("\n")[:-1]


def test_one_loaded_model_searches_each_call_as_that_calls_options_say(ckpt, monkeypatch):
    """Beam 1 is what `nmtkit translate --beam 1` gives, beam search and sampling come from one
    load (loads counted), and a seed reproduces its samples."""
    import nmtkit
    import nmtkit.checkpoint

    loads = []
    real = nmtkit.checkpoint.load_bundle
    monkeypatch.setattr(nmtkit.checkpoint, "load_bundle", lambda *a, **k: loads.append(1) or real(*a, **k))
    model = nmtkit.load(ckpt, **LOAD)
    proc = run_cli(["translate", "-m", ckpt, "--beam", "1", "--max-len-a", "1", "--max-len-b", "3", "-q"],
                   "\n".join(LINES) + "\n", process=True)
    assert model.translate(LINES, beam=1, max_len_a=1.0, max_len_b=3.0) == proc.out.split("\n")[:-1]
    wide = model.translate(LINES, **SEARCH)
    sampled = model.translate(LINES * 2, sampling=True, seed=5, max_len_b=6.0)
    assert model.translate(LINES * 2, sampling=True, seed=5, max_len_b=6.0) == sampled
    assert model.translate(LINES * 2, sampling=True, seed=6, max_len_b=6.0) != sampled
    assert model.translate(LINES, **SEARCH) == wide  # sampling changed nothing for the next search
    assert len(loads) == 1


def test_generate_gives_frozen_results_the_nbest_list_best_first_with_scores_and_tokens(ckpt, tmp_path):
    import dataclasses

    import nmtkit

    model = nmtkit.load(ckpt, **LOAD)
    results = model.generate(LINES, nbest=3, **SEARCH)
    assert [r.index for r in results] == [1, 2, 3, 4, 5]
    assert results[1].nbest == () and results[1].text == "" and results[1].score == 0.0
    first = results[0]
    assert len(first.nbest) == 3 and first.text == first.nbest[0].text == model.translate(LINES[0], **SEARCH)
    scores = [t.score for t in first.nbest]
    assert scores == sorted(scores, reverse=True) and first.score == scores[0]
    for t in first.nbest:
        assert t.score == pytest.approx(t.log_prob / (len(t.tokens) + 1))
        assert t.src_tokens == ("the", "cat", "sat", "on", "a", "mat", ".")
        with pytest.raises(ValueError, match="alignments=True"):
            t.alignment()
    for obj, name in ((first, "nbest"), (first.nbest[0], "text"), (first.nbest[0], "score")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, None)
    assert isinstance(first.nbest, tuple) and isinstance(first.nbest[0].tokens, tuple)
    # the CLI's n-best list holds the same hypotheses
    proc = run_cli(["translate", "-m", ckpt, "--beam", "3", "--nbest", "3", "--max-len-a", "1", "--max-len-b", "3"],
                   LINES[0] + "\n", process=True)
    texts = [line.split(" ||| ")[1] for line in proc.out.splitlines()]
    assert texts == [t.text for t in first.nbest]


def test_a_list_of_checkpoints_is_an_ensemble(ckpt, tmp_path):
    import nmtkit

    other = str(make_checkpoint(tmp_path / "other.pt", seed=4))
    pair = nmtkit.load([ckpt, other], **LOAD)
    assert pair.config.ensemble and len(pair.bundle.models) == 2
    assert len(pair.translate(LINES, **SEARCH)) == len(LINES)


# ---- forced decoding ------------------------------------------------------------------------

def _tokens_model(ckpt, **load):
    """A model that reads and writes its own tokens, so that its output can be scored as is."""
    import nmtkit

    return nmtkit.load(ckpt, precision="fp32", input_format="bpe", output_format="bpe", **LOAD, **load)


def test_score_of_the_models_own_beam_output_is_its_log_probability_and_beats_shuffled_pairs(ckpt):
    model = _tokens_model(ckpt)
    src = [line for line in LINES if line]
    best = [r.nbest[0] for r in model.generate(src, beam=4, shortlist="off")]
    own = model.score(src, [t.text for t in best])
    for s, t in zip(own, best):
        assert s == pytest.approx(t.log_prob, abs=1e-5)
        assert s / (len(t.tokens) + 1) == pytest.approx(t.score, abs=1e-5)  # lenpen 1
    shuffled = model.score(src, [t.text for t in best[1:] + best[:1]])
    assert sum(own) > sum(shuffled)
    detail = model.score(src, [t.text for t in best], per_token=True)
    for d, t, s in zip(detail, best, own):
        assert d.tokens == t.tokens and len(d.token_log_probs) == len(t.tokens) + 1
        assert d.log_prob == s and sum(d.token_log_probs) == pytest.approx(s, abs=1e-4)
        assert all(lp <= 0 for lp in d.token_log_probs)


@pytest.mark.parametrize("fmt", ["raw", "tok"])
def test_a_translation_holding_the_unknown_word_scores_back_as_the_search_found_it(ckpt, fmt):
    """Raw and tokenised output write the unknown word as '<unk>': scored back in that format it
    is that word, not the text '<', 'unk', '>' (three tokens, each scored as <unk>)."""
    import nmtkit

    warnings: list[str] = []
    model = nmtkit.load(ckpt, precision="fp32", input_format=fmt, output_format=fmt, warn=warnings.append, **LOAD)
    best = model.generate(["a dog ran"], beam=3, shortlist="off")[0].nbest[0]
    assert "<unk>" in best.text.split()
    [scored] = model.score(["a dog ran"], [best.text], per_token=True)
    assert scored.tokens == best.tokens and scored.log_prob == pytest.approx(best.log_prob, abs=1e-5)
    assert model.score(["a dog ran"], ["le<unk>."], per_token=True)[0].tokens == ("le", "<unk>", ".")
    assert warnings == []


def test_an_ensemble_scores_with_the_mean_of_its_members_probabilities(ckpt, tmp_path):
    import math

    other = str(make_checkpoint(tmp_path / "other.pt", seed=4))
    src, tgt = ["the cat sat", "a dog"], ["le chat", "un chien"]
    a = _tokens_model(ckpt).score(src, tgt, per_token=True)
    b = _tokens_model(other).score(src, tgt, per_token=True)
    both = _tokens_model([ckpt, other]).score(src, tgt, per_token=True)
    for x, y, xy in zip(a, b, both):
        mean = [math.log((math.exp(p) + math.exp(q)) / 2) for p, q in zip(x.token_log_probs, y.token_log_probs)]
        assert xy.token_log_probs == pytest.approx(mean, abs=1e-5)
    copy = shutil.copy(ckpt, tmp_path / "copy.pt")  # one file twice is refused (test_translate_cli)
    assert _tokens_model([ckpt, copy]).score(src, tgt) == pytest.approx([s.log_prob for s in a], abs=1e-5)


def test_score_and_the_command_lines_score_reference_agree(ckpt, tmp_path):
    import nmtkit

    src, ref = tmp_path / "in.en", tmp_path / "ref.fr"
    src.write_text("the cat sat on a mat .\na dog ran\nthe big red house\n", encoding="utf-8")
    ref.write_text("le chat est assis .\nun chien\nla grande maison\n", encoding="utf-8")
    proc = run_cli(["translate", "-m", ckpt, "--precision", "fp32", "-i", str(src), "--score-reference", str(ref),
                    "--buffer-size", "2"], process=True)
    assert proc.code == 0, proc.err
    assert "scored 3 lines" in proc.err
    api = nmtkit.load(ckpt, precision="fp32", **LOAD).score(src.read_text().splitlines(), ref.read_text().splitlines())
    assert [float(x) for x in proc.out.split()] == pytest.approx(api, abs=1e-5)


@pytest.mark.parametrize("sources, targets, error, needle", [
    (["the cat", "a dog"], ["le chat"], "InputError", "2 sources but 1 targets"),
    (["the cat", "a dog"], ["le chat", " "], "InputError", "<input>:2: empty translation"),
    (["the cat", ""], ["le chat", "un chien"], "InputError", "<input>:2: empty source line"),
    (["the cat"], ["le chat\nun chien"], "InputError", "targets line 1 holds a line break"),
    # not "translate() also takes one string", which score does not
    (["the cat"], "le chat", "TypeError", "targets must be a list of lines; score one pair as score([source], [target])"),
    ("the cat", "le chat", "TypeError", "sources must be a list of lines; score one pair as score([source], [target])"),
    # text the pipeline removes whole: an AttributeError on a None score, or the score of an empty translation
    (["the cat", "\u200b"], ["le chat", "un chien"], "InputError", "<input>:2: empty source line to the model"),
    (["the cat", "a dog"], ["le chat", "\x01\u200b"], "InputError", "<input>:2: empty translation to the model"),
])
def test_bad_score_input_is_one_clear_error(ckpt, sources, targets, error, needle):
    import builtins

    import nmtkit
    from nmtkit import errors

    model = nmtkit.load(ckpt, **LOAD)
    with pytest.raises(getattr(errors, error, None) or getattr(builtins, error), match=re.escape(needle)):
        model.score(sources, targets)


def test_a_translation_with_words_outside_the_target_vocabulary_is_scored_with_a_warning(ckpt):
    """Each such word is scored as <unk> (the probability of any unknown word): 'le zebre' and
    'le girafe' scored alike, without a word."""
    import nmtkit

    warnings: list[str] = []
    model = nmtkit.load(ckpt, warn=warnings.append, **LOAD)
    scores = model.score(["the cat", "the cat", "the cat"], ["le chat", "le zebre", "le girafe"])
    assert scores[1] == pytest.approx(scores[2])
    assert warnings == ["<input>:2: 1 token(s) of the translation not in the model's target vocabulary ('zebre'): "
                        "each is scored as <unk>, the probability of any unknown word (warned once)"]
    model.score(["the cat"], ["le <unk> </s>"])  # <unk> is a word of the vocabulary; '</s>' is not
    assert len(warnings) == 1


@pytest.mark.parametrize("refs, extra, needle", [
    ("le chat\n", [], "line counts differ: -i {src} has 2 lines, --score-reference {ref} has 1 lines"),
    ("le chat\n\n", [], "{ref}:2: empty translation"),
    ("le chat\n\x01\n", [], "{ref}:2: empty translation to the model"),
    ("le chat\nun chien\n", ["--nbest", "2", "--beam", "2"], "--score-reference scores given translations: --nbest"),
    ("le chat\nun chien\n", ["--sampling"], "--score-reference scores given translations: --sampling"),
    # each silently ignored: --output-format bpe did not make the translations read as the model's tokens
    ("le chat\nun chien\n", ["--ban-unk"], "--score-reference scores given translations: --ban-unk would"),
    ("le chat\nun chien\n", ["--beam", "5", "--lenpen", "0.5", "--max-len-b", "3"],
     "--score-reference scores given translations: --beam and --lenpen and --max-len-b would change nothing"),
    ("le chat\nun chien\n", ["--output-format", "bpe"], "--output-format would change nothing (it reads the "
                                                          "translations as --input-format reads the sources)"),
])
def test_bad_score_reference_input_is_one_error_line_and_writes_nothing(ckpt, tmp_path, refs, extra, needle):
    src, ref, out = tmp_path / "in.en", tmp_path / "ref.fr", tmp_path / "out"
    src.write_text("the cat\na dog\n", encoding="utf-8")
    ref.write_text(refs, encoding="utf-8")
    code, _, err = run_cli(["translate", "-m", ckpt, "-i", str(src), "--score-reference", str(ref), "-o", str(out),
                            *extra])
    assert code != 0 and needle.format(src=src, ref=ref) in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_the_output_can_never_be_the_score_reference_file_even_with_force(ckpt, tmp_path):
    src, ref = tmp_path / "in.en", tmp_path / "ref.fr"
    src.write_text("the cat\n", encoding="utf-8")
    ref.write_text("le chat\n", encoding="utf-8")
    code, _, err = run_cli(["translate", "-m", ckpt, "-i", str(src), "--score-reference", str(ref), "-o", str(ref),
                            "--force"])
    assert code != 0 and "--score-reference" in err and len(err.strip().splitlines()) == 1, err
    assert ref.read_text(encoding="utf-8") == "le chat\n"


def test_score_reference_from_a_pipe_stops_at_a_missing_translation_naming_its_line(ckpt, tmp_path):
    ref = tmp_path / "ref.fr"
    ref.write_text("le chat\n", encoding="utf-8")
    code, out, err = run_cli(["translate", "-m", ckpt, "--score-reference", str(ref)], "the cat\na dog\n")
    assert code == 1 and f"{ref}:2: has fewer lines (1) than <stdin>" in err and out == ""


# ---- options and the public surface ---------------------------------------------------------

def test_the_public_surface_is_what_all_lists():
    import nmtkit

    assert set(nmtkit.__all__) == {
        "load", "train", "presets", "Translator", "Result", "Translation", "TokenScores", "DecodeConfig",
        "SearchConfig", "NmtkitError", "ConfigError", "InputError", "CheckpointError", "OutputError", "__version__"}
    for name in nmtkit.__all__:
        assert getattr(nmtkit, name) is not None
    public = {n for n in dir(nmtkit.Translator) if not n.startswith("_")}
    assert public == {"load", "translate", "generate", "score", "has_attention"}
    assert "small" in nmtkit.presets() and nmtkit.presets()["small"]["arch"] == "rnnsearch"


def test_generates_keywords_are_the_search_options_declared_once():
    """`generate` names each SearchConfig field, and nothing else but the lines and alignments."""
    import inspect
    from dataclasses import fields

    import nmtkit

    params = set(inspect.signature(nmtkit.Translator.generate).parameters) - {"self", "lines", "alignments"}
    assert params == {f.name for f in fields(nmtkit.SearchConfig)}


@pytest.mark.parametrize("kwargs,error,needle", [
    (dict(beem=5), "ConfigError", "unknown option(s) beem for load; valid ones: "),
    (dict(beam=5), "ConfigError", "beam: an option of each call: translate(..., beam=5)"),
    (dict(buffer_size=10), "ConfigError", "unknown option(s) buffer_size for load"),  # a file-writing option
    (dict(plot_attention="d"), "ConfigError", "unknown option(s) plot_attention for load"),
    (dict(batch_size=0), "ConfigError", "--batch-size must be at least 1, got 0"),
    (dict(precision="fp8"), "ConfigError", "--precision must be one of"),
    (dict(input_format=None), "ConfigError", "--input-format must be a string, got None"),
])
def test_bad_load_options_raise_one_clear_error(ckpt, kwargs, error, needle):
    import nmtkit
    from nmtkit import errors

    with pytest.raises(getattr(errors, error)) as exc:
        nmtkit.load(ckpt, **kwargs)
    assert needle in str(exc.value)


@pytest.mark.parametrize("call, error, needle", [
    (lambda m: m.generate(LINES, beam="3"), "ConfigError", "--beam must be an integer, got '3'"),
    (lambda m: m.generate(LINES, beam=True), "ConfigError", "--beam must be an integer, got True"),
    (lambda m: m.generate(LINES, beam=0), "ConfigError", "--beam must be at least 1, got 0"),
    (lambda m: m.generate(LINES, nbest=2.5), "ConfigError", "--nbest must be an integer, got 2.5"),
    (lambda m: m.generate(LINES, nbest=0), "ConfigError", "--nbest must be at least 1"),  # was the default, silently
    (lambda m: m.translate(LINES, beam=3, nbest=2), "ConfigError",  # was searched for, then thrown away
     "translate() returns each line's best translation only, not nbest=2 lists: call generate() for those"),
    (lambda m: m.generate(LINES, beam=3, nbest=4), "ConfigError", "--nbest must be between 1 and --beam (3)"),
    (lambda m: m.generate(LINES, temperature=0.0, sampling=True), "ConfigError", "--temperature must be > 0"),
    (lambda m: m.generate(LINES, seed=3), "ConfigError", "--seed needs --sampling"),
    (lambda m: m.generate(LINES, sampling="no"), "ConfigError", "--sampling must be true or false, got 'no'"),
    (lambda m: m.generate(LINES, alignments="no"), "ConfigError", "alignments must be True or False"),
    (lambda m: m.translate(LINES, device="cpu"), "TypeError", "unexpected keyword argument 'device'"),
    (lambda m: m.translate([b"the cat"]), "TypeError", "line 1 is bytes, not str: decode it first"),
    (lambda m: m.translate(b"the cat"), "TypeError", "lines must be a list of str, not bytes"),
    (lambda m: m.translate(["the cat", None]), "TypeError", "line 2 is NoneType, not str"),
    (lambda m: m.translate({"the cat": 1}), "TypeError", "not dict"),
    (lambda m: m.translate(None), "TypeError", "not NoneType"),
    (lambda m: m.translate(["the cat", "a\x00dog"]), "InputError", "line 2 holds binary data (a NUL character at "
                                                                    "character 2)"),  # the CLI refuses it in a file
    (lambda m: m.translate(["the cat\na dog"]), "InputError", "line 1 holds a line break"),
])
def test_per_call_values_and_lines_of_the_wrong_type_are_refused_naming_them(ckpt, call, error, needle):
    """They were translated into plausible rubbish (bytes, a dict's keys), ignored (nbest=0),
    or failed deep inside with an AttributeError; the translator stays usable after."""
    import builtins

    import nmtkit
    from nmtkit import errors

    model = nmtkit.load(ckpt, **LOAD)
    with pytest.raises(getattr(errors, error, None) or getattr(builtins, error), match=re.escape(needle)):
        call(model)
    assert model.translate(["the cat"], **SEARCH) == nmtkit.load(ckpt, **LOAD).translate(["the cat"], **SEARCH)


def test_numpy_scalars_load_search_and_score_as_the_python_values_they_hold(ckpt):
    """np.int64, np.float32 and np.True_ options were each refused as of the wrong type."""
    import numpy as np

    import nmtkit

    model = nmtkit.load(ckpt, threads=np.int64(1), batch_size=np.int64(8), **LOAD)
    [a] = model.generate(["the cat"], beam=np.int64(3), nbest=np.int32(2), lenpen=np.float32(0.5),
                         max_len_b=np.float64(3), alignments=np.True_)
    [b] = model.generate(["the cat"], beam=3, nbest=2, lenpen=0.5, max_len_b=3.0, alignments=True)
    assert [(t.text, t.score, t.alignment()) for t in a.nbest] == [(t.text, t.score, t.alignment()) for t in b.nbest]
    assert model.score(["the cat"], ["le chat"], per_token=np.True_) == model.score(["the cat"], ["le chat"],
                                                                                    per_token=True)
    assert model.translate(np.array(["the cat"])) == model.translate(["the cat"])  # an array's items: np.str_
    with pytest.raises(TypeError, match="lines must be a list of str, not ndarray of 0 dimensions"):
        model.translate(np.array("the cat"))  # numpy's own "iteration over a 0-d array" before


def test_a_missing_checkpoint_is_refused(tmp_path):
    import nmtkit
    from nmtkit.errors import CheckpointError

    with pytest.raises(CheckpointError):
        nmtkit.load(tmp_path / "missing.pt")


def test_a_leading_byte_order_mark_is_no_word_even_without_non_printing_removal(tmp_path):
    """Text read with encoding="utf-8" keeps a file's BOM on its first line; `nmtkit translate`
    drops it, and --remove-non-printing deletes it, but a pipeline without that step kept it as a word."""
    import nmtkit
    from nmtkit.text.pipeline import TextPipeline

    plain = TextPipeline(src_lang="en", tgt_lang="fr", nfc=False, remove_non_printing=False)
    model = nmtkit.load(str(make_checkpoint(tmp_path / "plain.pt", seed=3, pipeline=plain)), **LOAD)
    [with_bom, without] = model.generate(["\ufeffthe cat", "the cat"], **SEARCH)
    assert with_bom.src_tokens == without.src_tokens == ("the", "cat")
    assert with_bom.text == without.text


def _python_examples() -> list[tuple[str, str]]:
    """Every ```python block of the README and docs/python-api.md, as (where, code); the training
    example (`nmtkit.train(`) is run by tests/test_train.py instead."""
    examples = []
    for page in ("README.md", "docs/python-api.md"):
        blocks = re.findall(r"```python\n(.*?)```", (REPO / page).read_text(encoding="utf-8"), flags=re.S)
        examples += [(f"{page}#{i}", b) for i, b in enumerate(blocks, 1) if "nmtkit.train(" not in b]
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
        nmtkit.load(checkpoints(ckpt), **LOAD)


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


def test_a_beam_given_with_sampling_is_warned_ignored_once_as_the_cli_warns(ckpt):
    """sampling=True draws one translation per line whatever beam says (fairseq's draws beam of them):
    the CLI said so, a call dropped beam=5 without a word. Beam 1 and the default are not warned."""
    import nmtkit

    warnings: list[str] = []
    model = nmtkit.load(ckpt, warn=warnings.append, **LOAD)
    for beam in (None, 1, 12, 5, 5):
        model.translate(["the cat"], sampling=True, beam=beam, max_len_b=3.0)
    assert warnings == ["--beam 5 is ignored with --sampling, which draws one translation per line"]


def test_a_warn_that_cannot_be_called_is_refused_at_load(ckpt):
    """It was accepted, and the first warning (a line over --max-src-len) raised 'int is not callable'."""
    import nmtkit

    with pytest.raises(TypeError, match="warn must be a function"):
        nmtkit.load(ckpt, warn=3, **LOAD)


def test_load_and_calls_leave_the_callers_torch_thread_count_as_they_found_it(ckpt, monkeypatch):
    """torch's thread count is the process's: nmtkit.load(threads=2) left it at 2, and each call
    set it back to the model's, undoing what the caller set meanwhile for its own work."""
    import torch

    import nmtkit

    seen = []
    model = nmtkit.load(ckpt, threads=2, workers=1, **LOAD)
    assert torch.get_num_threads() == 1
    real = model._decode_batch
    monkeypatch.setattr(model, "_decode_batch", lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    torch.set_num_threads(3)
    model.translate(["the cat"], beam=1)
    assert torch.get_num_threads() == 3 and seen == [2]  # the model's threads within the call only
    model.score(["the cat"], ["le chat"])
    assert torch.get_num_threads() == 3
