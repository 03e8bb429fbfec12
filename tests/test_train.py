"""Training loop properties on a tiny synthetic task (CPU, one thread, a few seconds each)."""
from __future__ import annotations

import inspect
import math

import pytest
import torch

from nmtkit.checkpoint import load_checkpoint, load_model
from nmtkit.errors import ConfigError, OutputExistsError
from nmtkit.train.config import TrainConfig, parse_duration
from tests.conftest import TINY_MODEL, tiny_config, tiny_options, tiny_overrides, train_run
from tests.conftest import records as _records


def test_dev_loss_decreases_on_tiny_data(data_dir, tmp_path):
    run = tmp_path / "run"
    res = train_run(data_dir, run, tiny_options(max_updates=60, valid_every=20, lr=0.03), tiny_overrides())
    assert res.reason == "max-updates" and res.update == 60
    valid = _records(run, "valid")
    assert len(valid) == 3
    assert valid[-1]["loss"] < valid[0]["loss"] - 0.5, [v["loss"] for v in valid]
    train = _records(run, "train")
    assert train[-1]["loss"] < train[0]["loss"]
    assert all(r["tgt_tokens_per_s"] > 0 for r in train)
    assert (run / "curves.png").stat().st_size > 1000
    assert "validation at update 60" in (run / "train.log").read_text()


def test_checkpoint_is_self_contained_and_loads_with_weights_only(data_dir, tmp_path):
    run = tmp_path / "run"
    train_run(data_dir, run, tiny_options(max_updates=10, valid_every=5), tiny_overrides())
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        torch.load(run / name, map_location="cpu", weights_only=True)  # no code, no classes
        ckpt = load_checkpoint(run / name)
        assert ckpt["arch"] == "rnnsearch"
        assert ckpt["model_config"]["emb_dim"] == 16 and ckpt["model_config"]["src_vocab_size"] == 12
        cfg = TrainConfig.from_dict(ckpt["train_config"])
        assert cfg.optimizer == "adam" and cfg.max_updates == 10
        assert ckpt["src_vocab"][:5] == ["<pad>", "<unk>", "<s>", "</s>", "w0"]
        assert ckpt["tgt_vocab"][4] == "v0"
        assert ckpt["pipeline"]["src_lang"] == "en" and (ckpt["src_lang"], ckpt["tgt_lang"]) == ("en", "fr")
        assert ckpt["data_manifest"]["vocab"]["src"] == "vocab.en.txt"
    last = load_checkpoint(run / "checkpoint_last.pt")
    assert {"optimizer_state", "schedule_state", "rng", "trainer"} <= set(last)
    assert last["trainer"]["update"] == 10
    model, _ = load_model(run / "checkpoint_best.pt")
    src = torch.tensor([[4, 5, 6]])
    with torch.no_grad():
        assert model(src, torch.tensor([3]), torch.tensor([[2, 6]])).shape[:2] == (1, 2)


def test_max_time_stops_the_run(data_dir, tmp_path):
    res = train_run(data_dir, tmp_path / "run", tiny_options(max_updates=None, max_time=0.5, valid_every=1000,
                                                                valid_bleu_samples=0), tiny_overrides())
    assert res.reason == "max-time" and res.update > 0


def test_token_budget_batches_and_bf16_on_cpu(data_dir, tmp_path):
    run = tmp_path / "run"
    res = train_run(data_dir, run, tiny_options(max_updates=6, batch_size=None, max_tokens=60, valid_every=3,
                                                   precision="bf16", valid_bleu_samples=4), tiny_overrides())
    assert res.update == 6
    assert load_checkpoint(run / "checkpoint_last.pt")["train_config"]["max_tokens"] == 60
    assert all(math.isfinite(r["loss"]) for r in _records(run, "valid"))


@pytest.mark.parametrize("changes, match", [
    (dict(optimizer="rmsprop"), "--optimizer"),
    (dict(max_updates=None, max_epochs=None, max_time=None, patience=None), "stopping criterion"),
    (dict(batch_size=None, max_tokens=None), "--max-tokens"),
    (dict(best_metric="bleu", valid_bleu_samples=0), "BLEU"),
    (dict(label_smoothing=1.0), "label-smoothing"),
    (dict(valid_every=0), "--valid-every"),
])
def test_inconsistent_train_config_is_rejected(changes, match):
    with pytest.raises(ConfigError, match=match):
        tiny_config(**changes)


def test_train_options_are_train_config_fields_each_unset_until_given_and_checked_alike():
    import dataclasses

    from nmtkit.train.config import TrainOptions

    assert [f.name for f in dataclasses.fields(TrainOptions)] == [f.name for f in dataclasses.fields(TrainConfig)]
    for given, full in zip(dataclasses.fields(TrainOptions), dataclasses.fields(TrainConfig)):
        assert given.type in (full.type, f"{full.type} | None") and given.default is None, given.name
    assert "max_updates: int | None = None" in inspect.getsource(TrainOptions)  # static: an editor sees it
    assert TrainOptions().given() == {}
    assert TrainOptions(lr=0.5).replace(max_updates=3).given() == {"lr": 0.5, "max_updates": 3}
    for changes in (dict(max_updates=0), dict(optimizer="rmsprop"), dict(lr=float("nan")), dict(preset="huge")):
        with pytest.raises(ConfigError) as given:
            TrainOptions(**changes)
        with pytest.raises(ConfigError) as full:
            tiny_config(**changes)
        assert str(given.value) == str(full.value)


def test_nmtkit_train_takes_the_options_by_their_long_names_and_refuses_unknown_ones(data_dir, tmp_path):
    import nmtkit
    from tests.conftest import TINY_MODEL

    with pytest.raises(ConfigError, match="unknown option.s. max_update for nmtkit.train; valid ones: .*max_updates"):
        nmtkit.train(data_dir, tmp_path / "run", max_update=3)
    with pytest.raises(ConfigError, match="--max-updates must be at least 1, got 0"):
        nmtkit.train(data_dir, tmp_path / "run", max_updates=0)
    assert not (tmp_path / "run").exists()
    result = nmtkit.train(data_dir, tmp_path / "run", arch="rnnsearch", max_updates=2, device="cpu", threads=1,
                          valid_every=100, valid_bleu_samples=0, **TINY_MODEL)
    assert result.update == 2 and (tmp_path / "run" / "checkpoint_last.pt").is_file()
    assert nmtkit.train(data_dir, tmp_path / "run", resume=True, max_updates=3).update == 3


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_stop_signal_in_nmtkit_train_saves_the_run_then_raises_as_ctrl_c_does(data_dir, tmp_path, sig):
    """From Python (a script, a notebook) Ctrl-C returned a TrainResult as a finished run does, and
    the caller's code went on; now the run saves checkpoint_last.pt, then raises a KeyboardInterrupt."""
    import os
    import signal

    import nmtkit
    from nmtkit.train.events import Callbacks

    class SignalAt3(Callbacks):
        def on_update(self, update, epoch):
            handler = signal.getsignal(getattr(signal, sig))
            if update == 3 and type(getattr(handler, "__self__", None)).__name__ == "StopSignals":
                os.kill(os.getpid(), getattr(signal, sig))

    with pytest.raises(KeyboardInterrupt, match=f"^{sig} at update 3: checkpoint_last.pt saved") as stop:
        nmtkit.train(data_dir, tmp_path / "run", arch="rnnsearch", max_updates=100, device="cpu", threads=1,
                     valid_every=100, valid_bleu_samples=0, callbacks=SignalAt3(), **TINY_MODEL)
    assert isinstance(stop.value, nmtkit.train.TrainInterrupted) and stop.value.result.reason == sig
    assert load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")["trainer"]["update"] == 3
    assert nmtkit.train(data_dir, tmp_path / "run", resume=True, max_updates=4).update == 4


def test_train_run_takes_typed_options_not_a_dict(data_dir, tmp_path):
    with pytest.raises(TypeError, match="TrainOptions"):
        train_run(data_dir, tmp_path / "run", dict(max_updates=1))
    assert not (tmp_path / "run").exists()


def test_parse_duration():
    assert parse_duration("90") == 90 and parse_duration("30m") == 1800 and parse_duration("2h") == 7200
    with pytest.raises(ConfigError):
        parse_duration("soon")



def test_a_budget_stop_between_validations_still_leaves_a_best_checkpoint(data_dir, tmp_path):
    run = tmp_path / "run"
    res = train_run(data_dir, run, tiny_options(max_updates=7, valid_every=100), tiny_overrides())
    assert res.reason == "max-updates" and res.update == 7
    valid = _records(run, "valid")
    assert [(v["update"], v["final"]) for v in valid] == [(7, True)]
    best = load_checkpoint(run / "checkpoint_best.pt")
    assert best["trainer"]["update"] == 7
    # a final validation leaves early stopping and the schedule alone
    assert best["trainer"]["bad_validations"] == 0


@pytest.mark.parametrize("metric", ["loss", "bleu"])
def test_a_tied_dev_score_makes_the_later_model_best_but_is_no_gain_for_patience_or_plateau(
        data_dir, tmp_path, monkeypatch, metric):
    """fairseq's rule: checkpoint_best.pt is replaced on a tie (`is_better` >=), early stopping
    and the plateau schedule count a tie as no improvement (`should_stop_early` >)."""
    import nmtkit.train.trainer as trainer_mod

    monkeypatch.setattr(trainer_mod, "dev_scores", lambda ctx, stop=None: (2.0, 2.0))  # every validation ties
    run = tmp_path / "run"
    res = train_run(data_dir, run, tiny_options(max_updates=10, valid_every=2, patience=2, best_metric=metric,
                                                lr_schedule="plateau", lr_patience=0), tiny_overrides())
    assert (res.reason, res.update, res.best_update) == ("patience", 6, 6)
    assert [v["best"] for v in _records(run, "valid")] == [True, True, True]
    assert load_checkpoint(run / "checkpoint_best.pt")["trainer"]["update"] == 6
    assert load_checkpoint(run / "checkpoint_last.pt")["schedule_state"]["decay"] == 0.25  # decayed at 4 and 6



def test_patience_counts_validations_without_gain_since_the_last_gain(data_dir, tmp_path, monkeypatch):
    """--patience 2 stops after two bad validations in a row; a gain between two bad ones resets the count."""
    import nmtkit.train.trainer as trainer_mod

    losses = iter([3.0, 4.0, 2.0, 5.0, 6.0, 7.0])  # validations at updates 2, 4, ..., 12
    monkeypatch.setattr(trainer_mod, "dev_scores", lambda ctx, stop=None: (next(losses), 0.0))
    res = train_run(data_dir, tmp_path / "run", tiny_options(max_updates=20, valid_every=2, patience=2,
                                                             valid_bleu_samples=0), tiny_overrides())
    assert (res.reason, res.update, res.best_update) == ("patience", 10, 6)


def test_patience_plateau_and_ema_without_a_validation_or_average_before_max_updates_warn(data_dir, tmp_path, caplog):
    opts = tiny_options(max_updates=2, valid_every=2, valid_bleu_samples=0, patience=1, lr_schedule="plateau",
                        ema_decay=0.5, ema_start=1)
    train_run(data_dir, tmp_path / "a", opts, tiny_overrides())
    assert ("--valid-every 2 schedules no validation before --max-updates 2: --patience and --lr-schedule plateau "
            "change nothing") in caplog.text
    assert "starts no average" not in caplog.text
    caplog.clear()
    train_run(data_dir, tmp_path / "b", opts.replace(max_updates=3, lr_schedule=None, ema_start=3), tiny_overrides())
    assert "schedules no validation" not in caplog.text
    # the "average" was a copy of the weights at every update, silently
    assert "--ema-start 3 starts no average before --max-updates 3: --ema-decay changes nothing" in caplog.text


def test_keep_every_keeps_the_model_at_those_updates_and_force_clears_them(data_dir, tmp_path):
    """--keep-every N writes checkpoint_<update>.pt (model, no optimiser) at every N-th update,
    each the model as it was then; a run directory holding only those refuses a new run without
    --force, and --force removes them."""
    run = tmp_path / "run"
    train_run(data_dir, run, tiny_options(max_updates=9, valid_every=100, keep_every=4), tiny_overrides())
    kept = sorted(p.name for p in run.glob("checkpoint_*.pt"))
    assert kept == ["checkpoint_4.pt", "checkpoint_8.pt", "checkpoint_best.pt", "checkpoint_last.pt"]
    c4, c8 = load_checkpoint(run / "checkpoint_4.pt"), load_checkpoint(run / "checkpoint_8.pt")
    assert (c4["trainer"]["update"], c8["trainer"]["update"]) == (4, 8)
    assert "optimizer_state" not in c8
    assert any(not torch.equal(c4["model_state"][k], c8["model_state"][k]) for k in c4["model_state"])
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        (run / name).unlink()
    with pytest.raises(OutputExistsError, match="checkpoint_4.pt"):
        train_run(data_dir, run, tiny_options(max_updates=2, valid_every=100), tiny_overrides())
    train_run(data_dir, run, tiny_options(max_updates=2, valid_every=100), tiny_overrides(), force=True)
    assert not (run / "checkpoint_4.pt").exists() and not (run / "checkpoint_8.pt").exists()


def test_negative_keep_every_is_refused():
    with pytest.raises(ConfigError, match="--keep-every"):
        tiny_config(keep_every=-1)


def test_a_failing_validation_loses_no_update_before_it(data_dir, tmp_path, monkeypatch):
    """Saved first, then validated: an error in the validation at update 10 (10 is no save point)
    leaves checkpoint_last.pt at update 10, and a resume from it, which runs that validation again,
    ends where the uninterrupted run ends."""
    import nmtkit.train.validate as validate_mod

    opts = tiny_options(max_updates=20, valid_every=10, save_every=20, lr_schedule="plateau", lr_patience=0)
    train_run(data_dir, tmp_path / "full", opts, tiny_overrides())

    real = validate_mod.dev_loss

    def broken(*args, **kwargs):
        raise RuntimeError("validation broke")

    monkeypatch.setattr(validate_mod, "dev_loss", broken)
    with pytest.raises(RuntimeError, match="validation broke"):
        train_run(data_dir, tmp_path / "half", opts, tiny_overrides())
    assert load_checkpoint(tmp_path / "half" / "checkpoint_last.pt")["trainer"]["update"] == 10
    monkeypatch.setattr(validate_mod, "dev_loss", real)
    train_run(data_dir, tmp_path / "half", opts, tiny_overrides(), resume=True)
    a = load_checkpoint(tmp_path / "full" / "checkpoint_last.pt")
    b = load_checkpoint(tmp_path / "half" / "checkpoint_last.pt")
    wall = ("elapsed",)
    assert {k: v for k, v in a["trainer"].items() if k not in wall} == {
        k: v for k, v in b["trainer"].items() if k not in wall}
    assert a["schedule_state"] == b["schedule_state"]
    for name, tensor in a["model_state"].items():
        assert torch.equal(tensor, b["model_state"][name]), name
    updates = [r["update"] for r in _records(tmp_path / "half", "valid")]
    assert updates == [10, 20], updates


def test_a_module_dev_bleu_needs_but_lacks_stops_the_run_before_its_first_update(data_dir, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "sacrebleu", None)  # `import sacrebleu` now fails
    with pytest.raises(ConfigError, match="dev BLEU needs the module 'sacrebleu'.*--valid-bleu-samples 0"):
        train_run(data_dir, tmp_path / "run", tiny_options(max_updates=20, valid_every=10), tiny_overrides())
    assert not (tmp_path / "run" / "checkpoint_last.pt").exists()
    # without dev BLEU the run does not need it
    res = train_run(data_dir, tmp_path / "run", tiny_options(max_updates=2, valid_every=10, valid_bleu_samples=0),
                       tiny_overrides())
    assert res.update == 2


def test_the_public_train_step_on_a_fresh_context_makes_the_loops_updates(data_dir, tmp_path):
    """A context straight from its constructor, driven by `train_step` over the epoch's plan,
    reaches the weights the training loop saves after as many updates."""
    from nmtkit.train.context import TrainContext, train_step
    from nmtkit.train.data import DataDir
    from nmtkit.train.presets import resolve_model

    opts = tiny_options(max_updates=6, valid_every=100, valid_bleu_samples=0)
    train_run(data_dir, tmp_path / "loop", opts, tiny_overrides())
    data = DataDir.open(data_dir)
    arch, mcfg = resolve_model("rnnsearch", None, TINY_MODEL, len(data.src_vocab), len(data.tgt_vocab))
    ctx = TrainContext(TrainConfig.from_dict(opts.given()), data, tmp_path / "step", arch, mcfg)
    try:
        plan = ctx.epoch_plan(1)
        assert len(plan) > 6
        assert all(train_step(ctx, [plan[k]]) for k in range(6))
        assert ctx.state.update == 6
        saved = load_checkpoint(tmp_path / "loop" / "checkpoint_last.pt")["model_state"]
        for name, tensor in ctx.model.state_dict().items():
            assert torch.equal(tensor, saved[name]), name
    finally:
        ctx.close()
    assert not (tmp_path / "step").exists()  # a context writes nothing: the loop owns the run folder


def test_callbacks_receive_typed_events_that_are_the_metrics_records(data_dir, tmp_path):
    import json

    from nmtkit.train.events import Callbacks, LogEvent, StartEvent, ValidationEvent

    class Keep(Callbacks):
        def __init__(self):
            self.events = []

        def on_start(self, event):
            self.events.append(event)

        def on_log(self, event):
            self.events.append(event)

        def on_validation(self, event):
            self.events.append(event)

    keep = Keep()
    run = tmp_path / "run"
    train_run(data_dir, run, tiny_options(max_updates=10, valid_every=5, log_every=5), tiny_overrides(), callbacks=keep)
    start, *rest = keep.events
    assert isinstance(start, StartEvent) and (start.update, start.max_updates, start.dropped_pairs) == (0, 10, 0)
    assert [type(e) for e in rest] == [LogEvent, ValidationEvent] * 2
    assert rest[-1].update == 10 and rest[-1].bleu is not None and not rest[-1].final
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [e.record() for e in rest] == records


@pytest.mark.slow  # the small preset's 4M parameters: 10-30 s on a shared 2-core machine
def test_the_docs_training_snippet_runs_with_a_smaller_budget(tmp_path):
    """docs/python-api.md's `nmtkit.train` example, on a tiny data directory at its path, with its
    1000 updates cut to 2 (the only change)."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import make_data_dir

    readme = (Path(__file__).resolve().parent.parent / "docs" / "python-api.md").read_text(encoding="utf-8")
    [code] = [b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "nmtkit.train(" in b]
    assert "max_updates=1000" in code
    make_data_dir(tmp_path / "work" / "tatoeba", n_train=48, n_valid=8)
    proc = subprocess.run([sys.executable, "-c", code.replace("max_updates=1000", "max_updates=2")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "2" and (tmp_path / "work" / "run-py" / "config.json").exists()



def test_cpu_training_gives_free_memory_back_every_few_updates(data_dir, tmp_path, monkeypatch):
    """Batches of ever new shapes leave freed buffers in malloc's arenas; without a periodic
    trim a bf16 CPU run's resident size grew through the run (nmtkit.devices)."""
    from nmtkit.devices import RELEASE_EVERY_UPDATES
    from nmtkit.train import trainer

    calls = []
    monkeypatch.setattr(trainer, "release_free_memory", lambda: calls.append(1) or True)
    updates = 3 * RELEASE_EVERY_UPDATES
    train_run(data_dir, tmp_path / "run", tiny_options(max_updates=updates, valid_every=1000,
                                                          valid_bleu_samples=0), tiny_overrides())
    assert len(calls) == updates // RELEASE_EVERY_UPDATES


def test_a_training_run_leaves_torchs_thread_count_as_it_found_it(data_dir, tmp_path):
    """train_run(threads=1) left the process at 1 thread for whatever it did next."""
    import torch

    from tests.conftest import tiny_options, tiny_overrides, train_run

    before = torch.get_num_threads()
    train_run(data_dir, tmp_path / "run", tiny_options(max_updates=2, threads=before + 1), tiny_overrides())
    assert torch.get_num_threads() == before


def test_a_training_run_leaves_the_translators_default_threads_as_torchs_own(data_dir, tmp_path, monkeypatch):
    """nmtkit.load's default threads, torch's own count, were noted at nmtkit's first change of it:
    inside a first training run, at its --threads, which every later translator took (and --workers)."""
    import torch

    import nmtkit.devices
    from tests.conftest import tiny_options, tiny_overrides, train_run

    monkeypatch.setattr(nmtkit.devices, "_DEFAULT_THREADS", [])  # as in a process that trains first
    before = torch.get_num_threads()
    train_run(data_dir, tmp_path / "run", tiny_options(max_updates=2, threads=before + 1), tiny_overrides())
    assert nmtkit.devices.default_threads() == before


def test_a_training_run_leaves_torchs_tf32_settings_as_it_found_them(data_dir, tmp_path, monkeypatch):
    """An fp32 run on CUDA turned TF32 on for the process (--tf32, the default): a translator's fp32
    products after it, and the caller's own, ran in TF32 where a fresh process's are exact."""
    import torch

    from nmtkit.models import precision
    from nmtkit.train import context
    from tests.conftest import tiny_options, tiny_overrides, train_run

    flags = (torch.backends.cuda.matmul, torch.backends.cudnn)
    name = "fp32_precision" if hasattr(flags[0], "fp32_precision") else "allow_tf32"  # torch < 2.9
    before = [getattr(f, name) for f in flags]
    monkeypatch.setattr(context, "set_tf32", lambda device, prec, on: precision.set_tf32("cuda", "fp32", on))  # as on CUDA
    train_run(data_dir, tmp_path / "run", tiny_options(max_updates=2), tiny_overrides())
    assert [getattr(f, name) for f in flags] == before


def test_a_training_run_leaves_the_nmtkit_loggers_level_as_it_found_it(data_dir, tmp_path):
    """The run lowered it to INFO for train.log and left it there: a caller who had raised it to quiet
    nmtkit's warnings got them again, and its own handlers every later run's progress lines."""
    import logging

    from tests.conftest import tiny_options, tiny_overrides, train_run

    logger = logging.getLogger("nmtkit")
    before = logger.level
    logger.setLevel(logging.ERROR)
    try:
        train_run(data_dir, tmp_path / "run", tiny_options(max_updates=2), tiny_overrides())
        assert logger.level == logging.ERROR
    finally:
        logger.setLevel(before)


def test_a_training_run_leaves_the_callers_random_generators_as_it_found_them(data_dir, tmp_path):
    """The run seeded Python's, numpy's and torch's generators with its --seed and left them so: a loop
    that drew a random subset of its data before each run drew the same one before every run after the first."""
    import random

    import numpy as np
    import torch

    from tests.conftest import tiny_options, tiny_overrides, train_run

    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    train_run(data_dir, tmp_path / "run", tiny_options(max_updates=2), tiny_overrides())
    drawn = random.random(), np.random.random(), torch.rand(1).item()
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])
    assert drawn == (random.random(), np.random.random(), torch.rand(1).item())


def test_dev_bleu_scores_the_first_n_dev_translations_detokenised_against_their_own_references(tmp_path,
                                                                                               monkeypatch):
    """An oracle search gives each dev source its reference (pair 5 a wrong one): BLEU of the first
    2 is 100 against the raw references, and of the first 5, where pair 2 has no source (scored as
    an empty translation), pair 3 one of 251 tokens (left out) and pair 4 one of exactly the 250
    validated, is sacrebleu's of those translations; the binarised references score alike."""
    from collections import Counter
    from types import SimpleNamespace

    import sacrebleu

    import nmtkit.decode.search as search
    from nmtkit.data.binarized import ParallelData, write_split
    from nmtkit.decode.steps import Hypothesis
    from nmtkit.text.pipeline import TextPipeline
    from nmtkit.text.vocab import Vocab
    from nmtkit.train.validate import dev_bleu

    pipe = TextPipeline("en", "fr")
    texts = ["l'homme a dit oui.", "c'est la vie.", "il pleut.", "qu'il vienne.", "le chat dort.", "j'y vais."]
    toks = [pipe.encode(t, "tgt") for t in texts]
    vocab = Vocab.build(Counter(w for t in toks for w in t))
    refs = [pipe.decode(t, "tgt") for t in toks]
    write_split(tmp_path, "valid", "en", [[4], [5], [], [7] * 251, [8] * 250, [9]])
    write_split(tmp_path, "valid", "fr", [vocab.encode(t) for t in toks])

    def oracle(model, src, lens, max_len):
        return [Hypothesis(vocab.encode(toks[int(s[0]) - 4 if int(s[0]) < 9 else 0]), 0.0, 0.0) for s in src]

    monkeypatch.setattr(search, "greedy_search", oracle)
    ctx = SimpleNamespace(model=torch.nn.Linear(1, 1), valid_data=ParallelData(tmp_path, "valid", "en", "fr"),
                          device=torch.device("cpu"), data=SimpleNamespace(tgt_vocab=vocab, pipeline=pipe.to_dict()),
                          cfg=SimpleNamespace(valid_beam=1), precision="fp32", raw_refs=texts)
    assert dev_bleu(ctx, 2, 2) == pytest.approx(100.0)
    expected = sacrebleu.corpus_bleu([refs[0], refs[1], "", refs[4]], [refs[:3] + refs[4:5]]).score
    assert dev_bleu(ctx, 5, 2) == pytest.approx(expected) and expected < 100
    ctx.raw_refs = None
    assert dev_bleu(ctx, 5, 2) == pytest.approx(expected)


def test_dev_loss_is_the_mean_nll_per_target_token_eos_included_without_label_smoothing(tmp_path):
    from nmtkit.data.binarized import ParallelData, write_split
    from nmtkit.text.vocab import BOS_ID, EOS_ID
    from nmtkit.train.validate import dev_loss
    from tests.conftest import tiny_model

    model = tiny_model(seed=4).eval()
    src, tgt = [[4, 5, 6], [7, 8], [9]], [[4, 5], [6, 7, 8, 9], [10]]
    write_split(tmp_path, "valid", "en", src)
    write_split(tmp_path, "valid", "fr", tgt)
    loss, n = dev_loss(model, ParallelData(tmp_path, "valid", "en", "fr"), 2, torch.device("cpu"))
    total = 0.0
    with torch.no_grad():
        for s, t in zip(src, tgt):
            lp = model(torch.tensor([s]), torch.tensor([len(s)]), torch.tensor([[BOS_ID, *t]]))[0]
            total -= float(sum(lp[i, w] for i, w in enumerate([*t, EOS_ID])))
    assert n == 10 and loss == pytest.approx(total / n, rel=1e-5)


def test_the_records_logged_before_train_log_opens_are_written_there_first_notes_included(tmp_path):
    """The data's and options' records of a run come before its train.log exists: kept, then written
    there ahead of the run's own, those below WARNING too (the CLI's NOTE ones, which it lets through)."""
    import logging

    from nmtkit.progress import NOTE
    from nmtkit.train.metrics import keep_early_records, setup_file_log

    logger = logging.getLogger("nmtkit")
    level, handlers = logger.level, list(logger.handlers)
    logger.setLevel(NOTE)  # as the CLI sets it
    keep_early_records()
    try:
        logging.getLogger("nmtkit.data").log(NOTE, "early note record")
        logging.getLogger("nmtkit.data").warning("early warning record")
        handler = setup_file_log(tmp_path)
        logging.getLogger("nmtkit.train").info("the run's own record")
        handler.close()
    finally:
        for h in set(logger.handlers) - set(handlers):
            logger.removeHandler(h)
        logger.setLevel(level)
    lines = (tmp_path / "train.log").read_text(encoding="utf-8").splitlines()
    assert [line.split(" ", 3)[2:] for line in lines] == [["NOTE", "early note record"],
                                                          ["WARNING", "early warning record"],
                                                          ["INFO", "the run's own record"]]


def test_a_record_naming_a_file_whose_name_is_not_utf8_is_written_to_train_log_as_its_bytes(tmp_path, capsys):
    """A dev prefix named in Latin-1 (`preprocess --valid $'\\xff'`), then changed: train's warning
    about it reached stderr, but train.log's strict UTF-8 refused it: the record was lost and logging
    printed "--- Logging error ---" and a traceback for it."""
    import logging
    import os

    from nmtkit.train.metrics import setup_file_log

    logger = logging.getLogger("nmtkit")
    level, handler = logger.level, setup_file_log(tmp_path)
    try:
        handler.handle(logging.LogRecord("nmtkit.train", logging.WARNING, __file__, 1, "dev text %s is gone",
                                         (os.fsdecode(b"/d/\xff.fr"),), None))  # to train.log alone
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()
    assert b"WARNING dev text /d/\xff.fr is gone\n" in (tmp_path / "train.log").read_bytes()
    assert "Logging error" not in capsys.readouterr().err


def test_a_second_training_run_in_the_same_process_while_one_runs_is_refused_and_writes_nothing(data_dir, tmp_path):
    """Two runs in two threads of one process seeded and drew from the same random generators (with
    dropout neither run's weights were a lone run's) and each run's train.log took the other's lines.
    A process forked meanwhile is another process: its run is not refused."""
    import os
    import threading

    from nmtkit.train.events import Callbacks

    started, go_on, results = threading.Event(), threading.Event(), []

    class Wait(Callbacks):
        def on_start(self, event):
            started.set()
            go_on.wait(60)

    first = threading.Thread(target=lambda: results.append(train_run(
        data_dir, tmp_path / "a", tiny_options(max_updates=2), tiny_overrides(), callbacks=Wait())))
    first.start()
    try:
        assert started.wait(60)
        with pytest.raises(ConfigError, match="another training run is in progress in this process"):
            train_run(data_dir, tmp_path / "b", tiny_options(max_updates=2), tiny_overrides())
        pid = os.fork()  # a child process is not refused: its run would be its own (here: no data, at once)
        if pid == 0:
            try:
                train_run(tmp_path / "missing", tmp_path / "c", tiny_options(max_updates=2), tiny_overrides())
            except BaseException as err:  # noqa: BLE001
                os._exit(3 if "another training run" in str(err) else 0)
            os._exit(1)
        assert os.waitpid(pid, 0)[1] == 0
    finally:
        go_on.set()
        first.join()
    assert not (tmp_path / "b").exists() and results[0].update == 2
    assert train_run(data_dir, tmp_path / "b", tiny_options(max_updates=2), tiny_overrides()).update == 2
