"""Optimiser settings, the learning-rate schedule and the presets' training procedure."""
from __future__ import annotations

import pytest
import torch

from nmtkit.train.config import TrainConfig
from nmtkit.train.config import training_defaults as train_defaults
from nmtkit.train.context import LRSchedule, build_optimizer


def _cfg(**kw):
    return TrainConfig(max_updates=10, **kw)


def test_warmup_is_linear_then_constant():
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(2))], _cfg(optimizer="adam", lr=1e-3, warmup_updates=4))
    sched = LRSchedule(opt, _cfg(optimizer="adam", lr=1e-3, warmup_updates=4))
    assert [round(sched.lr_at(u), 8) for u in range(6)] == [2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3]
    sched.set_update(0)
    assert opt.param_groups[0]["lr"] == pytest.approx(2.5e-4)


def test_plateau_decay_after_patience_and_floor_and_state_round_trip():
    cfg = _cfg(optimizer="adam", lr=1.0, lr_schedule="plateau", lr_decay=0.5, lr_patience=1, min_lr=0.2)
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg)
    s = LRSchedule(opt, cfg)
    decays = [s.on_validation(x) for x in (3.0, 2.0, 2.5, 2.6, 2.7, 2.8, 1.0)]
    assert decays == [False, False, False, True, False, True, False]
    assert s.lr_at(100) == pytest.approx(0.25)
    assert [s.on_validation(9.0) for _ in range(4)] == [False, True, False, False]  # 0.125 -> floored at 0.2
    assert s.lr_at(100) == pytest.approx(0.2)
    s2 = LRSchedule(opt, cfg)
    s2.load_state_dict(s.state_dict())
    assert s2.state_dict() == s.state_dict() and s2.lr_at(5) == s.lr_at(5)


@pytest.mark.parametrize("min_lr,lrs", [(0.3, [0.125, 0.25, 0.3]), (0.25, [0.125, 0.25, 0.25])])
def test_min_lr_is_the_floor_from_the_end_of_the_warmup_and_a_decay_to_or_past_it_is_the_last(min_lr, lrs):
    cfg = _cfg(optimizer="adam", lr=1.0, lr_schedule="plateau", lr_decay=0.5, lr_patience=0, min_lr=min_lr,
               warmup_updates=2)
    s = LRSchedule(build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg), cfg)
    assert [s.on_validation(3.0) for _ in range(5)] == [False, True, True, False, False]  # decay 0.5, 0.25
    assert [s.lr_at(u) for u in (0, 1, 2)] == pytest.approx(lrs)  # warm-up 0.5, 1, then at least the floor


def test_bleu_plateau_counts_higher_as_better():
    cfg = _cfg(optimizer="adam", lr_schedule="plateau", best_metric="bleu", lr_patience=0)
    s = LRSchedule(build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg), cfg)
    assert [s.on_validation(x) for x in (10.0, 12.0, 11.0)] == [False, False, True]


def test_optimizers_are_the_requested_ones_with_paper_hyperparameters():
    p = [torch.nn.Parameter(torch.zeros(3))]
    ada = build_optimizer(p, _cfg())
    assert isinstance(ada, torch.optim.Adadelta)
    assert ada.defaults["rho"] == 0.95 and ada.defaults["eps"] == 1e-6 and ada.defaults["lr"] == 1.0
    adam = build_optimizer(p, _cfg(optimizer="adam", lr=1e-3, adam_beta2=0.98))
    assert isinstance(adam, torch.optim.Adam) and adam.defaults["betas"] == (0.9, 0.98)
    assert isinstance(build_optimizer(p, _cfg(optimizer="sgd", lr=0.1)), torch.optim.SGD)


@pytest.mark.parametrize("preset, max_len", [("rnnsearch-30", 30), ("rnnsearch-50", 50), ("rnnencdec-30", 30),
                                             ("rnnencdec-50", 50)])
def test_paper_presets_default_to_the_papers_procedure(preset, max_len):
    d = train_defaults(preset.split("-")[0], preset)
    cfg = TrainConfig(**d, max_updates=1)
    assert (cfg.optimizer, cfg.lr, cfg.adadelta_rho, cfg.adadelta_eps, cfg.clip_norm) == ("adadelta", 1.0, 0.95, 1e-6, 1.0)
    assert (cfg.batch_size, cfg.sort_pool, cfg.max_len, cfg.normalize_loss) == (80, 1600, max_len, "sentences")


def test_small_preset_defaults_to_adam():
    cfg = TrainConfig(**train_defaults("rnnsearch", "small"), max_updates=1)
    assert (cfg.optimizer, cfg.lr, cfg.batch_size, cfg.normalize_loss) == ("adam", 1e-3, 64, "tokens")


@pytest.mark.parametrize("arch, procedure", [("rnnsearch", ("adadelta", 1.0, 80, 1.0, "sentences")),
                                           ("rnnencdec", ("adadelta", 1.0, 80, 1.0, "sentences")),
                                           ("lstm-attention", ("adam", 1e-3, 64, 5.0, "tokens"))])
def test_a_bare_arch_trains_with_its_presets_procedure_else_the_papers(arch, procedure):
    """--arch lstm-attention without --preset: the assignment's Adam and --clip-grad 5; a paper arch: Adadelta."""
    cfg = TrainConfig(**train_defaults(arch, None), max_updates=1)
    assert (cfg.optimizer, cfg.lr, cfg.batch_size, cfg.clip_norm, cfg.normalize_loss) == procedure


@pytest.mark.parametrize("preset, optimizer, lr", [(None, "adam", 1e-3), ("small", "adadelta", 1.0), (None, "sgd", 1.0),
                                                   ("small", "sgd", 1e-3), ("small", "adam", 1e-3)])
def test_an_optimizer_given_without_lr_gets_the_lr_the_help_gives_it(data_dir, preset, optimizer, lr):
    """--optimizer adam over a paper preset kept Adadelta's lr 1.0 (dev loss 5.7 -> 49.9 in one update),
    though --lr's help says [adadelta 1.0, adam 1e-3]; sgd keeps the preset's."""
    from nmtkit.train import _new_configs
    from nmtkit.train.config import TrainOptions
    from nmtkit.train.data import DataDir
    from nmtkit.train.presets import ModelOverrides

    options = TrainOptions(preset=preset, optimizer=optimizer, max_updates=1)
    assert _new_configs(DataDir.open(data_dir), options, ModelOverrides())[0].lr == lr


def test_a_token_budget_sorts_the_whole_corpus_unless_sort_pool_is_given(tmp_path, data_dir):
    import json

    from tests.conftest import run_cli, tiny_train_args

    for extra, pool in (([], 0), (["--sort-pool", "400"], 400)):
        run = tmp_path / f"run{pool}"
        code, _, err = run_cli(["train", "--data", str(data_dir), "--save-dir", str(run), *tiny_train_args(),
                                "--max-tokens", "300", *extra, "--max-updates", "1", "-q"])
        assert code == 0, err
        assert json.loads((run / "config.json").read_text())["train_config"]["sort_pool"] == pool


def test_clip_norm_scales_an_update_down_to_that_norm(data_dir, tmp_path):
    from nmtkit.train.context import train_step
    from tests.conftest import tiny_context

    ctx = tiny_context(data_dir, tmp_path / "run", optimizer="sgd", lr=1.0, clip_norm=1e-3)
    try:
        before = [p.detach().clone() for p in ctx.model.parameters()]
        assert train_step(ctx, ctx.epoch_plan(1)[:1])
        change = torch.cat([(p.detach() - b).flatten() for p, b in zip(ctx.model.parameters(), before)])
        assert float(change.norm()) == pytest.approx(1e-3, rel=1e-3)  # plain SGD at lr 1: the clipped gradient
    finally:
        ctx.close()


@pytest.mark.parametrize("normalize", ["sentences", "tokens"])
def test_normalize_loss_divides_the_updates_summed_loss_as_its_help_says(data_dir, tmp_path, normalize):
    """With --update-freq 2 the loss is divided by the update's pairs or target tokens (EOS included),
    as one minibatch of both: the help said "a minibatch's", which with --update-freq's "sum the
    gradients" promised N times the gradient."""
    import numpy as np

    from nmtkit.data.binarized import collate
    from nmtkit.train.context import train_step
    from tests.conftest import tiny_context

    assert "an update's summed loss" in TrainConfig.__dataclass_fields__["normalize_loss"].metadata["option"].help
    ctx = tiny_context(data_dir, tmp_path / "run", optimizer="sgd", lr=1.0, clip_norm=0.0, update_freq=2,
                       normalize_loss=normalize)
    try:
        batches = ctx.epoch_plan(1)[:2]
        pairs = np.concatenate(batches)
        denom = len(pairs) + (int(ctx.tgt_lens[pairs].sum()) if normalize == "tokens" else 0)
        for b in batches:  # the expected gradient, by the loss of each minibatch over the whole update's count
            src, src_lens, tgt_in, tgt_out = (torch.from_numpy(a) for a in collate(*ctx.arrays, b))
            (ctx.model.loss(src, src_lens, tgt_in, tgt_out)[0] / denom).backward()
        want = [p.detach() - p.grad for p in ctx.model.parameters()]  # plain SGD at lr 1, unclipped
        ctx.model.zero_grad(set_to_none=True)
        assert train_step(ctx, batches)
        for got, w in zip(ctx.model.parameters(), want):
            torch.testing.assert_close(got.detach(), w, rtol=1e-5, atol=1e-6)
    finally:
        ctx.close()
