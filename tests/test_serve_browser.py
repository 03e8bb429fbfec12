"""The page at `GET /` in a real headless browser (Debian's chromium, driven over the DevTools protocol).

The test types a sentence into the page's text box, clicks Translate, waits for the page's own
script to show the answer, and checks the translation and the attention matrix (one row per target
token, one column per source token, grey levels) against the API's answer for the same sentence.
`make test-browser` installs chromium and runs it.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from devtools.server import ServerProcess
from tests.conftest import make_checkpoint

pytestmark = pytest.mark.browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SENTENCE = "the cat sat on a mat ."

# what the page shows, read back as plain values
READ_PAGE = """JSON.stringify({
  done: document.getElementById('output').dataset.done || null,
  error: document.getElementById('error').textContent,
  translations: [...document.querySelectorAll('.translation')].map(e => e.textContent),
  tables: [...document.querySelectorAll('table.attention')].map(t => ({
    src: [...t.querySelectorAll('thead th.src')].map(e => e.textContent),
    tgt: [...t.querySelectorAll('tbody th.tgt')].map(e => e.textContent),
    cells: [...t.querySelectorAll('tbody tr')].map(r => [...r.querySelectorAll('td.cell')].map(
      c => getComputedStyle(c).backgroundColor)),
  })),
})"""


class DevTools:
    """A minimal DevTools-protocol client over aiohttp's websocket client."""

    def __init__(self, ws):
        self.ws, self.ids, self.events = ws, itertools.count(1), []

    async def call(self, method: str, **params):
        msg_id = next(self.ids)
        await self.ws.send_json({"id": msg_id, "method": method, "params": params})
        while True:
            msg = await asyncio.wait_for(self.ws.receive_json(), 30)
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    async def evaluate(self, expression: str):
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.1)
        raise TimeoutError(expression)

    async def click(self, selector: str) -> None:
        """A real mouse click (pressed + released) at the middle of the element."""
        box = await self.evaluate(f"(() => {{ const r = document.querySelector('{selector}')"
                                  ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            await self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)


def start_chromium(profile: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    for line in proc.stderr:
        found = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
        if found:
            return proc, int(found.group(1))
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("chromium did not open its DevTools port")


async def drive_page(page_url: str, devtools_port: int) -> dict:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{devtools_port}/json/list") as resp:
            targets = await resp.json(content_type=None)
        ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        async with session.ws_connect(ws_url, max_msg_size=0) as ws:
            dt = DevTools(ws)
            await dt.call("Page.enable")
            await dt.call("Page.navigate", url=page_url)
            await dt.wait_for("document.readyState === 'complete' && !!document.getElementById('source')")
            await dt.evaluate("document.getElementById('source').focus()")
            await dt.call("Input.insertText", text=SENTENCE)  # typed into the focused text box
            await dt.click("#go")
            await dt.wait_for("document.getElementById('output').dataset.done === '1' || "
                              "document.getElementById('error').textContent !== ''")
            return json.loads(await dt.evaluate(READ_PAGE))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install chromium; "
                                             "or run `make test-browser`)")
def test_page_translates_typed_text_and_draws_the_attention_matrix(tmp_path):
    ckpt = str(make_checkpoint(tmp_path / "model.pt", seed=3))
    with ServerProcess("-m", ckpt, "--beam", "3", "--max-len-a", "1", "--max-len-b", "3", "--quiet") as server:
        api = server.post("/translate", {"text": [SENTENCE], "alignments": True})["translations"][0]
        with tempfile.TemporaryDirectory() as profile:
            browser, port = start_chromium(profile)
            try:
                page = asyncio.run(drive_page(server.url + "/", port))
            finally:
                browser.kill()
                browser.wait()
        server.stop()
    assert page["error"] == "" and page["done"] == "1"
    assert page["translations"] == [api["text"]]
    (table,) = page["tables"]
    al = api["alignment"]
    assert table["src"] == al["src"] and table["tgt"] == al["tgt"]  # source across, target down
    assert len(table["cells"]) == len(al["attention"]) == len(al["tgt"])
    assert all(len(row) == len(al["src"]) for row in table["cells"])
    for row, weights in zip(table["cells"], al["attention"]):  # grey levels: 0 black, 1 white
        for css, w in zip(row, weights):
            r, g, b = map(int, re.findall(r"\d+", css)[:3])
            assert r == g == b and abs(r - round(255 * w)) <= 1
