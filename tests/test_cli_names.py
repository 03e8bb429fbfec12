"""One name, one meaning across commands: -q/--quiet everywhere, --dest only for a folder, the
languages as --src-lang/--tgt-lang, --device cuda:N wherever a device is taken, and --max-len
counting words in preprocess and train alike."""
from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest

from nmtkit.cli import cli
from nmtkit.cli import command as cli_command
from tests.conftest import run_cli

SINGLE_LANGUAGE = {"tokenize"}  # commands that read one language: --lang


def _options(command: str) -> list[click.Option]:
    return [p for p in cli_command(command).params if isinstance(p, click.Option)]


def _names(command: str) -> set[str]:
    return {name for p in _options(command) for name in p.opts + p.secondary_opts}


@pytest.mark.parametrize("command", sorted(cli.list_commands(None)))
def test_every_command_has_q_and_quiet_as_one_flag(command):
    quiet = [p for p in _options(command) if "--quiet" in p.opts]
    assert len(quiet) == 1, command
    assert set(quiet[0].opts) == {"-q", "--quiet"} and quiet[0].is_flag


@pytest.mark.parametrize("command", sorted(cli.list_commands(None)))
def test_dest_names_only_a_folder(command):
    for p in _options(command):
        if "--dest" in p.opts:
            assert p.metavar == "DIR", (command, p.metavar)
        if p.metavar == "PREFIX":  # a prefix of files is named for what it is
            assert "--dest" not in p.opts, command


@pytest.mark.parametrize("command", sorted(cli.list_commands(None)))
def test_languages_are_spelled_src_lang_and_tgt_lang(command):
    langs = {n for n in _names(command) if n.endswith("lang")}
    if command in SINGLE_LANGUAGE:
        assert langs == {"--lang"}
    else:
        assert langs <= {"--src-lang", "--tgt-lang"}, (command, langs)


def test_a_command_taking_a_language_pair_takes_both_names():
    for command in ("preprocess", "select-data", "score"):
        assert {"--src-lang", "--tgt-lang"} <= _names(command), command


DEVICE_COMMANDS = ("train", "translate", "serve")


def test_the_commands_that_take_a_device_are_the_ones_checked_here():
    assert {c for c in cli.list_commands(None) if "--device" in _names(c)} == set(DEVICE_COMMANDS)


def _cuda_n_refused_only_for_want_of_that_gpu(code: int, err: str) -> None:
    """`cuda:7` is a device name every command accepts: the one-line error says the machine lacks
    that GPU, never that the name is not one."""
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert "cuda:7" in err and "cuda:N, not" not in err and "Traceback" not in err
    assert re.search(r"no CUDA device is available|there are \d+ CUDA device", err), err


def _train_argv(world, run: Path, *extra: str) -> list[str]:
    from tests.test_bad_inputs import TINY

    return ["train", "--data", str(world.data), "--save-dir", str(run), *TINY, "--max-updates", "1", *extra]


def test_device_cuda_n_is_a_device_name_in_every_command_and_the_api(world):
    commands = {
        "train": _train_argv(world, world.tmp / "run"),
        "translate": ["translate", "-m", str(world.ckpt), "-i", str(world.src)],
        "serve": ["serve", "-m", str(world.ckpt), "--port", "0"],
    }
    for name, argv in commands.items():
        refused = run_cli([*argv, "--device", "cuda:7", "-q"])
        _cuda_n_refused_only_for_want_of_that_gpu(refused.code, refused.err)
        assert not (world.tmp / "run").exists()  # a refused start leaves no run folder behind
        for bad in ("gpu", "cuda:x"):
            code, _, err = run_cli([*argv, "--device", bad, "-q"])
            assert code != 0 and f"'{bad}'" in err and "cuda" in err and len(err.splitlines()) == 1, (name, err)
    import nmtkit
    from nmtkit.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        nmtkit.load(world.ckpt, device="cuda:7")
    _cuda_n_refused_only_for_want_of_that_gpu(1, f"nmtkit: {err.value}")


def test_score_quiet_silences_its_notes_but_not_the_scores(tmp_path):
    (tmp_path / "ref.fr").write_text("le chat est noir .\nun chien\n", encoding="utf-8")
    (tmp_path / "hyp.fr").write_text("le chat est noir .\nle chien\n", encoding="utf-8")
    (tmp_path / "src.en").write_text("the cat is black .\na dog\n", encoding="utf-8")
    argv = ["score", "--hyp", str(tmp_path / "hyp.fr"), "-r", str(tmp_path / "ref.fr"), "--src",
            str(tmp_path / "src.en"), "--plot", str(tmp_path / "len.png"), "--tgt-lang", "fr", "--json"]
    loud = click.testing.CliRunner().invoke(cli, argv)
    quiet = click.testing.CliRunner().invoke(cli, [*argv, "-q"])
    assert loud.exit_code == 0 and quiet.exit_code == 0, (loud.output, quiet.output)
    assert "len.png" in loud.stderr and quiet.stderr == ""
    drop_plot = lambda out: {k: v for k, v in json.loads(out).items() if k != "by_length"}  # noqa: E731
    assert drop_plot(quiet.stdout) == drop_plot(loud.stdout)
    assert json.loads(quiet.stdout)["systems"]


# ---- --max-len counts words ---------------------------------------------------------------------

LONG_WORDS = ["quixotically", "zephyrous", "jabberwocky", "flummoxing", "syzygy", "kvetching"]


def _max_len_corpus(d: Path) -> Path:
    """Training pairs: many short ones; one of exactly 30 words, long rare words that a few BPE
    merges leave in pieces (far more than 30 subwords); one of 31 one-letter words."""
    short = [("a cat sat", "un chat"), ("the dog ran", "le chien"), ("a bird", "un oiseau")] * 4
    thirty = " ".join(LONG_WORDS[k % len(LONG_WORDS)] for k in range(30))
    pairs = short + [(thirty, thirty), (" ".join("x" * 31), " ".join("y" * 31))]
    for lang, side in (("en", 0), ("fr", 1)):
        (d / f"train.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
        (d / f"dev.{lang}").write_text("".join(p[side] + "\n" for p in short[:3]), encoding="utf-8")
    return d


def test_train_max_len_counts_words_as_preprocess_does_and_rnnsearch_30_keeps_30_words(tmp_path):
    """A pair of 30 words that BPE makes far longer in subwords is kept by the rnnsearch-30
    preset (the paper: pairs of at most 30 words); a pair of 31 words is dropped."""
    from nmtkit.data.binarized import ParallelData

    corpus, data, run = _max_len_corpus(tmp_path), tmp_path / "data", tmp_path / "run"
    code, _, err = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(corpus / "train"),
                            "--valid", str(corpus / "dev"), "--dest", str(data), "--bpe", "10", "--max-len", "50",
                          "--workers", "1", "-q"])
    assert code == 0, err
    train = ParallelData(data, "train", "en", "fr")
    assert train.src.word_lengths.tolist()[-2:] == [30, 31]
    assert train.src.lengths[-2] > 40  # the 30 words are over 40 subwords
    code, _, err = run_cli(["train", "--data", str(data), "--save-dir", str(run), "--preset", "rnnsearch-30",
                          "--emb-dim", "8", "--enc-hidden", "8", "--dec-hidden", "8", "--att-hidden", "8",
                          "--maxout", "4", "--max-updates", "1", "--valid-bleu-samples", "0", "--device", "cpu",
                          "--threads", "1"])
    assert code == 0, err
    assert json.loads((run / "config.json").read_text())["train_config"]["max_len"] == 30
    assert f"{len(train) - 1} pairs (1 over --max-len dropped)" in err


def _shared_options() -> dict[str, list[tuple[str, click.Option]]]:
    """Each long option name taken by more than one command -> (command, option) for each."""
    by_name: dict[str, list[tuple[str, click.Option]]] = {}
    for command in cli.list_commands(None):
        for p in _options(command):
            by_name.setdefault(next(n for n in p.opts if n.startswith("--")), []).append((command, p))
    return {name: uses for name, uses in by_name.items() if len(uses) > 1}


def test_an_option_shared_by_commands_is_a_switch_of_one_form_everywhere():
    """--lowercase was --lowercase/--no-lowercase in select-data alone."""
    forms = {name: {(c, p.is_flag, tuple(p.secondary_opts)) for c, p in uses} for name, uses in _shared_options().items()}
    assert [sorted(f) for f in forms.values() if len({form[1:] for form in f}) > 1] == []


def test_an_option_shared_by_commands_has_one_metavar():
    """The same kind of value is named alike: select-data's --src-lang was TEXT where preprocess's
    is LANG, average's -m FILE where translate's is CHECKPOINT, translate's --seed S."""
    metavars = {name: {(c, p.metavar or p.type.name.upper()) for c, p in uses
                       if not p.is_flag and not isinstance(p.type, click.Choice)}  # choices name their values
                for name, uses in _shared_options().items()}
    assert [(name, sorted(m)) for name, m in metavars.items() if len({v for _, v in m}) > 1] == []
