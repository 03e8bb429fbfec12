"""Everything a first GPU run needs to know, in one command: `make gpu-report OUT=DIR`.

Writes DIR/gpu-report.md and DIR/gpu-report.json with
  environment  the device, torch, CUDA, cuDNN, Triton and Python versions, the commit;
  tests        `pytest -m cuda` (what `make test-gpu` runs): its summary line and skip reasons;
  train        training target tokens/s and peak GPU memory of one `train_step` (forward,
               backward, clipping, optimiser) for `small` and `rnnsearch-50`, fp32 (+TF32) and
               bf16, batches of 80 pairs and of --max-tokens 8000, with CUDA graphs (unfused and
               fused) and without (unfused): warmed up until no step compiles or captures a new
               graph (at most WARMUP_MAX steps), then TIMED_STEPS steps timed between two
               torch.cuda.synchronize(); graphs compiled or captured inside the timed window are
               counted (they must be 0);
  run          a real 200-update run (`small`, --max-tokens, varied lengths, --fuse on, CUDA graphs
               where they run): graphs compiled per fused step body, CUDA graphs captured, and host
               reads per update (devtools.launches.HostReads, in a run of its own), and on
               CUDA the target tokens/s of real rnnsearch-50 runs with and without CUDA graphs;
  translate    newstest2014 (3,003 sentences, from DATA, default ../shared/data) at beam 12 with a
               randomly initialised rnnsearch-50 (every sentence runs to the fixed limit of
               TRANSLATE_LIMIT tokens), unfused and (on CUDA) fused: wall seconds, the first batch
               (which compiles, when fused) apart;
  profile      one rnnsearch-50 bf16 training step (unfused, the default) under torch.profiler,
               with and without CUDA graphs: the share of the step's wall time during which the GPU
               runs kernels.
Each section runs on its own: one that fails is reported with its error and the others still
run. Without CUDA the report says so plainly, runs what it can on the CPU (at the --quick sizes:
the full ones would take hours there) and exits 0.

  make gpu-report OUT=DIR PYTHON=python3 SYSTEM_TORCH=1   # on a GPU node (see benchmarks/GPU.md)
  python benchmarks/gpu_report.py --out DIR [--quick]     # --quick: tiny sizes, a few steps (CPU test)
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = Path(os.environ.get("DATA") or REPO.parent / "shared" / "data")

WARMUP_MAX = 30
TIMED_STEPS = 50
RUN_UPDATES = 200
TRANSLATE_LIMIT = 50  # target tokens before EOS, every sentence (max_len_a 0, max_len_b 50)
BEAM = 12
SECTIONS = ("train", "translate", "profile", "run", "tests")  # the order they run in: the targets' figures first


# ---- sections --------------------------------------------------------------------------------
def environment() -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(), "host": platform.node(),
    }
    try:
        env["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                       text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        env["commit"] = "unknown (not a git checkout)"
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name(0)
        env["gpus"] = torch.cuda.device_count()
        env["cudnn"] = torch.backends.cudnn.version()
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        env["memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    else:
        env["device"] = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    return env


def tests(quick: bool, timeout: float) -> dict[str, Any]:
    """`pytest -m cuda` in a child process (the command `make test-gpu` runs), killed past
    `timeout` with what it printed so far kept (devtools.report.run_tests)."""
    from devtools.report import run_tests

    target = str(REPO / "tests" / "test_cuda.py") if quick else str(REPO / "tests")
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-m", "cuda", "-p", "no:cacheprovider", target]
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return run_tests(cmd, str(REPO), dict(os.environ, PYTHONPATH=path), timeout)


def _graphs() -> int:
    """Graphs compiled by dynamo plus CUDA graphs captured, in this process so far."""
    import torch._dynamo.utils

    from nmtkit.models.fast.fusion import captured

    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"]) + captured()


def _release() -> None:
    """Free what the last measurement held (CUDA graphs and their arena included) and restart the
    peak-memory count, so that the next measurement's peak is its own."""
    import gc

    import torch

    from nmtkit.models.fast.fusion import release_all

    release_all()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_speed(workdir: Path, device: str, quick: bool, deadline: float) -> list[dict[str, Any]]:
    """Rows: one per preset x precision x batching x (fuse, cuda-graphs) (see the module
    docstring), run in `row_priority` order until `deadline`."""
    from benchmarks.launches import vocab_size, write_data_dir
    from devtools.report import row_priority, train_rows

    steps = 2 if quick else TIMED_STEPS
    rows = train_rows(device, quick)
    data = {}
    for row in sorted(rows, key=row_priority):
        if time.perf_counter() > deadline:
            row["skipped"] = "the report's time budget is spent"
            continue
        preset = row["preset"]
        if preset not in data:
            data[preset] = write_data_dir(workdir / f"data-{preset}", vocab_size(preset))
        try:
            row.update(_one_train_speed(preset, data[preset], workdir, device, row["precision"].split("+")[0],
                                        row["max_tokens"], row["fuse"], row["cuda_graphs"], quick, steps))
        except Exception as err:  # noqa: BLE001 - one row's failure is its result
            row["error"] = f"{type(err).__name__}: {err}"
        print(f"gpu-report: train {json.dumps(row)}", file=sys.stderr, flush=True)
        _release()
    return rows


def _one_train_speed(preset, data, workdir, device, precision, max_tokens, fuse, graphs, quick, steps
                     ) -> dict[str, Any]:
    import torch
    import torch._dynamo

    from benchmarks.launches import fixed_batch, make_context
    from nmtkit.train.context import train_step

    torch._dynamo.reset()  # each row compiles its own graphs: no row inherits another's towards the limit
    run = Path(tempfile.mkdtemp(dir=workdir))
    ctx = make_context(preset, data, run, max_tokens, quick, threads=os.cpu_count() or 1, precision=precision,
                       fuse=fuse, device=device, cuda_graphs=graphs)
    try:
        batch = fixed_batch(ctx, max_tokens)
        n_tgt = ctx.target_tokens(batch)
        dev = ctx.device

        def step() -> None:
            assert train_step(ctx, [batch]), "the synthetic step was skipped (non-finite loss)"

        t0 = time.perf_counter()
        warm, stable = 0, 0
        while warm < (1 if quick else WARMUP_MAX) and stable < 3:
            before = _graphs()
            step()
            warm += 1
            stable = stable + 1 if _graphs() == before else 0
        _sync(dev)
        warmup_s = time.perf_counter() - t0
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        before = _graphs()
        _sync(dev)
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(dev)
        secs = time.perf_counter() - t0
        out = {"tgt_tokens": n_tgt, "pairs": len(batch), "warmup_steps": warm, "warmup_s": round(warmup_s, 2),
               "timed_steps": steps, "step_ms": round(1000 * secs / steps, 2),
               "tokens_per_s": round(n_tgt * steps / secs), "compiles_in_window": _graphs() - before}
        if dev.type == "cuda":
            out["peak_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
        return out
    finally:
        ctx.close()


def training_run(workdir: Path, device: str, quick: bool) -> dict[str, Any]:
    """Real runs through `nmtkit.train.run` on varied lengths: (1) RUN_UPDATES updates, fused where
    CUDA is: graphs per fused body and CUDA graphs captured; (2) a few updates with the device's
    defaults under HostReads: host reads per update (a separate run: the counting mode is part of
    what dynamo guards on, so under it every body would compile each graph twice); (3) on CUDA,
    rnnsearch-50 in bf16 at --max-tokens 8000 with and without CUDA graphs, steady-state target
    tokens/s of a real run (the last log interval)."""
    import torch
    import torch._dynamo

    from benchmarks.launches import vocab_size
    from devtools.launches import HostReads
    from devtools.report import MODES
    from nmtkit.models.fast import fusion
    from nmtkit.models.fast.fusion import captured
    from nmtkit.train import trainer

    cuda = torch.cuda.is_available() and device == "cuda"
    data = _run_data(workdir / "data-run", 1000 if quick else 8000, 300 if quick else 2000)
    updates = 10 if quick else RUN_UPDATES
    torch._dynamo.reset()  # this run's graphs only
    captures = captured()
    t0 = time.perf_counter()
    result, speed = _real_run(data, workdir / "run-fused", device, quick, updates, preset="small",
                              fuse="on" if cuda else "off", max_tokens=300 if quick else 4000, bleu=8)
    out: dict[str, Any] = {
        "updates": result.update, "seconds": round(time.perf_counter() - t0, 1), "tgt_tokens_per_s_last": speed,
        "graphs_per_body": {b.__qualname__: fusion.graphs_compiled(b) for b in fusion.compiled_bodies()},
        "graph_bound": fusion.MAX_GRAPHS_PER_BODY, "total_graphs": _graphs(), "fused": cuda,
        "cuda_graphs_captured": captured() - captures}
    reads: list[int] = []
    step = trainer.train_step

    def counted(ctx, batches):
        with HostReads(ctx.device.type) as r:
            ok = step(ctx, batches)
        reads.append(r.count)
        return ok

    trainer.train_step = counted  # the loop's step, counted
    try:
        _real_run(data, workdir / "run-reads", device, quick, 4 if quick else 20, preset="small", fuse="auto",
                  max_tokens=300 if quick else 4000, bleu=0)
    finally:
        trainer.train_step = step
    out["host_reads_per_update_max"] = max(reads) if reads else None
    out["host_reads_per_update_mean"] = round(sum(reads) / len(reads), 3) if reads else None
    if cuda and not quick:
        _release()
        big = _run_data(workdir / "data-run-50", vocab_size("rnnsearch-50"), 2000)
        for fuse, graphs in MODES:  # the training table's (fuse, cuda-graphs) modes, in its order
            t0 = time.perf_counter()
            _, speed = _real_run(big, workdir / f"run-50-{fuse}-{graphs}", device, quick, RUN_UPDATES, preset="rnnsearch-50",
                                 fuse=fuse, max_tokens=8000, bleu=0, cuda_graphs=graphs, precision="bf16")
            out[f"rnnsearch-50 bf16 max-tokens 8000, fuse {fuse}, cuda-graphs {graphs}"] = {
                "tgt_tokens_per_s_last": speed, "seconds": round(time.perf_counter() - t0, 1),
                "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
            _release()
    return out


def _run_data(path: Path, vocab: int, pairs: int) -> Path:
    """Pairs of 1-60 tokens (a real run's variety of batch shapes)."""
    from benchmarks.launches import write_data_dir

    return write_data_dir(path, vocab, seed=1, lengths=(1, 60), n_pairs=pairs)


def _real_run(data: Path, run: Path, device: str, quick: bool, updates: int, *, preset: str, fuse: str, max_tokens: int,
              bleu: int, cuda_graphs: str = "auto", precision: str | None = None):
    """`nmtkit.train.run` -> (its result, target tokens/s of its last log interval)."""
    from nmtkit import train
    from nmtkit.train.config import RunConfig, TrainOptions
    from nmtkit.train.presets import ModelOverrides

    sizes = ModelOverrides(emb_dim=32, enc_hidden=32, dec_hidden=32, att_hidden=32, maxout=16) if quick else ModelOverrides()
    extra = {"precision": precision} if precision else {}
    opts = TrainOptions(preset=preset, max_tokens=max_tokens, max_updates=updates, valid_every=max(1, updates // 2),
                        save_every=updates, log_every=max(1, updates // 4), valid_bleu_samples=bleu, device=device,
                        fuse=fuse, cuda_graphs=cuda_graphs, max_len=60, **extra)
    result = train.run(RunConfig(data, run, opts, sizes, force=True))
    rec = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rec if r["kind"] == "train"]
    return result, round(train[-1]["tgt_tokens_per_s"]) if train else None


def translate(workdir: Path, device: str, quick: bool, deadline: float) -> dict[str, Any]:
    """newstest2014 at beam 12 (a random rnnsearch-50: every sentence runs to the limit), with
    --fuse off, then (on CUDA) on: off first, since it compiles nothing. Past `deadline` no
    further batch starts, and the sentences decoded so far are reported."""
    src = DATA / "wmt14-newstest" / "newstest2014-fren.en"
    if not src.exists():
        return {"skipped": f"{src} not found (set DATA=the shared data folder)"}
    from benchmarks.translate_speed import random_checkpoint

    lines = src.read_text(encoding="utf-8").splitlines()
    preset, beam, limit = ("small", 4, 10) if quick else ("rnnsearch-50", BEAM, TRANSLATE_LIMIT)
    lines = lines[:24] if quick else lines
    ckpt = random_checkpoint(preset, lines, workdir / f"{preset}-random.pt")
    out: dict[str, Any] = {"sentences": len(lines), "preset": preset, "beam": beam, "limit": limit}
    for fuse in ("off", "on") if device == "cuda" else ("off",):
        out[f"fuse {fuse}"] = _translate_once(ckpt, lines, device, beam, limit, fuse, deadline)
    return out


def _translate_once(ckpt: Path, lines: list[str], device: str, beam: int, limit: int, fuse: str,
                    deadline: float) -> dict[str, Any]:
    import torch

    from nmtkit.data.binarized import length_batches
    from nmtkit.translate import DecodeConfig, Translator
    from nmtkit.translate.config import SearchConfig

    cfg = DecodeConfig(models=(str(ckpt),), batch_size=64, device=device,
                       precision="bf16" if device == "cuda" else "fp32", fuse=fuse)
    search = SearchConfig(beam=beam, max_len_a=0.0, max_len_b=float(limit), shortlist="off")
    tr = Translator(cfg, warn=lambda m: None)
    if tr.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(tr.device)
    t0 = time.perf_counter()
    toks = [tr._prepare(line, i, "<input>")[0] for i, line in enumerate(lines, 1)]
    prep = time.perf_counter() - t0
    idx = [i for i, t in enumerate(toks) if t]
    batches = length_batches([len(toks[i]) for i in idx], 64, longest_first=True)
    _sync(tr.device)
    t0 = time.perf_counter()
    tr._decode_batch([toks[idx[j]] for j in batches[0]], search, False, batches[0])  # the first batch compiles (fused)
    _sync(tr.device)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    n_tgt = done = 0
    for b in batches:
        if time.perf_counter() > deadline:
            break
        done += len(b)
        for hyps in tr._decode_batch([toks[idx[j]] for j in b], search, False, b):
            n_tgt += len(hyps[0].tokens) + 1
    _sync(tr.device)
    secs = time.perf_counter() - t0
    out = {"decoded": done, "precision": cfg.precision, "text_pipeline_s": round(prep, 2),
           "first_batch_s": round(first, 2), "all_sentences_s": round(secs, 2) if done else None,
           "tgt_tokens_per_s": round(n_tgt / secs) if done and secs else None}
    if done < len(idx):
        out["stopped"] = f"the report's time budget was spent after {done} of {len(idx)} sentences"
    if tr.device.type == "cuda":
        out["peak_gib"] = round(torch.cuda.max_memory_allocated(tr.device) / 2**30, 2)
    return out


def profile_step(workdir: Path, device: str, quick: bool) -> dict[str, Any]:
    """The GPU's busy share of one steady-state rnnsearch-50 bf16 training step at 80 pairs,
    with CUDA graphs (the default) and without."""
    if device != "cuda":
        return {"skipped": "needs CUDA (the share of a step the GPU is busy)"}
    from benchmarks.launches import vocab_size, write_data_dir

    data = write_data_dir(workdir / "data-rnnsearch-50", vocab_size("rnnsearch-50"))
    out: dict[str, Any] = {}
    for graphs in ("on", "off"):
        try:
            out[f"cuda-graphs {graphs}"] = _profile_once(workdir, data, device, quick, graphs)
        except Exception as err:  # noqa: BLE001 - one profile's failure is its result
            out[f"cuda-graphs {graphs}"] = {"error": f"{type(err).__name__}: {err}"}
    return out


def _profile_once(workdir: Path, data: Path, device: str, quick: bool, graphs: str) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.launches import fixed_batch, make_context
    from nmtkit.train.context import train_step

    ctx = make_context("rnnsearch-50", data, Path(tempfile.mkdtemp(dir=workdir)), None, quick, threads=1,
                       precision="bf16", fuse="off", device=device, cuda_graphs=graphs)
    try:
        batch = fixed_batch(ctx, None)
        for _ in range(5):  # compile, capture and allocate
            train_step(ctx, [batch])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            train_step(ctx, [batch])
        torch.cuda.synchronize()
        plain = (time.perf_counter() - t0) / 10
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            train_step(ctx, [batch])
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
        busy, end = 0.0, float("-inf")
        for a, b in spans:  # the union of the kernels' intervals (us)
            if b > end:
                busy += b - max(a, end)
                end = b
        try:
            top = prof.key_averages().table(sort_by="self_device_time_total", row_limit=12)
        except (KeyError, AttributeError, ValueError):  # an older torch's name for it
            top = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12)
        return {"step_ms_unprofiled": round(plain * 1000, 2), "step_ms": round(wall * 1000, 2), "gpu_busy_ms": round(busy / 1000, 2),
                "gpu_busy_share": round(busy / 1000 / (wall * 1000), 3), "kernels": len(kernels), "top": top}
    finally:
        ctx.close()


# ---- the report ------------------------------------------------------------------------------
def _run(report: dict, name: str, fn: Callable[[], Any]) -> None:
    t0 = time.perf_counter()
    print(f"gpu-report: {name} ...", file=sys.stderr, flush=True)
    try:
        report[name] = fn()
    except Exception as err:  # noqa: BLE001 - a section's failure is part of the report
        report[name] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-3000:]}
    print(f"gpu-report: {name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def _fmt_rows(rows: list[dict], keys: list[str]) -> list[str]:
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        cells = []
        for k in keys:
            v = r.get(k, "")
            cells.append(f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v))
        out.append("| " + " | ".join(cells) + " |")
    return out


def markdown(report: dict) -> str:
    from devtools.report import problems

    env = report["environment"]
    lines = ["# nmtkit GPU report", ""]
    if not env.get("cuda_available"):
        lines += ["**CUDA is unavailable here: this report ran what it could on the CPU. The GPU figures "
                  "(training speed on the GPU, peak GPU memory, the profile) need a machine with CUDA.**", ""]
    found = problems(report)
    lines += ["## Problems", ""] + ([f"- {p}" for p in found] or ["- none found"]) + [""]
    lines += [f"- {k}: {v}" for k, v in env.items()] + [f"- mode: {report['mode']}", ""]
    for name, title in (("tests", "make test-gpu (pytest -m cuda)"), ("run", f"A {RUN_UPDATES}-update run"),
                        ("translate", "newstest2014 at beam 12"), ("profile", "One training step's profile")):
        sec = report.get(name)
        if sec is None:
            continue
        lines += [f"## {title}", ""]
        for k, v in sec.items():
            if k in ("traceback", "top"):
                lines += ["", "```", str(v).rstrip(), "```"]
            elif isinstance(v, dict):  # one measurement of several figures (translate: one per --fuse)
                lines.append(f"- {k}: " + ", ".join(f"{kk} {vv}" for kk, vv in v.items() if kk != "top"))
                if "top" in v:
                    lines += ["", "```", str(v["top"]).rstrip(), "```", ""]
            else:
                lines.append(f"- {k}: {v}")
        lines.append("")
    rows = report.get("train")
    if isinstance(rows, list):
        lines += ["## Training speed (one step, target tokens/s)", ""]
        keys = ["preset", "precision", "batch", "fuse", "cuda_graphs", "pairs", "tgt_tokens", "tokens_per_s", "step_ms",
                "peak_gib", "warmup_steps", "compiles_in_window", "error", "skipped"]
        keys = [k for k in keys if any(k in r for r in rows)]
        lines += _fmt_rows(rows, keys) + [""]
    elif rows is not None:
        lines += ["## Training speed", "", f"- {rows}", ""]
    lines += [f"Written by benchmarks/gpu_report.py in {report['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for gpu-report.md and gpu-report.json")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and a few steps (the test suite's CPU mode)")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"the sections to run, comma-separated, in this order [{','.join(SECTIONS)}]")
    ap.add_argument("--budget", type=float, default=480.0,
                    help="seconds for the whole report: training rows stop at 40%% of it, translation "
                         "at 55%%, and the tests get what is left (at least 120 s) [480]")
    args = ap.parse_args(argv)
    sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    if not sections or set(sections) - set(SECTIONS):
        ap.error(f"--sections: choose from {','.join(SECTIONS)}, got {args.sections!r}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    t_start = time.perf_counter()
    if device == "cpu":  # the full sizes would take hours on a CPU and say nothing about a GPU
        print("gpu-report: CUDA is unavailable: running what can run on the CPU, at the quick sizes",
              file=sys.stderr)
        args.quick = True
    report: dict[str, Any] = {"mode": "quick" if args.quick else "full", "environment": environment()}

    def at(share: float) -> float:  # a point of the budget
        return t_start + share * args.budget

    def save() -> None:  # after every section: a report killed later still has what was done
        report["seconds"] = time.perf_counter() - t_start
        from devtools.report import problems

        report["problems"] = problems(report)
        _write(out / "gpu-report.json", json.dumps(report, indent=1, default=str) + "\n")
        _write(out / "gpu-report.md", markdown(report))

    save()
    with tempfile.TemporaryDirectory(prefix="gpu-report-") as tmp:
        work = Path(tmp)
        # the figures the targets name first; the tests get what is left of the budget
        run = {"train": lambda: train_speed(work, device, args.quick, at(0.40)),
               "translate": lambda: translate(work, device, args.quick, at(0.55)),
               "profile": lambda: profile_step(work, device, args.quick),
               "run": lambda: training_run(work, device, args.quick),
               "tests": lambda: tests(args.quick, max(120.0, at(1.0) - time.perf_counter()))}
        for name in SECTIONS:
            if name in sections:
                _run(report, name, run[name])
                save()
    print(f"gpu-report: wrote {out / 'gpu-report.md'} and {out / 'gpu-report.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
