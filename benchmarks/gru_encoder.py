"""The RNNsearch encoder (bidirectional GRU) forward + backward: launched ops and CPU time, for
the three ways nmtkit can run it:

  torch.gru   today's default on CPUs (`fuse_steps` False: rnnsearch._bigru_cpu)
  eager       gru_recurrence.py's loop with its step bodies run eagerly (the reference)
  fused       the same loop with the step bodies compiled by inductor (`fuse_steps` True)

Launched ops (torch.profiler, CPU): aten ops with no launching aten op below them, not counting
ops that launch no kernel (views, empty, to/contiguous without a copy ...), plus inductor's
generated kernels (graph_*_cpp_fused_* events). The counts do not depend on the sizes, so they
are taken at rnnsearch-50's batch (80) and source length (30 + EOS) with tiny embeddings.
Times: fwd+bwd at the `small` preset's sizes, interleaved repeats, median of each.

  PYTHONPATH=. python benchmarks/gru_encoder.py [--threads 2] [--repeats 15] [--no-count]

Measured (2-core shared Xeon, torch 2.13 CPU, load 5-10 from other jobs, so times are rough):
  launched ops, B=80, S=31:  torch.gru 1846 | eager loop 1204 | fused 181 (per step 1 bmm + 1
                             inductor kernel, forward and backward)
  small sizes, 1 thread, CPU time median: torch.gru 85.6 ms | fused 98.7 ms (fused ~15% slower: a
                             compiled call costs ~30 us on the CPU side (guards, wrapper), as
                             much as the eager body's ~10 ops, and the generated kernels are no
                             faster than eager ops at 2x64x768 elements)
  small sizes, 2 threads, wall median:    torch.gru 814 ms | fused 719 ms (oversubscribed machine)
Hence CPUs keep torch.gru by default (`fuse_steps` False); fusion is meant for GPUs.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

NO_KERNEL = {
    "view", "reshape", "transpose", "t", "permute", "expand", "as_strided", "slice", "select",
    "unsqueeze", "squeeze", "detach", "alias", "empty", "empty_strided", "resize_", "unbind",
    "split", "unsafe_split", "chunk", "narrow", "_unsafe_view", "resolve_conj", "resolve_neg",
    "to", "_to_copy", "contiguous", "lift_fresh", "unflatten", "split_with_sizes", "empty_like",
    "_reshape_alias", "unsafe_chunk", "new_empty", "view_as", "expand_as", "_has_compatible_shallow_copy_type", "is_nonzero", "promote_types",
}


def launched_ops(prof) -> dict[str, int]:
    """Names and counts of the launching events of a finished torch.profiler.profile."""
    counts: dict[str, int] = {}

    def visit(ev) -> bool:  # True when ev or something below it launches
        below = [visit(c) for c in ev.cpu_children]
        name = ev.name
        if "cpp_fused" in name:
            key = "inductor kernel"
        elif name.startswith("aten::") and name[6:] not in NO_KERNEL and not any(below):
            key = name
        else:
            return any(below)
        counts[key] = counts.get(key, 0) + 1
        return True

    for ev in prof.events():
        if ev.cpu_parent is None:
            visit(ev)
    return counts


def build(emb: int, hidden: int, dropout: float, fuse_steps: bool):
    from nmtkit.models.fast.rnnsearch import FastRNNSearch, RNNSearchConfig

    cfg = RNNSearchConfig(src_vocab_size=8000, tgt_vocab_size=8000, emb_dim=emb, enc_hidden=hidden,
                          dec_hidden=16, att_hidden=16, maxout=8, dropout=dropout, init="default")
    return FastRNNSearch(cfg, fuse_steps=fuse_steps).train()


def batch(B: int, S: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, S + 1, (B,), generator=g)
    lens[0] = S
    src = torch.randint(4, 8000, (B, S), generator=g) * (torch.arange(S) < lens.unsqueeze(1))
    return src, lens


def fwd_bwd(model, src, lens) -> None:
    from nmtkit.models.fast.rnnsearch import encode_bigru

    ann, _, _ = encode_bigru(model.src_embed, model.encoder, model.drop, src, lens, True,
                             model.fuse_steps)
    ann.backward(torch.ones_like(ann))


def variants(emb: int, hidden: int, dropout: float):
    """name -> (model, run) for the three ways; 'eager' runs the loop with uncompiled bodies."""
    from nmtkit.models.fast import gru_recurrence

    def eager(model, src, lens):
        real = gru_recurrence.step_fn
        gru_recurrence.step_fn = lambda body, fuse: body
        try:
            fwd_bwd(model, src, lens)
        finally:
            gru_recurrence.step_fn = real

    return {"torch.gru": (build(emb, hidden, dropout, False), fwd_bwd),
            "eager": (build(emb, hidden, dropout, True), eager),
            "fused": (build(emb, hidden, dropout, True), fwd_bwd)}


def count(B: int = 80, S: int = 31) -> None:
    torch._inductor.config.cpp.enable_kernel_profile = True
    src, lens = batch(B, S - 1)  # + EOS inside the model
    for name, (model, run) in variants(16, 16, 0.0).items():
        run(model, src, lens)  # warm up (compiles the fused bodies)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            run(model, src, lens)
        ops = launched_ops(prof)
        top = ", ".join(f"{k.removeprefix('aten::')} {v}" for k, v in
                        sorted(ops.items(), key=lambda kv: -kv[1])[:8])
        print(f"{name:10s} launched ops {sum(ops.values()):6d}   ({top})", flush=True)


def timing(repeats: int, B: int = 64, S: int = 20) -> None:
    src, lens = batch(B, S - 1, seed=1)
    vs = {k: v for k, v in variants(256, 256, 0.2).items() if k != "eager"}
    wall: dict[str, list[float]] = {k: [] for k in vs}
    cpu: dict[str, list[float]] = {k: [] for k in vs}
    for model, run in vs.values():
        run(model, src, lens)
    for _ in range(repeats):
        for name, (model, run) in vs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            run(model, src, lens)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    for name in vs:
        print(f"{name:10s} fwd+bwd B={B} S={S} emb=hidden=256, {repeats} interleaved repeats: wall median "
              f"{1e3 * statistics.median(wall[name]):.1f} ms (min {1e3 * min(wall[name]):.1f}), CPU time "
              f"median {1e3 * statistics.median(cpu[name]):.1f} ms (min {1e3 * min(cpu[name]):.1f})",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--no-count", action="store_true", help="times only")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not args.no_count:
        count()
    timing(args.repeats)


if __name__ == "__main__":
    main()
