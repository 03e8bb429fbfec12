"""The dynamic batcher over a stand-in translate function (no model): grouping, caps, order, errors."""
from __future__ import annotations

import asyncio
import threading

import pytest

from nmtkit.serve.batcher import Batcher


class Recorder:
    """A translate function that answers each line with (line, beam, nbest) and records its calls."""

    def __init__(self, fail_on: str | None = None, pause: float = 0.0):
        self.calls: list[tuple[list[str], int, int, bool]] = []
        self.fail_on, self.pause = fail_on, pause
        self.threads: set[str] = set()

    def __call__(self, lines, beam, nbest, attention):
        import time

        self.threads.add(threading.current_thread().name)
        self.calls.append((list(lines), beam, nbest, attention))
        if self.fail_on in lines:
            raise RuntimeError("decoder failed")
        time.sleep(self.pause)
        return [(line, beam, nbest) for line in lines]


def run_batcher(fn, batch_size, delay, body):
    async def main():
        batcher = Batcher(fn, batch_size, delay)
        await batcher.start()
        try:
            return await body(batcher)
        finally:
            await batcher.stop()

    return asyncio.run(main())


def test_requests_arriving_together_share_one_call_and_get_their_own_lines_back_in_order():
    fn = Recorder()
    reqs = [[f"r{i}l{j}" for j in range(1 + i % 3)] for i in range(6)]

    async def body(b):
        return await asyncio.gather(*(b.submit(r, 5, 1, False) for r in reqs))

    out = run_batcher(fn, 64, 0.05, body)
    assert [[x[0] for x in o] for o in out] == reqs
    assert len(fn.calls) == 1 and fn.calls[0][0] == [line for r in reqs for line in r]
    assert fn.threads == {"nmtkit-decode_0"}  # decoded off the event loop


def test_a_batch_never_exceeds_batch_size_unless_one_request_alone_is_larger():
    fn = Recorder()
    reqs = [["a"] * 3, ["b"] * 3, ["c"] * 3, ["d"] * 9]

    async def body(b):
        return await asyncio.gather(*(b.submit(r, 5, 1, False) for r in reqs))

    out = run_batcher(fn, 7, 0.05, body)
    assert [[x[0] for x in o] for o in out] == reqs
    sizes = [len(c[0]) for c in fn.calls]
    assert sizes == [6, 3, 9]  # a+b; c could not join (6+3 > 7) and d goes alone


def test_requests_with_different_options_are_decoded_apart_and_none_is_starved():
    fn = Recorder()

    async def body(b):
        return await asyncio.gather(b.submit(["x"], 5, 1, False), b.submit(["y"], 2, 1, True),
                                    b.submit(["z"], 5, 1, True), b.submit(["w"], 2, 2, False))

    out = run_batcher(fn, 64, 0.05, body)
    assert out == [[("x", 5, 1)], [("y", 2, 1)], [("z", 5, 1)], [("w", 2, 2)]]
    assert sorted((c[0], c[1], c[2], c[3]) for c in fn.calls) == sorted(
        [(["x", "z"], 5, 1, True), (["y"], 2, 1, True), (["w"], 2, 2, False)])


def test_a_failing_call_fails_its_requests_and_the_next_ones_are_served():
    fn = Recorder(fail_on="bad")

    async def body(b):
        first = await asyncio.gather(b.submit(["ok"], 5, 1, False), b.submit(["bad"], 5, 1, False),
                                     return_exceptions=True)
        after = await b.submit(["fine"], 5, 1, False)
        return first, after

    first, after = run_batcher(fn, 64, 0.05, body)
    assert all(isinstance(x, RuntimeError) for x in first)
    assert after == [("fine", 5, 1)]


def test_a_request_that_arrives_while_the_model_is_busy_joins_the_next_batch():
    fn = Recorder(pause=0.2)

    async def body(b):
        first = asyncio.create_task(b.submit(["a"], 5, 1, False))
        await asyncio.sleep(0.05)  # "a" is being decoded
        later = [asyncio.create_task(b.submit([c], 5, 1, False)) for c in "bcd"]
        return await first, await asyncio.gather(*later)

    first, later = run_batcher(fn, 64, 0.0, body)
    assert first == [("a", 5, 1)] and [x[0][0] for x in later] == ["b", "c", "d"]
    assert [c[0] for c in fn.calls] == [["a"], ["b", "c", "d"]]


def test_empty_request_needs_no_decoder_call():
    fn = Recorder()
    assert run_batcher(fn, 4, 0.0, lambda b: b.submit([], 5, 1, False)) == []
    assert fn.calls == []


@pytest.mark.parametrize("delay", [0.0, 0.01])
def test_stats_count_calls_requests_and_sentences(delay):
    fn = Recorder()

    async def body(b):
        await asyncio.gather(b.submit(["a", "b"], 5, 1, False), b.submit(["c"], 5, 1, False))
        return b.stats

    stats = run_batcher(fn, 64, delay, body)
    assert stats.requests == 2 and stats.sentences == 3 and stats.batches == len(fn.calls)


def test_every_batch_runs_on_the_thread_the_model_was_loaded_on():
    """PyTorch's CPU parallelism builds a worker team per thread that starts parallel work; a
    model loaded on one thread and decoded on another ran at half speed (batcher.py)."""
    from nmtkit.serve.batcher import DecodeThread

    thread = DecodeThread()
    loaded_on = thread.call(threading.get_ident)
    seen: set[int] = set()

    def translate(lines, beam, nbest, attention):
        seen.add(threading.get_ident())
        return list(lines)

    async def main():
        batcher = Batcher(translate, 4, 0.0, thread)
        await batcher.start()
        try:
            return await asyncio.gather(*(batcher.submit([f"l{i}"], 5, 1, False) for i in range(10)))
        finally:
            await batcher.stop()

    assert asyncio.run(main()) == [[f"l{i}"] for i in range(10)]
    assert seen == {loaded_on} and loaded_on != threading.get_ident()


def test_nmtkit_serve_loads_its_model_on_the_thread_that_decodes(monkeypatch):
    """The CLI builds (and warms up) the Translator on the DecodeThread it hands to the server."""
    import nmtkit.serve.app
    import nmtkit.translate
    from nmtkit import cli

    built_on: list[int] = []

    class FakeTranslator:
        def __init__(self, config):
            built_on.append(threading.get_ident())

        def _translate_buffer(self, lines, search, source):
            assert threading.get_ident() == built_on[0]

    served: list[int] = []

    async def fake_serve(translator, config, announce, log_line=None, thread=None):
        served.append(await thread.run(threading.get_ident))
        thread.close()

    monkeypatch.setattr(nmtkit.translate, "Translator", FakeTranslator)
    monkeypatch.setattr(nmtkit.serve.app, "serve", fake_serve)
    try:
        cli.main(["serve", "-m", "model.pt", "-q"])
    except SystemExit as exit_:
        assert exit_.code in (0, None)
    assert built_on and served == built_on and built_on[0] != threading.get_ident()


def test_a_request_refused_by_the_translator_fails_alone_and_its_batch_mate_is_answered():
    """An NmtkitError (a line the translator refuses) splits a batch of two into single calls."""
    from nmtkit.errors import NmtkitError

    class Refuser(Recorder):
        def __call__(self, lines, beam, nbest, attention):
            if "bad" in lines:
                self.calls.append((list(lines), beam, nbest, attention))
                raise NmtkitError("line refused")
            return super().__call__(lines, beam, nbest, attention)

    fn = Refuser()

    async def body(b):
        return await asyncio.gather(b.submit(["ok"], 5, 1, False), b.submit(["bad"], 5, 1, False),
                                    return_exceptions=True)

    good, bad = run_batcher(fn, 64, 0.05, body)
    assert good == [("ok", 5, 1)] and isinstance(bad, NmtkitError)
    assert [c[0] for c in fn.calls] == [["ok", "bad"], ["ok"], ["bad"]]


def test_requests_that_exactly_fill_batch_size_share_one_call():
    fn = Recorder()

    async def body(b):
        return await asyncio.gather(b.submit(["a", "b"], 5, 1, False), b.submit(["c", "d"], 5, 1, False))

    run_batcher(fn, 4, 0.05, body)
    assert [c[0] for c in fn.calls] == [["a", "b", "c", "d"]]


def test_a_full_batch_is_decoded_without_waiting_out_the_delay():
    fn = Recorder()

    async def body(b):
        return await asyncio.wait_for(b.submit(["a", "b"], 5, 1, False), 3.0)

    assert run_batcher(fn, 2, 30.0, body) == [("a", 5, 1), ("b", 5, 1)]


def test_stats_largest_is_the_most_sentences_in_any_call_so_far():
    fn = Recorder()

    async def body(b):
        await b.submit(["a", "b", "c"], 5, 1, False)
        await b.submit(["d"], 5, 1, False)
        return b.stats

    stats = run_batcher(fn, 64, 0.0, body)
    assert stats.largest == 3 and stats.batches == 2
