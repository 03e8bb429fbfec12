"""`nmtkit serve` in process: routes, limits and refusals, and dynamic batching that changes nothing.

The server runs on 127.0.0.1 (aiohttp's TestServer, a free port) around a tiny random checkpoint;
the expected translations come from `Translator.translate`, the library behind
`nmtkit translate`.
"""
from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

pytest.importorskip("aiohttp")

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from nmtkit.serve import Limits, ServeConfig  # noqa: E402
from nmtkit.serve.app import make_app, server_url  # noqa: E402
from nmtkit.translate.config import SearchConfig  # noqa: E402
from tests.conftest import load_translator, translate_lines  # noqa: E402

LINES = ["the cat sat on a mat .", "", "a dog ran in the park", "the big red house", "cat", "is a small dog ."]
DECODE = dict(precision="fp32", max_len_a=1.0, max_len_b=3.0)
SEARCH = SearchConfig(max_len_a=1.0, max_len_b=3.0)  # the server's search (a request gives beam and n-best)


@pytest.fixture(scope="module")
def translator(ckpt):
    return load_translator(ckpt, batch_size=8, precision="fp32")[0]


def expected(ckpt, lines, beam=4):
    return translate_lines(ckpt, lines, beam=beam, **DECODE)


def serve(translator, body, config: ServeConfig | None = None, logs: list | None = None):
    """Run `body(client)` against a fresh server; returns its result."""
    config = config or ServeConfig(search=SEARCH, limits=Limits(max_beam=4, max_lines=10, max_line_chars=200, max_body_bytes=4096))

    async def main():
        app = make_app(translator, config, log_line=logs.append if logs is not None else None)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            return await body(client)

    return asyncio.run(main())


async def post(client, path, payload, raw: bytes | None = None):
    data = raw if raw is not None else json.dumps(payload).encode()
    resp = await client.post(path, data=data, headers={"Content-Type": "application/json"})
    return resp.status, await resp.text()


def test_translate_route_answers_every_line_in_order_as_nmtkit_translate_would(translator, ckpt):
    async def body(client):
        return await post(client, "/translate", {"text": LINES})

    status, text = serve(translator, body)
    assert status == 200, text
    data = json.loads(text)
    assert [t["text"] for t in data["translations"]] == expected(ckpt, LINES)
    assert data["translations"][1] == {"text": "", "score": 0.0, "alignment": None}
    assert data["model"] == "model.pt" and data["took_ms"] >= 0
    assert all(t["score"] < 0 for i, t in enumerate(data["translations"]) if i != 1)


def test_concurrent_requests_share_batches_and_each_gets_what_it_gets_alone(translator, ckpt):
    requests = [LINES[i % len(LINES): i % len(LINES) + 1 + i % 3] for i in range(12)]
    config = ServeConfig(batch_size=16, batch_delay_ms=100, limits=Limits(max_beam=4), search=SEARCH)

    async def body(client):
        alone = [await post(client, "/translate", {"text": r, "nbest": 2}) for r in requests]
        before = dict((await (await client.get("/health")).json())["batching"])
        together = await asyncio.gather(*(post(client, "/translate", {"text": r, "nbest": 2}) for r in requests))
        after = (await (await client.get("/health")).json())["batching"]
        return alone, together, before, after

    alone, together, before, after = serve(translator, body, config)
    assert before["batches"] == len(requests)  # one decoder call per request when they come one by one
    assert after["batches"] - before["batches"] < len(requests) / 2  # concurrent ones were batched
    assert after["largest"] > max(len(r) for r in requests)
    for r, (s1, t1), (s2, t2) in zip(requests, alone, together):
        assert s1 == s2 == 200
        a, b = json.loads(t1)["translations"], json.loads(t2)["translations"]
        assert [x["text"] for x in a] == [x["text"] for x in b] == expected(ckpt, r)
        assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-5)
        assert [[n["text"] for n in x["nbest"]] for x in a] == [[n["text"] for n in x["nbest"]] for x in b]


def test_per_request_beam_and_nbest_narrow_the_servers_and_mixed_requests_stay_correct(translator, ckpt):
    async def body(client):
        return await asyncio.gather(
            post(client, "/translate", {"text": LINES, "beam": 1}),
            post(client, "/translate", {"text": LINES, "beam": 3, "nbest": 3}),
            post(client, "/translate", {"text": LINES}),
        )

    (s1, greedy), (s2, three), (s3, default) = serve(translator, body)
    assert s1 == s2 == s3 == 200
    assert [t["text"] for t in json.loads(greedy)["translations"]] == expected(ckpt, LINES, beam=1)
    assert [t["text"] for t in json.loads(three)["translations"]] == expected(ckpt, LINES, beam=3)
    assert [t["text"] for t in json.loads(default)["translations"]] == expected(ckpt, LINES, beam=4)
    for t in json.loads(three)["translations"]:
        if t["text"]:
            assert len(t["nbest"]) == 3 and t["nbest"][0]["text"] == t["text"]
            assert [n["score"] for n in t["nbest"]] == sorted((n["score"] for n in t["nbest"]), reverse=True)


def test_an_empty_line_has_one_empty_nbest_entry_as_nmtkit_translate_writes(translator):
    """A client reading nbest[0] finds the line's top translation, an empty line's included."""
    async def body(client):
        return await post(client, "/translate", {"text": ["", "a cat"], "nbest": 2})

    status, text = serve(translator, body)
    assert status == 200, text
    empty, other = json.loads(text)["translations"]
    assert empty["nbest"] == [{"text": "", "score": 0.0, "log_prob": 0.0}]
    assert (empty["nbest"][0]["text"], empty["nbest"][0]["score"]) == (empty["text"], empty["score"])
    assert other["nbest"][0]["text"] == other["text"]


def test_a_line_over_max_src_len_is_marked_truncated_on_both_routes_and_only_it(ckpt):
    """The client learns that a translation covers only the first --max-src-len source tokens
    (the server's stderr warning never reaches it); a line of exactly that many is whole."""
    short = load_translator(ckpt, max_src_len=3, precision="fp32")[0]
    lines = ["the cat sat on a mat .", "a dog ran", "cat", ""]

    async def body(client):
        return (await post(client, "/translate", {"text": lines}),
                await post(client, "/translator/translate", [{"src": line} for line in lines]))

    (s1, native), (s2, onmt) = serve(short, body)
    assert s1 == s2 == 200, (native, onmt)
    items, (onmt_items,) = json.loads(native)["translations"], json.loads(onmt)
    assert [t.get("truncated") for t in items] == [True, None, None, None]
    assert [t.get("truncated") for t in onmt_items] == [True, None, None, None]
    assert items[0]["text"] == onmt_items[0]["tgt"] == short.translate("the cat sat", beam=4, max_len_a=1.0,
                                                                        max_len_b=3.0)
    assert set(onmt_items[1]) == {"src", "tgt", "n_best", "pred_score"}


def test_alignments_give_an_attention_row_per_target_token_over_the_source_tokens(translator):
    async def body(client):
        return await post(client, "/translate", {"text": LINES, "alignments": True})

    status, text = serve(translator, body)
    assert status == 200
    for line, t in zip(LINES, json.loads(text)["translations"]):
        al = t["alignment"]
        if not line:
            assert al == {"src": [], "tgt": [], "attention": [], "hard": ""}
            continue
        assert al["src"][: len(line.split())] == line.split()
        assert len(al["attention"]) == len(al["tgt"]) and al["tgt"][-1] == "</s>"
        assert all(len(row) == len(al["src"]) for row in al["attention"])
        assert all(sum(row) == pytest.approx(1.0, abs=2e-3) for row in al["attention"])
        assert len(al["hard"].split()) == len(al["tgt"]) - 1


def test_alignments_from_a_model_without_attention_are_refused_with_a_400(tmp_path):
    """RNNencdec's all-zero weights were sent as alignments (every word on the first source word)."""
    from tests.conftest import make_checkpoint

    encdec = load_translator(make_checkpoint(tmp_path / "c.pt", arch="rnnencdec"), precision="fp32")[0]

    async def body(client):
        info = await (await client.get("/info")).json()
        return info, [await post(client, "/translate", {"text": LINES[:2], "alignments": a}) for a in (True, False)]

    info, ((refused, text), (status, _)) = serve(encdec, body)
    assert refused == 400 and "needs attention" in json.loads(text)["error"] and status == 200
    assert info["attention"] is False  # what the page at / reads before it asks for alignments


def test_opennmt_route_takes_and_gives_opennmt_shapes(translator, ckpt):
    async def body(client):
        return await post(client, "/translator/translate", [{"src": line, "id": 100} for line in LINES])

    status, text = serve(translator, body)
    assert status == 200
    (rank1,) = json.loads(text)
    assert [r["src"] for r in rank1] == LINES
    assert [r["tgt"] for r in rank1] == expected(ckpt, LINES)
    assert all(r["n_best"] == 1 and isinstance(r["pred_score"], float) for r in rank1)


def test_opennmt_route_puts_each_src_outer_whitespace_around_its_tgt_as_opennmt_py_does(translator, ckpt):
    """OpenNMT-py translates a src stripped and answers its leading and trailing whitespace around the
    tgt: a client that sends lines read with their newline, or a CAT tool's spaced segments, get them back."""
    srcs = ["  the cat sat \n", "\tcat", "   "]

    async def body(client):
        return await post(client, "/translator/translate", [{"src": src, "id": 100} for src in srcs])

    status, text = serve(translator, body)
    assert status == 200, text
    (rank1,) = json.loads(text)
    cat_sat, cat = expected(ckpt, ["the cat sat", "cat"])
    assert [r["tgt"] for r in rank1] == ["  " + cat_sat + " \n", "\t" + cat, "      "]  # OpenNMT-py 3.5.1's
    assert [r["src"] for r in rank1] == srcs


def test_opennmt_health_and_models_routes_answer_opennmt_py_clients(translator):
    """A client of OpenNMT-py's server polls /translator/health and takes a model's id from /translator/models."""
    async def body(client):
        health, models = await client.get("/translator/health"), await client.get("/translator/models")
        return health.status, await health.json(), models.status, await models.json()

    health_status, health, models_status, models = serve(translator, body)
    assert (health_status, models_status) == (200, 200), (health, models)
    assert health["status"] == "ok"
    assert [(m["model_id"], m["models"], m["loaded"]) for m in models] == [(0, list(translator.bundle.paths), True)]


def test_a_request_body_with_a_utf8_bom_is_read_as_without_it_as_opennmt_py_does(translator, ckpt):
    """A leading byte order mark is dropped, as nmtkit's readers drop it from a file and OpenNMT-py's
    server (Flask) from a request; one elsewhere is still malformed JSON."""
    async def body(client):
        return (await post(client, "/translator/translate", None, raw=b'\xef\xbb\xbf[{"src": "cat", "id": 100}]'),
                await post(client, "/translate", None, raw=b'{"text": \xef\xbb\xbf["cat"]}'))

    (status, text), (inner, _) = serve(translator, body)
    assert status == 200, text
    assert json.loads(text)[0][0]["tgt"] == expected(ckpt, ["cat"])[0] and inner == 400


def test_health_and_info_describe_the_model(translator, ckpt):
    async def body(client):
        return await (await client.get("/health")).json(), await (await client.get("/info")).json()

    health, info = serve(translator, body)
    assert health["status"] == "ok" and health["model"] == "model.pt"
    assert (info["src_lang"], info["tgt_lang"], info["arch"]) == ("en", "fr", "rnnsearch")
    assert info["src_vocab_size"] == len(translator.bundle.src_vocab.itos)
    assert info["pipeline"]["src_lang"] == "en"
    with open(ckpt, "rb") as f:
        assert info["checkpoints"] == [{"path": ckpt, "sha256": hashlib.sha256(f.read()).hexdigest()}]
    assert info["decoding"]["beam"] == 4 and info["limits"]["max_lines"] == 10



def test_info_reports_the_servers_own_batch_size_over_the_translators(translator):
    config = ServeConfig(batch_size=3, search=SEARCH, limits=Limits(max_beam=4))

    async def body(client):
        return await (await client.get("/info")).json()

    assert serve(translator, body, config)["batching"]["batch_size"] == 3 != translator.config.batch_size


def test_a_request_exactly_at_every_limit_is_served(translator, ckpt):
    """max_lines, max_line_chars and max_body_bytes are the most a request may have, not one over."""
    lines = ["cat"] * 9 + ["a " * 100]  # 10 lines, the last of 200 characters
    raw = json.dumps({"text": lines}).encode()
    raw = raw[:-1] + b" " * (4096 - len(raw)) + b"}"  # JSON whitespace up to 4096 bytes

    async def body(client):
        return await post(client, "/translate", None, raw=raw)

    status, text = serve(translator, body)
    assert status == 200, text
    assert [t["text"] for t in json.loads(text)["translations"]] == expected(ckpt, lines)


BAD = [
    ("malformed JSON", "/translate", b'{"text": ["a cat"', 400, "malformed JSON"),
    ("not an object", "/translate", b'["a cat"]', 400, "JSON object"),
    ("text not a list", "/translate", b'{"text": "a cat"}', 400, "list of strings"),
    ("a line not a string", "/translate", b'{"text": ["a", 3]}', 400, "list of strings"),
    ("beam as a string", "/translate", b'{"text": ["a"], "beam": "2"}', 400, "'beam' must be an integer"),
    ("alignments not a bool", "/translate", b'{"text": ["a"], "alignments": 1}', 400, "true or false"),
    ("unknown field", "/translate", b'{"text": ["a"], "beem": 2}', 400, "unknown field(s) beem"),
    ("missing text", "/translate", b'{"beam": 2}', 400, "missing field 'text'"),
    ("invalid UTF-8", "/translate", b'{"text": ["caf\xe9"]}', 400, "not valid UTF-8"),
    ("too many lines", "/translate", json.dumps({"text": ["a"] * 11}).encode(), 413, "over the limit of 10"),
    ("over-long line", "/translate", json.dumps({"text": ["a " * 101]}).encode(), 413, "over the limit of 200"),
    ("line break in a line", "/translate", b'{"text": ["a\\nb"]}', 400, "line break"),
    ("NUL in a line", "/translate", b'{"text": ["a", "a\\u0000b"]}', 400,
     "'text'[1] holds binary data (a NUL character at character 2)"),
    ("opennmt NUL in a src", "/translator/translate", b'[{"src": "\\u0000"}]', 400, "'src'[0] holds binary data"),
    ("over-large body", "/translate", json.dumps({"text": ["a"], "x": "y" * 5000}).encode(), 413, "4096"),
    ("beam above the limit", "/translate", b'{"text": ["a"], "beam": 5}', 400, "above the server's --beam (4)"),
    ("beam zero", "/translate", b'{"text": ["a"], "beam": 0}', 400, "'beam' must be >= 1"),
    ("nbest above beam", "/translate", b'{"text": ["a"], "beam": 2, "nbest": 3}', 400, "above the beam"),
    ("opennmt not a list", "/translator/translate", b'{"src": "a"}', 400, "JSON list"),
    ("opennmt unknown field", "/translator/translate", b'[{"src": "a", "tgt": "b"}]', 400, "unknown field(s) tgt"),
    ("opennmt src not a string", "/translator/translate", b'[{"src": ["a"]}]', 400, "'src' must be a string"),
    ("unknown route", "/translate/now", b"{}", 404, "Not Found"),
]


@pytest.mark.parametrize("path,raw,status,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_gets_a_4xx_with_a_one_line_json_error_and_the_server_keeps_serving(
        translator, ckpt, path, raw, status, message):
    async def body(client):
        bad = await post(client, path, None, raw=raw)
        good = await post(client, "/translate", {"text": ["a cat"]})
        return bad, good

    (got_status, text), (good_status, good) = serve(translator, body)
    assert got_status == status, text
    assert "\n" not in text.strip()
    error = json.loads(text)
    assert list(error) == ["error"] and message in error["error"]
    assert good_status == 200 and json.loads(good)["translations"][0]["text"] == expected(ckpt, ["a cat"])[0]


def test_wrong_method_is_a_json_405_with_the_allow_header_http_requires(translator):
    async def body(client):
        resp = await client.get("/translate")
        return resp.status, await resp.json(), resp.headers.get("Allow")

    assert serve(translator, body) == (405, {"error": "Method Not Allowed"}, "POST")


def test_each_request_is_logged_in_one_line_with_its_size_and_latency_unless_quiet(translator):
    async def body(client):
        await post(client, "/translate", {"text": LINES[:3]})
        await post(client, "/translate", {"text": 3})

    logs: list[str] = []
    serve(translator, body, logs=logs)
    assert len(logs) == 2
    assert "POST /translate 200 lines=3 bytes=" in logs[0] and logs[0].endswith("ms")
    assert "POST /translate 400" in logs[1]
    quiet: list[str] = []
    serve(translator, body, ServeConfig(quiet=True, search=SEARCH), logs=quiet)
    assert quiet == []


def test_a_requests_beam_with_a_sampling_server_is_warned_ignored_in_the_log(ckpt, caplog):
    """A server searching with sampling draws one translation per line: a request's beam 3 was
    dropped without a word, where `nmtkit translate --sampling --beam 3` warns."""
    config = ServeConfig(search=SearchConfig(sampling=True, max_len_a=1.0, max_len_b=3.0), limits=Limits(max_beam=4))

    async def body(client):
        return await post(client, "/translate", {"text": ["the cat"], "beam": 3})

    assert serve(load_translator(ckpt, precision="fp32")[0], body, config)[0] == 200
    assert "--beam 3 is ignored with --sampling, which draws one translation per line" in caplog.messages


def test_the_page_is_one_self_contained_html_file(translator):
    async def body(client):
        resp = await client.get("/")
        return resp.status, resp.content_type, await resp.text()

    status, ctype, html = serve(translator, body)
    assert status == 200 and ctype == "text/html"
    assert '<textarea id="source"' in html and "attentionTable" in html
    assert "http://" not in html and "https://" not in html and "<link" not in html and "src=" not in html


def test_a_decoder_failure_is_a_json_500_and_the_server_keeps_serving(translator, ckpt, monkeypatch):
    real = translator._translate_buffer

    def failing(lines, *args, **kwargs):
        if any(text == "boom" for _, text in lines):
            raise RuntimeError("out of memory")
        return real(lines, *args, **kwargs)

    monkeypatch.setattr(translator, "_translate_buffer", failing)

    async def body(client):
        return await post(client, "/translate", {"text": ["boom"]}), await post(client, "/translate", {"text": ["cat"]})

    (s1, t1), (s2, t2) = serve(translator, body)
    assert s1 == 500 and json.loads(t1) == {"error": "internal error: RuntimeError: out of memory"}
    assert s2 == 200 and json.loads(t2)["translations"][0]["text"] == expected(ckpt, ["cat"])[0]


def test_the_accepted_host_names_are_built_once_per_server_not_per_request(translator, monkeypatch):
    from nmtkit.serve import app as app_module

    built = []
    original = app_module.AllowedHosts.of

    def counted(config):
        built.append(config.host)
        return original(config)

    monkeypatch.setattr(app_module.AllowedHosts, "of", counted)

    async def body(client):
        return [(await client.get("/health", headers={"Host": name})).status
                for name in ("127.0.0.1", "localhost", "mt.example.org", "evil.example")]

    config = ServeConfig(host="[::1]", allow_hosts=("MT.example.org",))
    assert serve(translator, body, config) == [200, 200, 200, 403]
    assert built == ["[::1]"]
    allowed = original(config)
    assert allowed.hosts == {"localhost", "::1", "mt.example.org"} and allowed.origins == {"mt.example.org"}


def test_the_announced_url_brackets_an_ipv6_address():
    assert server_url("127.0.0.1", 8080) == "http://127.0.0.1:8080"
    assert server_url("::1", 8080) == "http://[::1]:8080"
    assert server_url("::", 80) == "http://[::]:80"
