"""The whole chain through the real command line, as a user's Makefile runs it (fairseq's
test_binaries style): preprocess raw text, train a tiny model for a few updates, translate
through a pipe and score. Fast (about 15 s on 2 cores), so it runs in the default `make test`;
the long runs on real corpora are the slow tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import TINY_MODEL

REPO = Path(__file__).resolve().parent.parent
EN = ["the cat sleeps", "a dog runs in the park", "my friend reads a book", "the children play outside",
      "she is writing a letter", "we eat bread and cheese", "it's raining today", "the old man walks slowly"]
FR = ["le chat dort", "un chien court dans le parc", "mon ami lit un livre", "les enfants jouent dehors",
      "elle écrit une lettre", "nous mangeons du pain et du fromage", "il pleut aujourd'hui",
      "le vieil homme marche lentement"]
TRAIN_ARGS = [f"--{k.replace('_', '-')}={v}" for k, v in TINY_MODEL.items()] + [
    "--arch", "rnnsearch", "--optimizer", "adam", "--lr", "0.01", "--batch-size", "8", "--threads", "1",
    "--device", "cpu", "--max-updates", "4", "--valid-every", "2", "--valid-bleu-samples", "3", "--quiet"]


def _write(prefix: Path, n: int, offset: int) -> Path:
    """n made-up pairs PREFIX.en / PREFIX.fr, capitalised and numbered like real text."""
    pairs = [(f"{EN[(k + offset) % 8].capitalize()}, number {k + offset}!",
              f"{FR[(k + offset) % 8].capitalize()}, numéro {k + offset} !") for k in range(n)]
    for lang, col in (("en", 0), ("fr", 1)):
        prefix.with_suffix("." + lang).write_text("".join(p[col] + "\n" for p in pairs), encoding="utf-8")
    return prefix


def _nmtkit(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "nmtkit", *args], input=stdin, capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, f"nmtkit {args[0]} failed:\n{proc.stderr}"
    return proc


def test_preprocess_train_translate_through_a_pipe_and_score(tmp_path):
    t0 = time.perf_counter()
    train, valid, test = _write(tmp_path / "train", 64, 0), _write(tmp_path / "valid", 6, 100), \
        _write(tmp_path / "test", 5, 200)
    data, run = tmp_path / "data", tmp_path / "run"
    _nmtkit("preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(train), "--valid", str(valid),
            "--test", str(test), "--dest", str(data), "--bpe", "60", "--bpe-min-frequency", "1", "--truecase",
            "--workers", "1", "--quiet")
    assert json.loads((data / "manifest.json").read_text(encoding="utf-8"))["splits"]["test"]["lines"] == 5

    _nmtkit("train", "--data", str(data), "--save-dir", str(run), *TRAIN_ARGS)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert max(r.get("update", 0) for r in records) == 4
    assert (run / "checkpoint_best.pt").is_file() and (run / "checkpoint_last.pt").is_file()

    # raw text in on stdin, raw text out on stdout, line for line (the checkpoint alone is enough)
    src = test.with_suffix(".en").read_text(encoding="utf-8")
    hyp = _nmtkit("translate", "-m", str(run / "checkpoint_best.pt"), "--beam", "3", "--max-len-b", "4",
                  "--batch-size", "2", stdin=src + "\n").stdout
    assert hyp.count("\n") == 6 and hyp.endswith("\n\n")  # the empty line stays empty
    hyp_file = tmp_path / "test.hyp.fr"
    hyp_file.write_text(hyp[:-1], encoding="utf-8")

    report = json.loads(_nmtkit("score", "--hyp", str(hyp_file), "--ref", str(test.with_suffix(".fr")),
                                "--json").stdout)
    text = json.dumps(report)
    assert "BLEU" in text and "chrF" in text and "TER" in text
    print(f"end to end: {time.perf_counter() - t0:.1f} s")
