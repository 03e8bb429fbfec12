"""Real data: the small preset trained on Tatoeba en-fr (BPE) for a few minutes learns (slow)."""
from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

TRAIN_SECONDS = 240


def test_small_preset_dev_loss_falls_well_below_start_on_tatoeba(shared_data, tmp_path):
    corpus = shared_data / "tatoeba-eng-fra"
    data, run = tmp_path / "data", tmp_path / "run"
    code, _, err = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(corpus / "train"),
                            "--valid", str(corpus / "dev"), "--bpe", "10000", "--max-len", "50", "--dest", str(data)],
                           process=True, timeout=3600)
    assert code == 0, err

    # the dev loss of the untrained model (same seed, same initialisation as the run)
    from nmtkit.models import build_model
    from nmtkit.train.data import DataDir
    from nmtkit.train.presets import resolve_model
    from nmtkit.train.validate import dev_loss

    d = DataDir.open(data)
    arch, cfg = resolve_model(None, "small", {}, len(d.src_vocab), len(d.tgt_vocab))
    torch.manual_seed(1)
    start, _ = dev_loss(build_model(arch, cfg), d.split("valid"), 64, torch.device("cpu"))

    code, _, err = run_cli(["train", "--data", str(data), "--save-dir", str(run), "--preset", "small",
                            "--max-time", str(TRAIN_SECONDS), "--valid-every", "50", "--valid-bleu-samples", "100",
                            "--log-every", "25", "--quiet",
                            # one thread: on a shared 2-core machine two OpenMP threads run several times slower
                            "--threads", "1"], process=True, timeout=3600)
    assert code == 0, err
    valid = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in valid if r["kind"] == "valid"]
    assert valid, "no validation in the time budget"
    best = min(r["loss"] for r in valid)
    assert best < 0.7 * start, (start, [r["loss"] for r in valid])
    assert all(r["bleu"] is not None for r in valid)
    ckpt = torch.load(run / "checkpoint_best.pt", weights_only=True)
    assert ckpt["pipeline"]["bpe"] is not None  # translate needs only the checkpoint
