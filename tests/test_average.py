"""`nmtkit average`: the float64 mean of compatible checkpoints, written as an ordinary checkpoint."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from nmtkit.checkpoint import load_checkpoint, save_checkpoint
from tests.conftest import TGT_WORDS, CliResult, make_checkpoint, run_cli, tiny_model

LINES = ["the cat sat on a mat .", "a dog ran in the park", "the big red house"]


def one_error_line(res: CliResult) -> str:
    code, _, err = res
    assert code != 0 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nmtkit: error: "), err
    return lines[0]


def kept(run_dir: Path, update: int, seed: int, **extra) -> Path:
    """checkpoint_<update>.pt as train --keep-every writes it (trainer state included)."""
    run_dir.mkdir(exist_ok=True)
    return make_checkpoint(run_dir / f"checkpoint_{update}.pt", seed=seed, trainer={"update": update}, **extra)


def test_average_is_the_float64_mean_cast_back_to_the_stored_dtype(tmp_path):
    paths = [make_checkpoint(tmp_path / f"m{s}.pt", seed=s) for s in (1, 2, 3)]
    code, _, err = run_cli(["average", *sum((["-m", str(p)] for p in paths), []), "-o", str(tmp_path / "avg.pt")])
    assert code == 0, err
    states = [load_checkpoint(p)["model_state"] for p in paths]
    avg = load_checkpoint(tmp_path / "avg.pt")["model_state"]
    assert set(avg) == set(states[0])
    for k, t in avg.items():
        want = (sum(s[k].double() for s in states) / 3).to(states[0][k].dtype)
        assert t.dtype == states[0][k].dtype
        assert torch.equal(t, want), k
    # not a trivial mean: the inputs differ
    k = next(iter(avg))
    assert not torch.equal(states[0][k], states[1][k])


def test_bf16_parameters_are_averaged_in_float64_and_stored_as_bf16(tmp_path):
    from nmtkit.average import AverageConfig, run

    paths = []
    for s in (1, 2):
        model = tiny_model(seed=s)
        paths.append(make_checkpoint(tmp_path / f"b{s}.pt", model=model.to(torch.bfloat16)))
    ckpt = run(AverageConfig(models=paths, output=tmp_path / "avg.pt"))["checkpoint"]
    a, b = (load_checkpoint(p)["model_state"] for p in paths)
    for k, t in ckpt["model_state"].items():
        assert t.dtype == torch.bfloat16
        assert torch.equal(t, ((a[k].double() + b[k].double()) / 2).to(torch.bfloat16)), k


def test_average_of_copies_of_one_model_translates_exactly_as_that_model(tmp_path):
    import nmtkit

    base = make_checkpoint(tmp_path / "base.pt", seed=5)
    copy = tmp_path / "copy.pt"
    copy.write_bytes(base.read_bytes())
    code, _, err = run_cli(["average", "-m", str(base), "-m", str(copy), "-o", str(tmp_path / "avg.pt")])
    assert code == 0, err

    def translate(path):
        return nmtkit.load(path).translate(LINES, beam=3, max_len_b=5)

    assert translate(tmp_path / "avg.pt") == translate(base)


def test_averaged_checkpoint_translates_through_the_cli(tmp_path):
    paths = [make_checkpoint(tmp_path / f"m{s}.pt", seed=s) for s in (1, 2)]
    avg = tmp_path / "avg.pt"
    assert run_cli(["average", "-m", str(paths[0]), "-m", str(paths[1]), "-o", str(avg), "-q"])[0] == 0
    src = tmp_path / "in.en"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "out.fr"
    code, _, err = run_cli(["translate", "-m", str(avg), "-i", str(src), "-o", str(out), "--beam", "2",
                    "--max-len-b", "4", "--quiet"])
    assert code == 0, err
    hyps = out.read_text(encoding="utf-8").splitlines()
    assert len(hyps) == len(LINES)
    assert all(w in TGT_WORDS for h in hyps for w in h.split())


def test_averaged_checkpoint_keeps_pipeline_vocabularies_lexicon_and_names_its_sources(tmp_path):
    from nmtkit.average import AverageConfig, run
    from nmtkit.text.pipeline import TextPipeline
    from nmtkit.train.config import TrainConfig

    pipe = TextPipeline("en", "fr", lowercase=True)
    lexicon = torch.arange(12, dtype=torch.int32).reshape(-1, 1)
    run_dir = tmp_path / "run"
    # the first's lexicon and training config differ (as another run's may): the newest's are kept
    paths = [kept(run_dir, u, seed=u, pipeline=pipe, lexicon=lexicon if u == 200 else lexicon.flip(0),
                  train_config=TrainConfig(max_len=u, max_updates=1).to_dict()) for u in (100, 200)]
    ckpt = run(AverageConfig(models=paths, output=tmp_path / "avg.pt"))["checkpoint"]
    back = load_checkpoint(tmp_path / "avg.pt")
    newest = load_checkpoint(paths[-1])
    for key in ("arch", "model_config", "pipeline", "src_vocab", "tgt_vocab", "src_lang", "tgt_lang", "train_config"):
        assert back[key] == newest[key], key
    assert TextPipeline.from_dict(back["pipeline"]).lowercase
    assert torch.equal(back["lexicon"], lexicon)
    assert back["averaged_from"] == [{"path": str(p), "update": u} for p, u in zip(paths, (100, 200))]
    assert "optimizer_state" not in back
    assert ckpt["averaged_from"] == back["averaged_from"]


def test_last_n_takes_the_newest_kept_checkpoints_by_update_number(tmp_path):
    run_dir = tmp_path / "run"
    for u in (200, 1000, 800, 600, 400):  # as strings, "1000" would sort before "200"
        kept(run_dir, u, seed=u)
    make_checkpoint(run_dir / "checkpoint_best.pt", seed=9)
    make_checkpoint(run_dir / "checkpoint_last.pt", seed=9)
    out = tmp_path / "avg.pt"
    code, _, err = run_cli(["average", "--last", "3", "--save-dir", str(run_dir), "-o", str(out)])
    assert code == 0, err
    assert [s["update"] for s in load_checkpoint(out)["averaged_from"]] == [600, 800, 1000]


def test_average_of_a_real_training_runs_kept_checkpoints(data_dir, tmp_path):
    """train --keep-every leaves checkpoint_<update>.pt that `average --last` takes and translate reads."""
    from tests.conftest import tiny_options, tiny_overrides, train_run

    run_dir = tmp_path / "run"
    train_run(data_dir, run_dir, tiny_options(max_updates=4, keep_every=1, valid_every=4, save_every=4),
                 tiny_overrides())
    out = tmp_path / "avg.pt"
    code, _, err = run_cli(["average", "--last", "3", "--save-dir", str(run_dir), "-o", str(out)])
    assert code == 0, err
    assert [s["update"] for s in load_checkpoint(out)["averaged_from"]] == [2, 3, 4]
    elapsed = [load_checkpoint(run_dir / f"checkpoint_{u}.pt")["trainer"]["elapsed"] for u in (1, 2, 3, 4)]
    assert 0 < elapsed[0] < elapsed[1] < elapsed[2] < elapsed[3], elapsed  # each its own time (all 0.0 before)
    from nmtkit.checkpoint import load_model

    model, ckpt = load_model(out)
    assert ckpt["src_vocab"] == load_checkpoint(run_dir / "checkpoint_4.pt")["src_vocab"]


# ---- bad inputs: one line naming the file, nothing written ----------------------------------------


def _changed(tmp_path: Path, name: str, how: str) -> Path:
    from nmtkit.text.pipeline import TextPipeline

    p = tmp_path / name
    if how == "config":
        model = tiny_model(seed=2, emb_dim=8)
        ckpt = load_checkpoint(make_checkpoint(p, seed=2))
        ckpt["model_state"] = model.state_dict()
        ckpt["model_config"] = dict(ckpt["model_config"], emb_dim=8)
        save_checkpoint(ckpt, p)
    elif how == "shape":  # same config recorded, a tensor of another shape (a hand-edited file)
        ckpt = load_checkpoint(make_checkpoint(p, seed=2))
        k = next(iter(ckpt["model_state"]))
        ckpt["model_state"][k] = ckpt["model_state"][k][:1]
        save_checkpoint(ckpt, p)
    elif how == "vocab":
        make_checkpoint(p, seed=2, tgt_words=list(reversed(TGT_WORDS)))
    elif how == "pipeline":
        make_checkpoint(p, seed=2, pipeline=TextPipeline("en", "fr", lowercase=True))
    elif how == "arch":
        make_checkpoint(p, seed=2, arch="rnnencdec")
    elif how in ("nan", "config-list"):  # a damaged file: a weight that is NaN, a config that is not a mapping
        ckpt = load_checkpoint(make_checkpoint(p, seed=2))
        if how == "nan":
            k = next(k for k, t in ckpt["model_state"].items() if t.is_floating_point())
            ckpt["model_state"][k] = ckpt["model_state"][k].clone().fill_(float("nan"))
        else:
            ckpt["model_config"] = [1, 2]
        save_checkpoint(ckpt, p)
    return p


@pytest.mark.parametrize("how, needle", [
    ("config", "model config differs"),
    ("shape", "parameter"),
    ("vocab", "tgt vocabulary differs"),  # and says what needs them alike: averaging, not an ensemble
    ("pipeline", "(lowercase True vs False); averaging needs checkpoints trained on the same preprocessing"),
    ("arch", "architecture rnnencdec differs"),
    ("nan", "its model has weights that are NaN or infinite"),
    ("config-list", "its model_config and model_state are not both mappings"),
])
def test_incompatible_checkpoints_are_refused_with_one_line_naming_the_file(tmp_path, how, needle):
    a = make_checkpoint(tmp_path / "a.pt", seed=1)
    b = _changed(tmp_path, "b.pt", how)
    out = tmp_path / "avg.pt"
    line = one_error_line(run_cli(["average", "-m", str(a), "-m", str(b), "-o", str(out)]))
    assert str(b) in line and needle in line, line
    assert "ensemble" not in line, line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "b.pt"]


def test_two_runs_checkpoints_of_one_update_are_averaged_a_copy_of_one_is_refused(tmp_path):
    """Two runs' last checkpoints at the same update are two models, not one counted twice."""
    a, b = kept(tmp_path / "run1", 6, seed=1), kept(tmp_path / "run2", 6, seed=2)
    code, _, err = run_cli(["average", "-m", str(a), "-m", str(b), "-o", str(tmp_path / "avg.pt")])
    assert code == 0, err
    copy = tmp_path / "copy.pt"
    copy.write_bytes(a.read_bytes())
    line = one_error_line(run_cli(["average", "-m", str(a), "-m", str(b), "-m", str(copy), "-o",
                                   str(tmp_path / "avg2.pt")]))
    assert f"{copy}: holds update 6, as {a} does" in line, line


def test_fewer_kept_checkpoints_than_last_n_is_one_line_listing_them(tmp_path):
    run_dir = tmp_path / "run"
    kept(run_dir, 100, seed=1)
    kept(run_dir, 200, seed=2)
    line = one_error_line(run_cli(["average", "--last", "5", "--save-dir", str(run_dir), "-o",
                               str(tmp_path / "avg.pt")]))
    assert str(run_dir) in line and "--last 5" in line and "kept 2" in line and "checkpoint_200.pt" in line
    assert "--keep-every" in line and "give --last 2 or less" in line  # what a too short run (tatoeba's AVERAGE=5) can do
    assert not (tmp_path / "avg.pt").exists()
    line = one_error_line(run_cli(["average", "--last", "1", "--save-dir", str(tmp_path), "-o", str(tmp_path / "a.pt")]))
    assert "kept 0 (none); train with --keep-every N" in line, line


def _hard_link(target, link):
    os.link(target, link)
    return link


@pytest.mark.parametrize("case, needle", [
    ("missing", "checkpoint not found"),
    ("output-is-input", "is the same file as the -m input"),
    ("output-exists", "exists (use --force"),
    ("twice", "is given twice"),
    ("hard-link", "is given twice"),  # a hard link used to be averaged in as a second checkpoint
    ("last-without-save-dir", "--last N and --save-dir RUN go together"),
    ("last-and-m", "not both"),
    ("missing-run-dir", "run directory not found"),
    ("last-0", "--last must be at least 1"),
    ("nothing", "give the checkpoints to average"),
    ("not-a-checkpoint", "not an nmtkit checkpoint"),
    ("output-is-stdout", "written to a file"),
])
def test_bad_average_command_lines_are_one_line(tmp_path, monkeypatch, case, needle):
    monkeypatch.chdir(tmp_path)  # where "-o -" used to write a file named "-"
    a = make_checkpoint(tmp_path / "a.pt", seed=1)
    out = tmp_path / "avg.pt"
    argv = {
        "missing": ["-m", str(a), "-m", str(tmp_path / "gone.pt"), "-o", str(out)],
        "output-is-input": ["-m", str(a), "-m", str(make_checkpoint(tmp_path / "b.pt", seed=2)), "-o", str(a), "--force"],
        "output-exists": ["-m", str(a), "-o", str(a.with_name("old.pt"))],
        "twice": ["-m", str(a), "-m", str(tmp_path / "." / "a.pt"), "-o", str(out)],
        "hard-link": ["-m", str(a), "-m", str(_hard_link(a, tmp_path / "linked.pt")), "-o", str(out)],
        "last-without-save-dir": ["--last", "2", "-o", str(out)],
        "last-and-m": ["--last", "2", "--save-dir", str(tmp_path), "-m", str(a), "-o", str(out)],
        "missing-run-dir": ["--last", "2", "--save-dir", str(tmp_path / "norun"), "-o", str(out)],
        "last-0": ["--last", "0", "--save-dir", str(tmp_path), "-o", str(out)],
        "nothing": ["-o", str(out)],
        "not-a-checkpoint": ["-m", str(a), "-m", str(tmp_path / "junk.pt"), "-o", str(out)],
        "output-is-stdout": ["-m", str(a), "-m", str(make_checkpoint(tmp_path / "b.pt", seed=2)), "-o", "-"],
    }[case]
    if case == "output-exists":
        a.with_name("old.pt").write_text("old\n")
    if case == "not-a-checkpoint":
        (tmp_path / "junk.pt").write_text("not a checkpoint\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    line = one_error_line(run_cli(["average", *argv]))
    assert needle in line, line
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_an_average_config_refuses_a_last_below_one_when_built():
    """AverageConfig(last=0) was built, and refused only once run() looked for the run's checkpoints."""
    from nmtkit.average import AverageConfig
    from nmtkit.errors import ConfigError

    for n in (0, -1):
        with pytest.raises(ConfigError, match=f"--last must be at least 1, got {n}"):
            AverageConfig(output="avg.pt", last=n, save_dir="run")


def test_kept_checkpoint_names_are_parsed_one_way():
    from nmtkit.io.dirs import is_run_file, kept_name, kept_update

    assert [kept_update(kept_name(n)) for n in (0, 7, 12000)] == [0, 7, 12000]
    for other in ("checkpoint_last.pt", "checkpoint_best.pt", "checkpoint_12.pt.x.tmp", "checkpoint_-1.pt",
                  "checkpoint_1a.pt", "checkpoint_.pt", "xcheckpoint_3.pt"):
        assert kept_update(other) is None, other
    assert is_run_file("checkpoint_40.pt") and not is_run_file("checkpoint_40.pt.tmp")


def test_kept_checkpoints_come_oldest_update_first(tmp_path):
    from nmtkit.io.dirs import kept_checkpoints

    for name in ("checkpoint_100.pt", "checkpoint_9.pt", "checkpoint_last.pt", "checkpoint_20.pt", "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in kept_checkpoints(tmp_path)] == ["checkpoint_9.pt", "checkpoint_20.pt", "checkpoint_100.pt"]


@pytest.mark.parametrize("alias", ["/dev/stdout", "/proc/self/fd/1"])
def test_average_never_writes_a_checkpoint_to_stdout_under_another_name(tmp_path, alias):
    """-o /dev/stdout is stdout as -o - is: refused before any checkpoint is read."""
    import subprocess
    import sys
    a = make_checkpoint(tmp_path / "a.pt", seed=1)
    b = make_checkpoint(tmp_path / "b.pt", seed=2)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    res = subprocess.run([sys.executable, "-m", "nmtkit", "average", "-m", str(a), "-m", str(b), "-o", alias],
                         capture_output=True, env=env)
    assert res.returncode != 0 and res.stdout == b""
    err = res.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "written to a file" in err[0], res.stderr


@pytest.mark.parametrize("name", ["checkpoint_last.pt", "checkpoint_best.pt", "checkpoint_50.pt"])
def test_average_never_replaces_a_runs_own_checkpoint(tmp_path, name):
    """A run's resumable checkpoint replaced by an averaged one (no optimiser state) could no
    longer be resumed: -o naming a run file in a run directory is refused, even with --force."""
    run_dir = tmp_path / "run"
    kept(run_dir, 100, seed=1)
    kept(run_dir, 200, seed=2)
    for f in ("checkpoint_last.pt", "checkpoint_best.pt", "checkpoint_50.pt"):
        make_checkpoint(run_dir / f, seed=9, trainer={"update": 300})
    before = (run_dir / name).read_bytes()
    line = one_error_line(run_cli(["average", "--last", "2", "--save-dir", str(run_dir), "-o",
                                   str(run_dir / name), "--force"]))
    assert name in line and "another name" in line
    assert (run_dir / name).read_bytes() == before
    code, _, err = run_cli(["average", "--last", "2", "--save-dir", str(run_dir), "-o", str(run_dir / "averaged.pt")])
    assert code == 0, err


def test_average_refuses_a_gz_output_that_no_checkpoint_reader_would_gunzip(tmp_path):
    """A .gz output is written gzip-compressed (nmtkit.io.files), which load_checkpoint never
    undoes: -o avg.pt.gz is refused before any checkpoint is read."""
    a = make_checkpoint(tmp_path / "a.pt", seed=1)
    b = make_checkpoint(tmp_path / "b.pt", seed=2)
    line = one_error_line(run_cli(["average", "-m", str(a), "-m", str(b), "-o", str(tmp_path / "avg.pt.gz")]))
    assert "avg.pt.gz" in line and "without .gz" in line
    assert not (tmp_path / "avg.pt.gz").exists()


def test_checkpoints_of_runs_with_other_seeds_are_warned_as_from_other_initial_weights(tmp_path):
    """-m of two runs (other --seed, so other initial weights: the mean of such models translates
    nothing) was averaged in silence; a run keeps its seed, so a seed that differs is now warned."""
    from nmtkit.train.config import TrainConfig

    paths = [make_checkpoint(tmp_path / f"s{s}.pt", seed=s, train_config=TrainConfig(seed=s, max_updates=1).to_dict())
             for s in (1, 2)]
    code, _, err = run_cli(["average", "-m", str(paths[0]), "-m", str(paths[1]), "-o", str(tmp_path / "avg.pt")])
    assert code == 0 and [line for line in err.splitlines() if "warning" in line] == [
        f"nmtkit: warning: {paths[1]} was trained with --seed 2, {paths[0]} with --seed 1: the mean of runs from other "
        "initial weights is in general no working model (average the checkpoints of one run)"], err
    same = make_checkpoint(tmp_path / "same.pt", seed=3, train_config=TrainConfig(seed=1, max_updates=1).to_dict())
    code, _, err = run_cli(["average", "-m", str(paths[0]), "-m", str(same), "-o", str(tmp_path / "avg2.pt")])
    assert code == 0 and "warning" not in err, err
