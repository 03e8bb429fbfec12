"""Vocabulary building/saving and the ordered parallel map."""
from __future__ import annotations

import functools
import os
from collections import Counter

import pytest

from nmtkit.errors import InputError
from nmtkit.text.parallel import parallel_map, worker_state
from nmtkit.text.vocab import SPECIALS, UNK_ID, Vocab


def test_vocab_keeps_specials_first_then_most_frequent_with_alphabetical_ties():
    v = Vocab.build(Counter({"b": 3, "a": 3, "c": 5, "d": 1}), max_size=6)
    assert v.itos == list(SPECIALS) + ["c", "a"]
    assert v.encode(["c", "d", "a"]) == [4, UNK_ID, 5]


def test_decoding_ids_stops_at_eos_and_drops_pad_and_bos_unless_told_to_keep_them():
    v = Vocab.build(Counter({"c": 2, "a": 1}))
    assert v.decode([2, 4, 0, 5, 3, 4]) == ["c", "a"]
    assert v.decode([2, 4, 3, 5], strip_specials=False) == ["<s>", "c", "</s>", "a"]


def test_vocab_file_round_trip_and_bad_file_error(tmp_path):
    v = Vocab.build(Counter({"x": 2, "y": 1}))
    v.save(tmp_path / "v.txt")
    w = Vocab.load(tmp_path / "v.txt")
    assert w.itos == v.itos and w.counts == v.counts
    (tmp_path / "bad.txt").write_text("<pad>\t0\nno-tab-here\n")
    with pytest.raises(InputError, match="bad.txt:2"):
        Vocab.load(tmp_path / "bad.txt")


def _prepare(offset: int) -> dict:
    return {"offset": offset, "pid": os.getpid()}


def _add(x: int) -> tuple[int, int]:
    state = worker_state()
    return x + state["offset"], state["pid"]


@pytest.mark.parametrize("workers", [1, 2])
def test_parallel_map_keeps_order_and_prepares_the_state_once_in_each_worker(workers):
    out = list(parallel_map(_add, range(2000), workers=workers, chunk_size=7, state=100, prepare=_prepare))
    assert [y for y, _ in out] == [x + 100 for x in range(2000)]
    pids = {pid for _, pid in out}
    if workers > 1:
        assert os.getpid() not in pids
    else:
        assert pids == {os.getpid()}
    with pytest.raises(RuntimeError, match="outside parallel_map"):
        worker_state()  # the map's state does not outlive it


def _refuse_seven(x: int) -> int:
    if x == 7:
        raise InputError("bad item")
    return x


@pytest.mark.parametrize("workers", [1, 2])
def test_an_items_error_learns_its_position_in_the_whole_stream(workers):
    """The position names the input line in the message, with or without workers (chunks of 3)."""
    with pytest.raises(InputError) as err:
        list(parallel_map(_refuse_seven, range(12), workers=workers, chunk_size=3))
    assert err.value.item == 7


def test_a_map_without_workers_restores_the_state_of_an_enclosing_map():
    def inner(x):
        return list(parallel_map(lambda y: (y, worker_state()), [x], workers=1, state="inner"))[0] + (worker_state(),)

    assert list(parallel_map(inner, [1, 2], workers=1, state="outer")) == [(1, "inner", "outer"), (2, "inner", "outer")]


def test_parallel_map_with_partial_and_no_initializer():
    f = functools.partial(pow, exp=2)
    assert list(parallel_map(f, range(50), workers=2, chunk_size=3)) == [x * x for x in range(50)]


def test_a_pool_stopped_as_its_workers_start_ends_them_without_tracebacks_or_a_hang():
    """Workers fork with the command's SIGTERM handler (nmtkit.cli: SIGTERM unwinds as Ctrl-C).
    A pool stopped before a worker replaced it (an empty map) had that worker raise in its
    start-up (a traceback each), or drop the signal and keep the pool's terminate() waiting
    forever (a hung select-data)."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import signal\n"
        "from nmtkit.text.parallel import parallel_map\n"
        "def stop(signum, frame):\n    raise KeyboardInterrupt\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "for _ in range(150):\n"
        "    assert list(parallel_map(abs, [], workers=2)) == []\n"
        "assert list(parallel_map(abs, [-1, -2, -3], workers=2, chunk_size=1)) == [1, 2, 3]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
