"""`--ema-decay`: an exponential moving average of the weights, held to its equation in float64,
resumed exactly, validated on, and what every checkpoint holds as the model."""
from __future__ import annotations

import re

import pytest
import torch

from nmtkit.checkpoint import load_checkpoint
from nmtkit.errors import ConfigError
from nmtkit.train.context import WeightAverage
from tests.conftest import run_cli, tiny_config, tiny_options, tiny_overrides, train_run


def test_the_average_follows_its_equation_in_float64():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).double()
    D, start = 0.45, 2
    ema = WeightAverage(model, D, start)
    ref = [p.detach().clone() for p in model.parameters()]
    decays = []
    for u in range(1, 11):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        ema.update(u)
        d = min(D, (1 + u - start) / (10 + u - start))  # Marian's warm-up, then D
        decays.append(d)
        ref = [p.detach().clone() if u <= start else d * r + (1 - d) * p.detach()
               for r, p in zip(ref, model.parameters())]
        for got, want in zip(ema.tensors, ref):
            assert got.dtype == torch.float64 and torch.allclose(got, want, rtol=0, atol=1e-15)
    assert decays[2:] == [2 / 11, 3 / 12, 4 / 13, 5 / 14, 6 / 15, 7 / 16, D, D]  # warm-up until (1 + k) / (10 + k) > D
    state = ema.state_dict()
    assert torch.equal(state["weight"], ema.tensors[0]) and not torch.equal(state["weight"], model.weight)
    raw = model.weight.detach().clone()
    with ema.swapped_in():
        assert torch.equal(model.weight, ema.tensors[0])
    assert torch.equal(model.weight, raw)


def test_a_float32_model_keeps_a_float32_average_of_its_float32_weights():
    model = torch.nn.Linear(3, 2)
    ema = WeightAverage(model, 0.5, 0)
    with torch.no_grad():
        model.weight.add_(1.0)
    before = ema.tensors[0].clone()
    ema.update(10)  # past the warm-up: d = 0.5
    assert ema.tensors[0].dtype == torch.float32
    assert torch.allclose(ema.tensors[0], 0.5 * before + 0.5 * model.weight.detach())


def test_a_resumed_run_continues_the_average_exactly(data_dir, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    train_run(data_dir, straight, tiny_options(max_updates=6, valid_every=3, save_every=3, ema_decay=0.8, ema_start=1),
              tiny_overrides())
    train_run(data_dir, split, tiny_options(max_updates=3, valid_every=3, save_every=3, ema_decay=0.8, ema_start=1),
              tiny_overrides())
    train_run(data_dir, split, tiny_options(max_updates=6), resume=True)
    a, b = load_checkpoint(straight / "checkpoint_last.pt"), load_checkpoint(split / "checkpoint_last.pt")
    for key in ("model_state", "raw_model_state"):
        assert a[key].keys() == b[key].keys()
        for name in a[key]:
            assert torch.equal(a[key][name], b[key][name]), (key, name)
    # the model a checkpoint holds is the average, not the raw weights it trains on
    assert any(not torch.equal(a["model_state"][n], a["raw_model_state"][n]) for n in a["model_state"])


def test_validation_and_the_best_checkpoint_use_the_average(data_dir, tmp_path, monkeypatch):
    import nmtkit.train.trainer as trainer

    seen = []
    real = trainer.dev_scores

    def recording(ctx, stop=None):
        seen.append(all(torch.equal(p, t) for p, t in zip(ctx.model.parameters(), ctx.ema.tensors)))
        return real(ctx, stop)

    monkeypatch.setattr(trainer, "dev_scores", recording)
    run = tmp_path / "run"
    train_run(data_dir, run, tiny_options(max_updates=4, valid_every=2, keep_every=2, ema_decay=0.5), tiny_overrides())
    assert seen and all(seen)
    best, last = load_checkpoint(run / "checkpoint_best.pt"), load_checkpoint(run / "checkpoint_last.pt")
    assert "raw_model_state" not in best and "raw_model_state" in last
    code, out, err = run_cli(["translate", "-m", str(run / "checkpoint_last.pt"), "--beam", "2", "-q"], "the cat\n")
    assert code == 0, err
    code, _, err = run_cli(["average", "-m", str(run / "checkpoint_2.pt"), "-m", str(run / "checkpoint_4.pt"),
                            "-o", str(tmp_path / "avg.pt")])
    assert code == 0, err
    kept = [load_checkpoint(run / f"checkpoint_{u}.pt")["model_state"] for u in (2, 4)]
    avg = load_checkpoint(tmp_path / "avg.pt")["model_state"]
    name = next(n for n in avg if avg[n].is_floating_point())
    assert torch.allclose(avg[name], (kept[0][name] + kept[1][name]) / 2)  # the average of the averages


@pytest.mark.parametrize("changes, message", [
    (dict(ema_decay=1.0), "--ema-decay must be in [0, 1), got 1.0"),
    (dict(ema_decay=-0.5), "--ema-decay must be in [0, 1), got -0.5"),
    (dict(ema_start=5), "--ema-start needs --ema-decay"),
    (dict(ema_start=5, ema_decay=0.0), "--ema-start needs --ema-decay above 0"),
])
def test_bad_ema_options_are_one_clear_error(changes, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        tiny_config(**changes)


def test_the_small_preset_keeps_an_average_unless_ema_decay_is_zero(data_dir, tmp_path):
    """The small preset's default (docs/experiments.md: +2.5-3 dev BLEU at the peer benchmark's
    budget); `--ema-decay 0` trains without one."""
    for decay, averaged in ((None, True), (0.0, False)):
        run = tmp_path / f"run{decay}"
        given = {} if decay is None else {"ema_decay": decay}
        train_run(data_dir, run, tiny_options(preset="small", max_updates=2, valid_every=2, save_every=2,
                                              precision="fp32", **given), tiny_overrides())
        ckpt = load_checkpoint(run / "checkpoint_last.pt")
        assert ckpt["train_config"]["ema_decay"] == (0.998 if decay is None else 0.0)
        assert ("raw_model_state" in ckpt) is averaged
