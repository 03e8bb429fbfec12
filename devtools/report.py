"""The rules of the GPU report (benchmarks/gpu_report.py): which training rows it times and in
what order, how it runs the test suite under a time limit, and the problems it puts first.

Here rather than in the benchmark so that the tests check the rules without importing benchmarks/.
"""
from __future__ import annotations

import subprocess
import tempfile
import time
from typing import Any

PRESETS = ("small", "rnnsearch-50")


# (--fuse, --cuda-graphs) of the rows, in the order they are timed: the default on CUDA (graphs,
# unfused), then without graphs, then fused inside graphs (fused without graphs was measured:
# benchmarks/GPU.md)
MODES = (("off", "on"), ("off", "off"), ("on", "on"))


def train_rows(device: str, quick: bool) -> list[dict[str, Any]]:
    """The training-speed table's rows, in its order: preset x precision x batching x modes."""
    rows = []
    modes = MODES if device == "cuda" and not quick else (("off", "off"),)
    for preset in PRESETS[:1] if quick else PRESETS:
        for precision in ("fp32", "bf16"):
            for max_tokens in ((None,) if quick else (None, 8000)):
                for fuse, graphs in modes:
                    rows.append({"preset": preset, "precision": precision + ("+tf32" if precision == "fp32"
                                 and device == "cuda" else ""), "max_tokens": max_tokens,
                                 "batch": "80 pairs" if max_tokens is None else f"max-tokens {max_tokens}",
                                 "fuse": fuse, "cuda_graphs": graphs})
    return rows


def row_priority(row: dict[str, Any]) -> tuple:
    """The order the rows are timed in: those the issue's targets name first (rnnsearch-50, bf16,
    8,000 tokens), each in MODES' order, so that a spent budget skips the least wanted ones."""
    return (row["preset"] != "rnnsearch-50", not row["precision"].startswith("bf16"), row["max_tokens"] is None,
            MODES.index((row["fuse"], row["cuda_graphs"])))


def run_tests(cmd: list[str], cwd: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run a pytest command line; past `timeout` seconds kill it and keep what it printed so far.
    Returns its exit code (None when killed), last line, skip reasons, failures and seconds."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            code: int | None = proc.wait(timeout=max(0.1, timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
        log.seek(0)
        lines = log.read().strip().splitlines()
    out: dict[str, Any] = {
        "exit_code": code, "summary": lines[-1] if lines else "",
        "skipped": sorted({ln.split("] ", 1)[-1] for ln in lines if ln.startswith("SKIPPED")}),
        "failed": [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))], "seconds": time.perf_counter() - t0}
    if code is None:
        out["timed_out"] = f"killed after {timeout:.0f} s; output so far: " + " / ".join(lines[-5:])
    elif code:
        out["output_tail"] = "\n".join(lines[-60:])
    return out


def problems(report: dict) -> list[str]:
    """What a reader must look at first: failed sections, tests, rows; compiles inside a timed
    window; more than one host read per update; a body over the graph bound."""
    out = []
    for name in ("environment", "tests", "train", "run", "translate", "profile"):
        sec = report.get(name)
        if isinstance(sec, dict) and "error" in sec:
            out.append(f"section {name} failed: {sec['error']}")
    t = report.get("tests")
    if isinstance(t, dict) and t.get("exit_code") not in (0, None):
        out.append(f"make test-gpu failed: {t.get('summary')}; {'; '.join(t.get('failed', []))}")
    if isinstance(t, dict) and t.get("timed_out"):
        out.append(f"make test-gpu did not finish: {t['timed_out']}")
    for r in report.get("train") if isinstance(report.get("train"), list) else []:
        what = f"{r['preset']} {r['precision']} {r['batch']} fuse {r['fuse']} cuda-graphs {r['cuda_graphs']}"
        if "error" in r:
            out.append(f"train {what}: {r['error']}")
        elif r.get("compiles_in_window"):
            out.append(f"train {what}: {r['compiles_in_window']} graphs compiled or captured inside the timed window")
    run = report.get("run")
    if isinstance(run, dict) and "error" not in run:
        if (run.get("host_reads_per_update_max") or 0) > 1:
            out.append(f"run: up to {run['host_reads_per_update_max']} host reads per update (budget 1)")
        over = {k: v for k, v in run.get("graphs_per_body", {}).items() if v > run.get("graph_bound", 0)}
        if over:
            out.append(f"run: step bodies over the graph bound {run.get('graph_bound')}: {over}")
    return out
