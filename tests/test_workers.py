"""Worker processes (nmtkit.workers): a command with busy workers ends within seconds of SIGINT,
SIGTERM or SIGHUP, leaving no output, temp file or worker behind; replies, errors and deaths."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nmtkit.errors import WorkerError
from nmtkit.workers import Workers
from tests.conftest import REPO, child_pids

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

EVIL = r"(a+)+$"  # catastrophic backtracking: minutes inside the regex engine's C code
EVIL_LINE = "a" * 41 + "!"
SECONDS = 10  # from the signal to the exit: a few seconds, with room for a loaded machine

# `nmtkit ARGV` whose workers each spend their first task inside EVIL, whatever the command
HANGING_WORKERS = (
    "import re, sys\n"
    "import nmtkit.workers as w\n"
    "real = w.Workers.start\n"
    "def start(self, handle, setup=None):\n"
    f"    return real(self, lambda task: re.match({EVIL!r}, {EVIL_LINE!r}), setup)\n"
    "w.Workers.start = start\n"
    "from nmtkit.cli import main\n"
    "main(sys.argv[1:])\n")


def _gone(pid: int) -> bool:
    """No such process, or a zombie that nobody has reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _stop_busy_command(argv: list[str], sig: int, cwd: Path, hang: bool = False) -> tuple[int, str, float]:
    """Run `nmtkit ARGV` in a session of its own; once its workers have been busy a while, send
    `sig` (SIGINT or SIGHUP to the whole group, as Ctrl-C or a closed terminal does; SIGTERM to
    the command alone, as kill does). (exit status, stderr, seconds from the signal to the exit);
    no worker is left."""
    command = [sys.executable, "-c", HANGING_WORKERS] if hang else [sys.executable, "-m", "nmtkit"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.Popen([*command, *argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not workers and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            workers = child_pids(proc.pid)
        assert workers, f"no worker started: {proc.poll()} {proc.stderr.read() if proc.poll() is not None else ''}"
        time.sleep(1.0)  # inside their tasks
        assert proc.poll() is None
        start = time.monotonic()
        if sig != signal.SIGTERM:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=60)
        finally:
            took = time.monotonic() - start
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 5
    while not all(_gone(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(pid) for pid in workers), "a worker outlived its command"
    return proc.returncode, err, took


def _assert_stopped(result: tuple[int, str, float], sig: int) -> None:
    code, err, took = result
    assert took < SECONDS, f"{took:.1f} s from the signal to the exit"
    assert code == 128 + sig, (code, err)  # 130, 143, 129
    assert "Traceback" not in err, err
    assert err.strip().splitlines() == ["nmtkit: aborted" if sig == signal.SIGINT else "nmtkit: terminated"], err
    if sig != signal.SIGINT:  # click's blank line closes a terminal's ^C echo; no ^C was typed here
        assert not ("\n" + err).endswith("\n\nnmtkit: terminated\n"), repr(err)


SIGNALS = pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])


@linux_only
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_tokenize_with_workers_stuck_in_a_regex_ends_at_once_on_a_signal_leaving_nothing(tmp_path, sig):
    (tmp_path / "in.txt").write_text("hello world\n" * 2001)  # two chunks: both workers stuck
    result = _stop_busy_command(["tokenize", "--lang", "en", "--workers", "2", "-i", "in.txt", "-o", "out.txt"],
                                sig, tmp_path, hang=True)
    _assert_stopped(result, sig)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


@linux_only
@SIGNALS
def test_preprocess_with_workers_stuck_in_a_regex_ends_at_once_on_a_signal_leaving_nothing(tmp_path, sig):
    for lang in ("en", "fr"):
        (tmp_path / f"train.{lang}").write_text("hello world\n" * 50)
        (tmp_path / f"valid.{lang}").write_text("hello world\n")  # checked in the main process
    result = _stop_busy_command(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", "train",
                                 "--valid", "valid", "--dest", "d", "--workers", "2", "--quiet"], sig, tmp_path,
                                hang=True)
    _assert_stopped(result, sig)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.en", "train.fr", "valid.en", "valid.fr"]


@linux_only
@SIGNALS
def test_select_data_with_busy_workers_ends_at_once_on_a_signal_leaving_nothing(tmp_path, sig):
    for name, words in (("in", ("cat", "chat")), ("pool", ("dog", "chien"))):
        for lang, word in zip(("en", "fr"), words):
            (tmp_path / f"{name}.{lang}").write_text("".join(f"the {word} {i}\n" for i in range(300)))
    result = _stop_busy_command(["select-data", "--src-lang", "en", "--tgt-lang", "fr", "--in-domain", "in",
                                 "--pool", "pool", "--output-prefix", "sel", "--lines", "10", "--workers", "2",
                                 "--quiet"], sig, tmp_path, hang=True)
    _assert_stopped(result, sig)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.en", "in.fr", "pool.en", "pool.fr"]


@linux_only
@SIGNALS
def test_translate_with_busy_workers_ends_at_once_on_a_signal_leaving_nothing(tmp_path, sig, ckpt):
    (tmp_path / "in.txt").write_text("the cat sat on a mat\n" * 8)
    result = _stop_busy_command(["translate", "-m", ckpt, "-i", "in.txt", "-o", "out.txt", "--workers", "2",
                                 "--batch-size", "1", "--device", "cpu"], sig, tmp_path, hang=True)
    _assert_stopped(result, sig)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


# ---- the mechanism itself ---------------------------------------------------------------------
def _sleep_forever(task):
    time.sleep(600)


def test_leaving_the_block_kills_and_reaps_busy_workers_at_once():
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt), Workers("died ({how})") as pool:
        workers = [pool.start(_sleep_forever) for _ in range(2)]
        for w in workers:
            w.send(None)
        raise KeyboardInterrupt
    assert time.monotonic() - start < SECONDS
    for w in workers:
        with pytest.raises(ChildProcessError):
            os.waitpid(w.pid, os.WNOHANG)  # reaped


def test_a_reply_is_the_result_or_the_workers_exception_and_a_death_is_a_worker_error():
    def handle(task):
        if task == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        if task == "fail":
            raise ValueError("bad task")
        if task == "unpicklable":
            raise _Unpicklable()
        if task == "unreadable":
            raise _NotReadBack("f.txt", "bad")
        return task * 2

    with Workers("a worker died ({how})") as pool:
        w = pool.start(handle)
        w.send(21)
        assert w.reply() == 42
        w.send("fail")
        with pytest.raises(ValueError, match="bad task"):
            w.reply()
        w = pool.start(handle)
        w.send("unpicklable")
        with pytest.raises(RuntimeError, match="_Unpicklable: no pickling"):
            w.reply()
        w = pool.start(handle)
        w.send("unreadable")  # it pickles, but its class cannot be built again from its args
        with pytest.raises(RuntimeError, match="^_NotReadBack: f.txt: bad$"):
            w.reply()
        w = pool.start(handle)
        w.send("die")
        with pytest.raises(WorkerError, match=r"^a worker died \(killed by signal 9\)$"):
            w.reply()


def test_a_worker_killed_from_outside_is_a_worker_error_on_send_and_on_reply():
    """A worker the OOM killer ended between tasks made the next send a BrokenPipeError, and one
    ended with a task unread made the reply a ConnectionResetError: OSErrors that preprocess
    reported as "cannot write the data directory: Broken pipe" (or "Connection reset by peer")."""
    def handle(task):
        if task == "sleep":
            time.sleep(60)
        return task

    with Workers("a worker died ({how})") as pool:
        w = pool.start(handle)
        w.send(1)
        assert w.reply() == 1
        os.kill(w.pid, signal.SIGKILL)
        assert w.conn.poll(SECONDS)  # its end of the pipe is closed
        with pytest.raises(WorkerError, match=r"^a worker died \(killed by signal 9\)$"):
            w.send(2)
        w = pool.start(handle)
        w.send("sleep")
        w.send("unread")
        time.sleep(0.2)
        os.kill(w.pid, signal.SIGKILL)
        with pytest.raises(WorkerError, match=r"^a worker died \(killed by signal 9\)$"):
            w.reply()


def test_a_failed_setup_is_the_reply_to_the_first_task():
    def setup():
        raise OSError("no table")

    with Workers("died ({how})") as pool:
        w = pool.start(lambda task: task, setup)
        w.send(1)
        with pytest.raises(OSError, match="no table"):
            w.reply()


class _NotReadBack(Exception):
    def __init__(self, path, why):
        super().__init__(f"{path}: {why}")


class _Unpicklable(Exception):
    def __init__(self):
        super().__init__("no pickling")

    def __reduce__(self):
        raise TypeError("not today")


def test_a_tokenize_worker_that_dies_is_one_line_naming_no_line_of_the_input(tmp_path, monkeypatch):
    """A worker's death became an error at the first line of the chunk it held ("in.txt:2001: a
    worker process died"), as if that line were at fault; a line's own error keeps its number."""
    import nmtkit.text.tokenize as tokenize
    from tests.conftest import run_cli

    parent, real = os.getpid(), tokenize._tok_line

    def tok_line(line, pipeline):
        if os.getpid() != parent and line.startswith("die"):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(line, pipeline)

    monkeypatch.setattr(tokenize, "_tok_line", tok_line)
    (tmp_path / "in.txt").write_text("hello world\n" * 2000 + "die here\n")  # the second chunk's worker dies
    res = run_cli(["tokenize", "--lang", "en", "--workers", "2", "-i", str(tmp_path / "in.txt"), "-o",
                   str(tmp_path / "out.txt")])
    assert res.code == 1 and res.err.strip().splitlines() == [
        "nmtkit: error: a worker process died without answering (killed by signal 9; out of memory? --workers 1 "
        "works in one process)"], res.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
