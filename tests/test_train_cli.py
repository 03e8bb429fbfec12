"""`nmtkit train` through the real entry points: end to end, signals, resume, bad input."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nmtkit.checkpoint import load_checkpoint
from nmtkit.train.config import TrainConfig
from tests.conftest import run_cli, tiny_train_args

REPO = Path(__file__).resolve().parent.parent
TINY = tiny_train_args()


def _train_cmd(data_dir, run, *extra):
    return [sys.executable, "-m", "nmtkit", "train", "--data", str(data_dir), "--save-dir", str(run), *TINY, *extra]


def _start_training(data_dir, run, save_every: int, logged: int, *extra: str,
                    metrics: tuple[str, ...] = ("metrics.jsonl", ".run.tmp-*/metrics.jsonl"),
                    **popen) -> subprocess.Popen:
    """`nmtkit train` in a subprocess, logging every update, returned once its metrics.jsonl (one
    of the globs `metrics` in RUN: a new run's is staged until its first checkpoint) holds `logged`
    records (or the process ended, or 120 s passed)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.Popen(_train_cmd(data_dir, run, "--max-updates", "1000000", "--log-every", "1",
                                       "--valid-every", "1000000", "--save-every", str(save_every), *extra),
                            env=env, cwd=REPO, **popen)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if any(p.read_text().count("\n") >= logged for glob in metrics for p in run.glob(glob)):
            break
        time.sleep(0.05)
    return proc


def test_train_end_to_end_writes_a_run_and_resumes(data_dir, tmp_path):
    run = tmp_path / "run"
    code, out, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *TINY, "--max-updates", "6",
                           "--valid-every", "3", "--log-every", "2", "--valid-bleu-samples", "4"])
    assert code == 0, err
    assert out == ""  # stdout carries data only
    assert "update 6" in err and "validation at update 6" in err and "stopped (max-updates)" in err
    for name in ("checkpoint_last.pt", "checkpoint_best.pt", "metrics.jsonl", "curves.png", "train.log"):
        assert (run / name).exists(), name
    kinds = [json.loads(line)["kind"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert kinds.count("train") == 3 and kinds.count("valid") == 2
    # the resolved configuration: printed at the start and in config.json, as in the checkpoint
    written = json.loads((run / "config.json").read_text())
    ckpt = load_checkpoint(run / "checkpoint_last.pt")
    assert written == {"arch": "rnnsearch", "model_config": ckpt["model_config"], "train_config": ckpt["train_config"]}
    assert written["train_config"]["optimizer"] == "adam" and written["model_config"]["emb_dim"] == 16
    assert (run / "config.json").read_text() in err
    # same run dir again: refused; --resume continues; --quiet prints nothing
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *TINY, "--max-updates", "8"])
    assert code != 0 and "--resume" in err and "Traceback" not in err
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), "--resume", "--max-updates", "8",
                         "--quiet"])
    assert code == 0 and err == ""
    assert load_checkpoint(run / "checkpoint_last.pt")["trainer"]["update"] == 8
    assert json.loads((run / "config.json").read_text())["train_config"]["max_updates"] == 8


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_signal_saves_a_checkpoint_and_exits_cleanly(data_dir, tmp_path, sig, code):
    run = tmp_path / "run"
    proc = _start_training(data_dir, run, save_every=1000000, logged=3,
                           stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:  # a run that took no notice of the signal trains on for a million updates: not past the test
        proc.kill()
    assert proc.returncode == code, err
    assert "Traceback" not in err and out == ""
    assert f"nmtkit: {sig.name}: checkpoint saved" in err and "--resume" in err
    ckpt = load_checkpoint(run / "checkpoint_last.pt")
    assert ckpt["trainer"]["update"] >= 3
    assert not list(run.glob("*.tmp"))  # atomic writes leave no temp files


def test_help_documents_every_train_config_option():
    from nmtkit.options import option_fields
    from nmtkit.train.presets import ModelOverrides

    code, out, _ = run_cli(["train", "--help"])
    assert code == 0
    text = " ".join(out.split())
    names = [f.name for cls in (TrainConfig, ModelOverrides) for f, _ in option_fields(cls)]
    assert "max_updates" in names and "emb_dim" in names and "loss_chunk_tokens" not in names
    for name in (*names, "data", "save_dir", "resume", "force", "quiet"):
        assert "--" + name.replace("_", "-") in text, name


@pytest.mark.parametrize("argv, message", [
    (["--data", "{tmp}/nowhere"], "data directory not found"),
    (["--data", "{tmp}"], "no manifest.json"),
    (["--preset", "rnnsearch-99"], "'rnnsearch-99' is not one of"),
    (["--arch", "transformer"], "transformer"),
    (["--max-updates", "0"], "--max-updates must be at least 1"),
    (["--max-time", "soon"], "--max-time"),
    (["--best-metric", "bleu", "--valid-bleu-samples", "0"], "--best-metric bleu"),
    (["--preset", "small", "--arch", "rnnencdec"], "contradicts --preset small"),
    (["--max-len", "0"], "--max-len must be at least 1"),
    (["--lr", "-1"], "--lr must be positive"),
    (["--resume"], "nothing to resume"),
    (["--resume", "--force"], "exclude each other"),
])
def test_bad_input_is_one_line_and_nonzero_exit(data_dir, tmp_path, argv, message):
    run = tmp_path / "run"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    base = ["train", "--save-dir", str(run), *TINY, "--max-updates", "2"]
    if "--data" not in argv:
        base += ["--data", str(data_dir)]
    code, out, err = run_cli(base + argv)
    assert code != 0
    assert message in err, err
    assert "Traceback" not in err and out == ""
    assert not (run / "checkpoint_last.pt").exists() and not (run / "metrics.jsonl").exists()


def test_live_display_shows_progress_loss_speed_eta_and_dev_score():
    from rich.console import Console

    from nmtkit.cli.train import Reporter
    from nmtkit.train.events import LogEvent, StartEvent, ValidationEvent

    rep = Reporter(quiet=True)  # no terminal here: render the live panel by hand
    rep.on_start(StartEvent(update=0, epoch=1, max_updates=200, max_epochs=None, max_time=None, batches_per_epoch=50,
                            train_pairs=800, dropped_pairs=2, parameters=1234, device="cpu", world_size=1,
                            elapsed=0.0))
    rep.on_update(100, 2)
    rep.on_log(LogEvent(update=100, epoch=2, loss=3.25, ppl=25.8, objective=3.3, grad_norm=1.0, lr=0.001,
                        tgt_tokens_per_s=1500.0, sents_per_s=100.0, updates_per_s=2.0, elapsed=50.0, skipped=0))
    rep.on_validation(ValidationEvent(update=100, epoch=2, loss=3.5, ppl=33.1, bleu=12.34, best=True, best_score=12.34,
                                      best_update=100, seconds=1.0, elapsed=51.0, final=False))
    console = Console(record=True, width=120)
    console.print(rep._render())
    text = console.export_text()
    for part in ("update 100/200 (50%)", "epoch 2", "ETA", "loss 3.250", "ppl 25.8", "lr 0.001", "1,500 tgt tok/s",
                 "dev loss 3.500", "BLEU 12.34", "(best)"):
        assert part in text, (part, text)


@pytest.mark.parametrize("max_updates, world_size, update_freq, total", [
    (None, 1, 2, 16), (None, 2, 1, 14), (None, 2, 3, 6), (100, 1, 1, 30), (20, 1, 1, 20)])
def test_the_progress_total_of_max_epochs_counts_updates_not_minibatches(max_updates, world_size, update_freq, total):
    """--max-epochs 2 of 15 minibatches: an update takes processes x --update-freq of them (the last
    of an epoch fewer); the total was 30 whatever they were (ETA and bar off by that factor)."""
    from nmtkit.cli.train import Reporter
    from nmtkit.train.events import StartEvent

    rep = Reporter(quiet=True)
    rep.on_start(StartEvent(update=0, epoch=1, max_updates=max_updates, max_epochs=2, max_time=None,
                            batches_per_epoch=15, train_pairs=240, dropped_pairs=0, parameters=1, device="cpu",
                            world_size=world_size, elapsed=0.0, update_freq=update_freq))
    assert rep.total == total


@pytest.mark.parametrize("fused", [True, False])
def test_start_line_says_when_the_first_updates_compile_fused_steps(fused, capsys):
    from nmtkit.cli.train import Reporter
    from nmtkit.train.events import StartEvent

    rep = Reporter(quiet=False)  # no terminal here: the plain stderr line
    rep.on_start(StartEvent(update=0, epoch=1, max_updates=200, max_epochs=None, max_time=None, batches_per_epoch=50,
                            train_pairs=800, dropped_pairs=2, parameters=1234, device="cuda:0", world_size=1,
                            elapsed=0.0, fused=fused))
    err = capsys.readouterr().err
    assert err.startswith("nmtkit train: training 1,234 parameters on cuda:0") and err.count("\n") == 1
    assert ("compile the fused steps" in err) is fused, err


def test_sigkill_loses_only_work_since_last_checkpoint(data_dir, tmp_path):
    """A checkpoint is written every update; kill -9 at an arbitrary point leaves a loadable
    checkpoint_last.pt (atomic replace), and --resume continues from it."""
    run = tmp_path / "run"
    proc = _start_training(data_dir, run, save_every=1, logged=5, stderr=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL)
    proc.kill()
    proc.wait(timeout=60)
    saved = load_checkpoint(run / "checkpoint_last.pt")["trainer"]["update"]
    assert saved >= 4
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), "--resume",
                         "--max-updates", str(saved + 2)])
    assert code == 0, err
    assert f"from update {saved:,}" in err
    assert load_checkpoint(run / "checkpoint_last.pt")["trainer"]["update"] == saved + 2
    assert not list(run.glob("*.tmp"))
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for kind in ("train", "valid"):
        updates = [r["update"] for r in records if r["kind"] == kind]
        assert updates == sorted(updates) and len(updates) == len(set(updates))  # no lines from the lost work


def test_a_killed_force_start_leaves_the_old_run_in_place_to_resume(data_dir, tmp_path):
    """kill -9 of `train --force` before its first checkpoint: the old run was set aside in
    RUN/.replaced-run, where --resume found nothing to resume. Now the new run is staged, and the
    next start under the lock removes the dead start's staging folder."""
    run = tmp_path / "run"
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *TINY, "--max-updates", "2"])
    assert code == 0, err
    old = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != "train.lock"}
    proc = _start_training(data_dir, run, 1000000, 3, "--force", metrics=(".run.tmp-*/metrics.jsonl",),
                           stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    proc.kill()
    proc.wait(timeout=60)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != "train.lock"} == old
    assert [p.name for p in run.iterdir() if p.name.startswith(".run.tmp-")]  # what the kill left
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *TINY, "--max-updates", "4"])
    assert code != 0 and "already holds a run" in err, err  # a new start: refused, as over any run
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), "--resume",
                            "--max-updates", "4"])
    assert code == 0, err
    assert "from update 2" in err
    assert load_checkpoint(run / "checkpoint_last.pt")["trainer"]["update"] == 4
    assert not [p for p in run.iterdir() if p.name.startswith(".run")]


def test_a_dead_starts_staging_folder_whose_pid_is_another_process_now_is_removed(data_dir, tmp_path):
    """A killed start's RUN/.run.tmp-HOST-PID-X, whose PID the system has since given to another
    process (here: this test's): every later run warned that it "is being written by process PID
    (another run to the same destination?)" and left it, a checkpoint and all, for good. The run's
    lock, held, says no run writes it: it is removed."""
    import socket

    run = tmp_path / "run"
    stale = run / f".run.tmp-{socket.gethostname()}-{os.getpid()}-abcd1234"
    stale.mkdir(parents=True)
    (stale / "checkpoint_last.pt").write_bytes(b"PK\x03\x04 a killed start's")
    code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *TINY, "--max-updates", "1",
                            "--valid-bleu-samples", "0"], process=True)
    assert code == 0, err
    assert "is being written by process" not in err
    assert not [p for p in run.iterdir() if p.name.startswith(".run")]


def test_init_option_overrides_the_presets_initialisation_and_is_recorded(data_dir, tmp_path):
    base = ["train", "--data", str(data_dir), "--threads", "1", "--device", "cpu", "--max-updates", "1",
            "--valid-bleu-samples", "0", "--quiet"]
    code, _, err = run_cli(base + ["--save-dir", str(tmp_path / "a"), "--preset", "small"])
    assert code == 0, err
    assert load_checkpoint(tmp_path / "a" / "checkpoint_last.pt")["model_config"]["init"] == "uniform"
    code, _, err = run_cli(base + ["--save-dir", str(tmp_path / "b"), "--preset", "small", "--init", "paper"])
    assert code == 0, err
    assert load_checkpoint(tmp_path / "b" / "checkpoint_last.pt")["model_config"]["init"] == "paper"


def test_a_diverging_runs_perplexity_is_printed_in_scientific_notation_not_300_digits():
    from nmtkit.cli.train import _ppl
    from nmtkit.train.validate import perplexity

    assert [_ppl(25.83, 1), _ppl(25.833, 2), _ppl(999_999.0, 1)] == ["25.8", "25.83", "999999.0"]
    assert _ppl(perplexity(92291111.29), 1) == "1.01e+304" and _ppl(float("nan"), 2) == "nan"


# Sends this process a SIGINT when `import numpy` starts, which torch's C code does (and clears
# whatever error it raises), then runs `nmtkit ARGS`.
_INTERRUPT_IN_NUMPY = """
import importlib.abc, os, signal, sys
class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "numpy":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Hook())
from nmtkit.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("command", ["train", "translate", "average"])
def test_ctrl_c_while_torch_imports_ends_the_command_instead_of_being_lost(data_dir, ckpt, tmp_path, command):
    """Interrupted there, training went on (the interrupt lost inside torch's import of numpy)
    or failed later with a traceback from a half-imported numpy."""
    from tests.conftest import REPO

    argv = {"train": ["train", "--data", str(data_dir), "--save-dir", str(tmp_path / "run"), *TINY,
                      "--max-updates", "3", "-q"],
            "translate": ["translate", "-m", ckpt, "-o", str(tmp_path / "out.txt")],
            "average": ["average", "-m", ckpt, "-o", str(tmp_path / "avg.pt")]}[command]
    proc = subprocess.run([sys.executable, "-c", _INTERRUPT_IN_NUMPY, *argv], input="the cat\n", capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "nmtkit: aborted"
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_a_new_run_that_fails_before_its_first_checkpoint_leaves_only_its_lock_file(data_dir, tmp_path):
    """config.json and train.log stayed, so that the folder looked like a run's. A run that fails
    after its first checkpoint keeps everything."""
    from tests.conftest import tiny_options, tiny_overrides, train_run

    def fail_at(update):
        def hook(at, loss):
            if at == update:
                raise MemoryError("as a model too large for memory would")
            return loss
        return hook

    run = tmp_path / "run"
    with pytest.raises(MemoryError):
        train_run(data_dir, run, tiny_options(save_every=4), tiny_overrides(), loss_hook=fail_at(0))
    assert os.listdir(run) == ["train.lock"]
    (run / "tensorboard").mkdir()  # an earlier run's curves and the user's notes, which a start allows, stay
    (run / "tensorboard" / "events.out.tfevents.1.host").write_text("x")
    (run / "notes.txt").write_text("x")
    with pytest.raises(MemoryError):
        train_run(data_dir, run, tiny_options(save_every=4, tensorboard=str(run / "tensorboard")), tiny_overrides(),
                     loss_hook=fail_at(0))
    assert sorted(os.listdir(run)) == ["notes.txt", "tensorboard", "train.lock"]
    assert os.listdir(run / "tensorboard") == ["events.out.tfevents.1.host"]
    with pytest.raises(MemoryError):
        train_run(data_dir, run, tiny_options(save_every=4), tiny_overrides(), loss_hook=fail_at(6))
    assert {"checkpoint_last.pt", "config.json", "metrics.jsonl", "train.log"} <= set(os.listdir(run))


def test_train_log_holds_the_warnings_given_before_it_opened(data_dir, tmp_path):
    """They went to stderr only (those of the options and data, checked as the run is set up), while
    train.log records the run, the warnings given later included."""
    from tests.conftest import tiny_options, tiny_overrides, train_run

    train_run(data_dir, tmp_path / "run", tiny_options(sort_pool=4, max_updates=1), tiny_overrides())
    first = (tmp_path / "run" / "train.log").read_text().splitlines()[0]
    assert " WARNING --sort-pool 4 is below --batch-size 16: " in first, first
