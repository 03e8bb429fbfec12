"""What the GPU report (benchmarks/gpu_report.py) puts first: the problems its sections found.

Here rather than in the benchmark so that the tests check the rules without importing benchmarks/.
"""
from __future__ import annotations


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
        what = f"{r['preset']} {r['precision']} {r['batch']} fuse {r['fuse']}"
        if "error" in r:
            out.append(f"train {what}: {r['error']}")
        elif r.get("compiles_in_window"):
            out.append(f"train {what}: {r['compiles_in_window']} graphs compiled inside the timed window")
    run = report.get("run")
    if isinstance(run, dict) and "error" not in run:
        if (run.get("host_reads_per_update_max") or 0) > 1:
            out.append(f"run: up to {run['host_reads_per_update_max']} host reads per update (budget 1)")
        over = {k: v for k, v in run.get("graphs_per_body", {}).items() if v > run.get("graph_bound", 0)}
        if over:
            out.append(f"run: step bodies over the graph bound {run.get('graph_bound')}: {over}")
    return out
