"""`nmtkit preprocess --dest`: where the data directory lands (symlinks, the current folder),
what a failed run leaves (nothing), what --force may delete, and names that are not UTF-8."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nmtkit import preprocess
from nmtkit.io.dirs import make_temp_dir
from nmtkit.train.data import DataDir
from tests.conftest import REPO, CliResult, make_checkpoint, make_data_dir, run_cli, tiny_train_args
from tests.test_preprocess import _assert_clean_failure, _base_args, _config, _corpus, _no_leftovers, _write


@pytest.fixture()
def corpus(tmp_path: Path) -> dict:
    """Clean train, valid and test files in tmp_path."""
    return {"train": _write(tmp_path / "train", *_corpus(40)), "valid": _write(tmp_path / "valid", *_corpus(10, 100)),
            "test": _write(tmp_path / "test", *_corpus(7, 200)), "tmp": tmp_path}


def test_a_dest_given_as_a_symlink_fills_the_directory_it_points_to(corpus):
    big = corpus["tmp"] / "big"
    big.mkdir()
    link = corpus["tmp"] / "data"
    link.symlink_to(big)
    proc = run_cli(["preprocess", *_base_args(corpus, link)])
    assert proc.code == 0, proc.err
    assert link.is_symlink() and (big / "manifest.json").is_file()
    assert "delete it by hand" not in proc.err
    _no_leftovers(corpus["tmp"])
    proc = run_cli(["preprocess", *_base_args(corpus, link), "--force"])  # replaced: the link still points there
    assert proc.code == 0, proc.err
    assert link.is_symlink() and (big / "manifest.json").is_file()
    _no_leftovers(corpus["tmp"])


def test_input_names_that_are_not_utf8_are_recorded_so_that_train_finds_the_dev_references(corpus):
    tmp = corpus["tmp"]
    for split in ("train", "valid"):
        for lang in ("en", "fr"):
            shutil.copy(f"{corpus[split]}.{lang}", os.fsdecode(os.fsencode(str(tmp / split)) + b"\xff." + lang.encode()))
    c = {**corpus, "train": os.fsdecode(os.fsencode(str(tmp / "train")) + b"\xff"),
         "valid": os.fsdecode(os.fsencode(str(tmp / "valid")) + b"\xff")}
    dest = Path(os.fsdecode(os.fsencode(str(tmp / "data")) + b"\xfe"))
    proc = run_cli(["preprocess", *_base_args(c, dest)])
    assert proc.code == 0, proc.err
    assert json.loads((dest / "manifest.json").read_text(encoding="utf-8"))["splits"]["valid"]["prefix"] == c["valid"]
    fr = Path(f"{corpus['valid']}.fr").read_text(encoding="utf-8").splitlines()
    assert DataDir.open(dest).raw_references("valid") == fr


def test_a_dest_name_of_250_bytes_is_written_and_replaced_though_its_temp_names_would_be_longer(corpus):
    """NAME.tmp-HOST-PID-XXXXXXXX (and --force's NAME.old-XXXXXXXX) passed the 255 bytes a name may
    hold: 'cannot create the data directory here: File name too long'. A killed run's is still found."""
    dest = corpus["tmp"] / ("d" * 250)
    make_temp_dir(dest)  # as a killed run leaves it: no process holds it
    for extra in ((), ("--force",)):
        proc = run_cli(["preprocess", *_base_args(corpus, dest), *extra])
        assert proc.code == 0, proc.err
        assert (dest / "manifest.json").is_file()
        _no_leftovers(corpus["tmp"])


def test_a_dest_naming_the_current_folder_is_refused_before_any_work(corpus, monkeypatch):
    here = corpus["tmp"] / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for dest in (".", str(here), "./"):
        proc = run_cli(["preprocess", *_base_args(corpus, dest)])
        _assert_clean_failure(proc, "current folder")
        assert list(here.iterdir()) == []
        _no_leftovers(corpus["tmp"])


def test_a_failed_run_leaves_no_parent_folder_it_created(corpus):
    dest = corpus["tmp"] / "a" / "b" / "data"
    proc = run_cli(["preprocess", *_base_args(corpus, dest), "--max-len", "1"])
    _assert_clean_failure(proc, "no training pairs left")
    assert not (corpus["tmp"] / "a").exists()


def test_force_refuses_to_delete_an_empty_folder_of_the_user_in_dest(corpus):
    dest = corpus["tmp"] / "data"
    preprocess.run(_config(corpus, dest))
    (dest / "mynotes" / "inner").mkdir(parents=True)
    proc = run_cli(["preprocess", *_base_args(corpus, dest), "--force"])
    _assert_clean_failure(proc, str(dest), "mynotes")
    assert (dest / "mynotes" / "inner").is_dir()


def test_a_parent_folder_another_run_makes_meanwhile_is_used_not_an_error_nor_taken_back(tmp_path, monkeypatch):
    """Two preprocess runs of a parallel make into one new folder: the second found it missing,
    then failed to create it (FileExistsError), and would have removed it on failure."""
    from pathlib import Path

    from nmtkit.io.dirs import make_parents

    (tmp_path / "a").mkdir()  # made by the other run between this one's look and its mkdir
    real = Path.exists
    monkeypatch.setattr(Path, "exists", lambda p: False if p == tmp_path / "a" else real(p))
    assert make_parents(tmp_path / "a" / "b" / "data") == [tmp_path / "a" / "b"]
    assert (tmp_path / "a" / "b").is_dir()


def test_a_data_directory_replaced_while_train_opens_it_is_read_whole_from_one(tmp_path, monkeypatch):
    """`preprocess --force` swapping a new data directory in while `train` (or `score --no-unk
    --data`) opened it: the manifest and vocabularies were the old folder's, the ids the new one's,
    each read by name, and training went ahead on words that were not the text's (same counts: no
    check saw it). Now the reading starts again when the folder was replaced meanwhile."""
    import nmtkit.train.data as train_data
    from nmtkit.io.dirs import swap_in_dir
    from tests.conftest import make_data_dir, make_pairs

    pairs = {"train": make_pairs(240, 1), "valid": make_pairs(24, 2)}
    dest = make_data_dir(tmp_path / "data", pairs=pairs)
    new = make_data_dir(tmp_path / "data.new", pairs={k: v[::-1] for k, v in pairs.items()})  # same counts
    for name in ("vocab.en.txt", "vocab.fr.txt"):  # other words, as another --vocab-size or --bpe gives
        path = new / name
        path.write_text("".join(line if line.startswith("<") else "x" + line for line in
                                path.read_text().splitlines(keepends=True)))
    real = train_data.read_manifest_files  # within DataDir.open's one read_one_folder, not a nested one

    def read_manifest(path):
        m = real(path)
        if (tmp_path / "data.new").exists():  # the new folder goes in once the old one's manifest is read
            swap_in_dir(tmp_path / "data.new", dest)
        return m

    monkeypatch.setattr(train_data, "read_manifest_files", read_manifest)
    data = DataDir.open(dest)
    assert data.src_vocab.to_list()[4].startswith("x")  # the new folder's words ...
    assert list(data.split("train").src[0]) == list(pairs["train"][-1][0])  # ... and its ids


def _as_a_user_under_umask_777(argv: list[str], cwd: Path) -> CliResult:
    """`nmtkit ARGV` in a subprocess under umask 777, where file permissions bind: as root, without
    the capabilities that bypass them (setpriv)."""
    caps = "-dac_override,-dac_read_search,-fowner"
    prefix = ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"] if os.geteuid() == 0 else []
    if prefix and shutil.which("setpriv") is None:
        pytest.skip("root needs setpriv to give up its rights over file permissions")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([*prefix, sys.executable, "-m", "nmtkit", *argv], capture_output=True, text=True, env=env,
                          cwd=cwd, preexec_fn=lambda: os.umask(0o777), timeout=300)
    if proc.stderr.startswith("setpriv:"):
        pytest.skip(f"cannot give up root's rights here: {proc.stderr.strip()}")
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize("option", ["--dest", "--plot-attention", "--save-dir"])
def test_under_umask_777_a_folder_option_is_one_line_naming_it_and_leaves_nothing(option, corpus):
    """A folder made under umask 777 has mode 000, which keeps its maker out (but root): preprocess
    failed naming its temp folder ('DEST.tmp-.../work: ... Permission denied') and left it behind,
    mode 000; translate's clean-up could not list the --plot-attention folder it had made, so the
    error was that ('/abs/plots: Permission denied', a traceback under --debug) and it stayed;
    train left the --save-dir folders it had made (d, where d/run could not be made in it)."""
    out = corpus["tmp"] / "out"
    out.mkdir()
    if option == "--dest":
        argv = ["preprocess", *_base_args(corpus, out / "d")]
    elif option == "--save-dir":
        make_data_dir(corpus["tmp"] / "data")
        argv = ["train", "--data", str(corpus["tmp"] / "data"), "--save-dir", str(out / "d" / "run"),
                *tiny_train_args(), "--max-updates", "1"]
    else:
        argv = ["translate", "-m", str(make_checkpoint(corpus["tmp"] / "m.pt")), "-i", corpus["valid"] + ".en",
                "-o", str(out / "o.txt"), "--plot-attention", str(out / "d")]
    proc = _as_a_user_under_umask_777(argv, corpus["tmp"])
    _assert_clean_failure(proc, f"{out / 'd'}{'/run' if option == '--save-dir' else ''}: ",
                          "umask 0777" if option == "--dest" else "Permission denied")
    assert list(out.iterdir()) == []
