"""One training update: `train_step(context, batches)`.

Forward and backward over the update's minibatches (gradients summed), the gradient norm clipped
to --clip-norm, one optimiser step. A non-finite loss or gradient applies no step: --on-nan stop
raises, --on-nan skip drops the update (giving up after MAX_CONSECUTIVE_SKIPS in a row).
Hot path: one host synchronisation per update (the finiteness check of the gradient norm;
tests/test_host_reads.py counts them); losses accumulate on the device and are read at log
intervals only; source lengths stay on the host, where the packed recurrences are planned."""
from __future__ import annotations

import contextlib
import logging

import numpy as np
import torch

from nmtkit.data.binarized import collate
from nmtkit.errors import TrainingError
from nmtkit.io.dirs import LAST
from nmtkit.models.precision import autocast
from nmtkit.train import distributed as ddp
from nmtkit.train.context import TrainContext

log = logging.getLogger("nmtkit.train")

MAX_CONSECUTIVE_SKIPS = 50  # --on-nan skip gives up when the model itself has gone bad
# tests set this to `(update, loss_sum) -> loss_sum`, applied to each minibatch's loss (e.g. to inject a NaN)
_loss_hook = None


def train_step(ctx: TrainContext, batches: list[np.ndarray]) -> bool:
    """One update on the minibatches of `update_batches` (this rank trains on every
    world_size-th, `update_freq` of them at most), gradients summed over all of them; on success
    `ctx.state.update` counts it. False if it was skipped. Host reads: one (the finiteness check
    of the gradient norm)."""
    cfg, world = ctx.cfg, ctx.dist.world_size
    pairs = np.concatenate(batches)
    n_tgt = ctx.target_tokens(pairs)  # the update's target tokens (EOS included)
    denom = n_tgt if cfg.normalize_loss == "tokens" else len(pairs)
    lr = ctx.schedule.set_update(ctx.state.update)
    loss_total, nll_total, tokens_local = _forward_backward(ctx, batches[ctx.dist.rank :: world], world / denom)
    if ctx.scaler is not None:
        ctx.scaler.unscale_(ctx.optimizer)
    gnorm = torch.nn.utils.clip_grad_norm_(ctx.params, cfg.clip_norm if cfg.clip_norm > 0 else float("inf"))
    if ctx.scaler is not None:  # fp16: inf gradients are overflows the scaler handles
        bad = ddp.any_flag(not bool(torch.isfinite(loss_total)), ctx.dist, ctx.device)
    else:  # after DDP's all-reduce the norm is the same on every rank
        bad = not bool(torch.isfinite(gnorm))
    if bad:
        ctx.optimizer.zero_grad(set_to_none=True)
        _non_finite(ctx)
        return False
    ctx.consecutive_skips = 0
    if ctx.scaler is not None:
        ctx.scaler.step(ctx.optimizer)
        ctx.scaler.update()
    else:
        ctx.optimizer.step()
    ctx.optimizer.zero_grad(set_to_none=True)
    ctx.acc.add(loss_total, nll_total, gnorm, tokens_local, n_tgt, len(pairs))
    ctx.lr = lr
    ctx.state.update += 1
    if ctx.ema is not None:
        ctx.ema.update(ctx.state.update)
    return True


def _forward_backward(ctx: TrainContext, mine: list[np.ndarray], scale: float
                      ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Forward and backward over this rank's minibatches `mine`, each loss sum multiplied by
    `scale` (world size / the update's denominator: DDP averages gradients over ranks, so the
    result is d(sum over the update)/denominator). Returns the summed loss and NLL (device
    scalars, detached) and this rank's target tokens."""
    non_blocking = ctx.device.type == "cuda"
    loss_total = nll_total = None
    tokens_local = 0
    for k, batch in enumerate(mine):
        src, src_lens, tgt_in, tgt_out = collate(*ctx.arrays, batch)
        # the lengths stay on the host: the models plan their packed recurrences there
        src, tgt_in, tgt_out = (torch.from_numpy(a).to(ctx.device, non_blocking=non_blocking)
                                for a in (src, tgt_in, tgt_out))
        src_lens = torch.from_numpy(src_lens)
        n_batch = ctx.target_tokens(batch)
        # DDP all-reduces the gradients once, in the last minibatch's backward
        last = k == len(mine) - 1
        with contextlib.nullcontext() if last or not ctx.dist.enabled else ctx.loss_module.no_sync():
            with autocast(ctx.device.type, ctx.precision):
                loss_sum, nll_sum, _ = ctx.loss_module(src, src_lens, tgt_in, tgt_out, n_batch)
            if _loss_hook is not None:
                loss_sum = _loss_hook(ctx.state.update, loss_sum)
            loss = loss_sum * scale
            if ctx.scaler is not None:
                ctx.scaler.scale(loss).backward()
            else:
                loss.backward()
        loss_total = loss_sum.detach() if loss_total is None else loss_total + loss_sum.detach()
        nll_total = nll_sum.detach() if nll_total is None else nll_total + nll_sum.detach()
        tokens_local += n_batch
    assert loss_total is not None and nll_total is not None
    return loss_total, nll_total, tokens_local


def _non_finite(ctx: TrainContext) -> None:
    """--on-nan stop: raise. --on-nan skip: count the skipped update, and raise after
    MAX_CONSECUTIVE_SKIPS in a row."""
    st = ctx.state
    where = f"update {st.update + 1} (epoch {st.epoch}, minibatch {st.batch_in_epoch})"
    if ctx.cfg.on_nan == "stop":
        last = ctx.run_dir / LAST
        hint = (f"the last checkpoint ({last}) is untouched: resume it with --on-nan skip to skip such minibatches, "
                "or start a new run with a lower --lr" if last.exists() else "no checkpoint was written yet")
        raise TrainingError(f"non-finite loss or gradient (nan/inf) at {where}: stopped; {hint}")
    st.skipped_batches += 1
    ctx.consecutive_skips += 1
    log.warning("non-finite loss or gradient at %s: minibatch skipped", where)
    ctx.cb.on_message(f"non-finite loss at {where}: minibatch skipped")
    if ctx.consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
        raise TrainingError(f"{ctx.consecutive_skips} minibatches in a row had a non-finite loss "
                            f"(last at {where}): the model has diverged; start a new run with a lower --lr "
                            "(a resumed run keeps its --lr)")
