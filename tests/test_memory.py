"""Resident memory stays flat over a training run whose batches keep changing shape, and the
levers that keep it so (nmtkit.devices)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmtkit.models import build_model
from nmtkit.models.precision import cpu_has_fast_bf16
from tests.conftest import random_batch


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from /proc (Linux)")
@pytest.mark.skipif(not cpu_has_fast_bf16(), reason="the shape-growth cause is oneDNN's cache of bf16 products, "
                    "used by bf16 autocast only on CPUs with native BF16 (elsewhere --precision auto is fp32)")
def test_rss_after_update_300_is_within_10_percent_of_rss_after_update_100():
    """bf16 autocast training, 300 updates of batches whose target token counts all differ
    (what made the footprint grow by megabytes per new shape): RSS at update 300 is within
    10% of RSS at update 100. Without the loss's row padding (accelerated.ROW_MULTIPLE = 1)
    this run grew from 598 MB to 755 MB; with it, 420 MB and 405 MB (12 s on the quiet 2-core
    machine, 150 s on a loaded one)."""
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        V = 8000
        model = build_model("rnnsearch", dict(src_vocab_size=500, tgt_vocab_size=V, emb_dim=16, enc_hidden=16,
                                              dec_hidden=32, att_hidden=16, maxout=256, dropout=0.0))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(0)
        rss = {}
        for update in range(1, 301):
            src_lens = torch.randint(1, 8, (32,), generator=gen).tolist()
            tgt_lens = torch.randint(1, 12, (32,), generator=gen).tolist()
            src, lens, tgt_in, tgt_out, _ = random_batch(500, V, seed=update, src_lens=src_lens, tgt_lens=tgt_lens)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss, _, n = model.loss(src, lens, tgt_in, tgt_out, n_tokens=int(tgt_out.ne(0).sum()))
            (loss / n).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if update in (100, 300):
                rss[update] = _rss_mb()
    finally:
        torch.set_num_threads(threads)
    assert rss[300] <= 1.1 * rss[100], f"RSS grew from {rss[100]:.0f} MB at update 100 to {rss[300]:.0f} MB at 300"


def test_the_cpu_cache_caps_keep_a_capacity_the_user_set(monkeypatch):
    from nmtkit.devices import limit_cpu_caches

    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "500")
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "300")
    limit_cpu_caches(64, 1)
    assert (os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"], os.environ["LRU_CACHE_CAPACITY"]) == ("500", "300")
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    monkeypatch.delenv("LRU_CACHE_CAPACITY")
    limit_cpu_caches(64, 1)
    assert (os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"], os.environ["LRU_CACHE_CAPACITY"]) == ("64", "1")


@pytest.mark.parametrize("argv, onednn", [(["translate", "-m", "x.pt"], "64"),
                                           (["train", "--data", "d", "--save-dir", "r"], "1024")])
def test_the_cli_caps_the_cpu_caches_before_torch_builds_a_product(argv, onednn):
    """Both capacities are in the environment of a CLI run by the time its command starts (oneDNN
    and ideep read them once, at their first product); training keeps more of oneDNN's primitives."""
    names = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
    code = ("import os, sys\nfrom nmtkit import cli\nseen = []\n"
            f"cli.command({argv[0]!r}).callback = lambda **kw: seen.extend(os.environ.get(n) for n in {names!r})\n"
            f"try:\n    cli.main({argv!r})\nexcept SystemExit:\n    pass\n"
            "print(seen, 'torch' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if k not in names}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.stdout.split() == [f"['{onednn}',", "'1']", "False"], proc.stdout + proc.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim is Linux only")
def test_freed_heap_memory_goes_back_to_the_os():
    from nmtkit.devices import release_free_memory

    blocks = [bytearray(64 * 1024) for _ in range(3000)]  # ~190 MB in small malloc chunks
    del blocks[:-1]  # all but the topmost: the heap cannot shrink from its top alone
    before = _rss_mb()
    assert release_free_memory()
    assert _rss_mb() < before - 100
