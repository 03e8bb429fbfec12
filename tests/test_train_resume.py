"""Resume, run-directory safety and stopping criteria of the training loop (tiny task, CPU)."""
from __future__ import annotations

import contextlib
import os
import signal

import pytest
import torch

from nmtkit.checkpoint import load_checkpoint
from nmtkit.errors import CheckpointError, ConfigError, OutputExistsError
from nmtkit.train.config import TrainConfig, TrainOptions
from nmtkit.train.presets import ModelOverrides
from tests.conftest import TINY_MODEL, tiny_options, tiny_overrides, train_run
from tests.conftest import records as _records


def test_resume_equals_uninterrupted_run(data_dir, tmp_path):
    # dropout (torch RNG), a plateau schedule with warm-up, label smoothing and an epoch
    # boundary inside the second half (15 minibatches per epoch) all have to survive the resume
    opts = tiny_options(max_updates=20, valid_every=4, save_every=4, lr=0.02, lr_schedule="plateau",
                        warmup_updates=5, label_smoothing=0.1, valid_bleu_samples=0)
    model = ModelOverrides(**TINY_MODEL, dropout=0.2)
    full, half = tmp_path / "full", tmp_path / "half"
    train_run(data_dir, full, opts, model)
    train_run(data_dir, half, opts.replace(max_updates=10), model)
    mid = load_checkpoint(half / "checkpoint_last.pt")
    assert mid["trainer"]["update"] == 10 and mid["trainer"]["epoch"] == 1
    res = train_run(data_dir, half, opts, model, resume=True)
    assert res.update == 20 and res.epoch == 2
    a = load_checkpoint(full / "checkpoint_last.pt")
    b = load_checkpoint(half / "checkpoint_last.pt")
    for name, tensor in a["model_state"].items():
        assert torch.equal(tensor, b["model_state"][name]), name
    sa, sb = a["optimizer_state"]["state"], b["optimizer_state"]["state"]
    for k in sa:
        for key in sa[k]:
            assert torch.equal(torch.as_tensor(sa[k][key]), torch.as_tensor(sb[k][key]))
    assert a["schedule_state"] == b["schedule_state"]
    assert {k: v for k, v in a["trainer"].items() if k != "elapsed"} == \
        {k: v for k, v in b["trainer"].items() if k != "elapsed"}
    # the resumed metrics file describes one run: no duplicated updates
    # (the first half stopped on --max-updates between two validations, so it validated once more
    # at its end, marked final, without touching the schedule or early stopping)
    scheduled = [r["update"] for r in _records(half, "valid") if not r.get("final")]
    final = [r["update"] for r in _records(half, "valid") if r.get("final")]
    assert scheduled == sorted(set(scheduled)) == [4, 8, 12, 16, 20]
    assert final == [10]


def test_refuses_to_overwrite_a_run_unless_resume_or_force(data_dir, tmp_path):
    run = tmp_path / "run"
    opts = tiny_options(max_updates=4, valid_every=2, valid_bleu_samples=0)
    with pytest.raises(CheckpointError, match="nothing to resume"):
        train_run(data_dir, run, opts, tiny_overrides(), resume=True)
    train_run(data_dir, run, opts, tiny_overrides())
    with pytest.raises(OutputExistsError, match="--resume.*--force"):
        train_run(data_dir, run, opts, tiny_overrides())
    res = train_run(data_dir, run, opts.replace(max_updates=2), tiny_overrides(), force=True)
    assert res.update == 2
    assert [r["update"] for r in _records(run, "valid")] == [2]
    with pytest.raises(ConfigError, match="--lr .* differs from the run being resumed"):
        train_run(data_dir, run, opts.replace(lr=0.5), tiny_overrides(), resume=True)
    (run / "checkpoint_last.pt").unlink()  # checkpoint_best.pt left: "start a new run without --resume" was refused
    with pytest.raises(CheckpointError, match=r"no checkpoint_last.pt \(its other checkpoints hold no training "
                                              r"state: start the run again with --force\)"):
        train_run(data_dir, run, opts, tiny_overrides(), resume=True)


def test_a_resume_reads_checkpoint_last_holding_the_runs_lock(data_dir, tmp_path, monkeypatch):
    """A resume read checkpoint_last.pt before it took the run's lock: another run that began and
    ended meanwhile (a resume to update 8 over one at 4) had its checkpoint replaced by this one's,
    which went on from update 4."""
    from nmtkit import checkpoint
    from nmtkit.errors import OutputError
    from nmtkit.io.dirs import run_lock

    run = tmp_path / "run"
    opts = tiny_options(max_updates=2, valid_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    load = checkpoint.load_checkpoint

    def load_while_locked(path, *args, **kwargs):
        with pytest.raises(OutputError, match="another process"):  # as a second run is refused
            run_lock(run).check()
        return load(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "load_checkpoint", load_while_locked)
    assert train_run(data_dir, run, opts.replace(max_updates=3), tiny_overrides(), resume=True).update == 3


def test_force_keeps_the_old_run_when_the_new_one_fails_before_its_first_checkpoint(data_dir, tmp_path):
    """--force used to delete the old run first: a new run that failed at once lost it. The new
    run is staged inside RUN and replaces the old one only at its first checkpoint."""
    from nmtkit.errors import TrainingError

    run = tmp_path / "run"
    opts = tiny_options(max_updates=4, valid_every=2, save_every=2, keep_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != "train.lock"}
    assert {"checkpoint_last.pt", "checkpoint_best.pt", "checkpoint_2.pt", "checkpoint_4.pt"} <= set(before)

    def nan(update, loss):
        return loss * float("nan")

    with pytest.raises(TrainingError, match="non-finite loss"):
        train_run(data_dir, run, opts.replace(max_updates=8), tiny_overrides(), force=True, loss_hook=nan)
    after = {p.name: p.read_bytes() for p in run.iterdir() if p.name != "train.lock"}
    assert after == before  # no staging folder left either
    # a new run that saves a checkpoint replaces the old one: the old files are gone
    res = train_run(data_dir, run, opts.replace(max_updates=2, keep_every=0), tiny_overrides(), force=True)
    assert res.update == 2
    assert sorted(os.listdir(run)) == ["checkpoint_best.pt", "checkpoint_last.pt", "config.json", "curves.png",
                                       "metrics.jsonl", "train.lock", "train.log"]
    assert "saved checkpoint_last.pt at update 2" in (run / "train.log").read_text()  # its log, moved in while open
    assert [r["update"] for r in _records(run, "valid")] == [2]


def test_force_replaces_the_old_runs_checkpoints_with_no_moment_without_them(data_dir, tmp_path, monkeypatch):
    """`train --force` at its first checkpoint deleted every file of the old run, then renamed its
    own in: a `translate -m RUN/checkpoint_last.pt` (or average, score, serve) started meanwhile
    failed with "checkpoint not found". A file the new run has now replaces the old one in one step
    (checkpoint_best.pt is not one: the first validation comes after the first checkpoint)."""
    import nmtkit.io.dirs as dirs

    run = tmp_path / "run"
    opts = tiny_options(max_updates=2, valid_every=2, save_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    real, missing = os.replace, []

    def replace(src, dst):
        missing.extend(name for name in ("checkpoint_last.pt", "config.json") if not (run / name).exists())
        real(src, dst)

    monkeypatch.setattr(dirs.os, "replace", replace)
    train_run(data_dir, run, opts, tiny_overrides(), force=True)
    assert not missing


def test_a_new_run_writes_its_log_and_metrics_in_the_run_folder_after_its_first_checkpoint(data_dir, tmp_path):
    """The staged run's open train.log and metrics.jsonl follow it into RUN at the first checkpoint,
    and what it writes later lands there, not in the removed staging folder."""
    run = tmp_path / "run"
    train_run(data_dir, run, tiny_options(max_updates=6, valid_every=2, save_every=2, valid_bleu_samples=0),
              tiny_overrides())
    assert [r["update"] for r in _records(run, "valid")] == [2, 4, 6]
    log = (run / "train.log").read_text()
    assert all(f"saved checkpoint_last.pt at update {u}" in log for u in (2, 4, 6))
    assert not [p for p in run.iterdir() if p.name.startswith(".run")]


def test_a_start_that_fails_as_it_writes_its_config_leaves_no_staging_folder(data_dir, tmp_path):
    """The staging folder is made before config.json is written and handed to the callbacks:
    a failure there, too, leaves the folder as it was."""
    from nmtkit.train.events import Callbacks

    class Failing(Callbacks):
        def on_config(self, text):
            raise RuntimeError("callback failed")

    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="callback failed"):
        train_run(data_dir, run, tiny_options(max_updates=1), tiny_overrides(), callbacks=Failing())
    assert os.listdir(run) == ["train.lock"]


def test_resuming_with_other_training_data_of_the_same_vocabularies_is_refused(data_dir, tmp_path):
    """It resumed, and the 'continued' run trained on another corpus from then on."""
    from tests.conftest import make_data_dir

    run = tmp_path / "run"
    opts = tiny_options(max_updates=2, valid_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    other = make_data_dir(tmp_path / "other", n_train=100)
    last = (run / "checkpoint_last.pt").read_bytes()
    with pytest.raises(CheckpointError, match=r"the training data of .*other \(100 pairs.*differs from the run's"):
        train_run(other, run, opts.replace(max_updates=4), tiny_overrides(), resume=True)
    assert (run / "checkpoint_last.pt").read_bytes() == last
    assert train_run(data_dir, run, opts.replace(max_updates=4), tiny_overrides(), resume=True).update == 4


def test_resuming_with_another_dev_set_is_refused(data_dir, tmp_path):
    """The training data and vocabularies were the same, the dev set another: the resumed run
    compared its dev scores with the old dev set's best, and kept as checkpoint_best.pt a model
    that was worse on the run's own dev set."""
    from tests.conftest import make_data_dir

    run = tmp_path / "run"
    opts = tiny_options(max_updates=2, valid_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    other = make_data_dir(tmp_path / "other", n_valid=30)
    with pytest.raises(CheckpointError, match=r"the dev data of .*other \(30 pairs.*differs from the run's"):
        train_run(other, run, opts.replace(max_updates=4), tiny_overrides(), resume=True)


def test_a_model_option_of_another_architecture_on_resume_is_refused_as_a_new_run_refuses_it(data_dir, tmp_path):
    """It said "--att-hidden 12 differs from the run being resumed (None)" for an rnnencdec run."""
    from tests.conftest import SIZES

    run, sizes = tmp_path / "run", dict(SIZES["rnnencdec"], init="default")
    opts = tiny_options(arch="rnnencdec", max_updates=1, valid_bleu_samples=0)
    train_run(data_dir, run, opts, ModelOverrides(**sizes))
    for name, value in (("att_hidden", 12), ("readout", "prev")):
        with pytest.raises(ConfigError, match=rf"^--{name.replace('_', '-')} does not apply to rnnencdec$"):
            train_run(data_dir, run, opts.replace(max_updates=2), ModelOverrides(**sizes, **{name: value}), resume=True)


def test_resuming_with_training_text_of_the_same_sizes_but_other_content_is_refused(tmp_path):
    """A corpus whose pairs were reordered (or a word changed) and preprocessed again keeps the
    vocabularies and sizes: the run resumed on misaligned pairs. The manifests' sha256 of the
    text preprocess read tell; the same text read from another path is the same."""
    import json

    from tests.conftest import make_data_dir

    def data(name: str, folder: str, tgt_digest: str):
        path = make_data_dir(tmp_path / name)
        manifest = json.loads((path / "manifest.json").read_text())
        manifest["splits"]["train"]["prefix"] = f"/{folder}/train"
        manifest["inputs"] = {f"/{folder}/train.en": "a1", f"/{folder}/train.fr": tgt_digest, f"/{folder}/dev.fr": "d"}
        (path / "manifest.json").write_text(json.dumps(manifest))
        return path

    run = tmp_path / "run"
    opts = tiny_options(max_updates=2, valid_every=2, valid_bleu_samples=0)
    train_run(data("first", "corpus", "b2"), run, opts, tiny_overrides())
    last = (run / "checkpoint_last.pt").read_bytes()
    with pytest.raises(CheckpointError, match=r"the training text of .*reordered differs from the run's"):
        train_run(data("reordered", "corpus", "c3"), run, opts.replace(max_updates=4), tiny_overrides(),
                     resume=True)
    assert (run / "checkpoint_last.pt").read_bytes() == last
    moved = data("moved", "elsewhere", "b2")
    assert train_run(moved, run, opts.replace(max_updates=4), tiny_overrides(), resume=True).update == 4


@pytest.mark.parametrize("changes, needle", [
    (dict(protected_patterns=(r"https?://\S+",)), r"\(protected_patterns\)"),
    (dict(nfc=False), r"\(nfc False vs True\)"),
], ids=["protect", "no-nfc"])
def test_resuming_with_a_data_directory_preprocessed_otherwise_is_refused(data_dir, tmp_path, changes, needle):
    """Same vocabularies and sizes, another text pipeline: the resumed checkpoints recorded the
    new one, so translate preprocessed otherwise than the run's first updates were trained, and
    averaging the run's own kept checkpoints was refused."""
    import json

    from nmtkit.text.pipeline import TextPipeline
    from tests.conftest import make_data_dir

    run = tmp_path / "run"
    opts = tiny_options(max_updates=2, valid_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    other = make_data_dir(tmp_path / "other")
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["pipeline"] = TextPipeline("en", "fr", **changes).to_dict()
    (other / "manifest.json").write_text(json.dumps(manifest))
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != "train.lock"}
    with pytest.raises(CheckpointError, match=r"text pipeline \(preprocessing\) of .*other differs from the run's "
                       + needle) as err:
        train_run(other, run, opts.replace(max_updates=4), tiny_overrides(), resume=True)
    assert str(run / "checkpoint_last.pt") in str(err.value)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != "train.lock"} == before


def test_resume_refuses_another_runs_checkpoint_last_by_the_runs_config_json(data_dir, tmp_path):
    """Another run's checkpoint_last.pt copied into a run directory was resumed: that run went on
    there, over this run's kept checkpoints, checkpoint_best.pt, metrics and config.json; with
    config.json gone, checkpoint_best.pt tells. What resume may change, and a config.json that is
    gone, still resume."""
    import json
    import shutil

    from tests.conftest import SIZES

    run, other = tmp_path / "run", tmp_path / "other"
    opts = tiny_options(max_updates=4, valid_every=2, save_every=2, keep_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    train_run(data_dir, other, opts.replace(arch="rnnencdec", max_updates=2),
                 ModelOverrides(**SIZES["rnnencdec"], init="default"))
    own_last = (run / "checkpoint_last.pt").read_bytes()
    shutil.copy(other / "checkpoint_last.pt", run / "checkpoint_last.pt")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != "train.lock"}
    with pytest.raises(CheckpointError, match=r"checkpoint_last\.pt: not this run's checkpoint: its arch rnnencdec "
                       r"differs from rnnsearch in .*run/config\.json"):  # resumed as `train --resume` is, no --arch
        train_run(data_dir, run, TrainOptions(max_updates=6, threads=1, device="cpu"), resume=True)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != "train.lock"} == before
    config_json = (run / "config.json").read_bytes()
    (run / "config.json").unlink()  # then checkpoint_best.pt is the record
    with pytest.raises(CheckpointError, match=r"its arch rnnencdec differs from rnnsearch in .*run/checkpoint_best\.pt, "
                       r"the run's best checkpoint \(config\.json is missing\)"):
        train_run(data_dir, run, TrainOptions(max_updates=6, threads=1, device="cpu"), resume=True)
    assert not (run / "config.json").exists()
    (run / "config.json").write_bytes(config_json)

    (run / "checkpoint_last.pt").write_bytes(own_last)
    config = json.loads((run / "config.json").read_text())
    config["train_config"].update(max_updates=100, valid_every=3)  # a resume with these, killed before a checkpoint
    (run / "config.json").write_text(json.dumps(config))
    assert train_run(data_dir, run, opts.replace(max_updates=6), tiny_overrides(), resume=True).update == 6
    (run / "config.json").unlink()
    assert train_run(data_dir, run, opts.replace(max_updates=8), tiny_overrides(), resume=True).update == 8
    assert json.loads((run / "config.json").read_text())["train_config"]["max_updates"] == 8


def test_a_kept_checkpoint_is_written_before_checkpoint_last_at_its_update(data_dir, tmp_path, monkeypatch):
    """Written after it, a kill between the two lost the kept model for good: the run resumed
    after that update."""
    from nmtkit.train.trainer import RunCheckpoints

    order: list[tuple[int, str]] = []
    save_last, save_model = RunCheckpoints.save_last, RunCheckpoints.save_model
    monkeypatch.setattr(RunCheckpoints, "save_last",
                        lambda self: (order.append((self.ctx.state.update, "last")), save_last(self))[1])
    monkeypatch.setattr(RunCheckpoints, "save_model",
                        lambda self, name: (order.append((self.ctx.state.update, name)), save_model(self, name))[1])
    train_run(data_dir, tmp_path / "run", tiny_options(max_updates=4, valid_every=2, save_every=2, keep_every=2,
                                                          valid_bleu_samples=0), tiny_overrides())
    at_2 = [name for update, name in order if update == 2]
    assert at_2[0] == "checkpoint_2.pt" and "last" in at_2, order


def test_a_resumed_metrics_file_drops_the_validation_its_checkpoint_does_not_hold(tmp_path):
    """A run killed between a validation's record and the checkpoint saved after it repeats that
    validation on resume: the file held it twice (and so did the curves)."""
    import json

    from nmtkit.train.metrics import MetricsLog

    recs = [{"kind": "train", "update": 2}, {"kind": "valid", "update": 2}, {"kind": "train", "update": 4},
            {"kind": "valid", "update": 4}, {"kind": "train", "update": 6}]
    (tmp_path / "metrics.jsonl").write_bytes("".join(json.dumps(r) + "\n" for r in recs).encode() + b"\xff{cut")
    log = MetricsLog(tmp_path, (4, 2))  # checkpoint_last.pt at update 4, saved before its validation
    log.close()
    assert log.records == recs[:3]
    assert [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == recs[:3]


def test_a_resumed_run_removes_a_curves_png_write_cut_by_a_kill(data_dir, tmp_path):
    run = tmp_path / "run"
    opts = tiny_options(max_updates=2, valid_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    (run / "curves.png.k3j9x2.tmp").write_bytes(b"half a png")
    train_run(data_dir, run, opts.replace(max_updates=4), tiny_overrides(), resume=True)
    assert not list(run.glob("*.tmp"))


def test_max_epochs_and_patience_stop_the_run(data_dir, tmp_path):
    res = train_run(data_dir, tmp_path / "a", tiny_options(max_updates=None, max_epochs=2, valid_every=100,
                                                              valid_bleu_samples=0), tiny_overrides())
    assert (res.reason, res.epoch, res.update) == ("max-epochs", 2, 30)  # 240 pairs / 16 = 15 per epoch
    # lr 0 is refused, so make no progress with a huge warm-up instead: dev loss never improves
    res = train_run(data_dir, tmp_path / "b", tiny_options(max_updates=200, valid_every=2, patience=3,
                                                              warmup_updates=10**9, valid_bleu_samples=0),
                       tiny_overrides())
    assert res.reason == "patience" and res.update == 8


def test_request_stop_saves_checkpoint(data_dir, tmp_path):
    """The SIGINT path without a signal: stop after the current update, checkpoint written."""
    from nmtkit.train.context import TrainContext
    from nmtkit.train.data import DataDir
    from nmtkit.train.events import Callbacks
    from nmtkit.train.presets import resolve_model
    from nmtkit.train.trainer import Trainer

    data = DataDir.open(data_dir)
    arch, mcfg = resolve_model("rnnsearch", None, TINY_MODEL, len(data.src_vocab), len(data.tgt_vocab))
    opts = tiny_options(max_updates=100, valid_bleu_samples=0)

    class StopAt3(Callbacks):
        def on_update(self, update, epoch):
            if update == 3:
                trainer.request_stop()

    trainer = Trainer(TrainContext(TrainConfig.from_dict(opts.given()), data, tmp_path / "run", arch, mcfg,
                                   callbacks=StopAt3()))
    try:
        res = trainer.train()
    finally:
        trainer.close()
    assert res.reason == "SIGINT" and res.interrupted and res.update == 3
    assert load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")["trainer"]["update"] == 3


def test_a_second_ctrl_c_lost_where_it_was_raised_still_aborts_at_the_end_of_the_update(data_dir, tmp_path):
    """Python prints and drops a KeyboardInterrupt raised inside a weakref callback or a __del__:
    the second Ctrl-C's abort was lost there, and the run saved and stopped as after one."""
    from nmtkit.train.context import TrainContext
    from nmtkit.train.data import DataDir
    from nmtkit.train.events import Callbacks
    from nmtkit.train.presets import resolve_model
    from nmtkit.train.trainer import Trainer

    data = DataDir.open(data_dir)
    arch, mcfg = resolve_model("rnnsearch", None, TINY_MODEL, len(data.src_vocab), len(data.tgt_vocab))

    class CtrlCTwiceAt3(Callbacks):
        def on_update(self, update, epoch):
            if update == 3:
                trainer.signals.handle(signal.SIGINT, None)
                with contextlib.suppress(KeyboardInterrupt):  # where Python drops it
                    trainer.signals.handle(signal.SIGINT, None)

    trainer = Trainer(TrainContext(TrainConfig.from_dict(tiny_options(max_updates=100).given()), data,
                                   tmp_path / "run", arch, mcfg, callbacks=CtrlCTwiceAt3()))
    try:
        with pytest.raises(KeyboardInterrupt):
            trainer.train()
    finally:
        trainer.close()



def test_an_exception_of_on_message_at_a_stop_signal_reaches_the_caller_where_the_signal_cut_in(data_dir, tmp_path,
                                                                                              monkeypatch):
    """on_message runs in the signal handler: its exception, raised where the run was, was swallowed by
    curves.png's `except Exception` (a warning "could not draw curves.png: ...") and the run saved and
    stopped as if the callback had returned."""
    from nmtkit.train import metrics
    from nmtkit.train.events import Callbacks

    class Stop(Exception):
        pass

    class Abort(Callbacks):
        def on_message(self, msg):
            raise Stop(msg)

    draw = metrics.draw_curves

    def signal_while_drawing(records, path):
        os.kill(os.getpid(), signal.SIGTERM)
        draw(records, path)

    monkeypatch.setattr(metrics, "draw_curves", signal_while_drawing)
    with pytest.raises(BaseException) as raised:  # not TrainInterrupted, a KeyboardInterrupt that stops pytest
        train_run(data_dir, tmp_path / "run", tiny_options(max_updates=8, valid_every=4), tiny_overrides(),
                  callbacks=Abort())
    assert type(raised.value) is Stop and "SIGTERM: saving a checkpoint" in str(raised.value)
    assert load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")["trainer"]["update"] == 4

class _FakeCuda:
    """torch.cuda's RNG functions on a machine with `n` GPUs, recording what is set where."""

    def __init__(self, monkeypatch, n: int):
        self.n, self.set = n, []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_rng_state", self.get)
        monkeypatch.setattr(torch.cuda, "set_rng_state", self.put)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [self.get(i) for i in range(n)])

    @staticmethod
    def _index(device) -> int:
        return device if isinstance(device, int) else (torch.device(device).index or 0)

    def get(self, device="cuda"):
        assert self._index(device) < self.n, f"no GPU {device} here"
        return torch.full((4,), self._index(device), dtype=torch.uint8)

    def put(self, state, device="cuda"):
        assert self._index(device) < self.n, f"no GPU {device} here"
        self.set.append((self._index(device), int(state[0])))


def test_each_rank_saves_and_restores_its_own_gpus_rng_state(monkeypatch):
    from nmtkit.train.context import restore_rng, rng_state

    cuda = _FakeCuda(monkeypatch, 4)
    states = [rng_state(torch.device("cuda", r)) for r in range(4)]  # what four ranks save
    assert [int(s["cuda_device"][0]) for s in states] == [0, 1, 2, 3]
    assert all("cuda" not in s for s in states)
    for rank in range(4):
        restore_rng({"ranks": states}, rank, seed=1, update=10, device=torch.device("cuda", rank))
    assert cuda.set == [(0, 0), (1, 1), (2, 2), (3, 3)]


@pytest.mark.parametrize("drop", [("scheduled_best",), ("world_size",), ("precision",), ("scheduled_best", "world_size")])
def test_a_checkpoint_of_another_nmtkits_training_state_is_refused_with_what_to_rerun(data_dir, tmp_path, drop):
    """A training state without what this nmtkit writes into it (the best scheduled score, the
    number of processes) is refused in one line naming checkpoint_last.pt and saying to start the
    run again, before anything of the run is written."""
    import torch

    run = tmp_path / "run"
    opts = tiny_options(max_updates=2, valid_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    last = run / "checkpoint_last.pt"
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    for key in drop:
        del ckpt["trainer"][key]
    torch.save(ckpt, last)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != "train.lock"}
    with pytest.raises(CheckpointError) as err:
        train_run(data_dir, run, opts.replace(max_updates=4), tiny_overrides(), resume=True)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{last}: its training state lacks {sorted(drop)}")
    assert line.endswith("re-run 'nmtkit train' with this nmtkit to start the run again")
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != "train.lock"} == before


def test_a_run_record_of_another_nmtkit_is_refused_with_what_to_rerun(data_dir, tmp_path):
    """config.json without a setting this nmtkit records (another nmtkit wrote it): one line
    naming it and saying to start the run again; its settings are not compared one by one."""
    import json

    run = tmp_path / "run"
    opts = tiny_options(max_updates=2, valid_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    config = json.loads((run / "config.json").read_text())
    del config["train_config"]["label_smoothing"]
    (run / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as err:
        train_run(data_dir, run, opts.replace(max_updates=4), tiny_overrides(), resume=True)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{run / 'config.json'}: the run's record lacks the settings "
                                                 "['label_smoothing']")
    assert line.endswith("re-run 'nmtkit train' with this nmtkit to start the run again")


def test_resume_reads_the_lexicon_back_instead_of_rebuilding_it(data_dir, tmp_path, monkeypatch):
    """The decode-time lexicon is built once per run; a resumed run carries the checkpoint's on,
    and builds one only for a checkpoint that has none."""
    import nmtkit.decode.shortlist as sl

    run = tmp_path / "run"
    opts = tiny_options(max_updates=3, valid_every=100, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    first = load_checkpoint(run / "checkpoint_last.pt")["lexicon"]
    assert isinstance(first, torch.Tensor)
    real = sl.build_lexicon

    def no_build(*args, **kwargs):
        raise AssertionError("the lexicon was rebuilt on resume")

    monkeypatch.setattr(sl, "build_lexicon", no_build)
    train_run(data_dir, run, opts.replace(max_updates=6), tiny_overrides(), resume=True)
    assert torch.equal(load_checkpoint(run / "checkpoint_last.pt")["lexicon"], first)

    ckpt = torch.load(run / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    ckpt["lexicon"] = None  # a checkpoint written before checkpoints carried one
    torch.save(ckpt, run / "checkpoint_last.pt")
    built = []
    monkeypatch.setattr(sl, "build_lexicon", lambda *a, **k: built.append(1) or real(*a, **k))
    train_run(data_dir, run, opts.replace(max_updates=9), tiny_overrides(), resume=True)
    assert built == [1] and torch.equal(load_checkpoint(run / "checkpoint_last.pt")["lexicon"], first)


@pytest.mark.parametrize("field, value, needle", [
    ("model_config", [1], "its model_config is missing or not a mapping: it cannot be resumed"),
    ("optimizer_state", "adam", "its optimizer_state is missing or not a mapping"),
    ("trainer", 5, "its trainer is missing or not a mapping"),
    ("optimizer_state", {"state": {}, "param_groups": []}, r"its training state cannot be restored \(loaded state dict"),
    ("trainer", "bogus", r"its training state cannot be restored \(.*'bogus'"),  # its own state and bogus=1
    # its own weights, v_a NaN (a run that diverged): --resume trained on to a NaN loss, advising --on-nan skip
    ("model_state", "nan", r"weights that are NaN or infinite \(in v_a\): the run cannot continue from them; start it "
                           r"again with --force"),
])
def test_resuming_a_damaged_checkpoint_is_one_error_naming_it_and_keeps_it(data_dir, tmp_path, field, value, needle):
    """A damaged training state failed as a traceback deep in the restore; the checkpoint stays
    as it was, so nothing of the run is lost."""
    from nmtkit.checkpoint import save_checkpoint

    run = tmp_path / "run"
    opts = tiny_options(max_updates=2, valid_every=100, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    last = run / "checkpoint_last.pt"
    good = load_checkpoint(last)
    value = dict(good["trainer"], bogus=1) if value == "bogus" else value
    if value == "nan":
        value = dict(good["model_state"], v_a=torch.full_like(good["model_state"]["v_a"], float("nan")))
    save_checkpoint(dict(good, **{field: value}), last)
    before = last.read_bytes()
    with pytest.raises(CheckpointError, match=needle) as err:
        train_run(data_dir, run, opts.replace(max_updates=4), tiny_overrides(), resume=True)
    assert str(last) in str(err.value) and last.read_bytes() == before


@pytest.mark.parametrize("was, was_world, world, given, expected", [
    (1, 1, 1, None, 1),  # the same job
    (1, 4, 2, 2, 2),  # 4 processes -> 2, each summing 2 minibatches: 4 per update still
    (2, 1, 2, 1, 1),  # 1 process at --update-freq 2 -> 2 processes
])
def test_resuming_on_another_number_of_processes_keeps_the_minibatches_per_update(was, was_world, world, given,
                                                                                    expected):
    from nmtkit.train.resume import resumed_update_freq

    assert resumed_update_freq(was, was_world, world, given) == expected


@pytest.mark.parametrize("was, was_world, world, given, needle", [
    (1, 2, 1, None, "= 1 minibatch(es) per update; the run being resumed made 2 (2 x --update-freq 1): resume with "
                    "--update-freq 2"),
    (1, 1, 1, 2, "resume with --update-freq 1"),  # the global batch changed on the same job
    (1, 2, 3, None, "resume with a number of processes that divides 2, or start a new run"),
])
def test_resuming_with_a_global_batch_that_changes_is_refused(was, was_world, world, given, needle):
    from nmtkit.errors import ConfigError
    from nmtkit.train.resume import resumed_update_freq

    with pytest.raises(ConfigError) as err:
        resumed_update_freq(was, was_world, world, given)
    assert needle in str(err.value)


@pytest.mark.parametrize("metric, change, refused", [
    ("bleu", dict(valid_bleu_samples=4), True), ("bleu", dict(valid_beam=3), True),
    ("loss", dict(valid_bleu_samples=4, valid_beam=3), False), ("bleu", dict(valid_batch_size=4), False),
])
def test_the_dev_bleu_that_selects_the_best_checkpoint_stays_on_resume(metric, change, refused):
    """--valid-bleu-samples and --valid-beam may change on resume as reporting options; with
    --best-metric bleu the resumed run compared BLEU on another dev subset (or beam) with the best
    score of the old one, for checkpoint_best.pt, early stopping and the lr schedule."""
    from nmtkit.train.resume import resume_config
    from tests.conftest import tiny_config

    ckpt = {"train_config": tiny_config(best_metric=metric).to_dict(), "trainer": {"world_size": 1}}
    if not refused:
        assert resume_config(ckpt, tiny_options(**change)).to_dict() == {**ckpt["train_config"], **change}
        return
    with pytest.raises(ConfigError, match=r"differs from the run being resumed \(.*\); with --best-metric bleu it "
                                          "decides checkpoint_best.pt: start a new run to change it"):
        resume_config(ckpt, tiny_options(**change))


@pytest.mark.parametrize("was, given, message", [
    (None, dict(ema_decay=0.0), None),
    (None, dict(ema_decay=0.9), r"--ema-decay 0.9 differs from the run being resumed \(not given\);"),
    (0.9, dict(ema_decay=0.0), r"--ema-decay 0.0 differs from the run being resumed \(0.9\);"),
])
def test_a_resume_names_an_option_the_run_was_not_given_and_takes_ema_decay_0_as_none(was, given, message):
    """--ema-decay 0 means no average, as its absence does: it was refused on resume as differing
    from "(None)", Python's word for an option the run was not given."""
    from nmtkit.train.resume import resume_config
    from tests.conftest import tiny_config

    ckpt = {"train_config": tiny_config(ema_decay=was).to_dict(), "trainer": {"world_size": 1}}
    if message is None:
        assert not resume_config(ckpt, tiny_options(**given)).ema_decay
        return
    with pytest.raises(ConfigError, match=message):
        resume_config(ckpt, tiny_options(**given))


def test_a_resume_on_fewer_processes_that_stops_before_saving_leaves_the_run_resumable(data_dir, tmp_path):
    """The resume rewrote config.json with the new --update-freq before its first save; the
    checkpoint still held the old one, and every later resume was refused as another run's."""
    from nmtkit.checkpoint import save_checkpoint

    run = tmp_path / "run"
    opts = tiny_options(max_updates=2, valid_every=2, save_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    ckpt = load_checkpoint(run / "checkpoint_last.pt")
    ckpt["trainer"]["world_size"] = 2  # as saved by a run of two processes
    save_checkpoint(ckpt, run / "checkpoint_last.pt")

    def stop(update, loss):
        raise RuntimeError("stopped before the first save")

    more = opts.replace(max_updates=4, update_freq=2)
    with pytest.raises(RuntimeError, match="before the first save"):
        train_run(data_dir, run, more, tiny_overrides(), resume=True, loss_hook=stop)
    result = train_run(data_dir, run, more, tiny_overrides(), resume=True)
    assert result.update == 4
    assert load_checkpoint(run / "checkpoint_last.pt")["train_config"]["update_freq"] == 2


def test_an_ignored_sigint_stays_ignored_while_training(data_dir, tmp_path):
    """A script's background job runs with SIGINT ignored; training must not take it back and
    stop at a Ctrl-C meant for the script's foreground."""
    def interrupt(update, loss):
        if update == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return loss

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        res = train_run(data_dir, tmp_path / "run", tiny_options(max_updates=5, valid_bleu_samples=0),
                           loss_hook=interrupt)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
    assert res.reason == "max-updates" and res.update == 5


def test_a_resume_with_max_epochs_below_the_current_epoch_stops_at_once(data_dir, tmp_path):
    """It trained on to the end of the epoch it was in, as a lower --max-updates does not."""
    run = tmp_path / "run"
    first = train_run(data_dir, run, tiny_options(max_updates=20, valid_bleu_samples=0), tiny_overrides())
    assert first.epoch == 2
    again = train_run(data_dir, run, tiny_options(max_updates=100, max_epochs=1, valid_bleu_samples=0),
                         tiny_overrides(), resume=True)
    assert (again.reason, again.update) == ("max-epochs", 20)


def test_resuming_a_run_past_its_budget_says_that_nothing_is_left_to_train(data_dir, tmp_path, caplog):
    """It printed the start line and "stopped (max-updates)" with nothing between, as if trained."""
    run = tmp_path / "run"
    train_run(data_dir, run, tiny_options(max_updates=20, valid_bleu_samples=0), tiny_overrides())
    for options, said in ((dict(max_updates=None), "--max-updates 20"), (dict(max_updates=100, max_epochs=1),
                                                                           "--max-epochs 1")):
        caplog.clear()
        again = train_run(data_dir, run, tiny_options(**options, valid_bleu_samples=0), tiny_overrides(), resume=True)
        assert again.update == 20
        assert f"already reached its {said}: nothing to train; resume with a larger one" in caplog.text
    caplog.clear()
    again = train_run(data_dir, run, tiny_options(max_updates=25, max_epochs=3, valid_bleu_samples=0), tiny_overrides(),
                      resume=True)  # --max-epochs 1 given on a resume stays the run's until another is given
    assert again.update == 25 and "already reached" not in caplog.text


def test_a_run_stopped_between_validations_resumes_to_the_same_early_stop(data_dir, tmp_path):
    """The validation a run makes when it stops between two scheduled ones (here --max-updates
    38) set the best score that --patience counts against: the resumed run stopped early at
    another update than the run that was never stopped."""
    opts = tiny_options(lr=0.1, seed=2, max_updates=60, valid_every=10, save_every=10, log_every=10,
                        valid_bleu_samples=0, patience=2)
    whole = train_run(data_dir, tmp_path / "whole", opts, tiny_overrides())
    train_run(data_dir, tmp_path / "parts", opts.replace(max_updates=38), tiny_overrides())
    parts = train_run(data_dir, tmp_path / "parts", opts, tiny_overrides(), resume=True)
    assert (parts.reason, parts.update) == (whole.reason, whole.update)
    a = load_checkpoint(tmp_path / "whole" / "checkpoint_last.pt")["model_state"]
    b = load_checkpoint(tmp_path / "parts" / "checkpoint_last.pt")["model_state"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_validation_a_resume_runs_first_is_not_counted_in_its_first_records_throughput(data_dir, tmp_path,
                                                                                           monkeypatch):
    """A run killed in the validation after its checkpoint runs it first on --resume: its seconds went
    into the first log record's tokens/s, updates/s and sentences/s (half the rate on Tatoeba)."""
    import time

    from nmtkit.train import trainer
    from nmtkit.train.events import Callbacks

    class StopAt4(Callbacks):
        def on_update(self, update, epoch):
            if update == 4:
                signal.raise_signal(signal.SIGINT)

    run = tmp_path / "run"
    opts = tiny_options(max_updates=8, valid_every=100, log_every=2, valid_bleu_samples=0)
    with contextlib.suppress(KeyboardInterrupt):
        train_run(data_dir, run, opts, tiny_overrides(), callbacks=StopAt4())
    real = trainer.dev_scores
    monkeypatch.setattr(trainer, "dev_scores", lambda *a: (time.sleep(2), real(*a))[1])
    train_run(data_dir, run, opts.replace(valid_every=4), tiny_overrides(), resume=True)
    first = [r for r in _records(run, "train") if r["update"] > 4][0]
    assert first["update"] == 6 and 2 / first["updates_per_s"] < 1.5


def test_ctrl_c_in_the_last_update_leaves_the_final_validation_to_the_resume_and_says_so(data_dir, tmp_path, caplog):
    """Ctrl-C in the last update stopped the final validation, yet the run ended as finished
    ('stopped (max-updates)', exit 0) without a checkpoint_best.pt; a --resume then said 'nothing to train'."""
    from nmtkit.train import TrainInterrupted
    from nmtkit.train.events import Callbacks

    class CtrlCAt6(Callbacks):
        def on_update(self, update, epoch):
            if update == 6:
                signal.raise_signal(signal.SIGINT)

    run, opts = tmp_path / "run", tiny_options(max_updates=6, valid_every=100, valid_bleu_samples=0)
    with pytest.raises(TrainInterrupted) as stop:
        train_run(data_dir, run, opts, tiny_overrides(), callbacks=CtrlCAt6())
    assert stop.value.result.reason == "SIGINT" and not (run / "checkpoint_best.pt").exists()
    res = train_run(data_dir, run, opts, tiny_overrides(), resume=True)
    assert (res.reason, res.best_update) == ("max-updates", 6) and (run / "checkpoint_best.pt").exists()
    assert "nothing to train" not in caplog.text


def test_a_resume_keeps_the_precision_auto_chose_unless_the_user_changes_it(data_dir, tmp_path, monkeypatch, caplog):
    """--precision auto times a bf16 product at every start: a resume on a loaded machine whose
    timing came out the other way trained the rest of the run in the other precision, silently.
    It keeps the run's; an explicit --precision still changes it, and bf16 on a CPU without native
    BF16 is resolved afresh with a warning."""
    import nmtkit.models.precision as prec
    from nmtkit.train import context

    seen = []
    monkeypatch.setattr(context, "autocast", lambda device_type, precision: seen.append(precision)
                        or contextlib.nullcontext())
    native, speedup = [True], [1.5]  # bf16 pays off at the start
    monkeypatch.setattr(prec, "cpu_has_fast_bf16", lambda cpuinfo=None: native[0])
    monkeypatch.setattr(prec, "cpu_bf16_speedup", lambda: speedup[0])
    run, opts = tmp_path / "run", tiny_options(max_updates=2, valid_every=2, valid_bleu_samples=0, precision="auto")

    def used(max_updates, **given):
        seen.clear()
        train_run(data_dir, run, opts.replace(max_updates=max_updates, **given), tiny_overrides(), resume=max_updates > 2)
        return set(seen)

    assert used(2) == {"bf16"}
    speedup[0] = 1.1  # a loaded machine: bf16 no longer times faster
    assert used(4) == {"bf16"}
    assert used(6, precision="auto") == {"bf16"}  # auto given again: no change
    assert used(8, precision="fp32") == {"fp32"}
    assert used(10, precision="auto") == {"fp32"}  # the user's change to auto: resolved afresh
    assert used(12, precision="bf16") == {"bf16"}
    speedup[0] = 1.5
    assert used(14, precision="auto") == {"bf16"}
    native[0] = False  # resumed on a CPU without native BF16
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert used(16) == {"fp32"}
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == ["--precision auto: the resumed run trains in fp32, not in bf16 as before (this cpu does not run "
                      "bf16 natively)"]
    starts = [line for line in (run / "train.log").read_text().splitlines() if " INFO training " in line]
    assert [s.split(" parameters, ")[1].split(")")[0] for s in starts] == ["bf16"] * 3 + ["fp32"] * 2 + ["bf16"] * 2 + [
        "fp32"]  # what each session trained in, which config.json's "auto" does not say


def test_a_resume_from_an_older_checkpoint_put_back_warns_of_the_later_kept_checkpoints(data_dir, tmp_path, caplog):
    """They stayed without a word, to be replaced or, past where the run stops, mixed with its own by
    `nmtkit average --last`. A run killed between saves leaves kept checkpoints up to its next save
    only: those it replaces on its way, no warning."""
    run, opts = tmp_path / "run", dict(keep_every=2, save_every=4, valid_every=4, valid_bleu_samples=0)
    train_run(data_dir, run, tiny_options(max_updates=4, **opts), tiny_overrides())
    backup = (run / "checkpoint_last.pt").read_bytes()
    (run / "checkpoint_8.pt").write_bytes((run / "checkpoint_4.pt").read_bytes())  # killed at 8, before its save
    caplog.clear()
    train_run(data_dir, run, tiny_options(max_updates=12, **opts), tiny_overrides(), resume=True)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    (run / "checkpoint_last.pt").write_bytes(backup)
    caplog.clear()
    train_run(data_dir, run, tiny_options(max_updates=6, **opts), tiny_overrides(), resume=True)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "checkpoint_last.pt is at update 4, older than the run's kept checkpoint_6.pt to " \
                                "checkpoint_12.pt (an earlier copy put back?)" in warned[0], warned


@pytest.mark.parametrize("procs", [0, -1, True, "2"])
def test_a_checkpoint_whose_world_size_is_not_a_number_of_processes_is_refused_as_damaged(data_dir, tmp_path, procs):
    """A saved world_size of 0 is no run's: it is named as the damage, not turned into a hint to
    resume with --update-freq 0."""
    run = tmp_path / "run"
    opts = tiny_options(max_updates=2, valid_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    last = run / "checkpoint_last.pt"
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    ckpt["trainer"]["world_size"] = procs
    torch.save(ckpt, last)
    with pytest.raises(CheckpointError, match=r"its training state's world_size .* is not a number of processes"):
        train_run(data_dir, run, opts.replace(max_updates=4), tiny_overrides(), resume=True)


def test_resuming_with_a_data_directory_whose_manifest_records_no_split_sizes_is_not_refused(tmp_path):
    """Sizes are compared only where both manifests record them: a data directory that records
    none (an older or hand-made manifest) resumes the run rather than being called another one."""
    import json

    from tests.conftest import make_data_dir

    run, data_dir = tmp_path / "run", make_data_dir(tmp_path / "data")
    opts = tiny_options(max_updates=2, valid_every=2, valid_bleu_samples=0)
    train_run(data_dir, run, opts, tiny_overrides())
    manifest = json.loads((data_dir / "manifest.json").read_text())
    for split in manifest["splits"].values():
        del split["lines"]
    (data_dir / "manifest.json").write_text(json.dumps(manifest))
    assert train_run(data_dir, run, opts.replace(max_updates=4), tiny_overrides(), resume=True).update == 4
