"""The training loop: updates, validation, checkpoints, exact resume, signals, NaN guard, DDP.

Procedure (Bahdanau et al. 2015, section 4.2 / appendix B.2, the default for the paper's
presets): minibatches of 80 pairs cut from pools of 1600 pairs sorted by length
(`nmtkit.data.batching`), Adadelta, gradient L2 norm rescaled to at most 1.

The loop knows nothing of the CLI: it reports through a `Callbacks` object and the `nmtkit`
logger, and writes into the run directory (rank 0 only):
  checkpoint_last.pt  every --save-every updates, before each validation (an error in it loses
                      no update), at the end and on SIGINT/SIGTERM
  checkpoint_best.pt  whenever the dev metric improves (never from a non-finite score)
  checkpoint_N.pt     the model at update N, every --keep-every updates (no optimiser state)
  metrics.jsonl, curves.png, train.log (see `nmtkit.train.metrics`)

Exact resume: a checkpoint holds the model, optimiser, schedule and grad-scaler states, the RNG
states (python, numpy, torch, cuda) and the position in the data (epoch, index of the next
minibatch in the epoch's plan, which is a pure function of the seed and the epoch), so N updates
equal N/2 updates + resume + N/2 updates bit for bit on the CPU.

Hot path: one host synchronisation per update (the finiteness check of the gradient norm,
needed to skip or stop before a bad step is applied; tests/test_host_reads.py counts them);
losses are accumulated on the device and read at log intervals only, and the loss picks the
real target positions by the token count known on the host, not by a boolean mask.
"""
from __future__ import annotations

import contextlib
import logging
import math
import random
import signal
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from nmtkit.checkpoint import make_checkpoint, save_checkpoint
from nmtkit.data.batching import (
    BatchingConfig,
    collate,
    epoch_batches,
    keep_pairs,
    over_budget,
    update_batches,
)
from nmtkit.devices import resolve_device, threads_per_process
from nmtkit.errors import ConfigError, InputError, TrainingError
from nmtkit.models.fusion import resolve_fuse
from nmtkit.models.precision import FP16_ON_CPU, autocast, resolve_precision, set_tf32
from nmtkit.train import distributed as ddp
from nmtkit.train.accumulate import Accumulators
from nmtkit.train.config import TrainConfig
from nmtkit.train.data import DataDir
from nmtkit.train.metrics import MetricsLog, setup_file_log
from nmtkit.train.optim import LRSchedule, build_optimizer
from nmtkit.train.rng import gather_rng_states, restore_rng, rng_state
from nmtkit.train.state import Callbacks, TrainResult, TrainState
from nmtkit.train.stopping import StopSignals, stop_reason
from nmtkit.train.validate import check_dev_bleu, dev_bleu, dev_loss, perplexity

log = logging.getLogger("nmtkit.train")

LAST = "checkpoint_last.pt"
BEST = "checkpoint_best.pt"
MAX_CONSECUTIVE_SKIPS = 50  # --on-nan skip gives up when the model itself has gone bad
DDP_SYNC_EVERY = 10  # updates between the collective checks of stop signals / time in DDP


class Trainer:
    """Trains one model on one data directory into one run directory.

    `resume`: a checkpoint dict (from checkpoint_last.pt) to continue from, or None.
    `loss_hook(update, loss_sum) -> loss_sum`: test hook applied to each step's loss (e.g. to
    inject a NaN); None in normal use.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        data: DataDir,
        run_dir: str | Path,
        arch: str,
        model_config: dict[str, Any],
        *,
        resume: dict[str, Any] | None = None,
        callbacks: Callbacks | None = None,
        dist_info: ddp.DistInfo | None = None,
        loss_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
    ):
        self.cfg = cfg
        self.data = data
        self.run_dir = Path(run_dir)
        self.arch = arch
        self.model_config = dict(model_config)
        self.cb = callbacks or Callbacks()
        self.dist = dist_info or ddp.DistInfo()
        self.loss_hook = loss_hook
        self.state = TrainState()
        self.signals = StopSignals(self.cb.on_message)
        self._setup_device()
        self._setup_data()
        self._setup_model(resume)
        self._setup_run_dir(resume is not None)

    # ---- setup --------------------------------------------------------------------------
    def _setup_device(self) -> None:
        """Device, precision ("auto" resolved), CPU threads, the process group."""
        cfg = self.cfg
        self.device = resolve_device(cfg.device, self.dist.local_rank)
        self.precision = resolve_precision(self.device.type, cfg.precision)  # "auto" resolved
        if self.precision == "fp16" and self.device.type != "cuda" and self.dist.is_main:
            log.warning(FP16_ON_CPU)
        if self.precision == "bf16" and self.device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError("--precision bf16 is not supported by this GPU (use fp16)")
        self.tf32 = set_tf32(self.device.type, self.precision, cfg.tf32)
        torch.set_num_threads(cfg.threads or threads_per_process(self.dist.local_world_size))
        ddp.init(self.dist, self.device)

    def _setup_data(self) -> None:
        """The training pairs kept (--max-len), the batching, the dev split and its references."""
        cfg, data = self.cfg, self.data
        self.train_data = data.split("train")
        self.keep = keep_pairs(self.train_data.src.lengths, self.train_data.tgt.lengths, cfg.max_len)
        if len(self.keep) == 0:
            raise InputError(f"no training pair has both sides within --max-len {cfg.max_len}", str(data.path))
        self.dropped = len(self.train_data) - len(self.keep)
        self.batching = BatchingConfig(cfg.batch_size, cfg.max_tokens, cfg.sort_pool, shuffle=True)
        lens = (self.train_data.src.lengths[self.keep], self.train_data.tgt.lengths[self.keep])
        over, largest = over_budget(*lens, cfg.max_tokens) if cfg.max_tokens is not None else (0, 0)
        if over and self.dist.is_main:
            log.warning("--max-tokens %d is below the padded size of %d of the %d training pairs (up to %d "
                        "tokens): each forms a one-pair minibatch over the budget", cfg.max_tokens, over,
                        len(self.keep), largest)
        self._arrays = (np.asarray(self.train_data.src.ids), np.asarray(self.train_data.src.offsets),
                        np.asarray(self.train_data.tgt.ids), np.asarray(self.train_data.tgt.offsets))
        self._tgt_lens = self.train_data.tgt.lengths
        # the decoding shortlist's lexicon, stored in every checkpoint (about a second of numpy)
        self.lexicon = None
        if self.dist.is_main:
            from nmtkit.decode.shortlist import build_lexicon

            self.lexicon = torch.from_numpy(build_lexicon(*self._arrays, len(data.src_vocab), len(data.tgt_vocab),
                                                          seed=cfg.seed))
        self._plan_epoch: int | None = None
        self._plan: list[np.ndarray] = []
        self.valid_data = data.split("valid") if data.has_split("valid") else None
        if self.valid_data is None:
            raise InputError("no 'valid' split in the data directory (validation needs a dev set)", str(data.path))
        self.bleu_enabled = cfg.valid_bleu_samples > 0
        self._raw_refs = data.raw_references("valid") if self.bleu_enabled else None

    def _setup_model(self, resume: dict[str, Any] | None) -> None:
        """Model, optimiser, schedule, grad scaler (same initial weights on every rank: seeded
        identically), the resumed state, and the loss module DDP wraps."""
        from nmtkit.models import build_model

        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        np.random.seed(cfg.seed % 2**32)
        self.model = build_model(self.arch, self.model_config,
                                 fuse_steps=resolve_fuse(cfg.fuse, self.device)).to(self.device)
        self.optimizer = build_optimizer(self.model.parameters(), cfg)
        self.schedule = LRSchedule(self.optimizer, cfg)
        # fp16 needs loss scaling (its range is too small for gradients); bf16 and fp32 do not
        self.scaler = torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None
        if resume is not None:
            self._load_resume(resume)
        elif self.dist.rank > 0:
            torch.manual_seed(cfg.seed + 7919 * self.dist.rank)  # own dropout masks per rank
        self.loss_module: nn.Module = ddp.LossModule(self.model, cfg.label_smoothing, cfg.loss_chunk_tokens)
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.loss_module = DistributedDataParallel(self.loss_module, device_ids=ids)
        self._params = [p for p in self.model.parameters() if p.requires_grad]

    def _setup_run_dir(self, resumed: bool) -> None:
        """Rank 0: the run directory (stale temp files of a killed write removed), metrics, log."""
        self.metrics: MetricsLog | None = None
        self._log_handler: logging.Handler | None = None
        if self.dist.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            for stale in self.run_dir.glob("checkpoint_*.pt.*.tmp"):  # a write cut by SIGKILL
                stale.unlink(missing_ok=True)
            self.metrics = MetricsLog(self.run_dir, self.state.update if resumed else None)
            self._log_handler = setup_file_log(self.run_dir)

    # ---- resume -------------------------------------------------------------------------
    def _load_resume(self, ckpt: dict[str, Any]) -> None:
        self.model.load_state_dict(ckpt["model_state"])
        self.optimizer.load_state_dict(ckpt["optimizer_state"])
        self.schedule.load_state_dict(ckpt["schedule_state"])
        if self.scaler is not None and ckpt.get("scaler_state"):
            self.scaler.load_state_dict(ckpt["scaler_state"])
        tr = dict(ckpt["trainer"])
        tr.pop("world_size", None)
        self.state = TrainState(**tr)
        restore_rng(ckpt.get("rng") or {}, self.dist.rank, self.cfg.seed, self.state.update, self.device)

    # ---- checkpoints --------------------------------------------------------------------
    def checkpoint(self, with_optimizer: bool = True, rng_states: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The dict saved to checkpoint_*.pt (primitives and tensors only)."""
        training: dict[str, Any] = {
            "trainer": {**asdict(self.state), "world_size": self.dist.world_size},
            "schedule_state": self.schedule.state_dict(),
            "rng": {"ranks": rng_states if rng_states is not None else [rng_state(self.device)]},
        }
        if with_optimizer:
            training["optimizer_state"] = self.optimizer.state_dict()
            training["scaler_state"] = self.scaler.state_dict() if self.scaler is not None else None
        return make_checkpoint(
            arch=self.arch, model_config=self.model_config, model_state=self.model.state_dict(),
            pipeline=self.data.pipeline, src_lang=self.data.src_lang, tgt_lang=self.data.tgt_lang,
            src_vocab=self.data.src_vocab.to_list(), tgt_vocab=self.data.tgt_vocab.to_list(),
            train_config=self.cfg.to_dict(), data_manifest=self.data.manifest, training=training,
            lexicon=self.lexicon,
        )

    def save_last(self) -> None:
        rng = gather_rng_states(self.dist, self.device)  # collective: every rank calls it
        if self.dist.is_main:
            save_checkpoint(self.checkpoint(True, rng), self.run_dir / LAST)
            log.info("saved %s at update %d", LAST, self.state.update)

    def _save_model(self, name: str) -> None:
        """The model as at this update, without optimiser state: checkpoint_best.pt, and
        checkpoint_<update>.pt every --keep-every updates."""
        if self.dist.is_main:
            save_checkpoint(self.checkpoint(False), self.run_dir / name)
            log.info("saved %s at update %d", name, self.state.update)

    # ---- data ---------------------------------------------------------------------------
    def epoch_plan(self, epoch: int) -> list[np.ndarray]:
        if self._plan_epoch != epoch:
            self._plan = epoch_batches(self.train_data.src.lengths, self._tgt_lens, self.batching,
                                       self.cfg.seed, epoch, self.keep)
            self._plan_epoch = epoch
        return self._plan

    def request_stop(self, signum: int = signal.SIGINT) -> None:
        """Stop after the current update as if `signum` had arrived (for embedding and tests)."""
        self.signals.received = signum

    # ---- one update ---------------------------------------------------------------------
    def _step(self, batches: list[np.ndarray]) -> bool:
        """One update on the minibatches of `update_batches` (this rank trains on every
        world_size-th, `update_freq` of them at most), gradients summed over all of them. False if
        it was skipped. Host reads: one (the finiteness check of the gradient norm)."""
        cfg, world = self.cfg, self.dist.world_size
        mine = batches[self.dist.rank :: world]
        pairs = np.concatenate(batches)
        n_tgt = int(self._tgt_lens[pairs].sum()) + len(pairs)  # the update's target tokens (EOS included)
        denom = n_tgt if cfg.normalize_loss == "tokens" else len(pairs)
        lr = self.schedule.set_update(self.state.update)
        non_blocking = self.device.type == "cuda"
        loss_total = nll_total = None
        tokens_local = 0
        for k, batch in enumerate(mine):
            src, src_lens, tgt_in, tgt_out = (torch.from_numpy(a).to(self.device, non_blocking=non_blocking)
                                              for a in collate(*self._arrays, batch))
            n_batch = int(self._tgt_lens[batch].sum()) + len(batch)  # its target tokens, EOS included
            # DDP all-reduces the gradients once, in the last minibatch's backward
            last = k == len(mine) - 1
            with contextlib.nullcontext() if last or not self.dist.enabled else self.loss_module.no_sync():
                with autocast(self.device.type, self.precision):
                    loss_sum, nll_sum, _ = self.loss_module(src, src_lens, tgt_in, tgt_out, n_batch)
                if self.loss_hook is not None:
                    loss_sum = self.loss_hook(self.state.update, loss_sum)
                # DDP averages gradients over ranks; scale so the result is d(sum over the update)/denom
                loss = loss_sum * (world / denom)
                if self.scaler is not None:
                    self.scaler.scale(loss).backward()
                else:
                    loss.backward()
            loss_total = loss_sum.detach() if loss_total is None else loss_total + loss_sum.detach()
            nll_total = nll_sum.detach() if nll_total is None else nll_total + nll_sum.detach()
            tokens_local += n_batch
        assert loss_total is not None and nll_total is not None
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        max_norm = cfg.clip_norm if cfg.clip_norm > 0 else float("inf")
        gnorm = torch.nn.utils.clip_grad_norm_(self._params, max_norm)
        if self.scaler is not None:  # fp16: inf gradients are overflows the scaler handles
            bad = ddp.any_flag(not bool(torch.isfinite(loss_total)), self.dist, self.device)
        else:  # after DDP's all-reduce the norm is the same on every rank
            bad = not bool(torch.isfinite(gnorm))
        if bad:
            self.optimizer.zero_grad(set_to_none=True)
            self._non_finite(pairs)
            return False
        self._consecutive_skips = 0
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.acc.add(loss_total, nll_total, gnorm, tokens_local, n_tgt, len(pairs))
        self._lr = lr
        return True

    def _non_finite(self, batch: np.ndarray) -> None:
        where = f"update {self.state.update + 1} (epoch {self.state.epoch}, minibatch {self.state.batch_in_epoch})"
        if self.cfg.on_nan == "stop":
            last = self.run_dir / LAST
            hint = (f"the last checkpoint ({last}) is untouched; resume with --resume and a lower --lr, "
                    "or with --on-nan skip" if last.exists() else "no checkpoint was written yet")
            raise TrainingError(f"non-finite loss or gradient (nan/inf) at {where}: stopped; {hint}")
        self.state.skipped_batches += 1
        self._consecutive_skips += 1
        log.warning("non-finite loss or gradient at %s: minibatch skipped", where)
        self.cb.on_message(f"non-finite loss at {where}: minibatch skipped")
        if self._consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
            raise TrainingError(f"{self._consecutive_skips} minibatches in a row had a non-finite loss "
                                f"(last at {where}): the model has diverged; resume from a checkpoint "
                                "with a lower --lr")

    def _reset_acc(self) -> None:
        self.acc = Accumulators(self.device)

    def _log_interval(self) -> None:
        """Read the accumulated statistics (the only host reads of losses) and write a record."""
        acc = self.acc
        if acc.updates == 0:
            return
        obj, nll, gnorm_sum, tokens = acc.read(self.dist)
        seconds = max(1e-9, time.perf_counter() - acc.start)
        loss = nll / max(1.0, tokens)
        rec = {
            "kind": "train", "update": self.state.update, "epoch": self.state.epoch,
            "loss": loss, "ppl": perplexity(loss), "objective": obj / max(1.0, tokens),
            "grad_norm": gnorm_sum / acc.updates / (self.dist.world_size if self.dist.enabled else 1),
            "lr": self._lr, "tgt_tokens_per_s": acc.tokens_global / seconds,
            "sents_per_s": acc.sents / seconds, "updates_per_s": acc.updates / seconds,
            "elapsed": self._elapsed(), "skipped": self.state.skipped_batches,
        }
        acc.reset()
        if self.dist.is_main:
            assert self.metrics is not None
            self.metrics.write(rec)
            log.info("update %d epoch %d loss %.4f ppl %.2f lr %.3g tok/s %.0f", rec["update"], rec["epoch"],
                     rec["loss"], rec["ppl"], rec["lr"], rec["tgt_tokens_per_s"])
            self.cb.on_log(rec)

    # ---- validation ---------------------------------------------------------------------
    def validate(self, final: bool = False) -> dict[str, Any]:
        """Dev loss (and BLEU); keeps checkpoint_best.pt. A `final` validation, run when training
        stops between two scheduled ones, may update the best checkpoint but leaves the learning-rate
        schedule and the early-stopping counter alone, so a later --resume continues exactly."""
        cfg = self.cfg
        t0 = time.perf_counter()
        loss, bleu = float("nan"), float("nan")
        if self.dist.is_main:
            assert self.valid_data is not None
            loss, _ = dev_loss(self.model, self.valid_data, cfg.valid_batch_size, self.device, self.precision,
                               cfg.loss_chunk_tokens)
            if self.bleu_enabled:
                bleu, _, _ = dev_bleu(self.model, self.valid_data, self.data.tgt_vocab, self.data.pipeline,
                                      cfg.valid_bleu_samples, cfg.valid_beam, cfg.valid_batch_size, self.device,
                                      self._raw_refs, self.precision)
        loss, bleu = ddp.broadcast_floats([loss, bleu], self.dist, self.device)
        st = self.state
        score = bleu if cfg.best_metric == "bleu" else loss
        improved = st.record_validation(score, cfg.best_metric == "bleu", final)
        if not final and self.schedule.on_validation(score):
            msg = f"dev {cfg.best_metric} did not improve: learning rate decayed to {self.schedule.lr_at(st.update):.3g}"
            log.info(msg)
            self.cb.on_message(msg)
        rec = {
            "kind": "valid", "update": st.update, "epoch": st.epoch, "loss": loss, "ppl": perplexity(loss),
            "bleu": bleu if math.isfinite(bleu) else None, "best": improved, "best_score": st.best_score,
            "best_update": st.best_update, "seconds": time.perf_counter() - t0, "elapsed": self._elapsed(),
            "final": final,
        }
        if improved:
            self._save_model(BEST)
        if self.dist.is_main:
            assert self.metrics is not None
            self.metrics.write(rec)
            self.metrics.draw_curves()
            log.info("validation at update %d: dev loss %.4f ppl %.2f bleu %s%s", st.update, loss, rec["ppl"],
                     "-" if rec["bleu"] is None else f"{bleu:.2f}", " (best)" if improved else "")
            self.cb.on_validation(rec)
        return rec

    # ---- the loop -----------------------------------------------------------------------
    def _elapsed(self) -> float:
        return self.state.elapsed + (time.perf_counter() - self._session_start)

    def _stop_reason(self, check_collective: bool) -> str | None:
        return stop_reason(self.cfg, self.state, self.signals.received, self._elapsed(), self.dist, self.device,
                           check_collective)

    def train(self) -> TrainResult:
        """Train until a stopping criterion; always leaves checkpoint_last.pt of the final state."""
        cfg, st = self.cfg, self.state
        self._session_start = time.perf_counter()
        self._consecutive_skips = 0
        self._saved_update: tuple[int, int | None] | None = None
        self._lr = self.schedule.lr_at(st.update)
        self._reset_acc()
        plan_len = len(self.epoch_plan(st.epoch))
        self.cb.on_start({
            "update": st.update, "epoch": st.epoch, "max_updates": cfg.max_updates, "max_epochs": cfg.max_epochs,
            "max_time": cfg.max_time, "batches_per_epoch": plan_len, "train_pairs": len(self.keep),
            "dropped_pairs": self.dropped, "parameters": sum(p.numel() for p in self._params),
            "device": str(self.device), "world_size": self.dist.world_size, "elapsed": st.elapsed,
        })
        log.info("training %s (%d parameters) on %s x%d: %d pairs (%d over --max-len %s dropped), "
                 "%d minibatches per epoch, from update %d", self.arch, sum(p.numel() for p in self._params),
                 self.device, self.dist.world_size, len(self.keep), self.dropped, cfg.max_len, plan_len, st.update)
        self._check_validation_needs()
        handlers = self.signals.install()
        reason: str | None = None
        last_valid: dict[str, Any] | None = None
        try:
            if self._pending_validation():
                last_valid = self.validate()
                self._save_progress()
            reason = self._stop_reason(check_collective=True)
            while reason is None:
                plan = self.epoch_plan(st.epoch)
                if st.batch_in_epoch >= len(plan):
                    if cfg.max_epochs is not None and st.epoch >= cfg.max_epochs:
                        reason = "max-epochs"
                        break
                    st.epoch += 1
                    st.batch_in_epoch = 0
                    continue
                batches = update_batches(plan, st.batch_in_epoch, self.dist.world_size, cfg.update_freq)
                if not batches:  # fewer minibatches left than ranks: on to the next epoch
                    st.batch_in_epoch = len(plan)
                    continue
                st.batch_in_epoch += len(batches)
                if not self._step(batches):
                    continue
                st.update += 1
                self.cb.on_update(st.update, st.epoch)
                if st.update % cfg.log_every == 0:
                    self._log_interval()
                keep = cfg.keep_every > 0 and st.update % cfg.keep_every == 0
                if st.update % cfg.valid_every == 0 or st.update % cfg.save_every == 0 or keep:
                    t0 = time.perf_counter()
                    if st.update % cfg.valid_every == 0:
                        # saved first, so an error in validation loses no training; a resume from
                        # this checkpoint runs the validation again (see `_pending_validation`)
                        self._save_progress()
                        last_valid = self.validate()
                    if st.update % cfg.save_every == 0:
                        self._save_progress()  # again after a validation: with its outcome
                    if keep:
                        self._save_model(f"checkpoint_{st.update}.pt")
                    self.acc.start += time.perf_counter() - t0  # throughput counts training only
                collective = not self.dist.enabled or st.update % DDP_SYNC_EVERY == 0
                reason = self._stop_reason(collective)
            self._log_interval()
            if reason in ("max-updates", "max-epochs", "max-time") and st.last_valid_update != st.update:
                # Users expect checkpoint_best.pt after a run that stopped on a budget.
                self._save_progress()
                last_valid = self.validate(final=True)
            self._save_progress()
        finally:
            self.signals.restore(handlers)
        log.info("stopped (%s) at update %d, epoch %d; best dev %s %s at update %s", reason, st.update, st.epoch,
                 cfg.best_metric, st.best_score, st.best_update)
        return TrainResult(reason, st.update, st.epoch, st.best_score, st.best_update, last_valid)

    def _pending_validation(self) -> bool:
        """True when the run resumes from the checkpoint saved just before a scheduled validation
        that did not finish: it runs first, as it would have in the uninterrupted run."""
        st = self.state
        return st.update > 0 and st.update % self.cfg.valid_every == 0 and st.last_valid_update != st.update

    def _check_validation_needs(self) -> None:
        """Before the first update: dev BLEU (decoding, the text pipeline's detokeniser and BPE,
        sacrebleu) runs on one dev sentence, so a module missing on this machine stops the run now,
        not at the first validation hours later."""
        if self.dist.is_main and self.bleu_enabled:
            assert self.valid_data is not None
            check_dev_bleu(self.model, self.valid_data, self.data.tgt_vocab, self.data.pipeline, self.cfg.valid_beam,
                           self.device, self._raw_refs, self.precision)

    def _save_progress(self) -> None:
        """checkpoint_last.pt, unless this state (update, validation) is already saved."""
        key = (self.state.update, self.state.last_valid_update)
        if self._saved_update == key:
            return
        self._saved_update = key
        self.state.elapsed = self._elapsed()
        self._session_start = time.perf_counter()
        self.save_last()

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        if self._log_handler is not None:
            logging.getLogger("nmtkit").removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None
        ddp.shutdown(self.dist)
