"""What `nmtkit serve` accepts: its limits and the checking of request bodies (no torch, no aiohttp).

Every request body is checked here before any work is queued. A bad request raises
`RequestError` with the HTTP status to answer (400, or 413 for sizes) and a one-line message;
the routes turn it into `{"error": message}`. Per-request options may only narrow the server's
own settings: a request's beam is at most the server's `--beam`, and its n-best at most its beam.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from nmtkit.options import check_fields, option

NATIVE_FIELDS = {"text", "beam", "nbest", "alignments"}
ONMT_FIELDS = {"src", "id"}  # OpenNMT-py's REST server: [{"src": "...", "id": 100}, ...]


@dataclass(frozen=True)
class Limits:
    """Sizes a request may have; the server refuses anything larger with a 4xx. Each field is an
    option of `nmtkit serve`."""

    max_lines: int = option(100, min=1, help="Most lines in one request.")
    max_line_chars: int = option(1000, min=1, help="Most characters in one line of a request.")
    max_body_bytes: int = option(1 << 20, min=1, help="Largest request body.")
    max_beam: int = option(5, min=1, names=("--beam", "-k"),
                           help="Beam width: the default and the most a request may ask for.")

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class TranslateRequest:
    """One checked request: its lines and decoding options (already within the limits)."""

    lines: tuple[str, ...]
    beam: int
    nbest: int = 1
    alignments: bool = False


class RequestError(Exception):
    """A request the server refuses: `status` is the HTTP status, str(self) the one-line reason."""

    def __init__(self, message: str, status: int = 400, close: bool = False):
        super().__init__(" ".join(message.split()))  # one line, whatever the cause said
        self.status = status
        self.close = close  # the body was not read: close the connection after answering


def parse_json_body(body: bytes, limits: Limits) -> Any:
    """The JSON value of a request body: size checked, strict UTF-8, well-formed JSON."""
    if len(body) > limits.max_body_bytes:
        raise RequestError(f"request body of {len(body)} bytes is over the limit of {limits.max_body_bytes}", 413)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(f"request body is not valid UTF-8 (byte {err.start})") from None
    try:
        return json.loads(text)
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


def check_lines(lines: Any, field: str, limits: Limits) -> tuple[str, ...]:
    """A list of strings within the line-count and line-length limits."""
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise RequestError(f"'{field}' must be a list of strings")
    if len(lines) > limits.max_lines:
        raise RequestError(f"{len(lines)} lines in one request, over the limit of {limits.max_lines}", 413)
    for i, line in enumerate(lines):
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as err:  # JSON's \ud800 escapes decode to lone surrogates
            raise RequestError(f"'{field}'[{i}] holds a lone surrogate (\\u{ord(line[err.start]):04x} at character "
                               f"{err.start}), which is no Unicode text") from None
        if "\n" in line or "\r" in line:
            raise RequestError(f"'{field}'[{i}] holds a line break: send one sentence per list item")
        nul = line.find("\0")
        if nul >= 0:  # binary data, which `nmtkit translate` refuses in its input too
            raise RequestError(f"'{field}'[{i}] holds binary data (a NUL character at character {nul}); expected text")
        if len(line) > limits.max_line_chars:
            raise RequestError(f"'{field}'[{i}] has {len(line)} characters, over the limit of "
                               f"{limits.max_line_chars}", 413)
    return tuple(lines)


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
    lines = check_lines([item["src"] for item in obj], "src", limits)
    return TranslateRequest(lines, limits.max_beam, 1, False)
