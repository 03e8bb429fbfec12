"""The GPU-node setup on a CPU: `make test-gpu SYSTEM_TORCH=1` runs on an interpreter's own torch,
with nmtkit's other dependencies from the wheelhouse and no package index (slow: builds a venv)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make not installed")


def _distributions_of(names: list[str]) -> list[Path]:
    """The installed folders and .dist-info of these distributions (and their top-level modules)."""
    import importlib.metadata

    out: list[Path] = []
    for name in names:
        dist = importlib.metadata.distribution(name)
        tops = set()
        for f in dist.files or []:
            first = f.parts[0]
            if first.endswith(".dist-info") or not first.endswith((".pth", "__pycache__")) and first != "..":
                tops.add(first)
        out += [Path(dist.locate_file(t)) for t in sorted(tops)]
    return out


def interpreter_with_only_torch(root: Path) -> Path:
    """A fresh venv that imports torch (linked from this one, with torch's own dependencies) and
    none of nmtkit's other dependencies: a GPU node's Python, as far as nmtkit can tell."""
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(root)], check=True)
    site = next((root / "lib").glob("python*/site-packages"))
    linked = root / "torch-only"
    linked.mkdir()
    for src in _distributions_of(["torch", "filelock", "typing_extensions", "sympy", "mpmath", "networkx",
                                  "jinja2", "markupsafe", "fsspec"]):
        if src.exists() and not (linked / src.name).exists():
            (linked / src.name).symlink_to(src)
    (site / "torch-only.pth").write_text(str(linked) + "\n")
    return root / "bin" / "python"


@pytest.mark.slow
def test_make_test_gpu_runs_on_the_interpreters_torch_from_the_wheelhouse_without_an_index(tmp_path):
    wheelhouse = tmp_path / "wheelhouse"
    subprocess.run([sys.executable, str(REPO / "tools" / "wheelhouse.py"), "--out", str(wheelhouse)], check=True,
                   capture_output=True)
    python = interpreter_with_only_torch(tmp_path / "node")
    probe = "import importlib.util as u; print(bool(u.find_spec('torch')), bool(u.find_spec('sacremoses')))"
    assert subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout.split() == ["True", "False"]
    torch_before = subprocess.run([python, "-c", "import torch; print(torch.__file__)"], capture_output=True,
                                  text=True, check=True).stdout
    # no index: pip's own configuration (this machine's local index) is ignored and the index is off
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PYTHONPATH="")
    deps = tmp_path / "deps"
    proc = subprocess.run(["make", "test-gpu", f"PYTHON={python}", "SYSTEM_TORCH=1", f"WHEELHOUSE={wheelhouse}",
                           f"DEPS={deps}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "CUDA is not available" in proc.stdout and "skipped" in proc.stdout, proc.stdout[-3000:]
    assert (deps / "sacremoses").is_dir() and not (deps / "torch").exists()
    torch_after = subprocess.run([python, "-c", "import torch; print(torch.__file__)"], capture_output=True,
                                 text=True, check=True).stdout
    assert torch_after == torch_before
    # the GPU report in the same mode: without CUDA it says so and exits 0
    out = tmp_path / "report"
    proc = subprocess.run(["make", "gpu-report", f"OUT={out}", "QUICK=1", f"PYTHON={python}", "SYSTEM_TORCH=1",
                           f"WHEELHOUSE={wheelhouse}", f"DEPS={deps}"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CUDA is unavailable" in (out / "gpu-report.md").read_text()


@pytest.mark.slow  # every section, the fused 200-update run's compiling included: 10-45 s
def test_gpu_report_without_cuda_runs_what_it_can_says_so_and_exits_0(tmp_path):
    """benchmarks/gpu_report.py --quick (the CPU mode of `make gpu-report`): both files, every
    section present, the CPU's figures filled in, the GPU-only ones skipped with the reason."""
    import json

    import torch

    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_report.py"), "--out", str(tmp_path),
                           "--quick"], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu-report.json").read_text())
    md = (tmp_path / "gpu-report.md").read_text()
    assert report["environment"]["torch"] == torch.__version__ and report["environment"]["commit"]
    for section in ("tests", "train", "run", "translate", "profile"):
        assert section in report and "error" not in report[section], (section, report[section])
    assert report["tests"]["exit_code"] == 0
    assert all(r["compiles_in_window"] == 0 and r["tokens_per_s"] > 0 for r in report["train"])
    assert report["run"]["host_reads_per_update_max"] == 1
    if not torch.cuda.is_available():
        assert "CUDA is unavailable" in md and "CUDA is unavailable" in proc.stderr
        assert "needs CUDA" in report["profile"]["skipped"]
    assert "| small | fp32 | 80 pairs | off |" in md
    assert report["problems"] == [] and "## Problems\n\n- none found" in md


def test_gpu_report_lists_what_went_wrong_first():
    from devtools.report import problems

    report = {"tests": {"exit_code": 1, "summary": "1 failed", "failed": ["FAILED tests/test_cuda.py::x"]},
              "train": [{"preset": "small", "precision": "bf16", "batch": "80 pairs", "fuse": "on",
                         "cuda_graphs": "on", "compiles_in_window": 2},
                        {"preset": "small", "precision": "fp32", "batch": "80 pairs", "fuse": "off",
                         "cuda_graphs": "off", "compiles_in_window": 0}],
              "run": {"host_reads_per_update_max": 3, "graphs_per_body": {"_fwd_step": 9}, "graph_bound": 6},
              "profile": {"error": "RuntimeError: boom"}}
    found = problems(report)
    assert len(found) == 5, found
    assert any("2 graphs compiled or captured inside the timed window" in p for p in found)
    assert any("3 host reads" in p for p in found) and any("_fwd_step" in p for p in found)
    assert any("profile failed" in p for p in found) and any("test-gpu failed" in p for p in found)


def test_gpu_report_runs_only_the_sections_asked_for_and_refuses_unknown_ones(tmp_path):
    import json

    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_report.py"), "--out", str(tmp_path),
                           "--quick", "--sections", "translate"], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu-report.json").read_text())
    assert "translate" in report and not {"train", "run", "profile", "tests"} & report.keys()
    assert report["translate"]["fuse off"]["decoded"] == report["translate"]["sentences"] > 0
    assert "stopped" not in report["translate"]["fuse off"]
    cut = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_report.py"), "--out", str(tmp_path / "cut"),
                          "--quick", "--sections", "translate", "--budget", "0.001"], cwd=REPO, capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert cut.returncode == 0, cut.stderr[-3000:]
    off = json.loads((tmp_path / "cut" / "gpu-report.json").read_text())["translate"]["fuse off"]
    assert off["decoded"] == 0 and off["tgt_tokens_per_s"] is None and "spent after 0 of" in off["stopped"]
    bad = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_report.py"), "--out", str(tmp_path / "x"),
                          "--sections", "train,bogus"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--sections" in bad.stderr and not (tmp_path / "x").exists()


def test_gpu_report_tests_past_their_time_are_killed_with_their_output_kept_and_listed_as_a_problem():
    from devtools.report import problems, run_tests

    slow = [sys.executable, "-c", "import time; print('..s', flush=True); time.sleep(60)"]
    out = run_tests(slow, str(REPO), dict(os.environ), timeout=2)
    assert out["exit_code"] is None and out["seconds"] < 30
    assert out["timed_out"].startswith("killed after") and "..s" in out["timed_out"]
    assert any("did not finish" in p for p in problems({"tests": out}))
    done = run_tests([sys.executable, "-c", "print('1 passed')"], str(REPO), dict(os.environ), timeout=60)
    assert done["exit_code"] == 0 and done["summary"] == "1 passed" and "timed_out" not in done
    assert problems({"tests": done}) == []


def test_gpu_report_times_the_rows_the_targets_name_first():
    from devtools.report import row_priority, train_rows

    rows = sorted(train_rows("cuda", quick=False), key=row_priority)
    assert len(rows) == 24
    first = [(r["preset"], r["precision"], r["batch"], r["fuse"], r["cuda_graphs"]) for r in rows[:4]]
    assert first == [("rnnsearch-50", "bf16", "max-tokens 8000", "off", "on"),
                     ("rnnsearch-50", "bf16", "max-tokens 8000", "off", "off"),
                     ("rnnsearch-50", "bf16", "max-tokens 8000", "on", "on"),
                     ("rnnsearch-50", "bf16", "80 pairs", "off", "on")]
    assert all(r["preset"] == "small" for r in rows[12:])
