"""The HTTP side of `nmtkit serve` (aiohttp): request checks, routes, answers, JSON errors,
request logs, start and graceful stop. Routes: `POST /translate`, `POST /translator/translate`
(OpenNMT-py's REST shape; its `GET /translator/health` and `/translator/models` too), `GET /health`,
`GET /info`, `GET /` (page.html). The event loop only parses, checks and answers; the model runs on
the `DecodeThread`. A refusal is a 4xx with `{"error": "one line"}`; a request's options may only
narrow the server's own.
"""
from __future__ import annotations

import asyncio
import contextvars
import hashlib
import ipaddress
import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, replace
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from aiohttp import HttpVersion11, web
from aiohttp import __version__ as aiohttp_version

from nmtkit import signals
from nmtkit.errors import ConfigError, NmtkitError, OutputError
from nmtkit.serve.batcher import Batcher, ClientGone, DecodeThread, Limits, ServeConfig
from nmtkit.text.io import BOM

if TYPE_CHECKING:
    from nmtkit.translate.alignment import Result
    from nmtkit.translate.translator import Translator

NATIVE_FIELDS = {"text", "beam", "nbest", "alignments"}
ONMT_FIELDS = {"src", "id"}  # OpenNMT-py's REST server: [{"src": "...", "id": 100}, ...]
BATCHER = web.AppKey("batcher", Batcher)
STATE = web.AppKey("state", dict)
# the current request's size for its log line: {"lines": n, "bytes": n}, set by the middleware
REQUEST_SIZE: contextvars.ContextVar[dict] = contextvars.ContextVar("nmtkit_request_size")


@dataclass(frozen=True)
class TranslateRequest:
    """One checked request: its lines and decoding options (already within the limits)."""

    lines: tuple[str, ...]
    beam: int
    nbest: int = 1
    alignments: bool = False
    srcs: tuple[str, ...] = ()  # OpenNMT-py's route: the lines as sent, outer whitespace and all


class RequestError(Exception):
    """A request the server refuses: `status` is the HTTP status, str(self) the one-line reason."""

    def __init__(self, message: str, status: int = 400, close: bool = False):
        super().__init__(" ".join(message.split()))  # one line, whatever the cause said
        self.status = status
        self.close = close  # the body was not read: close the connection after answering


def parse_json_body(body: bytes) -> Any:
    """The JSON value of a request body: strict UTF-8 (a leading BOM dropped), well-formed JSON."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(f"request body is not valid UTF-8 (byte {err.start + 1})") from None
    try:
        return json.loads(text.removeprefix(BOM))
    except json.JSONDecodeError as err:
        raise RequestError(f"malformed JSON: {err.msg} at line {err.lineno} column {err.colno}") from None
    except RecursionError:
        raise RequestError("malformed JSON: nested too deeply") from None
    except ValueError:  # Python refuses to convert integers over sys.get_int_max_str_digits() digits
        raise RequestError(f"malformed JSON: an integer of more than {sys.get_int_max_str_digits()} digits") from None


def _int_option(obj: dict, name: str, default: int, lowest: int, highest: int, limit_name: str) -> int:
    value = obj.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"'{name}' must be an integer, got {json.dumps(value)}")
    if value < lowest:
        raise RequestError(f"'{name}' must be >= {lowest}, got {value}")
    if value > highest:
        raise RequestError(f"'{name}' {value} is above {limit_name} ({highest})")
    return value


def check_lines(lines: Any, field: str, limits: Limits, strip: bool = False) -> tuple[str, ...]:
    """A list of strings within the line-count and line-length limits (`strip`: outer whitespace, line
    breaks too, is allowed and stripped)."""
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise RequestError(f"'{field}' must be a list of strings")
    if len(lines) > limits.max_lines:
        raise RequestError(f"{len(lines)} lines in one request, over the limit of {limits.max_lines}", 413)
    for i, line in enumerate(lines):
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as err:  # JSON's \ud800 escapes decode to lone surrogates
            raise RequestError(f"'{field}'[{i}] holds a lone surrogate (\\u{ord(line[err.start]):04x} at character "
                               f"{err.start + 1}), which is no Unicode text") from None
        if "\n" in (line.strip() if strip else line):
            raise RequestError(f"'{field}'[{i}] holds a line break: send one sentence per list item")
        nul = line.find("\0")
        if nul >= 0:  # binary data, which `nmtkit translate` refuses in its input too
            raise RequestError(f"'{field}'[{i}] holds binary data (a NUL character at character {nul + 1}); expected text")
        if len(line) > limits.max_line_chars:
            raise RequestError(f"'{field}'[{i}] has {len(line)} characters, over the limit of "
                               f"{limits.max_line_chars}", 413)
    return tuple(line.strip() if strip else line for line in lines)


def check_request(obj: Any, limits: Limits) -> TranslateRequest:
    """`POST /translate`: {"text": [...], "beam": 5, "nbest": 1, "alignments": false}."""
    if not isinstance(obj, dict):
        raise RequestError("request must be a JSON object with a 'text' list")
    unknown = sorted(set(obj) - NATIVE_FIELDS)
    if unknown:
        raise RequestError(f"unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(NATIVE_FIELDS))}")
    if "text" not in obj:
        raise RequestError("missing field 'text' (a list of sentences)")
    lines = check_lines(obj["text"], "text", limits)
    beam = _int_option(obj, "beam", limits.max_beam, 1, limits.max_beam, "the server's --beam")
    nbest = _int_option(obj, "nbest", 1, 1, beam, "the beam")
    alignments = obj.get("alignments", False)
    if not isinstance(alignments, bool):
        raise RequestError(f"'alignments' must be true or false, got {json.dumps(alignments)}")
    return TranslateRequest(lines, beam, nbest, alignments)


def check_onmt_request(obj: Any, limits: Limits) -> TranslateRequest:
    """`POST /translator/translate`, OpenNMT-py's shape: [{"src": "sentence", "id": 100}, ...]."""
    if not isinstance(obj, list) or not all(isinstance(x, dict) for x in obj):
        raise RequestError('request must be a JSON list of {"src": ..., "id": ...} objects')
    for i, item in enumerate(obj):
        unknown = sorted(set(item) - ONMT_FIELDS)
        if unknown:
            raise RequestError(f"item {i}: unknown field(s) {', '.join(unknown)}; valid: id, src")
        if "src" not in item:
            raise RequestError(f"item {i}: missing field 'src'")
        if not isinstance(item["src"], str):
            raise RequestError(f"item {i}: 'src' must be a string")
        if "id" in item and (isinstance(item["id"], bool) or not isinstance(item["id"], int)):
            raise RequestError(f"item {i}: 'id' must be an integer")
    srcs = [item["src"] for item in obj]  # translated stripped, as OpenNMT-py does
    return TranslateRequest(check_lines(srcs, "src", limits, strip=True), limits.max_beam, srcs=tuple(srcs))


def translation_json(result: Result, alignments: bool, nbest: int) -> dict[str, Any]:
    """`POST /translate`'s item for one line: top text and score, its alignment when asked, the
    n-best list when asked, and "truncated": true when the line was."""
    from nmtkit.translate.alignment import Translation, attention_table, hard_alignment

    # an empty line: one empty translation, as `nmtkit translate` (--nbest too) writes for it
    hyps = result.nbest or (Translation("", (), 0.0, 0.0, ()),)
    top = hyps[0]
    item: dict[str, Any] = {"text": top.text, "score": top.score, "alignment": None}
    if alignments:
        table = attention_table(top.attention, result.src_tokens, top.tokens, top.source_eos_attention)
        item["alignment"] = {**table, "hard": hard_alignment(top.attention, len(top.tokens))}
    if nbest > 1:
        item["nbest"] = [{"text": hyp.text, "score": hyp.score, "log_prob": hyp.log_prob} for hyp in hyps]
    if result.truncated:
        item["truncated"] = True
    return item


def onmt_json(src: str, result: Result) -> dict[str, Any]:
    """`POST /translator/translate`'s item: OpenNMT-py's fields (the src's outer whitespace around the
    tgt, as there), and "truncated": true when the line was."""
    tgt = src[:len(src) - len(src.lstrip())] + result.text + src[len(src.rstrip()):]
    item: dict[str, Any] = {"src": src, "tgt": tgt, "n_best": 1, "pred_score": result.score}
    if result.truncated:
        item["truncated"] = True
    return item


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def model_info(translator: Translator, config: ServeConfig) -> dict[str, Any]:
    """`GET /info`: what is being served and under which limits."""
    s, bundle = config.search, translator.bundle
    return {
        "model": "+".join(Path(p).name for p in bundle.paths),
        "checkpoints": [{"path": p, "sha256": file_sha256(p)} for p in bundle.paths],
        "src_lang": bundle.src_lang, "tgt_lang": bundle.tgt_lang, "arch": bundle.arch,
        "attention": translator.has_attention,  # false: requests may not ask for alignments
        "src_vocab_size": len(bundle.src_vocab.itos), "tgt_vocab_size": len(bundle.tgt_vocab.itos),
        "pipeline": bundle.pipeline.to_dict(),
        "decoding": {"beam": config.limits.max_beam, "lenpen": s.lenpen, "max_len_a": s.max_len_a, "max_len_b": s.max_len_b,
                     "max_src_len": translator.max_src_len, "device": str(translator.device)},
        "batching": {"batch_size": config.batch_size or translator.config.batch_size,
                     "max_tokens": translator.max_tokens, "batch_delay_ms": config.batch_delay_ms},
        "limits": asdict(config.limits),
    }


async def _checked(request: web.Request, check: Callable) -> Any:
    """The request's body, read within the size and time limits and checked by `check`."""
    config: ServeConfig = request.app[STATE]["config"]
    limits = config.limits
    if request.content_type != "application/json":
        raise RequestError(f"the request's Content-Type must be application/json, not "
                           f"{request.content_type or 'none'}", 415)
    if request.content_length is not None and request.content_length > limits.max_body_bytes:
        raise RequestError(f"request body of {request.content_length} bytes (Content-Length) is over the limit of "
                           f"{limits.max_body_bytes}", 413, close=True)
    try:
        body = await asyncio.wait_for(request.read(), config.body_timeout)
    except web.HTTPRequestEntityTooLarge:
        raise RequestError(f"request body over the limit of {limits.max_body_bytes} bytes", 413, close=True) from None
    except asyncio.TimeoutError:
        raise RequestError(f"request body not received within {config.body_timeout:g} s", 408, close=True) from None
    except ConnectionError as err:  # the client went away while sending its body
        raise ClientGone(f"the client went away while sending its request ({err})") from None
    except web.RequestPayloadError as err:  # a body its Content-Encoding cannot decode (not gzip data)
        reason = getattr(err.__cause__, "message", None) or str(err)
        request.content.feed_eof()  # else aiohttp reads the body's rest, raising this again with a traceback
        raise RequestError(f"request body cannot be read: {reason}", close=True) from None
    size = REQUEST_SIZE.get({})
    size["bytes"] = len(body)
    req = check(parse_json_body(body), limits)
    size["lines"] = len(req.lines)
    return req


async def translate_route(request: web.Request) -> web.Response:
    t0 = time.perf_counter()
    req = await _checked(request, check_request)
    if req.alignments and not request.app[STATE]["info"]["attention"]:
        raise RequestError("'alignments' needs attention, and this server's model has none (RNNencdec)")
    results = await request.app[BATCHER].submit(req.lines, req.beam, req.nbest, req.alignments, _gone(request))
    return _json({
        "translations": [translation_json(r, req.alignments, req.nbest) for r in results],
        "model": request.app[STATE]["info"]["model"],
        "took_ms": round((time.perf_counter() - t0) * 1000, 2),
    })


async def onmt_route(request: web.Request) -> web.Response:
    """OpenNMT-py's `/translator/translate`: a list per n-best rank (here one), items in input order."""
    req = await _checked(request, check_onmt_request)
    results = await request.app[BATCHER].submit(req.lines, req.beam, 1, False, _gone(request))
    return _json([[onmt_json(src, r) for src, r in zip(req.srcs, results)]])


async def onmt_models_route(request: web.Request) -> web.Response:
    """OpenNMT-py's `GET /translator/models`: the one model (a request's "id" may name any)."""
    info = request.app[STATE]["info"]
    return _json([{"model_id": 0, "models": [c["path"] for c in info["checkpoints"]], "loaded": True, "timeout": -1,
                   "opt": {"beam_size": info["decoding"]["beam"]}}])


def _gone(request: web.Request) -> Callable[[], bool]:
    """Whether the client of `request` has closed its connection (its queued work is dropped)."""
    return lambda: request.transport is None or request.transport.is_closing()


async def health_route(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return _json({"status": "ok", "model": state["info"]["model"],
                  "uptime_s": round(time.monotonic() - state["started"], 1),
                  "batching": asdict(request.app[BATCHER].stats)})


async def info_route(request: web.Request) -> web.Response:
    return _json(request.app[STATE]["info"])


async def page_route(request: web.Request) -> web.Response:
    return web.Response(text=request.app[STATE]["page"], content_type="text/html", charset="utf-8")


def _json(obj: Any, status: int = 200) -> web.Response:
    """A JSON body on one line, ending in a newline (so that `curl` output ends its line)."""
    return web.json_response(obj, status=status, dumps=lambda o: json.dumps(o, ensure_ascii=False) + "\n")


def _error(status: int, message: str, close: bool = False) -> web.Response:
    response = _json({"error": " ".join(str(message).split())}, status=status)
    if close:  # the rest of the request is not read: the connection cannot carry another one
        response.force_close()
    return response


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address `host` (brackets allowed) is, or None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """Whether listening on `host` answers this machine only."""
    ip = _ip(host)
    return host == "localhost" or (ip is not None and ip.is_loopback)


def _host_name(value: str) -> str:
    """The name of a Host header or an Origin's netloc, without the port: "[::1]:80" -> "::1"."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


@dataclass(frozen=True)
class AllowedHosts:
    """The names a request may give as its Host and as its browser's Origin, built once per server."""

    hosts: frozenset[str]  # Host header names beyond IP literals: localhost, --host, --allow-host
    origins: frozenset[str]  # Origin names beyond the server's own: --allow-host

    @classmethod
    def of(cls, config: ServeConfig) -> AllowedHosts:
        origins = frozenset(h.lower() for h in config.allow_hosts)
        return cls(frozenset({"localhost", config.host.lower().strip("[]")}) | origins, origins)


def check_origin(request: web.Request, allowed: AllowedHosts) -> None:
    """Refuse requests a web page could make through a visitor's browser: Host must be an IP
    literal or an allowed name (a DNS-rebinding page sends its own domain), and a browser's Origin
    must name the same host as Host (the page at /) or an --allow-host name."""
    host = request.headers.get("Host")
    if host is not None:
        name = _host_name(host)
        if not (_ip(name) is not None or name in allowed.hosts):
            raise RequestError(f"Host {host!r} is not this server's (give --allow-host {name} to accept it)", 403)
    origin = request.headers.get("Origin")
    if origin is not None:
        from urllib.parse import urlsplit

        try:
            netloc = urlsplit(origin).netloc
        except ValueError:  # "http://[::1": no site's origin (a browser sends none such)
            netloc = ""
        same = host is not None and netloc.lower() == host.strip().lower()
        if not (same or (netloc and _host_name(netloc) in allowed.origins)):
            raise RequestError(f"cross-origin requests are refused (Origin {origin!r}; give --allow-host to accept "
                               "a site)", 403)


def _middleware(log_line: Callable[[str], None] | None, allowed: AllowedHosts):
    @web.middleware
    async def errors_and_log(request: web.Request, handler) -> web.StreamResponse:
        t0 = time.perf_counter()
        size = {"lines": 0, "bytes": 0}
        REQUEST_SIZE.set(size)
        try:
            check_origin(request, allowed)
            response = await handler(request)
        except RequestError as err:
            response = _error(err.status, str(err), err.close)
        except NmtkitError as err:  # a line the text pipeline refuses (a protected pattern past its time limit)
            response = _error(400, str(err))
        except ClientGone as err:  # nobody reads the answer; the status is for the log line
            response = _error(499, str(err), close=True)
        except web.HTTPException as err:  # aiohttp's own: 404, 405, 413
            response = _error(err.status, err.reason if err.status != 413 else err.text or err.reason)
            if "Allow" in err.headers:  # a 405's methods, which HTTP requires it to name
                response.headers["Allow"] = err.headers["Allow"]
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - the server keeps serving; the client learns why
            response = _error(500, f"internal error: {type(err).__name__}: {err}")
        if log_line is not None:
            ms = (time.perf_counter() - t0) * 1000
            log_line(f"{request.remote} {request.method} {request.path} {response.status} "
                     f"lines={size['lines']} bytes={size['bytes']} {ms:.1f}ms")
        return response

    return errors_and_log


def make_app(translator: Translator, config: ServeConfig,
             log_line: Callable[[str], None] | None = None, thread: DecodeThread | None = None) -> web.Application:
    """The aiohttp application around a loaded Translator; `thread`: the `DecodeThread` it was loaded on."""
    app = web.Application(middlewares=[_middleware(None if config.quiet else log_line, AllowedHosts.of(config))],
                          client_max_size=config.limits.max_body_bytes)

    def translate(lines, beam, nbest, attention):  # a request's lines, as "<request>:N" in warnings
        return translator._translate_buffer(list(enumerate(lines, 1)), replace(config.search, beam=beam, nbest=nbest),
                                            attention, source="<request>")

    info = model_info(translator, config)
    batcher = app[BATCHER] = Batcher(translate, info["batching"]["batch_size"], config.batch_delay_ms / 1000, thread)
    app[STATE] = {"config": config, "info": info,
                  "page": resources.files("nmtkit.serve").joinpath("page.html").read_text(encoding="utf-8"),
                  "started": time.monotonic()}
    app.on_startup.append(lambda app: batcher.start())
    app.on_cleanup.append(lambda app: batcher.stop())  # after in-flight requests are answered (runner.cleanup)
    app.router.add_post("/translate", translate_route, expect_handler=_expect)
    app.router.add_post("/translator/translate", onmt_route, expect_handler=_expect)
    app.router.add_get("/health", health_route, expect_handler=_expect)
    app.router.add_get("/translator/health", health_route, expect_handler=_expect)  # OpenNMT-py's
    app.router.add_get("/translator/models", onmt_models_route, expect_handler=_expect)
    app.router.add_get("/info", info_route, expect_handler=_expect)
    app.router.add_get("/", page_route, expect_handler=_expect)
    return app


async def _expect(request: web.Request) -> web.StreamResponse | None:
    """A request's Expect header, as aiohttp's default answers it (100 Continue to an HTTP/1.1
    "100-continue"), but any other refused with the one-line JSON error, not a text/plain 417."""
    if request.version != HttpVersion11:
        return None
    expect = request.headers.get("Expect", "")
    if expect.lower() != "100-continue":
        return _error(417, f"unknown Expect: {expect} (HTTP/1.1 defines only 100-continue)", close=True)
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0  # the answer's head is still to come
    return None


class _JsonErrorHandler(web.RequestHandler):
    """aiohttp's connection handler, answering what never reaches a route (a malformed request, a
    handler that failed outright) with the one-line JSON error and one log line, instead of a
    text/plain page and a traceback in the log."""

    nmtkit_log_line: Callable[[str], None] | None

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        reason = message or (getattr(exc, "message", None) or str(exc) if exc is not None else "") or \
            HTTPStatus(status).phrase
        reason = " ".join(str(reason).split())[:200]  # the parser quotes the request up to a line break: 64 KB
        if self.nmtkit_log_line is not None:
            self.nmtkit_log_line(f"{request.remote} bad request {status}: {reason}")
        if request.writer.output_size > 0:
            raise ConnectionError("the response was sent already, the error cannot be")
        prefix = "malformed HTTP request: " if status == 400 else ""
        response = _error(status, prefix + reason)
        response.force_close()
        return response

    def data_received(self, data: bytes) -> None:
        """aiohttp drops what arrives once the server is stopping (its private close flags, as in
        aiohttp 3.10.6 to 3.14.5), the rest of a request body in flight too, which would then wait
        out --body-timeout: that rest is read."""
        closing = self._close, self._force_close
        if self._request_in_progress and self.transport is not None:
            self._close = self._force_close = False
        try:
            super().data_received(data)
        finally:
            self._close, self._force_close = self._close or closing[0], self._force_close or closing[1]


class _JsonErrorServer(web.Server):
    nmtkit_log_line: Callable[[str], None] | None = None

    def __call__(self) -> web.RequestHandler:
        """A connection's `_JsonErrorHandler`, made as aiohttp's own from its private `_loop` and `_kwargs`
        (checked with aiohttp 3.10.6 to 3.14.5); a ConfigError, at the start, where a release renamed them."""
        try:
            handler = _JsonErrorHandler(self, loop=self._loop, **self._kwargs)
            _ = handler._close, handler._force_close, handler._request_in_progress  # data_received's
        except AttributeError as err:
            raise ConfigError(f"aiohttp {aiohttp_version} lacks {err.name!r}, which nmtkit serve uses (it works with "
                              "aiohttp 3.10.6 to 3.14: pip install 'aiohttp>=3.10.6,<3.15')") from None
        handler.nmtkit_log_line = self.nmtkit_log_line
        return handler


class ServeRunner(web.AppRunner):
    """An AppRunner whose connections answer protocol errors as `_JsonErrorHandler` does."""

    def __init__(self, app: web.Application, log_line: Callable[[str], None] | None, **kwargs: Any):
        super().__init__(app, **kwargs)
        self._log_line = log_line

    async def setup(self) -> None:
        _JsonErrorServer(None)()  # aiohttp's private names, checked before the app starts
        await super().setup()
        self.server.__class__ = _JsonErrorServer
        self.server.nmtkit_log_line = self._log_line


def make_runner(app: web.Application, config: ServeConfig,
                log_line: Callable[[str], None] | None = None) -> ServeRunner:
    """The runner `serve` starts (tests start it on a port of their own)."""
    # lingering_time: how long a refused body's unread rest is read before the connection closes
    # (aiohttp's 10 s would let a 10 GB Content-Length hold it); keepalive_timeout: --idle-timeout
    return ServeRunner(app, None if config.quiet else log_line, access_log=None, handle_signals=False,
                       shutdown_timeout=config.shutdown_timeout, lingering_time=1.0,
                       keepalive_timeout=config.idle_timeout)


def _end_now(sig: int, announce: Callable[[str], None]) -> None:
    """The second stop signal of a stopping server ends the process here (130, 143, 129): unwinding
    would interrupt aiohttp's shutdown, which reports errors of its own; no file is half written."""
    announce("aborted" if sig == signal.SIGINT else "terminated")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + sig)  # as a shell reports a command the signal stopped


def _accept_failed(announce: Callable[[str], None]) -> Callable[[asyncio.AbstractEventLoop, dict], None]:
    """The loop's error handler: a line a second, not asyncio's traceback, for each accept() that
    found no file descriptor free (`ulimit -n` connections open)."""
    said = [float("-inf")]

    def handle(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        if context.get("message") != "socket.accept() out of system resource":
            return loop.default_exception_handler(context)
        if loop.time() - said[0] >= 1:
            said[0] = loop.time()
            announce(f"warning: new connections wait: {context['exception'].strerror} (see `ulimit -n`)")

    return handle


def server_url(host: str, port: int) -> str:
    """The URL of a server listening on `host` (an IPv6 address goes in brackets, RFC 3986)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve(translator: Translator, config: ServeConfig, announce: Callable[[str], None],
                log_line: Callable[[str], None] | None = None, thread: DecodeThread | None = None) -> None:
    """Serve until SIGTERM, SIGHUP or SIGINT, then stop accepting, finish the requests in flight,
    return; a second signal meanwhile ends the process at once. `thread`: the translator's `DecodeThread`."""
    app = make_app(translator, config, log_line, thread)
    runner = make_runner(app, config, log_line)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_accept_failed(announce))
    stops = signals.taken()  # one ignored at start (nohup) stays ignored
    for sig in stops:
        loop.add_signal_handler(sig, stop.set)
    try:
        try:
            await web.TCPSite(runner, config.host, config.port).start()
        except OSError as err:
            raise OutputError(f"cannot listen on {config.host}:{config.port}: {err.strerror or err}") from None
        host, port = runner.addresses[0][:2]  # the real port when --port 0
        if not is_loopback(config.host):
            announce(f"warning: listening on {config.host}: every machine that can reach this one may use this "
                     "server, which has no authentication (--host 127.0.0.1 keeps it to this machine)")
        announce(f"serving {app[STATE]['info']['model']} on {server_url(host, port)} (Ctrl-C or SIGTERM stops)")
        await stop.wait()
        for sig in stops:  # a second signal ends the process (a slow request may hold the stop)
            loop.add_signal_handler(sig, _end_now, sig, announce)
        announce("stopping: no new requests; finishing those in flight (Ctrl-C again stops at once)")
    finally:
        await runner.cleanup()
        for sig in stops:
            loop.remove_signal_handler(sig)
    announce("stopped")
