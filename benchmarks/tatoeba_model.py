"""The benchmarks' trained model: Tatoeba en-fr (joint BPE 10k), the `small` preset trained briefly.

Shared by benchmarks/precisions.py and benchmarks/serve_load.py; DATA= points at the corpora
(default ../shared/data).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("DATA", REPO.parent / "shared" / "data"))
TATOEBA = DATA / "tatoeba-eng-fra"


def nmtkit(*args: str, threads: int, **kw) -> subprocess.CompletedProcess:
    """`python -m nmtkit ARGS` from this checkout, with OMP_NUM_THREADS=threads."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "nmtkit", *args], env=env, check=True, **kw)


def train_small_model(work: Path, minutes: float, threads: int) -> Path:
    """WORK/run/checkpoint_best.pt, made first when missing: preprocess Tatoeba (joint BPE 10k,
    --max-len 50) and train the small preset for `minutes` (as examples/tatoeba-en-fr does)."""
    ckpt = work / "run" / "checkpoint_best.pt"
    if ckpt.exists():
        return ckpt
    print(f"training a small model for {minutes} minutes in {work} ...", file=sys.stderr)
    nmtkit("preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(TATOEBA / "train"), "--valid",
           str(TATOEBA / "dev"), "--bpe", "10000", "--max-len", "50", "--dest", str(work / "data"), "--force",
           threads=threads)
    nmtkit("train", "--data", str(work / "data"), "--save-dir", str(work / "run"), "--preset", "small",
           "--optimizer", "adam", "--lr", "0.001", "--batch-size", "64", "--threads", str(threads),
           "--max-time", f"{minutes}m", "--valid-every", "1000", "--valid-bleu-samples", "100", "--force",
           threads=threads)
    return ckpt
