"""Nothing a command reads is ever destroyed by what it writes: every output option of every
command tried against every input of that command (with --force where the command has it),
and the data-loss rows of the bad-input table (tests/test_bad_inputs.py's machinery).

Each input lives alone in its own folder, so the error line must name the input's option, and
every byte of every input folder must be the same afterwards. `nmtkit serve` writes no file,
so it has no row here.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import run_cli
from tests.test_bad_inputs import (
    EN,
    FR,
    TINY,
    Row,
    World,
    _preprocess,
    _train,
    _translate,
    check_row,
)


@dataclass
class Input:
    """An input made in its own folder: `value` goes on the command line; `file` is the file
    (or folder) an output may be aimed at; `prefix` the PREFIX of a parallel corpus."""

    value: str
    file: str
    prefix: str | None = None


def _corpus(w: World, folder: str, name: str, suffix: str = "") -> Input:
    d = w.tmp / folder
    d.mkdir()
    (d / f"{name}.en{suffix}").write_text("\n".join(EN) + "\n", encoding="utf-8")
    (d / f"{name}.fr{suffix}").write_text("\n".join(FR) + "\n", encoding="utf-8")
    return Input(str(d / name), str(d / f"{name}.en"), str(d / name))


def _file(w: World, folder: str, name: str, copy: Path | None = None, text: str = "") -> Input:
    d = w.tmp / folder
    d.mkdir()
    if copy is not None and copy.is_dir():
        shutil.copytree(copy, d / name)
    elif copy is not None:
        shutil.copy(copy, d / name)
    else:
        (d / name).write_text(text, encoding="utf-8")
    return Input(str(d / name), str(d / name))


@dataclass
class Command:
    """A command's inputs (option -> maker) and outputs (option -> kind), and its argv from
    both. Kinds: file (a file written whole), prefix (PREFIX.* files), dir (a folder replaced
    whole), folder (a folder written into)."""

    name: str
    inputs: dict[str, Callable[[World], Input]]
    outputs: dict[str, str]
    argv: Callable[[World, dict[str, Input], dict[str, str]], list[str]]


def _translate_argv(w: World, ins: dict[str, Input], outs: dict[str, str]) -> list[str]:
    return ["translate", "-m", ins["-m"].value, "-i", ins["-i"].value, "--beam", "2", "--max-len-b", "3",
            "--replace-unk", "--unk-dict", ins["--unk-dict"].value, "--alignments", "hard",
            "--alignments-file", outs["--alignments-file"], "--plot-attention", outs["--plot-attention"],
            "-o", outs["-o"], "--force"]


def _preprocess_argv(w: World, ins: dict[str, Input], outs: dict[str, str]) -> list[str]:
    return ["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", ins["--train"].value, "--valid",
            ins["--valid"].value, "--test", ins["--test"].value, "--dest", outs["--dest"], "--workers", "1",
            "--quiet", "--force"]


def _select_argv(w: World, ins: dict[str, Input], outs: dict[str, str]) -> list[str]:
    return ["select-data", "--src-lang", "en", "--tgt-lang", "fr", "--in-domain", ins["--in-domain"].value,
            "--pool", ins["--pool"].value, "--output-prefix", outs["--output-prefix"], "--workers", "1", "--lines", "3", "--force"]


def _train_argv(w: World, ins: dict[str, Input], outs: dict[str, str]) -> list[str]:
    return ["train", "--data", ins["--data"].value, "--save-dir", outs["--save-dir"], *TINY, "--max-updates", "2",
            "--force"]


def _score_argv(w: World, ins: dict[str, Input], outs: dict[str, str]) -> list[str]:
    vocab = ["--data", ins["--data"].value] if "--data" in ins else ["-m", ins["-m"].value]
    return ["score", "--hyp", ins["--hyp"].value, "--ref", ins["--ref"].value, "--src", ins["--src"].value,
            "--no-unk", *vocab, "--plot", outs["--plot"], "--metrics", "bleu", "-j", "1"]


COMMANDS = [
    Command("translate", {"-i": lambda w: _file(w, "in-i", "src.en", w.src),
                          "-m": lambda w: _file(w, "in-m", "model.pt", w.ckpt),
                          "--unk-dict": lambda w: _file(w, "in-unk", "dict.tsv", text="chat\tcat\n")},
            {"-o": "file", "--alignments-file": "file", "--plot-attention": "folder"}, _translate_argv),
    Command("preprocess", {"--train": lambda w: _corpus(w, "in-train", "tr"),
                           "--valid": lambda w: _corpus(w, "in-valid", "dv"),
                           "--test": lambda w: _corpus(w, "in-test", "te")},
            {"--dest": "dir"}, _preprocess_argv),
    Command("select-data", {"--in-domain": lambda w: _corpus(w, "in-ind", "ind"),
                            "--pool": lambda w: _corpus(w, "in-pool", "pool")},
            {"--output-prefix": "prefix"}, _select_argv),
    Command("train", {"--data": lambda w: _file(w, "in-data", "data", w.data)}, {"--save-dir": "folder"},
            _train_argv),
    Command("tokenize", {"-i": lambda w: _file(w, "in-i", "raw.en", w.src),
                         "--protect": lambda w: _file(w, "in-protect", "patterns.txt", text="[0-9]+\n")},
            {"-o": "file"},
            lambda w, ins, outs: ["tokenize", "--lang", "en", "-i", ins["-i"].value, "--protect",
                                  ins["--protect"].value, "-o", outs["-o"], "--workers", "1"]),
    Command("average", {"-m": lambda w: _file(w, "in-m", "model.pt", w.ckpt)}, {"-o": "file"},
            lambda w, ins, outs: ["average", "-m", ins["-m"].value, "-o", outs["-o"], "--force"]),
    # score's inputs are named *.png: --plot must end in .png, and that check is not the one tried here
    Command("score", {"--hyp": lambda w: _file(w, "in-hyp", "hyp.png", w.tmp / "corpus.fr"),
                      "--ref": lambda w: _file(w, "in-ref", "ref.png", w.tmp / "corpus.fr"),
                      "--src": lambda w: _file(w, "in-src", "src.png", w.tmp / "corpus.en"),
                      "-m": lambda w: _file(w, "in-m", "model.png", w.ckpt),
                      "--data": lambda w: _file(w, "in-data", "data.png", w.data)},
            {"--plot": "file"}, _score_argv),
]
CASES = [(c, out, inp) for c in COMMANDS for out in c.outputs for inp in c.inputs]


def _target(kind: str, inp: Input) -> str:
    """Where an output of `kind` must be aimed to hit `inp`."""
    if kind == "prefix":
        return inp.prefix or inp.value
    if kind == "dir":
        return str(Path(inp.file).parent)
    return inp.file


def _digest(root: Path) -> dict[str, str]:
    """Every file under the input folders -> its sha256 (symlinks as their target's name)."""
    out = {}
    for p in sorted(root.glob("in-*/**/*")):
        if p.is_symlink():
            out[str(p)] = "-> " + os.readlink(p)
        elif p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.mark.parametrize("cmd,out_opt,in_opt", CASES, ids=[f"{c.name}-{o}-vs-{i}" for c, o, i in CASES])
def test_no_output_option_can_destroy_an_input(cmd: Command, out_opt: str, in_opt: str, world: World):
    """Aimed at an input (its file, prefix or folder), every output option is refused with one
    line naming the input's option, --force or not, and every input is left byte for byte."""
    makers = dict(cmd.inputs)
    if cmd.name == "score":  # -m and --data exclude each other: keep the one tried
        makers.pop("--data" if in_opt != "--data" else "-m")
    ins = {opt: make(world) for opt, make in makers.items()}
    outs = {opt: str(world.tmp / "out" / f"o{k}") for k, opt in enumerate(cmd.outputs)}
    (world.tmp / "out").mkdir()
    outs[out_opt] = _target(cmd.outputs[out_opt], ins[in_opt])
    before = _digest(world.tmp)
    check_row(Row(f"{cmd.name}", lambda w: cmd.argv(w, ins, outs), needles=(in_opt,)), world)
    assert _digest(world.tmp) == before
    assert not any((world.tmp / "out").iterdir()), "an output was written"


DOTDOT = [(c, out, next(iter(c.inputs))) for c in COMMANDS for out, kind in c.outputs.items()
          if kind in ("file", "prefix")]


@pytest.mark.parametrize("cmd,out_opt,in_opt", DOTDOT, ids=[f"{c.name}-{o}-vs-{i}" for c, o, i in DOTDOT])
def test_an_output_through_a_missing_folder_and_dotdot_never_reaches_the_input(cmd: Command, out_opt: str,
                                                                               in_opt: str, world: World):
    """`-o DIR/missing/../in.txt`: open() fails there (`missing` does not exist), but the checks
    resolved the name as realpath does, to DIR/in.txt, which exists() said was not there: the input
    was replaced (translate, average, select-data), --force or not, and exit 0. Now refused as
    open() would refuse it, and every input is left byte for byte."""
    makers = dict(cmd.inputs)
    if cmd.name == "score":
        makers.pop("--data")
    ins = {opt: make(world) for opt, make in makers.items()}
    outs = {opt: str(world.tmp / "out" / f"o{k}") for k, opt in enumerate(cmd.outputs)}
    (world.tmp / "out").mkdir()
    target = Path(_target(cmd.outputs[out_opt], ins[in_opt]))
    outs[out_opt] = str(target.parent / "missing" / ".." / target.name)
    before = _digest(world.tmp)
    check_row(Row(cmd.name, lambda w: cmd.argv(w, ins, outs), needles=("its folder does not exist",)), world)
    assert _digest(world.tmp) == before
    assert not (target.parent / "missing").exists()


def _symlink_to_input(w: World) -> str:
    os.symlink(w.src, w.tmp / "link.txt")
    return str(w.tmp / "link.txt")


def _dest_with_own_file(w: World) -> Path:
    d = w.tmp / "d"
    d.mkdir()
    (d / "mine.txt").write_text("keep\n")
    return d


def _data_dir_over(w: World, name: str) -> Path:
    d = w.tmp / name
    code, _, err = run_cli(_preprocess(w, d))
    assert code == 0, err
    return d


def _old_data_dir(w: World) -> Path:
    """A data directory whose manifest lists no files (written before it did): derived names count."""
    d = _data_dir_over(w, "pp-old")
    m = json.loads((d / "manifest.json").read_text())
    del m["files"]
    (d / "manifest.json").write_text(json.dumps(m))
    return d


def _into_data_dir(w: World, extra: str) -> Path:
    d = _data_dir_over(w, "pp-extra")
    (d / extra).write_text("notes\n")
    return d


def _same_sides(w: World, prefix: str) -> str:
    os.symlink(w.tmp / "corpus.en", w.tmp / f"{prefix}.en")
    os.symlink(w.tmp / "corpus.en", w.tmp / f"{prefix}.fr")
    return prefix


def _unchanged(path: Path, text: str) -> Callable[[World], None]:
    return lambda w: (w.tmp / path).read_text() == text or pytest.fail(f"{path} changed")


ROWS = [
    Row("translate-o-symlink-to-input-force", lambda w: _translate(w, "-o", _symlink_to_input(w), "--force"),
        needles=("-o", "-i")),
    Row("translate-o-and-alignments-file-same",
        lambda w: _translate(w, "-o", str(w.tmp / "o.txt"), "--alignments", "hard", "--alignments-file",
                             str(w.tmp / "o.txt")), needles=("o.txt", "--alignments-file", "-o")),
    Row("preprocess-force-keeps-unrelated-files", lambda w: _preprocess(w, _dest_with_own_file(w), "corpus", "--force"),
        needles=("mine.txt", "--force")),
    Row("preprocess-advises-no-force-that-it-would-refuse",  # was "not empty; use --force", then refused
        lambda w: _preprocess(w, _dest_with_own_file(w)), needles=("mine.txt", "move it"), absent=("use --force",)),
    Row("preprocess-force-keeps-a-file-added-to-a-data-dir",
        lambda w: _preprocess(w, _into_data_dir(w, "NOTES.md"), "corpus", "--force"), needles=("NOTES.md",)),
    Row("preprocess-force-replaces-its-own-data-dir",
        lambda w: _preprocess(w, _data_dir_over(w, "pp-own"), "corpus", "--force"), ok=True),
    Row("preprocess-force-replaces-a-data-dir-whose-manifest-lists-no-files",
        lambda w: _preprocess(w, _old_data_dir(w), "corpus", "--force"), ok=True),
    Row("tokenize-tokinfo-would-replace-the-input",
        lambda w: ["tokenize", "--lang", "en", "-i", _text_file(w, "t.tokinfo.json"), "-o", str(w.tmp / "t")],
        needles=("tokinfo.json", "-i input"), check=_unchanged(Path("t.tokinfo.json"), "the cat\n")),
    Row("preprocess-same-file-as-source-and-target", lambda w: _preprocess(w, w.tmp / "pp", _same_sides(w, "same")),
        needles=("same.en", "same.fr", "same file")),
    Row("select-data-same-file-as-source-and-target",
        lambda w: ["select-data", "--src-lang", "en", "--tgt-lang", "fr", "--in-domain", str(w.tmp / "corpus"),
                   "--pool", str(w.tmp / _same_sides(w, "same")), "--output-prefix", str(w.tmp / "sel"), "--lines", "3",
                   "--workers", "1"], needles=("same.en", "same file")),
    Row("train-force-keeps-the-users-files-in-the-runs-tensorboard-folder",  # were deleted with the folder
        lambda w: _train(w, _run_with_own_tensorboard_file(w), "--force"), ok=True,
        check=_unchanged(Path("run/tensorboard/notes.txt"), "mine\n")),
    Row("train-save-dir-is-the-data-dir", lambda w: ["train", "--data", str(_data_copy_here(w)), "--save-dir",
                                                     str(w.tmp / "dc"), *TINY, "--max-updates", "2"],
        needles=("--save-dir", "--data")),
    Row("translate-o-hard-link-of-input-force", lambda w: _translate(w, "-o", _hard_link_to_input(w), "--force"),
        needles=("-o", "-i")),
    Row("preprocess-force-keeps-the-users-symlink-to-a-folder",  # a link deletes nothing it leads to, but itself
        lambda w: _preprocess(w, _dest_with_own_link(w), "corpus", "--force"), needles=("notes", "--force"),
        check=lambda w: (w.tmp / "d" / "notes").is_symlink() or pytest.fail("d/notes was deleted")),
    Row("preprocess-dest-named-as-its-inputs-prefix",  # --train corpus --dest corpus: corpus.en is beside it, not in it
        lambda w: _preprocess(w, w.tmp / "corpus"), ok=True),
    Row("train-resume-refuses-a-run-file-that-is-a-symlink-to-the-users-file",  # metrics.jsonl is appended to
        lambda w: _train(w, _run_with_linked_metrics(w), "--resume", "--max-updates", "4"),
        needles=("metrics.jsonl", "symbolic link"), check=_unchanged(Path("notes.txt"), "mine\n")),
]


def _text_file(w: World, name: str) -> str:
    (w.tmp / name).write_text("the cat\n")
    return str(w.tmp / name)


def _run_with_own_tensorboard_file(w: World) -> Path:
    run = w.run_dir()
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "notes.txt").write_text("mine\n")
    (run / "tensorboard" / "events.out.tfevents.1.host").write_bytes(b"")  # the old run's curves, which go
    return run


def _data_copy_here(w: World) -> Path:
    shutil.copytree(w.data, w.tmp / "dc")
    return w.tmp / "dc"


def _hard_link_to_input(w: World) -> str:
    os.link(w.src, w.tmp / "hard.txt")
    return str(w.tmp / "hard.txt")


def _dest_with_own_link(w: World) -> Path:
    d = w.tmp / "d"
    d.mkdir()
    (w.tmp / "notes").mkdir()
    os.symlink(w.tmp / "notes", d / "notes")
    return d


def _run_with_linked_metrics(w: World) -> Path:
    run = w.run_dir()
    (w.tmp / "notes.txt").write_text("mine\n")
    (run / "metrics.jsonl").unlink()
    os.symlink(w.tmp / "notes.txt", run / "metrics.jsonl")
    return run


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_data_loss_table(row: Row, world: World):
    check_row(row, world)
    if row.id == "preprocess-force-keeps-unrelated-files":
        assert (world.tmp / "d" / "mine.txt").read_text() == "keep\n"


# ---- one run per directory ------------------------------------------------------------------------

def _hold_lock(run: Path):
    """Another process holding `run`'s lock, as a live `nmtkit train` does: (process, its PID)."""
    import subprocess
    import sys

    code = ("import sys, time; from nmtkit.io.dirs import run_lock; from pathlib import Path; "
            "run_lock(Path(sys.argv[1])).acquire(); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("extra", [(), ("--force",), ("--resume",)], ids=["start", "force", "resume"])
def test_a_live_run_keeps_its_directory(world: World, extra: tuple[str, ...]):
    """A second train (new, --force or --resume) into a run directory held by a live process is
    refused with one line naming the holder's PID, and the run's files are untouched."""
    run = world.run_dir()
    files = lambda: {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != "train.lock"}  # noqa: E731
    before = files()
    holder = _hold_lock(run)
    try:
        argv = ["train", "--data", str(world.data), "--save-dir", str(run), *TINY, "--max-updates", "4", *extra]
        check_row(Row("second-train", lambda w: argv, needles=(f"PID {holder.pid}",)), world)
    finally:
        holder.kill()
        holder.wait()
    assert files() == before


def test_the_lock_of_a_dead_process_never_blocks(world: World):
    run = world.run_dir()
    holder = _hold_lock(run)
    holder.kill()
    holder.wait()
    assert (run / "train.lock").read_text().strip() == str(holder.pid)  # its file stays, its lock went
    argv = ["train", "--data", str(world.data), "--save-dir", str(run), *TINY, "--max-updates", "4", "--resume"]
    check_row(Row("resume-after-dead-holder", lambda w: argv, ok=True), world)


LOCK_ROWS = [
    Row("train-missing-data-creates-no-save-dir",
        lambda w: ["train", "--data", str(w.tmp / "nonexistent"), "--save-dir", str(w.tmp / "r"), *TINY],
        needles=("nonexistent",), check=lambda w: not (w.tmp / "r").exists() or pytest.fail("r/ was created")),
    Row("train-bad-option-creates-no-save-dir",
        lambda w: ["train", "--data", str(w.data), "--save-dir", str(w.tmp / "r"), *TINY, "--lr", "nan"],
        needles=("--lr",), check=lambda w: not (w.tmp / "r").exists() or pytest.fail("r/ was created")),
]


@pytest.mark.parametrize("row", LOCK_ROWS, ids=[r.id for r in LOCK_ROWS])
def test_run_dir_table(row: Row, world: World):
    check_row(row, world)


def test_the_run_lock_never_writes_through_a_symlink(tmp_path):
    """The lock truncates its file to write its PID there: train checks the run's files first, but a
    symbolic link made after that check led the PID into the file it names, the user's."""
    from nmtkit.errors import OutputError
    from nmtkit.io.dirs import run_lock

    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "run").mkdir()
    os.symlink(tmp_path / "notes.txt", tmp_path / "run" / "train.lock")
    with pytest.raises(OutputError, match="symbolic link"):
        run_lock(tmp_path / "run").acquire()
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_a_run_lock_made_under_umask_0222_stays_writable_by_its_owner(tmp_path):
    """train in an existing folder under umask 0222 failed ("umask 0222 keeps its owner out of the
    folders it makes (try umask 022)") and left train.lock mode 0444: under umask 022 every later
    train there, --force too, failed with "RUN/train.lock: Permission denied" (as a user)."""
    from nmtkit.io.dirs import run_lock

    old = os.umask(0o222)
    try:
        run_lock(tmp_path).acquire().release()
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "train.lock").st_mode & 0o777 == 0o644
