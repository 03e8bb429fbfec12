"""Slow: the GPU race harness (benchmarks/race.py) in its quick mode on the CPU (make test-slow)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RACE = REPO / "benchmarks" / "race.py"


@pytest.mark.slow
def test_the_race_trains_decodes_scores_and_reports_each_run_in_quick_mode(shared_data, tmp_path):
    peers = shared_data.parent / "peers-bench" / "prepare.py"
    if not peers.exists():
        pytest.skip(f"the peer benchmark's prepare.py is not at {peers}")
    data, out = tmp_path / "data", tmp_path / "out"
    subprocess.run([sys.executable, str(RACE), "prepare", "--quick", "--out", str(data)], check=True, cwd=REPO)
    assert (data / "train.bpe.en.gz").stat().st_size > 0 and (data / "dev.raw.fr").exists()
    runs = ["nmtkit", "nmtkit-best"] + (["opennmt-py"] if importlib.util.find_spec("onmt") else [])
    argv = [sys.executable, str(RACE), "run", "--quick", "--device", "cpu", "--data", str(data), "--out", str(out),
            "--work", str(tmp_path), "--runs", ",".join(runs), "--onmt-python", sys.executable]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in runs:
        r = json.loads((out / f"{name}.json").read_text())
        assert r["updates"] > 0 and r["peak_mb"] > 0 and r["tok_s"] > 0, r
        assert r["curve"] and all(0 <= p["bleu"] <= 100 and p["train_s"] <= r["budget_s"] for p in r["curve"]), r
        assert [p["updates"] for p in r["curve"]] == sorted(p["updates"] for p in r["curve"])
        assert r["final"]["updates"] == r["curve"][-1]["updates"]
    table = (out / "race.md").read_text().splitlines()
    assert [row.split("|")[1].strip() for row in table[2:]] == [n for n in ("nmtkit", "opennmt-py", "nmtkit-best")
                                                                 if n in runs]
    assert (out / "race.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
