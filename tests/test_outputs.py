"""nmtkit.io.files: atomic for regular files, in place for nodes, open()'s permissions."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

from nmtkit.errors import OutputError, OutputExistsError
from nmtkit.io.dirs import clean_stale_temp_dirs, make_temp_dir
from nmtkit.io.files import (
    OutputFile,
    Staged,
    check_output,
    check_output_dir,
    umask,
    writes_in_place,
)


def _char_device(tmp_path):
    """A private character device with /dev/null's numbers (1, 3); the real /dev/null is never touched."""
    if os.geteuid() != 0:
        pytest.skip("creating a character device needs root")
    node = tmp_path / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError as err:
        pytest.skip(f"mknod not permitted here: {err}")
    return node


def _read_fifo(path, sink: list) -> threading.Thread:
    def run():
        with open(path, "rb") as f:
            sink.append(f.read())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_character_device_is_written_in_place_and_stays_a_device(tmp_path):
    node = _char_device(tmp_path)
    assert writes_in_place(node)
    check_output(node, force=False)  # an existing node is no "exists" refusal, even without --force
    with OutputFile(node) as out:
        out.file.write("gone\n")
    st = os.stat(node)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert os.listdir(tmp_path) == ["null"]  # no temp file beside it


def test_a_fifo_receives_the_bytes_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = _read_fifo(fifo, got)
    with OutputFile(fifo) as out:
        out.file.write("hello\n")
    reader.join(10)
    assert got == [b"hello\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["pipe"]


def test_dev_stdout_style_paths_are_written_in_place():
    assert writes_in_place("/dev/stdout") and writes_in_place("/proc/self/fd/1") and writes_in_place("/dev/null")


@pytest.mark.parametrize("name", ["/dev/stdout", "/proc/self/fd/1"])
def test_dev_stdout_redirected_to_a_file_is_written_after_what_the_file_holds(tmp_path, name):
    """`{ echo header; nmtkit ... -o /dev/stdout; echo footer; } > f` lost the header: opened
    again by name, the file was truncated and written from its start (`-o -` kept it)."""
    out = tmp_path / "f"
    with open(out, "wb") as f:
        f.write(b"header\n")
        f.flush()
        proc = subprocess.run([sys.executable, "-m", "nmtkit", "tokenize", "--lang", "en", "-o", name],
                              input=b"Hello, world!\n", stdout=f, stderr=subprocess.PIPE, timeout=120)
        assert proc.returncode == 0, proc.stderr
        f.write(b"footer\n")
    assert out.read_bytes() == b"header\nHello , world !\nfooter\n"
    assert os.listdir(tmp_path) == ["f"]


@pytest.mark.parametrize("name", ["/dev/fd/{fd}", "/proc/self/fd/{fd}"])
def test_dev_fd_n_on_a_file_is_written_through_the_descriptor_as_the_shell_does(tmp_path, name):
    """`-o /dev/fd/3 3>>f` truncated f (reopened by name), losing what it held; `3<f` truncated
    a file opened for reading. Now appended through the descriptor, or one line with f intact."""
    out = tmp_path / "f"
    out.write_bytes(b"header\n")
    for mode, status in (("ab", 0), ("rb", 1)):
        with open(out, mode) as f:
            proc = subprocess.run([sys.executable, "-m", "nmtkit", "tokenize", "--lang", "en", "-o",
                                   name.format(fd=f.fileno())], input=b"Hello, world!\n", pass_fds=(f.fileno(),),
                                  capture_output=True, timeout=120)
        assert proc.returncode == status and len(proc.stderr.splitlines()) == status, proc.stderr
        assert out.read_bytes() == b"header\nHello , world !\n" and os.listdir(tmp_path) == ["f"]


def test_a_regular_file_is_replaced_atomically_with_open_w_permissions(tmp_path):
    new = tmp_path / "new.txt"
    with OutputFile(new) as out:
        out.file.write("a\n")
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o666 & ~umask()
    old = tmp_path / "old.txt"
    old.write_text("x\n")
    os.chmod(old, 0o640)
    with OutputFile(old) as out:
        out.file.write("b\n")
        assert old.read_text() == "x\n"  # nothing visible until the commit
    assert old.read_text() == "b\n" and stat.S_IMODE(os.stat(old).st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["new.txt", "old.txt"]


def test_a_read_only_file_is_replaced_by_writing_a_temp_file_its_owner_can_write(tmp_path):
    """The temp file got the final mode at once, so a library writing it by name (torch.save of
    checkpoint_last.pt) was refused for a read-only file: after the run's updates, in a message
    naming the temp file. The new file keeps the old one's mode."""
    old = tmp_path / "checkpoint_last.pt"
    old.write_text("x\n")
    os.chmod(old, 0o444)
    st = Staged(old)
    assert os.stat(st.write_path).st_mode & stat.S_IWUSR
    with open(st.write_path, "w") as f:
        f.write("new\n")
    st.commit()
    assert old.read_text() == "new\n" and stat.S_IMODE(os.stat(old).st_mode) == 0o444
    assert os.listdir(tmp_path) == ["checkpoint_last.pt"]


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    old = tmp_path / "old.txt"
    old.write_text("keep\n")
    with pytest.raises(RuntimeError):
        with OutputFile(old) as out:
            out.file.write("half")
            raise RuntimeError("boom")
    assert old.read_text() == "keep\n" and os.listdir(tmp_path) == ["old.txt"]


def test_ctrl_c_in_the_final_fsync_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    """Only an OSError in the commit removed the temp file: Ctrl-C while a big output was being
    synced to disk (seconds, when a user thinks it hangs) left NAME.XXXX.tmp beside it."""
    import nmtkit.io.files as files

    def interrupted(fd):
        raise KeyboardInterrupt

    old = tmp_path / "old.txt"
    old.write_text("keep\n")
    monkeypatch.setattr(files.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with OutputFile(old) as out:
            out.file.write("new\n")
    assert old.read_text() == "keep\n" and os.listdir(tmp_path) == ["old.txt"]


def test_a_signal_another_thread_takes_never_splits_commit_all(tmp_path, monkeypatch):
    """signals.blocked() masked SIGINT/SIGTERM for its own thread only: a Ctrl-C sent to the
    process was taken by a thread started unmasked (numpy's OpenBLAS pool, in every command that
    imports numpy, unless OMP_NUM_THREADS=1), whose Python handler ran in the main thread at once:
    `translate --alignments-file` new beside the old -o, preprocess --force's old data directory
    moved aside and the new one deleted. Now the signal comes after the block, every output whole."""
    from nmtkit.io.files import commit_all

    (tmp_path / "a.txt").write_text("old\n")
    (tmp_path / "b.txt").write_text("old\n")
    other = threading.Event()
    thread = threading.Thread(target=other.wait)  # started unmasked, as a BLAS pool is
    thread.start()
    real = Staged.commit

    def commit(self, synced=False):
        real(self, synced)
        signal.pthread_kill(thread.ident, signal.SIGINT)
        for _ in range(50):  # the main thread runs the Python handler at its next check: give it time
            time.sleep(0.002)

    monkeypatch.setattr(Staged, "commit", commit)
    outputs = [OutputFile(tmp_path / name) for name in ("a.txt", "b.txt")]
    for out in outputs:
        out.file.write("new\n")
    try:
        with pytest.raises(KeyboardInterrupt):
            commit_all(outputs)
    finally:
        other.set()
        thread.join()
    assert [(tmp_path / n).read_text() for n in ("a.txt", "b.txt")] == ["new\n", "new\n"]
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt"]


def test_two_runs_committing_the_same_outputs_leave_one_runs_never_a_mix(tmp_path, monkeypatch):
    """Two commands writing the same outputs at once (two `select-data --output-prefix P --force`, two
    `translate -o out --alignments-file al` of a `make -j`): each renamed its files in one by one,
    and when the commits overlapped the survivors were a mix (one run's .src beside the other's .tgt).
    Now commit_all locks their folder: the second waits for the first, and its files are all there.
    A stale file both remove is removed once, not an error of the second."""
    from nmtkit.io.files import commit_all

    names = ("sel.src", "sel.tgt")
    (tmp_path / "sel.src.tokinfo.json").write_text("{}\n")  # a stale record both runs remove
    runs = {}
    for run in ("a", "b"):
        runs[run] = [Staged(tmp_path / name) for name in names]
        for st in runs[run]:
            with open(st.write_path, "w") as f:
                f.write(f"{run}\n")
    b_done, errors = threading.Event(), []
    real = Staged.commit

    def run_b():
        try:
            commit_all(runs["b"], remove=[str(tmp_path / "sel.src.tokinfo.json")])
        except BaseException as err:  # noqa: BLE001 - asserted below
            errors.append(err)
        b_done.set()

    def commit(self, synced=False):
        real(self, synced)
        if self is runs["a"][0]:  # a's first file is in: b commits now
            threading.Thread(target=run_b).start()
            b_done.wait(0.5)

    monkeypatch.setattr(Staged, "commit", commit)
    commit_all(runs["a"], remove=[str(tmp_path / "sel.src.tokinfo.json")])
    assert b_done.wait(10) and not errors
    assert [(tmp_path / n).read_text() for n in names] == ["b\n", "b\n"]
    assert sorted(os.listdir(tmp_path)) == list(names)


def test_ctrl_c_between_the_renames_of_a_replaced_folder_leaves_one_whole_folder(tmp_path, monkeypatch):
    """preprocess --force swaps its new data directory in by two renames (the old one aside, the
    new one in), unblocked: Ctrl-C between them left no folder at --dest, the old one under
    DEST.old-XXXX and the new one deleted by the failed run's cleanup."""
    import nmtkit.io.dirs as dirs

    dest, tmp = tmp_path / "data", tmp_path / "data.tmp"
    dest.mkdir()
    (dest / "f").write_text("old\n")
    tmp.mkdir()
    (tmp / "f").write_text("new\n")
    real = os.rename

    def rename(src, dst):
        real(src, dst)
        if ".old-" in str(dst):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(50):
                time.sleep(0.002)

    monkeypatch.setattr(dirs.os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        dirs.swap_in_dir(tmp, dest)
    assert os.listdir(tmp_path) == ["data"] and (dest / "f").read_text() == "new\n"


def test_two_folders_swapped_in_at_once_leave_one_whole_and_nothing_aside(tmp_path, monkeypatch):
    """Two `preprocess --dest data --force` finishing together: the second saw no folder at --dest
    between the first's renames (the old one aside, the new one in) and renamed its own in, so the
    first failed ("Directory not empty") and left the original data directory as data.old-XXXX.
    Now the swaps take turns: the later run's folder is at --dest, nothing else beside it."""
    import nmtkit.io.dirs as dirs

    dest = tmp_path / "data"
    for name in ("data", "data.tmp-a", "data.tmp-b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text(f"{name}\n")
    b_done, errors = threading.Event(), []
    real = os.rename

    def run_b():
        try:
            dirs.swap_in_dir(tmp_path / "data.tmp-b", dest)
        except BaseException as err:  # noqa: BLE001 - asserted below
            errors.append(err)
        b_done.set()

    def rename(src, dst):
        real(src, dst)
        if ".old-" in str(dst) and not b_done.is_set() and threading.current_thread() is threading.main_thread():
            threading.Thread(target=run_b).start()  # the first run's old folder is aside: the second swaps now
            b_done.wait(0.5)

    monkeypatch.setattr(dirs.os, "rename", rename)
    assert dirs.swap_in_dir(tmp_path / "data.tmp-a", dest) is None
    assert b_done.wait(10) and not errors
    assert os.listdir(tmp_path) == ["data"] and (dest / "f").read_text() == "data.tmp-b\n"


def test_a_symlink_is_written_through_not_replaced(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("x\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    with Staged(link) as st:
        with open(st.write_path, "w") as f:
            f.write("y\n")
    assert link.is_symlink() and target.read_text() == "y\n"


def test_check_output_refuses_what_could_not_be_written(tmp_path):
    f = tmp_path / "f.txt"
    f.write_text("x")
    with pytest.raises(OutputExistsError):
        check_output(f, force=False)
    check_output(f, force=True)
    with pytest.raises(OutputError, match="directory"):
        check_output(tmp_path, force=True)
    with pytest.raises(OutputError, match="folder does not exist"):
        check_output(tmp_path / "missing" / "f.txt", force=True)
    with pytest.raises(OutputError, match="not a directory"):
        check_output_dir(f)


def test_temp_dirs_get_mkdir_permissions_and_stale_ones_are_removed(tmp_path):
    dest = tmp_path / "data"
    tmp = make_temp_dir(dest)
    assert stat.S_IMODE(os.stat(tmp).st_mode) == 0o777 & ~umask()
    # a temp dir of a process that has exited (its pid is dead) is stale
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    stale = tmp.with_name(tmp.name.replace(f"-{os.getpid()}-", f"-{pid}-"))
    tmp.rename(stale)
    other = tmp_path / "data.tmp-olderstyle"
    other.mkdir()
    warnings: list[str] = []
    removed = clean_stale_temp_dirs(dest, warnings.append)
    assert removed == [stale] and not stale.exists()
    assert other.exists() and len(warnings) == 1 and str(other) in warnings[0]


def test_gz_output_is_written_gzip_compressed(tmp_path):
    """A .gz output name gets gzip data (every reader gunzips .gz), text and binary alike,
    still staged and renamed into place; other names stay plain."""
    import gzip
    for mode, data in (("w", "a b\nc\n"), ("wb", b"\x00\x01")):
        path = tmp_path / f"out-{mode}.gz"
        with OutputFile(path, mode) as out:
            out.file.write(data)
        with open(path, "rb") as f:
            assert f.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rt" if mode == "w" else "rb", encoding=None if mode == "wb" else "utf-8") as f:
            assert f.read() == data
    with OutputFile(tmp_path / "plain.txt") as out:
        out.file.write("x\n")
    assert (tmp_path / "plain.txt").read_text() == "x\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out-w.gz", "out-wb.gz", "plain.txt"]


def test_gz_output_aborted_leaves_nothing(tmp_path):
    path = tmp_path / "out.gz"
    with pytest.raises(RuntimeError):
        with OutputFile(path) as out:
            out.file.write("half")
            raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []


def test_a_temp_dir_a_live_process_holds_is_kept_and_one_none_holds_is_stale(tmp_path):
    """clean_stale_temp_dirs removes a killed run's temp dir (its pid dead, or reused by a process
    that holds no lock on it, as held_temp_dir's owner does), never one its live owner holds, nor
    one of another host, whose processes this one cannot see."""
    import socket

    from nmtkit.io.files import folders_locked

    dest, live = tmp_path / "data", os.getppid()
    held = tmp_path / f"data.tmp-{socket.gethostname()}-{live}-held1234"
    reused = tmp_path / f"data.tmp-{socket.gethostname()}-{live}-freed123"
    remote = tmp_path / "data.tmp-another-host-1-abcd1234"
    for p in (held, reused, remote):
        p.mkdir()
    warnings: list[str] = []
    with folders_locked([held]):
        assert clean_stale_temp_dirs(dest, warnings.append) == [reused]
    assert held.exists() and remote.exists() and not reused.exists()
    assert len(warnings) == 2 and any(f"process {live}" in w for w in warnings)
    assert any(str(remote) in w and "interrupted run" in w for w in warnings)


def test_an_output_that_fails_to_commit_leaves_no_temp_file_nor_the_outputs_after_it(tmp_path):
    """commit_all removes the temp file of the output whose rename failed, with those after it,
    and the error names that output."""
    from nmtkit.io.files import commit_all

    outputs = [Staged(tmp_path / name) for name in ("a.txt", "b.txt")]
    for st in outputs:
        with open(st.write_path, "w") as f:
            f.write("new\n")
    (tmp_path / "a.txt").mkdir()  # a folder where a.txt goes: its rename fails
    with pytest.raises(IsADirectoryError) as err:
        commit_all(outputs)
    assert err.value.filename == str(tmp_path / "a.txt") and os.listdir(tmp_path) == ["a.txt"]


def test_a_temp_dir_is_held_while_its_run_builds_it_so_that_another_runs_cleaning_keeps_it(tmp_path):
    from nmtkit.io.dirs import held_temp_dir

    dest, warnings = tmp_path / "data", []
    with held_temp_dir(dest, warnings.append) as tmp:
        assert clean_stale_temp_dirs(dest, warnings.append) == [] and tmp.exists()
    assert clean_stale_temp_dirs(dest, warnings.append) == [tmp]  # its run has let it go


def test_an_error_naming_the_temp_file_names_the_output_instead(tmp_path):
    """A library writing the temp file by name (torch.save) fails naming it: the user never gave
    that name, and it is gone once the output is aborted."""
    import errno

    out_path = tmp_path / "checkpoint_last.pt"
    with pytest.raises(OSError) as err:
        with OutputFile(out_path, "wb") as out:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), out.write_path)
    assert err.value.filename == str(out_path) and os.listdir(tmp_path) == []


def test_an_existing_output_reached_through_a_symlink_needs_force(tmp_path):
    (tmp_path / "real.txt").write_text("x\n")
    os.symlink(tmp_path / "real.txt", tmp_path / "link.txt")
    with pytest.raises(OutputExistsError):
        check_output(tmp_path / "link.txt", force=False)
    check_output(tmp_path / "link.txt", force=True)


def test_outputs_whose_temp_files_cannot_all_be_made_leave_none_behind(tmp_path, monkeypatch):
    """select-data's outputs are staged together: a full disk at the second temp file left the
    first one in the output folder."""
    import tempfile

    from nmtkit.io.files import StagedFiles

    made = []

    def mkstemp(*args, **kwargs):
        if made:
            raise OSError(28, "No space left on device")
        made.append(real(*args, **kwargs))
        return made[-1]

    real = tempfile.mkstemp
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    with pytest.raises(OSError, match="No space left"):
        StagedFiles({"src": str(tmp_path / "sel.en"), "tgt": str(tmp_path / "sel.fr")})
    assert len(made) == 1 and os.listdir(tmp_path) == []


def test_the_real_path_of_link_dotdot_is_where_the_kernel_goes_not_where_its_text_says(tmp_path, monkeypatch):
    """"sl/../x" with sl -> a/b names a/x; abspath before realpath made it ./x, so the checks of
    outputs against inputs and of a data dir's files compared the wrong file."""
    from nmtkit.io.checks import real_path

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "sl").symlink_to(tmp_path / "a" / "b")
    monkeypatch.chdir(tmp_path)
    assert real_path("sl/../x") == str(tmp_path.resolve() / "a" / "x")
    assert real_path("sl/../x") == os.path.realpath(tmp_path / "a" / "x")
