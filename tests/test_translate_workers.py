"""--workers: a buffer's batches decoded by forked processes (nmtkit.translate.translator)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from nmtkit.errors import WorkerError
from nmtkit.translate import Translator
from nmtkit.translate.translator import MAX_AUTO_WORKERS, map_batches, resolve_workers, thread_shares
from nmtkit.workers import can_fork
from tests.conftest import bound_translator

pytestmark = pytest.mark.skipif(not can_fork(), reason="workers fork")

LINES = [f"the {w} sat on a mat {'and the dog ran ' * (i % 4)}." for i, w in enumerate(
    ["cat", "dog", "big cat", "red house", "small dog", "park", "mat", "house", "cat and dog", "dog"] * 2)]


def _reaped(pids_file) -> bool:
    """Whether every child that wrote its pid to `pids_file` has exited and been reaped."""
    children = {int(p) for p in pids_file.read_text().split()} - {os.getpid()}
    assert children
    for pid in children:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return True


def _note_pid(pids_file) -> None:
    with open(pids_file, "a") as f:
        f.write(f"{os.getpid()}\n")


def _results(ckpt, workers, pids_file=None, monkeypatch=None, **kw):
    t = bound_translator(ckpt, beam=3, max_len_a=1.0, max_len_b=3, batch_size=3, workers=workers, **kw)
    if pids_file is not None:
        def decode_batch(src, *a, real=t._decode_batch, **k):
            _note_pid(pids_file)
            time.sleep(0.02)  # every process takes batches
            return real(src, *a, **k)
        monkeypatch.setattr(t.translator, "_decode_batch", decode_batch)
    return t.generate(LINES, alignments=True)


@pytest.mark.parametrize("kw", [dict(precision="fp32", nbest=2),
                                dict(precision="int8"),
                                dict(precision="fp32", sampling=True, nbest=1)],
                         ids=["fp32-nbest-attention", "int8", "sampling"])
def test_worker_processes_translate_exactly_as_one_process(ckpt, tmp_path, monkeypatch, kw):
    pids = tmp_path / "pids"
    together = _results(ckpt, 3, pids, monkeypatch, **kw)
    alone = _results(ckpt, 1, **kw)
    assert len(set(pids.read_text().split())) == 3  # three processes decoded batches
    assert len(pids.read_text().split()) == 7  # each of the 7 batches once
    for a, b in zip(together, alone, strict=True):
        assert a.text == b.text and a.index == b.index
        for ha, hb in zip(a.nbest, b.nbest, strict=True):
            assert (ha.tokens, ha.score, ha.log_prob) == (hb.tokens, hb.score, hb.log_prob)
            assert (ha.attention is None) == (hb.attention is None)
            if ha.attention is not None:
                assert torch.equal(ha.attention, hb.attention)
    assert _reaped(pids)
    assert torch.get_num_threads() == 1  # the caller's threads are given back


def test_worker_processes_tokenise_in_chunks_and_warn_in_line_order(ckpt, tmp_path, monkeypatch):
    """Text to tokenise is prepared chunk by chunk in the workers; the warnings of truncated
    lines come back to the translator's `warn`, in line order."""
    import nmtkit.translate.translator as translator

    monkeypatch.setattr(translator, "PREPARE_CHUNK_LINES", 4)
    pids, calls = tmp_path / "pids", []
    real = translator.map_batches

    def map_batches(decode, n_jobs, *a):
        calls.append(n_jobs)
        return real(decode, n_jobs, *a)

    monkeypatch.setattr(translator, "map_batches", map_batches)
    out = {}
    for n in (3, 1):
        warned: list[str] = []
        t = bound_translator(ckpt, warned.append, beam=2, max_len_a=1.0, max_len_b=3, batch_size=3, workers=n,
                             max_src_len=6)
        if n == 3:
            def prepare(*a, real=t._prepare):
                _note_pid(pids)
                time.sleep(0.01)  # every process takes chunks
                return real(*a)
            monkeypatch.setattr(t.translator, "_prepare", prepare)
        out[n] = ([[h.text for h in r.nbest] for r in t.generate(LINES)], warned)
    assert calls[0] == 5  # 20 lines in chunks of 4, then the batches
    assert len(set(pids.read_text().split())) == 3  # each process tokenised lines
    assert out[3] == out[1]
    assert [int(w.split(":")[1]) for w in out[1][1]] == sorted({int(w.split(":")[1]) for w in out[1][1]})
    assert len(out[1][1]) >= 10


def test_a_beam_past_the_vocabulary_is_warned_once_not_once_per_worker(ckpt, tmp_path, monkeypatch):
    """Each forked worker warned it again: its warned-once set is a copy, never the caller's."""
    said, pids = tmp_path / "said", tmp_path / "pids"

    def warn(message):  # a file, which the workers write to as well
        with open(said, "a", encoding="utf-8") as f:
            f.write(message + "\n")

    t = bound_translator(ckpt, warn, beam=100, max_len_a=1.0, max_len_b=3, batch_size=3, workers=3)
    real = t._decode_batch

    def decode_batch(*a, **k):
        _note_pid(pids)
        time.sleep(0.02)  # every process takes batches
        return real(*a, **k)

    monkeypatch.setattr(t.translator, "_decode_batch", decode_batch)
    t.generate(LINES)
    assert len(set(pids.read_text().split())) == 3
    assert said.read_text(encoding="utf-8").count("--beam 100 is above the target vocabulary") == 1


def test_a_workers_exception_is_raised_in_the_caller_and_no_worker_is_left(tmp_path):
    parent, pids = os.getpid(), tmp_path / "pids"

    def decode(j):
        _note_pid(pids)
        if os.getpid() != parent:
            raise ValueError(f"batch {j} is bad")
        time.sleep(0.05)  # the children take batches too
        return j

    with pytest.raises(ValueError, match=r"batch \d+ is bad"):
        map_batches(decode, 8, 3, 3)
    assert _reaped(pids)


def test_a_worker_that_dies_is_an_error_saying_how(tmp_path):
    parent, pids = os.getpid(), tmp_path / "pids"

    def decode(j):
        _note_pid(pids)
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.05)
        return j

    with pytest.raises(WorkerError, match="decoding worker process died without answering "
                                           r"\(killed by signal 9; out of memory\?"):
        map_batches(decode, 6, 2, 2)
    assert _reaped(pids)


def test_a_failure_in_the_caller_stops_its_workers_at_once(tmp_path):
    parent, pids = os.getpid(), tmp_path / "pids"

    def decode(j):
        _note_pid(pids)
        if os.getpid() != parent:
            time.sleep(60)
        time.sleep(0.5)  # the children have taken their batches
        raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        map_batches(decode, 6, 3, 3)
    assert time.monotonic() - start < 20
    assert _reaped(pids)


def test_a_worker_never_returns_into_the_caller_nor_writes_its_output_twice(tmp_path):
    """A child leaves with os._exit once its batches are done: were it to return, the caller's
    code would run twice, and its exit would flush its copy of the parent's buffers."""
    code = ("import os, sys, time\n"
            "from nmtkit.translate.translator import map_batches\n"
            "def decode(j):\n"
            "    time.sleep(0.05)  # every process takes batches\n"
            "    sys.stdout.write(f'{os.getpid()} '); sys.stdout.flush()\n"
            "    return j * j\n"
            "sys.stdout.write('before\\n')\n"
            "print(map_batches(decode, 7, 3, 3))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.getcwd()}).stdout
    assert out.count("before") == 1
    assert len(out.split()[1:-7]) == 7 and len(set(out.split()[1:-7])) == 3  # 7 batches, 3 processes
    assert out.endswith("[0, 1, 4, 9, 16, 25, 36]\n")


def test_auto_workers_are_one_per_cpu_thread_up_to_a_limit_and_one_beside_other_threads(monkeypatch):
    import nmtkit.translate.translator as workers

    with monkeypatch.context() as m:  # as in a process of one thread (other tests may leave threads)
        m.setattr(workers.threading, "active_count", lambda: 1)
        assert resolve_workers(None, 2, "cpu") == 2
        assert resolve_workers(None, 1, "cpu") == 1
        assert resolve_workers(None, 64, "cpu") == MAX_AUTO_WORKERS
    assert resolve_workers(None, 2, "cpu") == 2 if threading.active_count() == 1 else 1
    assert resolve_workers(None, 8, "cuda") == resolve_workers(3, 8, "cuda") == 1
    assert resolve_workers(3, 1, "cpu") == 3
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert resolve_workers(None, 2, "cpu") == 1  # a server's decoding thread stays in one process
        assert resolve_workers(2, 2, "cpu") == 2
    finally:
        stop.set()
        other.join()
    assert thread_shares(5, 2) == [3, 2]
    assert thread_shares(1, 3) == [1, 1, 1]


def test_a_worker_killed_mid_translation_is_one_error_line_and_leaves_no_output(ckpt, tmp_path, monkeypatch):
    from tests.conftest import run_cli

    parent = os.getpid()
    real = Translator._decode_batch

    def decode_batch(self, *a, **k):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.02)
        return real(self, *a, **k)

    monkeypatch.setattr(Translator, "_decode_batch", decode_batch)
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("\n".join(LINES) + "\n")
    res = run_cli(["translate", "-m", ckpt, "-i", str(src), "-o", str(out), "--workers", "2", "--batch-size", "2"])
    assert res.code == 1
    assert res.err.strip().splitlines() == [
        "nmtkit: error: a decoding worker process died without answering (killed by signal 9; out of memory? "
        "--workers 1 decodes in one process)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_no_worker_outlives_a_command_killed_with_sigkill(tmp_path):
    pids = tmp_path / "pids"
    code = ("import os, signal, time\n"
            "from nmtkit.translate.translator import map_batches\n"
            "parent = os.getpid()\n"
            "def decode(j):\n"
            f"    open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
            "    if os.getpid() != parent:\n"
            "        time.sleep(60)\n"
            "    time.sleep(1)  # the children have taken their batches\n"
            "    os.kill(parent, signal.SIGKILL)\n"
            "map_batches(decode, 6, 3, 3)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == -signal.SIGKILL
    children = [int(p) for p in pids.read_text().split()[1:]]
    assert len(children) == 2

    def gone(pid: int) -> bool:  # no such process, or a zombie nobody reaped
        try:
            with open(f"/proc/{pid}/status") as f:
                return any(line.startswith("State:") and "Z" in line for line in f)
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 10
    while not all(gone(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(gone(pid) for pid in children)


def test_translate_without_workers_is_auto_not_every_core(monkeypatch):
    """The CLI gave translate one worker per core (64 processes on a 64-core machine at
    --threads 1), the rule of the text commands, where its help says one per thread, at most 4."""
    import nmtkit.cli.common as common
    from nmtkit.preprocess import PreprocessConfig
    from nmtkit.translate import TranslateConfig
    from nmtkit.translate.translator import resolve_workers

    monkeypatch.setattr(common, "available_cores", lambda: 64)
    values = common.config_values(TranslateConfig, {"workers": None})
    assert values["workers"] is None and resolve_workers(values["workers"], 1, "cpu") == 1
    assert common.config_values(PreprocessConfig, {"workers": None})["workers"] == 64
    assert "workers" not in common.config_values(PreprocessConfig, {"workers": None}, given_only=True)
    assert common.config_values(TranslateConfig, {"workers": 3})["workers"] == 3
