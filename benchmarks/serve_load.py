"""Load on `nmtkit serve`: throughput and latency with 1, 8 and 32 concurrent clients.

Starts the server on 127.0.0.1 (a free port), then for each client count runs that many clients
at once, each sending --requests requests of 1-5 Tatoeba dev sentences (drawn with a fixed seed)
one after the other. Reports sentences/s, p50 and p99 request latency, and checks that every
response equals `nmtkit translate` on the same lines (nothing lost, reordered or changed by the
batching). The reference is `nmtkit translate` run once on all the distinct sentences as one file;
its sentences/s (end to end, and without its start-up, measured on an empty input) is what the
server is compared with.

Targets: 32 clients >= 3x the 1-client throughput; >= 0.8x `nmtkit translate`'s sentences/s;
p99 < 1 s (the `small` model on 2 cores).

    python benchmarks/serve_load.py --model RUN/checkpoint_best.pt
    python benchmarks/serve_load.py            # trains a small model for --train-minutes first

Without --model it preprocesses Tatoeba (joint BPE 10k) and trains the `small` preset for
--train-minutes into --work (reused when it is there). DATA= points at the corpora
(default ../shared/data).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = Path(os.environ.get("DATA", REPO.parent / "shared" / "data"))

from nmtkit.devtools.server import ServerProcess  # noqa: E402 - the one launcher of a server subprocess


def nmtkit(*args: str, threads: int, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "nmtkit", *args], env=env, check=True, **kw)


def train_small_model(work: Path, minutes: float, threads: int) -> Path:
    """Preprocess Tatoeba and train the small preset briefly (as examples/tatoeba-en-fr does)."""
    ckpt = work / "run" / "checkpoint_best.pt"
    if ckpt.exists():
        return ckpt
    d = DATA / "tatoeba-eng-fra"
    print(f"training a small model for {minutes} minutes in {work} ...", file=sys.stderr)
    nmtkit("preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(d / "train"), "--valid",
           str(d / "dev"), "--bpe", "10000", "--max-len", "50", "--dest", str(work / "data"), "--force",
           threads=threads)
    nmtkit("train", "--data", str(work / "data"), "--save-dir", str(work / "run"), "--preset", "small",
           "--optimizer", "adam", "--lr", "0.001", "--batch-size", "64", "--threads", str(threads),
           "--max-time", f"{minutes}m", "--valid-every", "1000", "--valid-bleu-samples", "100", "--force",
           threads=threads)
    return ckpt


def make_requests(sentences: list[str], clients: int, requests: int, seed: int) -> list[list[list[str]]]:
    """clients x requests lists of 1-5 sentences drawn from `sentences`."""
    rng = random.Random(seed * 1000 + clients)
    return [[rng.sample(sentences, rng.randint(1, 5)) for _ in range(requests)] for _ in range(clients)]


def reference(model: str, lines: list[str], args) -> tuple[dict[str, str], float, float]:
    """`nmtkit translate` on `lines` as one file: (line -> translation, wall seconds, start-up seconds)."""
    opts = ["translate", "-m", model, "--beam", str(args.beam), "--threads", str(args.threads), "--quiet",
            "--batch-size", str(args.batch_size)]
    t0 = time.perf_counter()
    nmtkit(*opts, threads=args.threads, input="", capture_output=True, text=True)
    startup = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = nmtkit(*opts, threads=args.threads, input="\n".join(lines) + "\n", capture_output=True, text=True)
    wall = time.perf_counter() - t0
    hyps = out.stdout.split("\n")[:-1]
    assert len(hyps) == len(lines)
    return dict(zip(lines, hyps)), wall, startup


async def run_clients(url: str, plan: list[list[list[str]]], expected: dict[str, str]) -> tuple[float, list[float], int]:
    """Every client sends its requests in turn; (wall seconds, latencies, wrong responses)."""
    import aiohttp

    latencies: list[float] = []
    wrong = 0

    async def client(session, reqs):
        nonlocal wrong
        for lines in reqs:
            t0 = time.perf_counter()
            async with session.post(url + "/translate", json={"text": lines}) as resp:
                data = await resp.json()
            latencies.append(time.perf_counter() - t0)
            got = [t["text"] for t in data.get("translations", [])]
            wrong += got != [expected[line] for line in lines]

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(session, reqs) for reqs in plan))
        return time.perf_counter() - t0, latencies, wrong


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint to serve (default: train a small one)")
    ap.add_argument("--work", default="/tmp/nmtkit-serve-bench", help="where a trained model goes")
    ap.add_argument("--train-minutes", type=float, default=6)
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--requests", type=int, default=100, help="requests per client")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--batch-delay-ms", type=float, default=5)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    sentences = [s for s in (DATA / "tatoeba-eng-fra" / "dev.en").read_text(encoding="utf-8").splitlines() if s]
    model = args.model or str(train_small_model(Path(args.work), args.train_minutes, args.threads))
    clients = [int(c) for c in args.clients.split(",")]
    plans = {c: make_requests(sentences, c, args.requests, args.seed) for c in clients}
    used = sorted({line for plan in plans.values() for reqs in plan for lines in reqs for line in lines})
    expected, ref_wall, startup = reference(model, used, args)
    ref_rate, ref_rate_warm = len(used) / ref_wall, len(used) / max(1e-9, ref_wall - startup)
    print(f"model {model}, beam {args.beam}, {args.threads} threads, batch {args.batch_size}, "
          f"delay {args.batch_delay_ms} ms")
    print(f"nmtkit translate, {len(used)} sentences as one file: {ref_wall:.1f} s, {ref_rate:.1f} sent/s end to end, "
          f"{ref_rate_warm:.1f} sent/s without its {startup:.1f} s start-up")
    rates = {}
    with ServerProcess("-m", model, "--beam", str(args.beam), "--threads", str(args.threads), "--quiet",
                       "--batch-size", str(args.batch_size), "--batch-delay-ms", str(args.batch_delay_ms),
                       threads=args.threads) as server:
        for c in clients:
            wall, lat, wrong = asyncio.run(run_clients(server.url, plans[c], expected))
            n = sum(len(lines) for reqs in plans[c] for lines in reqs)
            rates[c] = n / wall
            print(f"{c:3d} clients: {len(lat)} requests, {n} sentences in {wall:.1f} s = {rates[c]:.1f} sent/s; "
                  f"p50 {1000 * percentile(lat, 50):.0f} ms, p99 {1000 * percentile(lat, 99):.0f} ms; "
                  f"{wrong} responses differ from nmtkit translate")
        status, _ = server.stop()
    top = max(clients)
    print(f"{top} clients / 1 client: {rates[top] / rates[min(clients)]:.2f}x (target >= 3); "
          f"{top} clients / nmtkit translate: {rates[top] / ref_rate:.2f}x end to end, "
          f"{rates[top] / ref_rate_warm:.2f}x without its start-up (target >= 0.8); server exit status {status}")


if __name__ == "__main__":
    main()
