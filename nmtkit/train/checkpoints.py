"""The checkpoints a training run writes (rank 0 only) into its run directory:
  checkpoint_last.pt  the whole training state (model, optimiser, schedule, grad scaler, RNG
                      states of every rank, `TrainState`): --resume continues from it exactly
  checkpoint_best.pt  the model at the best dev score (no optimiser state)
  checkpoint_N.pt     the model at update N, every --keep-every updates (no optimiser state)
Each also carries what decoding needs: configs, vocabularies, the text pipeline, and the
decode-time shortlist's lexicon (`nmtkit.decode.shortlist`), a checkpoint artefact computed
once per run from the training data and read back from checkpoint_last.pt on --resume.
"""
from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

import torch

from nmtkit.checkpoint import make_checkpoint, save_checkpoint
from nmtkit.io.dirs import BEST, LAST, discard_replaced
from nmtkit.train.context import TrainContext
from nmtkit.train.rng import gather_rng_states, rng_state

log = logging.getLogger("nmtkit.train")

__all__ = ["BEST", "LAST", "RunCheckpoints", "run_lexicon"]


def run_lexicon(ctx: TrainContext) -> torch.Tensor | None:
    """The lexicon the run's checkpoints carry (rank 0 only; None on other ranks): the resumed
    checkpoint's, else built from the training split (about a second of numpy)."""
    if not ctx.dist.is_main:
        return None
    if ctx.resumed_lexicon is not None:
        return ctx.resumed_lexicon
    from nmtkit.decode.shortlist import build_lexicon

    data = ctx.data
    return torch.from_numpy(build_lexicon(*ctx.arrays, len(data.src_vocab), len(data.tgt_vocab), seed=ctx.cfg.seed))


class RunCheckpoints:
    """Writes the run's checkpoints from the context's current state."""

    def __init__(self, ctx: TrainContext, lexicon: torch.Tensor | None):
        self.ctx = ctx
        self.lexicon = lexicon

    def checkpoint(self, with_optimizer: bool = True, rng_states: list[dict[str, Any]] | None = None
                   ) -> dict[str, Any]:
        """The dict saved to checkpoint_*.pt (primitives and tensors only)."""
        ctx = self.ctx
        training: dict[str, Any] = {
            "trainer": {**asdict(ctx.state), "world_size": ctx.dist.world_size},
            "schedule_state": ctx.schedule.state_dict(),
            "rng": {"ranks": rng_states if rng_states is not None else [rng_state(ctx.device)]},
        }
        if with_optimizer:
            training["optimizer_state"] = ctx.optimizer.state_dict()
            training["scaler_state"] = ctx.scaler.state_dict() if ctx.scaler is not None else None
        data = ctx.data
        return make_checkpoint(
            arch=ctx.arch, model_config=ctx.model_config, model_state=ctx.model.state_dict(),
            pipeline=data.pipeline, src_lang=data.src_lang, tgt_lang=data.tgt_lang,
            src_vocab=data.src_vocab.to_list(), tgt_vocab=data.tgt_vocab.to_list(),
            train_config=ctx.cfg.to_dict(), data_manifest=data.manifest, training=training,
            lexicon=self.lexicon,
        )

    def save_last(self) -> None:
        """checkpoint_last.pt (a collective: every rank calls it, for its RNG states)."""
        rng = gather_rng_states(self.ctx.dist, self.ctx.device)
        if self.ctx.dist.is_main:
            save_checkpoint(self.checkpoint(True, rng), self.ctx.run_dir / LAST)
            log.info("saved %s at update %d", LAST, self.ctx.state.update)
            discard_replaced(self.ctx.run_dir)  # the run --force replaces is gone once this one has a checkpoint

    def save_model(self, name: str) -> None:
        """The model as at this update, without optimiser state: checkpoint_best.pt, and
        checkpoint_<update>.pt every --keep-every updates."""
        if self.ctx.dist.is_main:
            save_checkpoint(self.checkpoint(False), self.ctx.run_dir / name)
            log.info("saved %s at update %d", name, self.ctx.state.update)
