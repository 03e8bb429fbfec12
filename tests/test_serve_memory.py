"""`nmtkit serve` does not grow: over 5,000 requests of varied lengths from concurrent clients
(batches of every size and width), the server's RSS after the warm-up stays within 10%.

fp32, int8 and bf16 autocast (the default on CPUs with native BF16) all hold; on a tiny model, RSS
after the warm-up and after each later 1,000 requests: fp32 258 / 260 MB, int8 266 / 264-266 MB,
bf16 286 / 290-300 MB. bf16 used to grow (263 -> 1,096 MB over the warm-up, 1,225 MB by the end):
oneDNN and ideep each kept a cached computation per batch shape, until the CLI capped their
caches (nmtkit.devices.limit_cpu_caches)."""
from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from devtools.server import ServerProcess
from tests.conftest import SRC_WORDS, make_checkpoint

REQUESTS, WARM_UP, CLIENTS = 5000, 1000, 16


def rss_mb(pid: int) -> float:
    """A live process's resident set size now (Linux VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def send(url: str, requests: list[list[str]], clients: int) -> int:
    """Send the requests from `clients` concurrent clients; the number answered with 200."""
    import aiohttp

    queue = list(reversed(requests))
    ok = 0

    async def client(session):
        nonlocal ok
        while queue:
            async with session.post(url + "/translate", json={"text": queue.pop()}) as resp:
                await resp.read()
                ok += resp.status == 200

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return ok


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "int8", "bf16"])
def test_server_rss_stays_flat_over_5000_requests(tmp_path, precision):
    pytest.importorskip("aiohttp")
    ckpt = make_checkpoint(tmp_path / "model.pt", seed=5)
    rng = random.Random(0)
    requests = [[" ".join(rng.choices(SRC_WORDS, k=rng.randint(1, 40))) for _ in range(rng.randint(1, 4))]
                for _ in range(REQUESTS)]
    samples = []
    with ServerProcess("-m", str(ckpt), "--beam", "4", "--max-len-b", "5", "--batch-delay-ms", "2",
                       "--precision", precision, "--quiet") as server:
        assert asyncio.run(send(server.url, requests[:WARM_UP], CLIENTS)) == WARM_UP
        warm = rss_mb(server.proc.pid)
        for start in range(WARM_UP, REQUESTS, 1000):
            chunk = requests[start:start + 1000]
            assert asyncio.run(send(server.url, chunk, CLIENTS)) == len(chunk)
            samples.append(rss_mb(server.proc.pid))
        status, stderr = server.stop()
    assert status == 0, stderr
    assert max(samples) <= 1.10 * warm, f"RSS after warm-up {warm:.0f} MB, then {[round(s) for s in samples]} MB"
