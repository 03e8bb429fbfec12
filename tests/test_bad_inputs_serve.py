"""The bad-input table of `nmtkit serve`: raw HTTP requests at the server's edges.

Each row is one request, sent byte for byte over a socket to the real server stack (the app,
its runner and connection handler, on 127.0.0.1 and a free port), and what it must get: a
status, a one-line JSON error naming the problem, and at most one log line without a
traceback. The model is tiny and random (tests/conftest.py).
"""
from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal
import time
from dataclasses import dataclass

import pytest

pytest.importorskip("aiohttp")

from nmtkit.serve import Limits, ServeConfig  # noqa: E402
from nmtkit.serve.app import make_app, make_runner, serve  # noqa: E402
from nmtkit.serve.batcher import Batcher, ClientGone  # noqa: E402
from nmtkit.translate.config import SearchConfig  # noqa: E402
from tests.conftest import load_translator, make_checkpoint  # noqa: E402

SEARCH = SearchConfig(max_len_b=3.0)
CONFIG = ServeConfig(limits=Limits(max_beam=2, max_body_bytes=1 << 20), body_timeout=0.5,
                     allow_hosts=("mt.example.org",), search=SEARCH)


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    ckpt = make_checkpoint(tmp_path_factory.mktemp("serve-bad") / "model.pt", seed=3)
    return load_translator(ckpt, precision="fp32")[0]


def _post(path: str, body: bytes, ctype: str = "application/json", extra: str = "", host: str = "{host}") -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {ctype}\r\n{extra}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode() + body


def _get(path: str, host: str = "{host}", extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n".encode()


SURROGATE = b'{"text": ["x \\ud800 y"]}'
DEEP = b"[" * 100_000 + b"]" * 100_000
HUGE_BEAM = b'{"text": ["a"], "beam": ' + b"9" * 5000 + b"}"  # Python parses no int over 4300 digits
HUGE_ID = b'[{"src": "a", "id": ' + b"9" * 5000 + b"}]"


@dataclass
class HttpRow:
    id: str
    raw: bytes  # "{host}" becomes 127.0.0.1:PORT
    status: int
    needle: str = ""  # in the JSON error
    logs: int | None = None  # exactly this many log lines (None: not checked)
    within: float = 5.0  # seconds the answer may take


ROWS = [
    HttpRow("lone-surrogate-translate", _post("/translate", SURROGATE), 400, "lone surrogate"),
    HttpRow("lone-surrogate-onmt", _post("/translator/translate", b'[{"src": "x \\udfff y", "id": 1}]'), 400,
            "lone surrogate"),
    HttpRow("json-nested-100000-deep", _post("/translate", DEEP), 400, "nested too deeply"),
    HttpRow("integer-of-5000-digits-translate", _post("/translate", HUGE_BEAM), 400, "more than 4300 digits"),
    HttpRow("integer-of-5000-digits-onmt", _post("/translator/translate", HUGE_ID), 400, "more than 4300 digits"),
    HttpRow("negative-content-length", b"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json"
            b"\r\nContent-Length: -5\r\n\r\n{}", 400, "malformed HTTP request", logs=1),
    HttpRow("duplicate-content-length", b"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\n"
            b"Content-Length: 3\r\nContent-Type: application/json\r\n\r\n{} ", 400, "malformed HTTP request", logs=1),
    HttpRow("transfer-encoding-and-content-length", b"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2"
            b"\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400,
            "malformed HTTP request", logs=1),
    HttpRow("garbage-request-line", b"\x16\x03\x01 hello there\r\n\r\n", 400, "malformed HTTP request", logs=1),
    HttpRow("content-length-10-gb-refused-from-the-header",
            b"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            b"Content-Length: 10000000000\r\n\r\n{", 413, "Content-Length", within=2.0),
    HttpRow("body-shorter-than-content-length-times-out",
            b"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{\"text\"", 408, "not received within", within=3.0),
    HttpRow("text-plain-post", _post("/translate", b'{"text": ["a"]}', ctype="text/plain"), 415, "application/json"),
    HttpRow("form-post", _post("/translate", b'{"text": ["a"]}', ctype="application/x-www-form-urlencoded"), 415,
            "application/json"),
    HttpRow("host-of-another-site", _post("/translate", b'{"text": ["a"]}', host="evil.example:80"), 403,
            "evil.example"),
    HttpRow("dns-rebinding-reads-info", _get("/info", host="rebind.evil.example"), 403, "--allow-host"),
    HttpRow("cross-origin-post", _post("/translate", b'{"text": ["a"]}', extra="Origin: http://evil.example\r\n"),
            403, "cross-origin"),
    HttpRow("null-origin-post", _post("/translate", b'{"text": ["a"]}', extra="Origin: null\r\n"), 403,
            "cross-origin"),
    # was a 500 "internal error" (urlsplit's ValueError)
    HttpRow("origin-that-is-no-url", _post("/translate", b'{"text": ["a"]}', extra="Origin: http://[::1\r\n"), 403,
            "cross-origin"),
    # was a 500 "internal error" (aiohttp's RequestPayloadError) and a traceback in the log
    HttpRow("gzip-content-encoding-of-no-gzip-data", _post("/translate", b'{"text": ["a"]}',
                                                           extra="Content-Encoding: gzip\r\n"), 400,
            "request body cannot be read: Can not decode content-encoding: gzip"),
    # was aiohttp's text/plain "Unknown Expect: 200-ok"
    HttpRow("unknown-expect", _post("/translate", b'{"text": ["a"]}', extra="Expect: 200-ok\r\n"), 417,
            "unknown Expect: 200-ok"),
    # what must still work
    HttpRow("same-origin-post", _post("/translate", b'{"text": ["a"]}', extra="Origin: http://{host}\r\n"), 200),
    HttpRow("localhost-host", _get("/health", host="localhost:8080"), 200),
    HttpRow("allowed-host-and-origin", _post("/translate", b'{"text": ["a"]}', host="mt.example.org",
                                             extra="Origin: https://mt.example.org\r\n"), 200),
    HttpRow("json-with-charset", _post("/translate", b'{"text": ["a"]}', ctype="application/json; charset=utf-8"),
            200),
    HttpRow("gzip-content-encoding", _post("/translate", gzip.compress(b'{"text": ["a"]}'),
                                           extra="Content-Encoding: gzip\r\n"), 200),
]


async def _exchange(translator, raw: bytes) -> tuple[bytes, float, list[str]]:
    logs: list[str] = []
    app = make_app(translator, CONFIG, log_line=logs.append)
    runner = make_runner(app, CONFIG, logs.append)
    await runner.setup()
    from aiohttp import web

    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        t0 = time.monotonic()
        writer.write(raw.replace(b"{host}", f"127.0.0.1:{port}".encode()))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
        took = time.monotonic() - t0  # until the answer's head: a refused body is not waited for
        answer = head + await asyncio.wait_for(reader.read(), 20)
        writer.close()
    finally:
        await runner.cleanup()
    return answer, took, logs


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_serve_bad_input_table(row: HttpRow, translator, caplog):
    answer, took, logs = asyncio.run(_exchange(translator, row.raw))
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert status == row.status, answer[:500]
    assert b"application/json" in head.lower(), head
    data = json.loads(body)
    if row.status >= 400:
        assert list(data) == ["error"] and "\n" not in data["error"] and row.needle in data["error"], data
    assert took < row.within, took
    if row.logs is not None:
        assert len(logs) == row.logs, logs
    assert not any("Traceback" in r.getMessage() or r.exc_info for r in caplog.records), caplog.text


def test_the_lines_of_a_client_that_went_away_are_never_decoded():
    """While the decoder is busy, a queued request whose client disconnects is dropped."""
    import threading

    calls: list[list[str]] = []
    busy = threading.Event()

    def translate(lines, beam, nbest, attention):
        calls.append(list(lines))
        busy.wait(5)
        return list(lines)

    async def main():
        batcher = Batcher(translate, batch_size=4, delay=0)
        await batcher.start()
        try:
            first = asyncio.create_task(batcher.submit(["busy"], 1, 1, False))
            while not calls:
                await asyncio.sleep(0.01)
            gone = asyncio.create_task(batcher.submit(["left"], 1, 1, False, gone=lambda: True))
            stays = asyncio.create_task(batcher.submit(["stays"], 1, 1, False, gone=lambda: False))
            await asyncio.sleep(0.05)
            busy.set()
            assert await first == ["busy"] and await stays == ["stays"]
            with pytest.raises(ClientGone):
                await gone
        finally:
            busy.set()
            await batcher.stop()

    asyncio.run(main())
    assert calls == [["busy"], ["stays"]]


def test_binding_beyond_loopback_warns(translator):
    said: list[str] = []

    def announce(msg: str) -> None:
        said.append(msg)
        if msg.startswith("serving"):
            os.kill(os.getpid(), signal.SIGTERM)  # serve() stops on it, as on a real SIGTERM

    asyncio.run(serve(translator, ServeConfig(host="0.0.0.0", port=0, quiet=True), announce))
    assert any(m.startswith("warning: listening on 0.0.0.0") for m in said), said
    said.clear()
    asyncio.run(serve(translator, ServeConfig(host="127.0.0.1", port=0, quiet=True), announce))
    assert not any("warning" in m for m in said), said


def test_an_empty_host_is_refused_not_taken_for_every_interface():
    """--host "$UNSET" listened on every interface (asyncio's reading of an empty host), behind a
    warning that named no address."""
    from nmtkit.errors import ConfigError

    with pytest.raises(ConfigError, match="--host '' names no address"):
        ServeConfig(host="")


def test_64_concurrent_clients_each_get_what_nmtkit_translate_gives(translator):
    """The edges' checks change nothing for well-formed clients: 64 at once, every answer right."""
    import aiohttp

    words = ["the cat", "a dog ran", "the big red house", "cat and dog .", "", "is a mat"]
    requests = [[words[(i + k) % len(words)] for k in range(1 + i % 4)] for i in range(64)]
    want = {line: out for line, out in zip(words, translator.translate(words, beam=2, max_len_b=3.0))}

    async def main():
        app = make_app(translator, ServeConfig(batch_size=32, limits=Limits(max_beam=2), search=SEARCH))
        runner = make_runner(app, ServeConfig())
        await runner.setup()
        from aiohttp import web

        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/translate"
        try:
            async with aiohttp.ClientSession() as session:
                async def one(lines):
                    async with session.post(url, json={"text": lines}) as resp:
                        assert resp.status == 200, await resp.text()
                        return [t["text"] for t in (await resp.json())["translations"]]
                return await asyncio.gather(*(one(r) for r in requests))
        finally:
            await runner.cleanup()

    for lines, got in zip(requests, asyncio.run(main())):
        assert got == [want[line] for line in lines]


def test_a_client_that_disconnects_while_queued_is_dropped_and_logged_once(translator, monkeypatch, caplog):
    """Through the whole server: the queued request of a client that closed its connection is never
    decoded; its log line says 499, without a traceback; the busy client still gets its answer."""
    import threading

    seen: list[list[str]] = []
    busy = threading.Event()
    real = translator._translate_buffer

    def slow(lines, *args, **kw):
        seen.append([text for _, text in lines])
        busy.wait(10)
        return real(lines, *args, **kw)

    monkeypatch.setattr(translator, "_translate_buffer", slow)

    async def main():
        logs: list[str] = []
        app = make_app(translator, CONFIG, log_line=logs.append)
        runner = make_runner(app, CONFIG, logs.append)
        await runner.setup()
        from aiohttp import web

        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        host = f"127.0.0.1:{port}"

        async def send(text: str):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = json.dumps({"text": [text]}).encode()
            writer.write(_post("/translate", body).replace(b"{host}", host.encode()))
            await writer.drain()
            return reader, writer

        try:
            r1, w1 = await send("the cat")
            while not seen:
                await asyncio.sleep(0.01)
            _, w2 = await send("a dog ran")  # queued behind the busy decoder, then gone
            await asyncio.sleep(0.2)
            w2.close()
            await asyncio.sleep(0.2)
            busy.set()
            answer = await asyncio.wait_for(r1.read(), 20)
            w1.close()
            await asyncio.sleep(0.2)
        finally:
            busy.set()
            await runner.cleanup()
        return answer, logs

    answer, logs = asyncio.run(main())
    assert b" 200 " in answer.split(b"\r\n", 1)[0]
    assert seen == [["the cat"]], seen
    assert len([x for x in logs if " 499 " in x]) == 1, logs
    assert not any(r.exc_info or "Traceback" in r.getMessage() for r in caplog.records), caplog.text


def test_a_request_whose_body_is_still_arriving_at_the_stop_is_read_and_answered(translator):
    """SIGTERM finishes the requests in flight, one whose body is still on its way too: aiohttp
    dropped what arrived once the server was stopping, so the request waited out --body-timeout
    for a 408 "not received", holding the stop meanwhile."""
    from aiohttp import web

    async def main():
        runner = make_runner(make_app(translator, CONFIG), CONFIG)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        reader, writer = await asyncio.open_connection("127.0.0.1", runner.addresses[0][1])
        raw = _post("/translate", b'{"text": ["the cat"]}', host="127.0.0.1")
        writer.write(raw[:-8])  # the headers and part of the body
        await writer.drain()
        await asyncio.sleep(0.1)
        stop = asyncio.create_task(runner.cleanup())  # what serve() does on SIGTERM
        await asyncio.sleep(0.1)
        writer.write(raw[-8:])
        answer = await asyncio.wait_for(reader.read(), 5)
        await stop
        return answer

    head, _, body = asyncio.run(main()).partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n", 1)[0], body
    assert len(json.loads(body)["translations"]) == 1


def test_an_aiohttp_that_renamed_a_private_name_serve_uses_is_one_error_before_serving(translator, monkeypatch):
    """serve makes its connection handlers from aiohttp's private `Server._kwargs`: a release that
    renamed it started serving, then closed every connection unanswered (an AttributeError in
    asyncio's protocol factory)."""
    from aiohttp import web

    from nmtkit.errors import ConfigError

    real = web.Server.__init__

    def renamed(self, *args, **kwargs):
        real(self, *args, **kwargs)
        self._handler_kwargs = self.__dict__.pop("_kwargs")

    monkeypatch.setattr(web.Server, "__init__", renamed)

    async def main():
        runner = make_runner(make_app(translator, CONFIG), CONFIG)
        try:
            await runner.setup()
        finally:
            await runner.cleanup()

    with pytest.raises(ConfigError, match=r"^aiohttp [\d.]+ lacks '_kwargs', which nmtkit serve uses"):
        asyncio.run(main())


def test_a_malformed_request_is_not_echoed_whole_into_its_error_and_log_line(translator):
    """aiohttp's parser quotes the request's bytes up to the next line break: an HTTP/1.0 POST
    without Content-Length put its whole body (64 KB and more) in the error and the server's log."""
    body = b'{"text": ["' + b"a " * 50_000 + b'"]}'
    answer, _, logs = asyncio.run(_exchange(translator, b"POST /translate HTTP/1.0\r\nContent-Type: application/json"
                                            b"\r\n\r\n" + body))
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error.startswith("malformed HTTP request: Data after") and len(error) < 300, error[:500]
    assert len(logs) == 1 and len(logs[0]) < 300, logs[0][:500]
