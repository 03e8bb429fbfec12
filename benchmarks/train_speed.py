"""Training speed of nmtkit's models: target tokens/s (forward + backward + optimiser step) and
peak memory, fp32 and bf16 autocast, against a naive step-by-step RNNsearch in the same run.

Workloads (random token ids, random lengths, so the numbers do not depend on preprocessing;
batches cut from length-sorted pools of 20 batches, as in the paper's training procedure):
  small         the `small` preset (BENCHMARKS.md: emb 256, enc 256x2, dec 512; vocabularies
                5,834 / 7,157 like Tatoeba BPE), Adam, batches of 64 pairs of 5-15 tokens
                (Tatoeba-like: about 10 target tokens + EOS per sentence).
  naive-small   benchmarks/naive_rnnsearch.py at the same sizes, same batches: every
                projection inside the decoder loop (U_a h_j included).
  naive-keys-small  the same with U_a h_j computed once per batch (a stronger baseline).
  rnnsearch-50  the paper preset (30k vocabularies, m=620, n=1000, l=500), Adadelta, batches
                of 80 pairs of 25-35 tokens.
Each measurement runs in its own subprocess so that the peak resident memory (CPU) or
torch.cuda.max_memory_allocated (GPU) is its own.

  python benchmarks/train_speed.py            # full run (a few minutes on 2 cores)
  python benchmarks/train_speed.py --quick    # fewer steps, fp32+bf16 small vs naive only
  python benchmarks/train_speed.py --device cuda
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

WORKLOADS = {
    "small": dict(preset="small", vocab=(5834, 7157), batch=64, lens=(5, 15), optimizer="adam"),
    "naive-small": dict(preset="small", vocab=(5834, 7157), batch=64, lens=(5, 15), optimizer="adam", naive=True),
    "naive-keys-small": dict(preset="small", vocab=(5834, 7157), batch=64, lens=(5, 15), optimizer="adam",
                             naive=True, precompute_keys=True),
    "rnnsearch-50": dict(preset="rnnsearch-50", vocab=(30000, 30000), batch=80, lens=(25, 35), optimizer="adadelta"),
}


def make_model(w: dict):
    """The workload's model: nmtkit's own, or the naive step-by-step baseline."""
    from nmtkit.models import build_model
    from nmtkit.train.presets import preset

    arch, cfg = preset(w["preset"])
    cfg.update(src_vocab_size=w["vocab"][0], tgt_vocab_size=w["vocab"][1])
    if w.get("naive"):
        from benchmarks.naive_rnnsearch import NaiveRNNSearch

        return NaiveRNNSearch(**cfg, precompute_keys=w.get("precompute_keys", False))
    return build_model(arch, cfg)


def make_batches(n: int, vocab: tuple[int, int], batch: int, lens: tuple[int, int], seed: int = 0):
    """n batches of random pairs; as in the paper's procedure, each group of 20 batches is cut
    from a pool of 20*batch pairs sorted by target length (so batches carry little padding)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    pool: list[tuple[int, int]] = []
    for _ in range(n):
        if not pool:
            src_l = torch.randint(lens[0], lens[1] + 1, (20 * batch,), generator=g).tolist()
            tgt_l = torch.randint(lens[0], lens[1] + 1, (20 * batch,), generator=g).tolist()
            pool = sorted(zip(src_l, tgt_l), key=lambda p: (p[1], p[0]))
            perm = torch.randperm(20, generator=g).tolist()
            pool = [pool[k * batch + j] for k in perm for j in range(batch)]
        chunk, pool = pool[:batch], pool[batch:]
        sl = torch.tensor([p[0] for p in chunk])
        tl = torch.tensor([p[1] for p in chunk])
        src = torch.randint(4, vocab[0], (batch, int(sl.max())), generator=g)
        src[torch.arange(src.size(1))[None] >= sl[:, None]] = 0
        T = int(tl.max()) + 1
        y = torch.randint(4, vocab[1], (batch, T), generator=g)
        pos = torch.arange(T)[None]
        tgt_in = torch.cat([torch.full((batch, 1), 2), y[:, :-1]], dim=1)
        tgt_out = y.clone()
        tgt_out[pos == tl[:, None]] = 3
        tgt_out[pos > tl[:, None]] = 0
        tgt_in[pos > tl[:, None]] = 0
        out.append((src, sl, tgt_in, tgt_out))
    return out


def measure(name: str, precision: str, device: str, steps: int, threads: int, fuse: str = "auto") -> dict:
    """One measurement, in this process: tokens/s and peak memory. `fuse` as `nmtkit train --fuse`."""
    import torch

    from nmtkit.models.fast.fusion import resolve_fuse

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    w = WORKLOADS[name]
    model = make_model(w)
    model.to(device).train()
    if not w.get("naive"):
        model = model.with_fused_steps(resolve_fuse(fuse, torch.device(device)))
    params = sum(p.numel() for p in model.parameters())
    if w["optimizer"] == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)  # torch's one-kernel Adam: 4x faster step on CPU
    else:
        opt = torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-6)
    warmup = 2
    batches = make_batches(warmup + steps, w["vocab"], w["batch"], w["lens"])
    dtype = torch.bfloat16 if precision == "bf16" else None

    def train_step(src, sl, ti, to):
        src, ti, to = src.to(device), ti.to(device), to.to(device)
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss, _, n = model.loss(src, sl, ti, to)
        opt.zero_grad(set_to_none=True)
        (loss / n).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return n

    for b in batches[:warmup]:
        train_step(*b)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    tokens = sum(train_step(*b) for b in batches[warmup:])
    if device == "cuda":
        torch.cuda.synchronize()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**30
        mem_kind = "GPU max_memory_allocated"
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
        mem_kind = "peak RSS"
    return dict(workload=name, precision=precision, device=device, fuse=bool(getattr(model, "fuse_steps", False)),
                params=params, steps=steps,
                tokens=tokens, seconds=dt, tokens_per_s=tokens / dt, cpu_seconds=cpu,
                tokens_per_cpu_s=tokens / cpu, load=load, peak_gib=peak, mem=mem_kind)


def interleaved(names: list[str], precision: str, steps: int, threads: int) -> dict[str, dict]:
    """Train several workloads in one process, alternating one step of each, and report the
    median step time of each: on a shared machine, every model sees the same background load."""
    import statistics

    import torch

    torch.set_num_threads(threads)
    runs = {}
    for name in names:
        w = WORKLOADS[name]
        torch.manual_seed(0)
        model = make_model(w)
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
        runs[name] = (model, opt, make_batches(steps + 2, w["vocab"], w["batch"], w["lens"]), [], [])
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    for k in range(steps + 2):
        for model, opt, batches, walls, cpus in runs.values():
            t0, c0 = time.perf_counter(), time.process_time()
            with torch.autocast("cpu", dtype=dtype, enabled=precision == "bf16"):
                loss, _, n = model.loss(*batches[k])
            opt.zero_grad(set_to_none=True)
            (loss / n).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if k >= 2:  # warm-up
                walls.append((time.perf_counter() - t0) / n)
                cpus.append((time.process_time() - c0) / n)
    return {name: dict(tokens_per_s=1 / statistics.median(w), tokens_per_cpu_s=1 / statistics.median(c))
            for name, (_, _, _, w, c) in runs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", default=bool(os.environ.get("QUICK")))
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=2, help="torch threads on CPU (default 2)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per measurement")
    ap.add_argument("--workloads", default=None, help="comma-separated subset of " + ",".join(WORKLOADS))
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--fuse", default="auto", choices=["auto", "on", "off"],
                    help="as nmtkit train --fuse (auto: fused on CUDA); the first fused run compiles")
    ap.add_argument("--no-interleaved", action="store_true", help="skip the interleaved ratio run")
    ap.add_argument("--one", nargs=2, metavar=("WORKLOAD", "PRECISION"), help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.one:
        steps = args.steps or 10
        print(json.dumps(measure(args.one[0], args.one[1], args.device, steps, args.threads, args.fuse)))
        return

    names = args.workloads.split(",") if args.workloads else (
        ["small", "naive-small", "naive-keys-small"] if args.quick else list(WORKLOADS))
    results = []
    for name in names:
        for prec in args.precisions.split(","):
            steps = args.steps or (4 if args.quick else (3 if name == "rnnsearch-50" else 20))
            if args.device == "cuda":
                steps *= 5
            cmd = [sys.executable, __file__, "--one", name, prec, "--device", args.device,
                   "--threads", str(args.threads), "--steps", str(steps), "--fuse", args.fuse]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{name} {prec}: FAILED\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            results.append(r)
            print(f"{name:14s} {prec:5s} {args.device}{' fused' if r['fuse'] else ''}: "
                  f"{r['tokens_per_s']:7.0f} target tokens/s "
                  f"({r['tokens_per_cpu_s']:5.0f} per CPU-second)  peak {r['peak_gib']:.2f} GiB "
                  f"({r['mem']})  [{r['params'] / 1e6:.1f}M params, {r['steps']} steps, "
                  f"{r['tokens']} tokens, {r['seconds']:.1f}s, load avg {r['load']:.1f}]", flush=True)
    # on a shared CPU, wall-clock rates follow the load; with 1 thread the CPU-time rate does not
    key = "tokens_per_cpu_s" if args.device == "cpu" and args.threads == 1 else "tokens_per_s"
    if key == "tokens_per_cpu_s":
        print("ratios below use tokens per CPU-second (1 thread: robust to other load)")
    by = {(r["workload"], r["precision"]): r[key] for r in results}
    for prec in args.precisions.split(","):
        for naive in ("naive-small", "naive-keys-small"):
            if ("small", prec) in by and (naive, prec) in by:
                print(f"small / {naive} ({prec}): {by['small', prec] / by[naive, prec]:.2f}x")
    if args.device == "cpu" and not args.no_interleaved:
        steps = args.steps or (6 if args.quick else 20)
        naive = [n for n in ("naive-small", "naive-keys-small") if n in names] or ["naive-small"]
        for prec in args.precisions.split(","):
            r = interleaved(["small", *naive], prec, steps, args.threads)
            for n in naive:
                print(f"interleaved, {args.threads} threads, {prec}, median step: small "
                      f"{r['small']['tokens_per_s']:.0f} tok/s vs {n} {r[n]['tokens_per_s']:.0f} tok/s: "
                      f"{r['small']['tokens_per_s'] / r[n]['tokens_per_s']:.2f}x "
                      f"(CPU-time: {r['small']['tokens_per_cpu_s'] / r[n]['tokens_per_cpu_s']:.2f}x)", flush=True)
    if ("small", "bf16") in by and ("small", "fp32") in by:
        print(f"small bf16 / fp32: {by['small', 'bf16'] / by['small', 'fp32']:.2f}x")
    if ("naive-small", "fp32") in by and ("small", "bf16") in by:
        print(f"small bf16 / naive-small fp32: {by['small', 'bf16'] / by['naive-small', 'fp32']:.2f}x")


if __name__ == "__main__":
    main()
