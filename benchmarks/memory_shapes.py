"""Why the bf16 CPU footprint grew with the shapes a run meets: the chunked loss's three products
alone, in bf16, for 300 batches of random target token counts N (300..900).

Each batch runs the loss's forward product (N, F) x (F, V), d loss / d features (N, V) x (V, F)
and d loss / d W (V, N) x (N, F) in bf16, as `models/fast/accelerated.py` does under autocast.
Modes: "plain" (every N its own shape), "trim" (plain, glibc's malloc_trim every 20 batches),
"pad" (N padded to a multiple of 64 rows, as accelerated.ROW_MULTIPLE does), "pad+trim".
Prints the RSS after batches 100 and 300 and the seconds taken. oneDNN's cache capacity can
be set with ONEDNN_PRIMITIVE_CACHE_CAPACITY in the environment.

    python benchmarks/memory_shapes.py plain pad
"""
from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nmtkit.devices import release_free_memory  # noqa: E402


def rss_mb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return -1


def run(mode: str, V: int = 10000, D: int = 512) -> str:
    torch.set_num_threads(2)
    w = torch.randn(V, D).bfloat16()
    b = torch.randn(V).bfloat16()
    rng = random.Random(0)
    start, at, t0 = rss_mb(), {}, time.perf_counter()
    for i in range(1, 301):
        n = rng.randint(300, 900)
        if "pad" in mode:
            n = (n + 63) // 64 * 64
        f = torch.randn(n, D).bfloat16()
        y = F.linear(f, w, b)
        y.mm(w)
        y.t().mm(f)
        if "trim" in mode and i % 20 == 0:
            release_free_memory()
        if i in (100, 300):
            at[i] = rss_mb()
    return (f"{mode:9s} RSS at start {start} MB, after batch 100 {at[100]} MB, after 300 {at[300]} MB; "
            f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    modes = sys.argv[1:] or ["plain", "trim", "pad", "pad+trim"]
    if len(modes) == 1:
        print(run(modes[0]), flush=True)
    else:  # each mode in a fresh process
        import subprocess

        for m in modes:
            subprocess.run([sys.executable, __file__, m], check=True)
