"""Options declared once: each generated click option takes its help and default from its config
field, and validation follows the field's declared choices and range."""
from __future__ import annotations

import re

import click
import pytest

from nmtkit.average import AverageConfig
from nmtkit.cli import cli
from nmtkit.cli import command as cli_command
from nmtkit.cli.serve import NOT_SERVED
from nmtkit.devices import check_device_name
from nmtkit.errors import ConfigError
from nmtkit.options import cli_default, cli_names, help_text, option_fields, resume_overridable
from nmtkit.preprocess import PreprocessConfig
from nmtkit.score import ScoreConfig
from nmtkit.select import SelectConfig
from nmtkit.serve import Limits, ServeConfig
from nmtkit.text.tokenize import TokenizeConfig
from nmtkit.train.config import TrainConfig
from nmtkit.train.presets import ModelOverrides
from nmtkit.translate.config import DecodeConfig, SearchConfig, TranslateConfig
from tests.conftest import tiny_options

# command -> (config classes its options are generated from, whether every default is "not given")
CONVERTED = {"train": ((TrainConfig, ModelOverrides), True), "score": ((ScoreConfig,), False),
             "preprocess": ((PreprocessConfig,), False), "select-data": ((SelectConfig,), False),
             "tokenize": ((TokenizeConfig,), False), "average": ((AverageConfig,), False),
             "translate": ((TranslateConfig,), False), "serve": ((DecodeConfig, SearchConfig, Limits, ServeConfig), False)}
# the fields of those classes that a command leaves out
EXCLUDED = {"serve": NOT_SERVED}


# the options of converted commands that are not config fields: where the run goes, and how loud it is
COMMAND_OPTIONS = {"train": {"data_dir", "save_dir", "resume", "force", "quiet"}, "score": {"quiet"},
                   "preprocess": {"quiet"}, "select-data": {"quiet"}, "tokenize": {"quiet"}, "average": {"quiet"},
                   "translate": {"input_path", "output_path", "alignments_file", "force", "interactive", "quiet"},
                   "serve": set()}


def test_every_command_generates_its_options_from_config_classes():
    assert set(cli.list_commands(None)) == set(CONVERTED)


@pytest.mark.parametrize("command", sorted(CONVERTED))
def test_each_generated_option_takes_its_help_and_default_from_its_config_field(command):
    classes, unset = CONVERTED[command]
    params = {p.name: p for p in cli_command(command).params if isinstance(p, click.Option)}
    fields = [(f, spec) for cls in classes for f, spec in option_fields(cls)
              if f.name not in EXCLUDED.get(command, ())]
    assert fields
    for field, spec in fields:
        param = params[field.name]
        assert set(cli_names(field, spec)) <= set(param.opts)
        assert param.help == help_text(field, spec)
        expected = None if unset else cli_default(field, spec)
        if spec.multiple:  # click holds "none given" as an empty sequence
            assert list(param.default or ()) == list(expected or ())
        elif spec.required:  # no default, which click (>= 8.3) would take as given, even None
            assert param.required and param.default in (None, getattr(click.core, "UNSET", None)), field.name
        else:
            assert param.default == expected
        if spec.choices is not None:
            assert tuple(param.type.choices) == spec.choices


@pytest.mark.parametrize("changes, message", [
    (dict(max_updates=0), "--max-updates must be at least 1, got 0"),
    (dict(optimizer="rmsprop"), "--optimizer must be one of adadelta, adam, sgd, got 'rmsprop'"),
    (dict(lr=0.0), "--lr must be positive, got 0.0"),
    (dict(label_smoothing=1.0), "--label-smoothing must be in [0, 1), got 1.0"),
    (dict(lr_decay=0.0), "--lr-decay must be in (0, 1], got 0.0"),
    (dict(adam_beta2=1.0), "--adam-beta2 must be in [0.0, 1.0), got 1.0"),
    (dict(clip_norm=-1.0), "--clip-norm must be >= 0 (0 disables clipping), got -1.0"),
    # float32 made 1e-300 a 0 that divided 0 by 0: "non-finite loss at update 2", the advice a lower --lr
    (dict(adam_eps=1e-300), "--adam-eps must be at least 1e-45 (float32 rounds a smaller epsilon to 0), got 1e-300"),
    (dict(adadelta_eps=1e-46), "--adadelta-eps must be at least 1e-45 (float32 rounds a smaller epsilon to 0), got 1e-46"),
    # float32 made either a 0: every update changed nothing, the loss stayed put, exit 0
    (dict(lr=1e-300), "--lr 1e-300 is below 1e-45, which float32 rounds to 0: no update would change a weight"),
    (dict(clip_norm=1e-46), "--clip-norm 1e-46 is below 1e-45, which float32 rounds to 0: no update would change a weight"),
    (dict(valid_bleu_samples=-1), "--valid-bleu-samples must be >= 0, got -1"),
    (dict(lr=float("nan")), "--lr must be a finite number, got nan"),
    (dict(seed=1.5), "--seed must be an integer, got 1.5"),
    (dict(seed=True), "--seed must be an integer, got True"),
    (dict(device="gpu"), "--device must be auto, cpu, cuda or cuda:N, not 'gpu'"),
])
def test_a_value_outside_its_declared_range_is_one_line_naming_the_option(changes, message):
    with pytest.raises(ConfigError) as err:
        TrainConfig(**dict(dict(max_updates=1), **changes))
    assert str(err.value) == message



def test_a_numpy_scalar_is_taken_as_the_python_int_float_or_bool_it_holds():
    """From Python (an option picked from an array, a grid of np.arange): np.int64(3) was refused as
    "--beam must be an integer, got np.int64(3)", np.float32(0.5) as "--lenpen must be a finite
    number, got 0.5", np.True_ as "--ban-unk must be true or false, got np.True_"."""
    import numpy as np

    given = SearchConfig(beam=np.int64(3), nbest=np.int32(2), lenpen=np.float32(0.5), ban_unk=np.bool_(True))
    assert given == SearchConfig(beam=3, nbest=2, lenpen=0.5, ban_unk=True)
    assert [type(getattr(given, n)) for n in ("beam", "lenpen", "ban_unk")] == [int, float, bool]  # stored plain
    assert TrainConfig(max_updates=np.int64(7)).to_dict()["max_updates"] == 7
    with pytest.raises(ConfigError, match=re.escape("--beam must be at least 1, got 0")):
        SearchConfig(beam=np.int64(0))


def test_a_value_on_a_closed_bound_of_its_range_is_accepted():
    cfg = TrainConfig(max_updates=1, lr_decay=1.0, label_smoothing=0.0, adam_beta2=0.0, valid_bleu_samples=0)
    assert (cfg.lr_decay, cfg.label_smoothing, cfg.adam_beta2) == (1.0, 0.0, 0.0)


def test_the_rules_between_train_options_refuse_only_what_they_name():
    """A token budget needs no pair count, --patience alone stops a run, and --min-lr may equal --lr."""
    assert TrainConfig(max_updates=1, batch_size=None, max_tokens=100).max_tokens == 100
    assert TrainConfig(patience=3).patience == 3
    assert TrainConfig(max_updates=1, lr=0.5, min_lr=0.5).min_lr == 0.5
    for changes, message in [(dict(max_updates=1, batch_size=None), "need --batch-size or --max-tokens"),
                             (dict(), "no stopping criterion"), (dict(max_updates=1, lr=0.5, min_lr=0.6), "is above")]:
        with pytest.raises(ConfigError, match=message):
            TrainConfig(**changes)


def test_none_leaves_an_optional_field_unset_and_cuda_n_is_a_device():
    cfg = TrainConfig(max_updates=1, max_len=None, threads=None, device="cuda:1")
    assert cfg.max_len is None and cfg.device == "cuda:1"
    assert check_device_name("cuda:0") == "cuda:0"
    with pytest.raises(ConfigError, match="cuda:N"):
        check_device_name("cuda:x")


def test_only_stopping_reporting_and_hardware_options_change_on_resume():
    assert resume_overridable(TrainConfig) == {
        "max_updates", "max_epochs", "max_time", "patience", "valid_every", "valid_bleu_samples", "valid_beam",
        "valid_batch_size", "save_every", "keep_every", "log_every", "on_nan", "tensorboard", "device", "threads",
        "precision", "fuse", "cuda_graphs", "tf32"}


def test_model_overrides_reject_a_choice_outside_the_declared_ones():
    with pytest.raises(ConfigError, match="--readout must be one of prev, new"):
        ModelOverrides(readout="both")
    assert ModelOverrides(emb_dim=16).given() == {"emb_dim": 16}


def test_a_model_size_too_large_to_allocate_is_one_config_error_before_the_run():
    """--emb-dim 10**30 was torch's TypeError ("Overflow when unpacking long long", 50 lines of C++
    frames) from building the model, the run folder made."""
    from nmtkit.train.presets import resolve_model

    for key in ("emb_dim", "maxout"):
        with pytest.raises(ConfigError, match=f"--{key.replace('_', '-')} must be a positive integer below 2"):
            resolve_model("rnnsearch", None, {key: 10**30}, 20, 20)
    assert resolve_model("rnnsearch", None, {"emb_dim": 2**31 - 1}, 20, 20)[1]["emb_dim"] == 2**31 - 1


def test_score_options_are_checked_once_whatever_builds_them():
    with pytest.raises(ConfigError, match="--bucket-width must be at least 1, got 0"):
        ScoreConfig(hyp_paths=["h"], ref_paths=["r"], bucket_width=0)
    with pytest.raises(ConfigError, match="--tokenize must be one of 13a"):
        ScoreConfig(hyp_paths=["h"], ref_paths=["r"], tokenize="moses")



def test_score_from_python_without_a_hypothesis_or_a_reference_is_one_config_error():
    """An empty list of either ended in an IndexError from deep inside the run."""
    for hyps, refs in (([], ["r"]), (["h"], []), ((), ())):
        with pytest.raises(ConfigError, match=r"need --hyp and --ref \(at least one file each\)"):
            ScoreConfig(hyp_paths=hyps, ref_paths=refs)
    ScoreConfig(hyp_paths="h", ref_paths="r")  # one path, given as a string, is a list of one


def test_score_metrics_from_python_are_read_as_the_command_line_reads_them():
    """A string was taken apart into its letters at run ("unknown metric 'b'"), and an empty list
    scored nothing, without a word."""
    assert ScoreConfig(hyp_paths=["h"], ref_paths=["r"], metrics="bleu,CHRF").metrics == ["bleu", "chrf"]
    assert ScoreConfig(hyp_paths=["h"], ref_paths=["r"], metrics=("ter",)).metrics == ["ter"]
    with pytest.raises(ConfigError, match="--metrics: nothing: choose from bleu, chrf, ter"):
        ScoreConfig(hyp_paths=["h"], ref_paths=["r"], metrics=[])
    with pytest.raises(ConfigError, match="--metrics must be a list of metric names, got 3"):
        ScoreConfig(hyp_paths=["h"], ref_paths=["r"], metrics=3)

# path options that also take '-' (a standard stream): refused when empty by nmtkit.io.checks.file_path
STREAM_PATHS = {(TokenizeConfig, "input_path"), (TokenizeConfig, "output_path")}
PATH_METAVARS = {"FILE", "FILE.png", "DIR", "RUN", "PREFIX", "CHECKPOINT"}


@pytest.mark.parametrize("command", sorted(CONVERTED))
def test_every_path_option_refuses_an_empty_path(command):
    """Declared as a path (`option(path=...)`): an empty value, which opens the current
    directory, is one line naming the option (the command line's callback, `check_fields`)."""
    classes, _ = CONVERTED[command]
    for cls in classes:
        for f, spec in option_fields(cls):
            if spec.metavar in PATH_METAVARS and (cls, f.name) not in STREAM_PATHS:
                assert spec.path is not None, f"{cls.__name__}.{f.name}"


def test_an_empty_path_is_refused_by_the_python_api_too():
    from nmtkit.train.config import TrainOptions

    with pytest.raises(ConfigError, match="--tensorboard '' names no directory"):
        TrainOptions(tensorboard="")
    with pytest.raises(ConfigError, match="--ref '' names no file"):
        ScoreConfig(hyp_paths=["h"], ref_paths=["r", ""])


def test_train_run_refuses_an_empty_data_or_run_directory_as_its_command_line_does(tmp_path, monkeypatch):
    """They are RunConfig fields, as the command line's options are: Path("") trained into the current directory."""
    from tests.conftest import train_run

    monkeypatch.chdir(tmp_path)
    for data, run, opt in (("", "run", "--data"), (str(tmp_path), "", "--save-dir")):
        with pytest.raises(ConfigError, match=f"{opt} '' names no directory"):
            train_run(data, run)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", sorted(CONVERTED))
def test_a_converted_command_has_no_hand_written_config_option(command):
    classes, _ = CONVERTED[command]
    generated = {f.name for cls in classes for f, _ in option_fields(cls)} - EXCLUDED.get(command, set())
    options = {p.name for p in cli_command(command).params if isinstance(p, click.Option)} - {"help"}
    assert options - generated == COMMAND_OPTIONS[command]


def test_a_converted_option_takes_its_text_form():
    """--max-time is a duration (90m), though TrainConfig holds seconds."""
    from tests.conftest import run_cli

    assert "Invalid value" not in run_cli(["train", "--data", "nowhere", "--save-dir", "nowhere", "--max-time", "90m"]).err
    param = next(p for p in cli_command("train").params if p.name == "max_time")
    assert param.type_cast_value(click.Context(cli_command("train")), "90m") == "90m"


def test_translate_and_serve_share_one_declaration_of_each_decode_option():
    """Both commands' load and search options come from DecodeConfig and SearchConfig: same names,
    help, default, choices. --beam is two fields: translate's beam width, serve's request limit
    (Limits.max_beam)."""
    translate, serve = ({p.name: p for p in cli_command(c).params if isinstance(p, click.Option)}
                        for c in ("translate", "serve"))
    shared = [f.name for cls in (DecodeConfig, SearchConfig) for f, _ in option_fields(cls) if f.name not in NOT_SERVED]
    assert {"lenpen", "max_len_a", "max_len_b", "batch_size", "max_tokens", "max_src_len", "device", "precision",
            "fuse", "shortlist", "threads", "models", "ensemble"} == set(shared)
    for name in shared:
        a, b = translate[name], serve[name]
        assert (a.opts, a.help, a.default, a.type.name) == (b.opts, b.help, b.default, b.type.name)
        assert getattr(a.type, "choices", None) == getattr(b.type, "choices", None)
    assert set(translate["beam"].opts) == set(serve["max_beam"].opts) == {"-k", "--beam"}
    assert (translate["beam"].default, serve["max_beam"].default) == (12, 5)


@pytest.mark.parametrize("build, message", [
    (lambda: TranslateConfig(models=("m.pt",), beam=0), "--beam must be at least 1, got 0"),
    (lambda: TranslateConfig(models=("m.pt",), precision="fp8"), "--precision must be one of fp32, bf16, fp16, auto"),
    (lambda: TranslateConfig(models=("m.pt",), output_format="xml"), "--output-format must be one of raw, tok, bpe"),
    (lambda: TranslateConfig(models=("m.pt",), max_len_a=-1.0), "--max-len-a must be in [0, 10], got -1.0"),
    (lambda: TranslateConfig(models=("m.pt",), device="gpu"), "--device must be auto, cpu, cuda or cuda:N"),
    (lambda: TranslateConfig(models=("m.pt",), lenpen=float("inf")), "--lenpen must be a finite number, got inf"),
    # an int no float holds: an OverflowError from math.isfinite
    (lambda: SearchConfig(sampling=True, temperature=10 ** 400), "--temperature must be a finite number, got 1000"),
    (lambda: TranslateConfig(models=()), "no model given (-m CHECKPOINT)"),
    (lambda: Limits(max_lines=0), "--max-lines must be at least 1, got 0"),
    (lambda: Limits(max_beam=0), "--beam must be at least 1, got 0"),
    (lambda: Limits(max_beam="3"), "--beam must be an integer, got '3'"),  # the option's name, not the field's
    (lambda: ServeConfig(port=70000), "--port must be in [0, 65535], got 70000"),
    (lambda: ServeConfig(body_timeout=0.0), "--body-timeout must be > 0 seconds, got 0.0"),
])
def test_translate_and_serve_values_are_checked_when_their_config_is_built(build, message):
    with pytest.raises(ConfigError) as err:
        build()
    assert str(err.value).startswith(message)


@pytest.fixture
def validations(monkeypatch):
    """How many times each config of translate and serve was validated (check_fields calls)."""
    from collections import Counter

    import nmtkit.serve.batcher
    import nmtkit.translate.config
    from nmtkit.options import check_fields

    counts: Counter = Counter()

    def counted(config):
        counts[type(config).__name__] += 1
        check_fields(config)

    for module in (nmtkit.translate.config, nmtkit.serve.batcher):
        monkeypatch.setattr(module, "check_fields", counted)
    return counts


def test_a_translate_run_validates_its_config_once(tmp_path, validations):
    from tests.conftest import make_checkpoint, run_cli

    ckpt = str(make_checkpoint(tmp_path / "m.pt", seed=1))
    code, _, err = run_cli(["translate", "-m", ckpt, "--beam", "2", "--max-len-b", "2"], "the cat\n")
    assert code == 0, err
    assert validations == {"TranslateConfig": 1}


def test_a_serve_run_validates_each_config_once(tmp_path, validations, monkeypatch):
    import nmtkit.serve.app
    from tests.conftest import make_checkpoint, run_cli

    served = []

    async def no_server(translator, config, announce, log_line=None, thread=None):
        served.append((config.search.beam, config.limits.max_beam, config.port, config.search.max_len_b))
        thread.close()

    monkeypatch.setattr(nmtkit.serve.app, "serve", no_server)
    ckpt = str(make_checkpoint(tmp_path / "m.pt", seed=1))
    code, _, err = run_cli(["serve", "-m", ckpt, "--beam", "3", "--port", "0", "--max-len-b", "2"])
    assert code == 0, err
    assert served == [(3, 3, 0, 2)]
    assert validations == {"DecodeConfig": 1, "SearchConfig": 1, "ServeConfig": 1, "Limits": 1}


def test_paths_given_from_python_become_strings_and_one_string_for_a_list_a_list_of_it(tmp_path):
    """A Path passed the checks and failed at the end, in the json.dump of the manifest, summary
    or config (the work done, TypeError naming nothing); one string for a list was a list of
    its characters ('/.en: file not found', '22 -m checkpoints given')."""
    import json
    from dataclasses import asdict

    from nmtkit.preprocess import PreprocessConfig
    from nmtkit.select import SelectConfig
    from nmtkit.train.config import TrainOptions
    from nmtkit.translate import TranslateConfig

    pre = PreprocessConfig(src_lang="en", tgt_lang="fr", train=tmp_path / "train", valid="dev", test="test",
                           dest=tmp_path / "d", protect="printf")
    assert (pre.train, pre.dest, pre.test, pre.protect) == (str(tmp_path / "train"), str(tmp_path / "d"), ("test",),
                                                            ("printf",))
    sel = SelectConfig(src_lang="en", tgt_lang="fr", in_domain="in", pool=[tmp_path / "a", "b"],
                       output_prefix=tmp_path / "o", lines=3)
    assert (sel.in_domain, sel.pool, sel.output_prefix) == (("in",), (str(tmp_path / "a"), "b"), str(tmp_path / "o"))
    assert TranslateConfig(models=tmp_path / "m.pt").models == (str(tmp_path / "m.pt"),)
    assert TrainOptions(tensorboard=tmp_path / "tb").tensorboard == str(tmp_path / "tb")
    json.dumps([pre.to_dict(), asdict(sel)])


def test_a_path_given_for_any_string_option_is_its_string():
    """A Path for a field not declared a path was kept: src_lang=Path("en") was a TypeError from
    check_lang's regex ("expected string or bytes-like object"), input_format=Path("tok") was
    refused as "must be one of raw, tok, got 'tok'", and a Path host or -i stayed a Path."""
    from pathlib import Path

    pre = PreprocessConfig(src_lang=Path("en"), tgt_lang="fr", train="t", valid="v", dest="d", input_format=Path("tok"))
    assert (pre.src_lang, pre.input_format) == ("en", "tok")
    assert ScoreConfig(hyp_paths=["h"], ref_paths=["r"], tgt_lang=Path("fr")).tgt_lang == "fr"
    assert type(ServeConfig(host=Path("localhost")).host) is str
    assert type(TokenizeConfig(lang="en", input_path=Path("in.txt")).input_path) is str


@pytest.mark.parametrize("build, message", [
    # bytes were taken apart into character codes, the checks passed with a number or None in the list,
    # and a generator had no len(): a TypeError from pathlib or from validate, naming nothing
    (lambda: TranslateConfig(models=b"m.pt"), "--model must be a list of strings, got b'm.pt'"),
    (lambda: TranslateConfig(models=("m.pt", 3), ensemble=True), "--model must be a string, got 3"),
    (lambda: ScoreConfig(hyp_paths=[None], ref_paths=["r"]), "--hyp must be a string, got None"),
    (lambda: ScoreConfig(hyp_paths=["h"], ref_paths={"r"}), "--ref must be a list of strings, got {'r'}"),
])
def test_a_repeatable_option_given_no_list_of_strings_from_python_is_one_clear_error(build, message):
    with pytest.raises(ConfigError) as err:
        build()
    assert str(err.value) == message


def test_a_repeatable_option_takes_a_generator_from_python():
    assert TranslateConfig(models=(m for m in ["a.pt", "b.pt"]), ensemble=True).models == ("a.pt", "b.pt")
    assert ScoreConfig(hyp_paths=iter(["h"]), ref_paths=["r"], labels=iter(["x"])).labels == ("x",)


def test_the_python_entry_points_name_an_argument_of_the_wrong_kind(tmp_path):
    """preprocess(dict) was an AttributeError from inside it, train_run(None, ...) a TypeError
    from os, resume="yes" was taken as True, and translate() of a set gave its results in an
    arbitrary order."""
    from nmtkit import preprocess, select
    from nmtkit.translate.translator import _lines_of
    from tests.conftest import train_run

    with pytest.raises(TypeError, match="preprocess takes a PreprocessConfig, not dict"):
        preprocess.run({"src_lang": "en"})
    with pytest.raises(TypeError, match="nmtkit.select.run takes a SelectConfig, not NoneType"):
        select.run(None)
    with pytest.raises(TypeError, match="folder for --data is a path, not NoneType"):
        train_run(None, tmp_path / "run")
    with pytest.raises(TypeError, match="resume is True or False, not 'yes'"):
        train_run(tmp_path, tmp_path / "run", resume="yes")
    with pytest.raises(TypeError, match="not set"):
        _lines_of({"the cat", "the dog"})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("module, config, needle", [
    ("nmtkit.translate", DecodeConfig(models=("m.pt",)), "nmtkit.translate.run takes a TranslateConfig, not DecodeConfig"),
    ("nmtkit.score", {"hyp_paths": ["h"]}, "nmtkit.score.run takes a ScoreConfig, not dict"),
    ("nmtkit.average", None, "nmtkit.average.run takes an AverageConfig, not NoneType"),
    ("nmtkit.serve", None, "nmtkit.serve.run takes a ServeConfig, not NoneType"),
    ("nmtkit.text.tokenize", None, "nmtkit.text.tokenize.run takes a TokenizeConfig, not NoneType"),
])
def test_every_verbs_run_names_a_config_of_the_wrong_kind(module, config, needle):
    """As preprocess, select and train did; the others failed with an AttributeError from inside
    them ('NoneType' object has no attribute 'alignments_file')."""
    import importlib

    with pytest.raises(TypeError, match=needle):
        importlib.import_module(module).run(config)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(decode="run/checkpoint_best.pt"), "ServeConfig.decode is a DecodeConfig, not str"),
    (dict(search=DecodeConfig(models=("m.pt",))), "ServeConfig.search is a SearchConfig, not DecodeConfig"),
    (dict(limits={"max_beam": 2}), "ServeConfig.limits is a Limits, not dict"),
])
def test_a_serve_config_holding_a_part_of_the_wrong_kind_is_refused_when_built(kwargs, needle):
    """It was taken, and serve failed with an AttributeError from its decoding thread."""
    with pytest.raises(TypeError, match=needle):
        ServeConfig(**kwargs)


def test_train_run_refuses_callbacks_that_are_not_so_before_the_run_folder(data_dir, tmp_path):
    """callbacks=3 failed as an AttributeError from inside the trainer, once config.json and
    train.log were written."""
    from nmtkit.train.events import Callbacks
    from tests.conftest import train_run

    class Partial:  # duck-typed callbacks missing two methods
        def on_start(self, event): ...
        def on_update(self, update, epoch): ...
        def on_log(self, event): ...

    run = tmp_path / "run"
    with pytest.raises(TypeError, match="callbacks lack on_validation, on_message"):
        train_run(data_dir, run, tiny_options(max_updates=1), callbacks=Partial())
    with pytest.raises(TypeError, match="callbacks lack on_start"):
        train_run(data_dir, run, tiny_options(max_updates=1), callbacks=3)
    assert not run.exists()
    train_run(data_dir, run, tiny_options(max_updates=1), callbacks=Callbacks())  # the base class is accepted
    assert (run / "checkpoint_last.pt").exists()
