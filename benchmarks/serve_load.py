"""Load on `nmtkit serve`: throughput, latency and memory with 1, 8 and 64 concurrent clients.

Starts the server (devtools' ServerProcess) on 127.0.0.1 and a free port, then for each
client count runs that many clients at once, each sending --requests requests of
--sentences-per-request sentences of --src (default: Tatoeba's English dev set), drawn with a
fixed seed, one after the other.
Reports, per client count: sentences/s, p50 and p99 request latency, the server's peak RSS so far
(VmHWM), and the speedup of cross-request batching: the same rate against the first
--sequential requests of the same plan sent one at a time (one client, nothing to batch with).
Every response is compared with `nmtkit translate` on the same lines ("differ": with the
shortlist or bf16, a sentence's translation may depend on the sentences batched with it, so
only --shortlist off with --precision int8 or fp32 should give 0). The reference is `nmtkit translate` run once on all the distinct
sentences as one file; its sentences/s (end to end, and without its start-up, measured on an
empty input) is what the server is compared with.

Target: at 64 clients of one sentence each, >= 0.8x `nmtkit translate`'s sentences/s and
p99 < 1 s (the `small` model on 2 cores). On a shared machine only the ratios measured in one
run mean much.

    python benchmarks/serve_load.py --model RUN/checkpoint_best.pt
    python benchmarks/serve_load.py            # trains a small model for --train-minutes first

Without --model it preprocesses Tatoeba (joint BPE 10k) and trains the `small` preset for
--train-minutes into --work (reused when it is there; benchmarks/tatoeba_model.py). DATA= points
at the corpora (default ../shared/data).
"""
from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tatoeba_model import REPO, TATOEBA, nmtkit, train_small_model  # noqa: E402 - the benchmarks' one model

sys.path.insert(0, str(REPO))
from devtools.server import ServerProcess  # noqa: E402 - the one launcher of a server subprocess


def peak_rss_mb(pid: int) -> float:
    """A live process's peak resident set size so far (Linux VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def make_requests(sentences: list[str], clients: int, requests: int, per_request: tuple[int, int],
                  seed: int) -> list[list[list[str]]]:
    """clients x requests lists of per_request[0]..per_request[1] sentences drawn from `sentences`."""
    rng = random.Random(seed * 1000 + clients)
    return [[rng.sample(sentences, rng.randint(*per_request)) for _ in range(requests)] for _ in range(clients)]


def reference(model: str, lines: list[str], args) -> tuple[dict[str, str], float, float]:
    """`nmtkit translate` on `lines` as one file: (line -> translation, wall seconds, start-up seconds)."""
    opts = ["translate", "-m", model, "--beam", str(args.beam), "--threads", str(args.threads), "--quiet",
            "--batch-size", str(args.batch_size), "--precision", args.precision]
    t0 = time.perf_counter()
    nmtkit(*opts, threads=args.threads, input="", capture_output=True, text=True)
    startup = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = nmtkit(*opts, threads=args.threads, input="\n".join(lines) + "\n", capture_output=True, text=True)
    wall = time.perf_counter() - t0
    hyps = out.stdout.split("\n")[:-1]
    assert len(hyps) == len(lines)
    return dict(zip(lines, hyps)), wall, startup


async def run_clients(url: str, plan: list[list[list[str]]], expected: dict[str, str], check: bool = True
                      ) -> tuple[float, list[float], int]:
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
            wrong += check and got != [expected[line] for line in lines]

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
    ap.add_argument("--train-minutes", type=float, default=5)
    ap.add_argument("--src", default=str(TATOEBA / "dev.en"), help="sentences to draw from [Tatoeba en-fr dev.en]")
    ap.add_argument("--clients", default="1,8,64")
    ap.add_argument("--requests", type=int, default=40, help="requests per client")
    ap.add_argument("--sentences-per-request", default="1", metavar="N or A-B",
                    help="sentences in each request: N, or drawn from A..B")
    ap.add_argument("--sequential", type=int, default=100,
                    help="requests of each plan sent one at a time for the batching speedup")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--batch-delay-ms", type=float, default=5)
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    lo, _, hi = args.sentences_per_request.partition("-")
    per_request = (int(lo), int(hi or lo))
    sentences = [s for s in Path(args.src).read_text(encoding="utf-8").splitlines() if s]
    model = args.model or str(train_small_model(Path(args.work), args.train_minutes, args.threads))
    clients = [int(c) for c in args.clients.split(",")]
    plans = {c: make_requests(sentences, c, args.requests, per_request, args.seed) for c in clients}
    used = sorted({line for plan in plans.values() for reqs in plan for lines in reqs for line in lines})
    expected, ref_wall, startup = reference(model, used, args)
    ref_rate, ref_rate_warm = len(used) / ref_wall, len(used) / max(1e-9, ref_wall - startup)
    print(f"model {model}, beam {args.beam}, {args.threads} threads, batch {args.batch_size}, "
          f"delay {args.batch_delay_ms} ms, precision {args.precision}, {args.sentences_per_request} sentence(s) "
          f"a request, {args.requests} requests a client")
    print(f"nmtkit translate, {len(used)} sentences as one file: {ref_wall:.1f} s, {ref_rate:.1f} sent/s end to end, "
          f"{ref_rate_warm:.1f} sent/s without its {startup:.1f} s start-up")
    print("| clients | requests | sent/s | p50 ms | p99 ms | mean batch | server peak RSS MB | one at a time sent/s | "
          "batching speedup | x translate (warm) | differ from translate |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rates = {}
    with ServerProcess("-m", model, "--beam", str(args.beam), "--threads", str(args.threads), "--quiet",
                       "--batch-size", str(args.batch_size), "--batch-delay-ms", str(args.batch_delay_ms),
                       "--precision", args.precision, threads=args.threads) as server:
        asyncio.run(run_clients(server.url, [[[sentences[0]]] * 3], {}, check=False))  # warm-up
        for c in clients:
            before = server.get("/health")["batching"]
            wall, lat, wrong = asyncio.run(run_clients(server.url, plans[c], expected))
            after = server.get("/health")["batching"]
            mean_batch = (after["sentences"] - before["sentences"]) / max(1, after["batches"] - before["batches"])
            n = sum(len(lines) for reqs in plans[c] for lines in reqs)
            rates[c] = n / wall
            one_by_one = [lines for reqs in zip(*plans[c]) for lines in reqs][: args.sequential]
            seq_wall, _, seq_wrong = asyncio.run(run_clients(server.url, [one_by_one], expected))
            seq_rate = sum(map(len, one_by_one)) / seq_wall
            print(f"| {c} | {len(lat)} | {rates[c]:.1f} | {1000 * percentile(lat, 50):.0f} | "
                  f"{1000 * percentile(lat, 99):.0f} | {mean_batch:.1f} | {peak_rss_mb(server.proc.pid):.0f} | {seq_rate:.1f} | "
                  f"{rates[c] / seq_rate:.2f}x | {rates[c] / ref_rate_warm:.2f}x | {wrong + seq_wrong} |", flush=True)
        status, _ = server.stop()
    top = max(clients)
    print(f"{top} clients / nmtkit translate: {rates[top] / ref_rate:.2f}x end to end, "
          f"{rates[top] / ref_rate_warm:.2f}x without its start-up (target >= 0.8); server exit status {status}")


if __name__ == "__main__":
    main()
