"""The training loop: it drives a `TrainContext` with `train_step`, validates, saves and stops,
reports through typed events and the `nmtkit` logger, and writes the run directory on rank 0.
checkpoint_last.pt holds everything to resume exactly (N updates equal N/2 + resume + N/2 bit
for bit on the CPU); checkpoint_best.pt and checkpoint_N.pt the same without the optimiser's state
(not resumable). SIGINT / SIGTERM / SIGHUP save a checkpoint after the current update and stop;
distributed ranks stop at the same update.
"""
from __future__ import annotations

import contextlib
import logging
import math
import signal
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from nmtkit import signals
from nmtkit.checkpoint import make_checkpoint, save_checkpoint
from nmtkit.data.binarized import update_batches
from nmtkit.devices import RELEASE_EVERY_UPDATES, release_free_memory
from nmtkit.errors import TrainingError
from nmtkit.io.dirs import BEST, LAST, RUN_LOG, kept_name
from nmtkit.train import distributed as ddp
from nmtkit.train.context import TrainContext, gather_rng_states, rng_state, train_step
from nmtkit.train.events import LogEvent, StartEvent, TrainResult, ValidationEvent
from nmtkit.train.metrics import MetricsLog, error_record, record_for_a_lost_writer, setup_file_log
from nmtkit.train.validate import ValidationStopped, check_dev_bleu, dev_scores, perplexity, warn_unvalidated

__all__ = ["BEST", "LAST", "RunCheckpoints", "Trainer"]

log = logging.getLogger("nmtkit.train")

DDP_SYNC_EVERY = 10  # updates between the collective checks of stop signals / time in DDP


class Trainer:
    """Trains a `TrainContext` into its run directory. `commit` (a new run staged by
    `nmtkit.train.run`): called at the first checkpoint, it returns the run directory to write in."""

    def __init__(self, ctx: TrainContext, commit: Callable[[], Path] | None = None):
        self.ctx = ctx
        self._commit = commit
        self.signals = StopSignals(ctx.cb.on_message)
        self.saver = RunCheckpoints(ctx)
        self._session_start = time.perf_counter()
        self._saved_update: tuple[int, int | None] | None = None
        self._last_saved = ctx.state.update if ctx.resumed else None  # the update checkpoint_last.pt holds
        self.metrics: MetricsLog | None = None
        self._log_handler: logging.Handler | None = None
        if ctx.dist.is_main:
            ctx.run_dir.mkdir(parents=True, exist_ok=True)
            for pattern in ("checkpoint_*.pt.*.tmp", "curves.png.*.tmp"):  # writes cut by SIGKILL
                for stale in ctx.run_dir.glob(pattern):
                    stale.unlink(missing_ok=True)
            st = ctx.state
            self.metrics = MetricsLog(ctx.run_dir, (st.update, st.last_valid_update) if ctx.resumed else None)
            self._log_handler = setup_file_log(ctx.run_dir)

    def request_stop(self, signum: int = signal.SIGINT) -> None:
        """Stop after the current update as if `signum` had arrived (for embedding and tests)."""
        self.signals.received = signum

    # ---- the loop -----------------------------------------------------------------------
    def train(self) -> TrainResult:
        """Train until a stopping criterion, leaving checkpoint_last.pt of the final state. An error
        is recorded in train.log too; a collective failed by a lost process becomes one line."""
        try:
            return self._train()
        except Exception as err:
            st = self.ctx.state
            lost = ddp.lost_process_error(err, st.update, self._last_saved) if self.ctx.dist.enabled else None
            self._record_error(lost or err, lost is not None)
            if lost is not None:
                raise lost from None
            raise

    def _record_error(self, err: BaseException, lost: bool) -> None:
        """The error that stopped the run, as train.log's last line: by rank 0, or where the job
        `lost` rank 0, by the first other rank to find it gone."""
        update = self.ctx.state.update
        with contextlib.suppress(Exception):  # the error that stopped the run is the one to report
            if self._log_handler is not None:
                msg = error_record(update, err)
                self._log_handler.handle(log.makeRecord(log.name, logging.ERROR, __file__, 0, msg, None, None))
            elif lost and self._last_saved is not None:  # before, rank 0's log was in its staging folder
                with signals.held():  # torchrun's SIGTERM to the survivors, in the middle of the write
                    by = f" (written by rank {self.ctx.dist.rank}: rank 0 had stopped)"
                    record_for_a_lost_writer(self.ctx.run_dir, error_record(update, err, by))

    def _train(self) -> TrainResult:
        ctx, cfg, st = self.ctx, self.ctx.cfg, self.ctx.state
        self._session_start = time.perf_counter()
        self._announce_start()
        self._check_validation_needs()
        last_valid: ValidationEvent | None = None
        with signals.handled_by(self.signals.handle):  # a signal that is ignored stays ignored
            if self._pending_validation():
                last_valid = self.validate() or last_valid
                self._save_progress()
            ctx.acc.reset()  # the first record's throughput counts training only, as every other's
            reason = self._stop_reason(check_collective=True)
            resumed_at = st.update
            while reason is None:
                batches = self._next_update()
                if isinstance(batches, str):
                    reason = batches
                    break
                if not batches or not train_step(ctx, batches):
                    continue
                ctx.cb.on_update(st.update, st.epoch)
                last_valid = self._after_update() or last_valid
                reason = self._stop_reason(not ctx.dist.enabled or st.update % DDP_SYNC_EVERY == 0)
            if reason in ("max-updates", "max-epochs", "patience", "max-time") and st.update == resumed_at > 0 and (
                    reason == "patience" or st.last_valid_update == st.update):  # else its final validation is due
                log.warning("the run being resumed has already reached its --%s %g: nothing to train; resume with a "
                            "larger one to go on", reason, getattr(cfg, reason.replace("-", "_")))
            self._log_interval()
            if reason in ("max-updates", "max-epochs", "max-time") and st.last_valid_update != st.update:
                self._save_progress()
                last_valid = self.validate(final=True) or last_valid
                if st.last_valid_update != st.update:  # a stop signal cut it: the run is not done, a --resume runs it
                    reason = signal.Signals(self.signals.received).name
            self._save_progress()
            self.signals.check()
        log.info("stopped (%s) at update %d, epoch %d; best dev %s %s at update %s", reason, st.update, st.epoch,
                 cfg.best_metric, st.best_score, st.best_update)
        return TrainResult(reason, st.update, st.epoch, st.best_score, st.best_update, last_valid)

    def _next_update(self) -> list[np.ndarray] | str:
        """The next update's minibatches (the data position moved past them); [] where the epoch
        ends; "max-epochs" after the last epoch."""
        cfg, st = self.ctx.cfg, self.ctx.state
        plan = self.ctx.epoch_plan(st.epoch)
        if st.batch_in_epoch >= len(plan):
            if cfg.max_epochs is not None and st.epoch >= cfg.max_epochs:
                return "max-epochs"
            st.epoch += 1
            st.batch_in_epoch = 0
            return []
        batches = update_batches(plan, st.batch_in_epoch, self.ctx.dist.world_size, cfg.update_freq)
        if not batches:  # fewer minibatches left than ranks: on to the next epoch
            st.batch_in_epoch = len(plan)
            return []
        st.batch_in_epoch += len(batches)
        return batches

    def _after_update(self) -> ValidationEvent | None:
        """The log record, validation and checkpoints due at this update."""
        cfg, st = self.ctx.cfg, self.ctx.state
        if st.update % RELEASE_EVERY_UPDATES == 0 and self.ctx.device.type == "cpu":
            release_free_memory()  # past batches' buffers, which the next shapes would not fit
        if st.update % cfg.log_every == 0:
            self._log_interval()
        keep = cfg.keep_every > 0 and st.update % cfg.keep_every == 0
        if not (st.update % cfg.valid_every == 0 or st.update % cfg.save_every == 0 or keep):
            return None
        t0 = time.perf_counter()
        event = None
        if keep:  # before checkpoint_last.pt: a run killed between the two resumes before this update, not after it
            self._note_elapsed()  # its training time as of now
            self.saver.save_model(kept_name(st.update))
        if st.update % cfg.valid_every == 0:
            self._save_progress()  # first: an error in validation loses no training
            event = self.validate()
        if st.update % cfg.save_every == 0:
            self._save_progress()  # again after a validation: with its outcome
        self.ctx.acc.start += time.perf_counter() - t0  # throughput counts training only
        return event

    def _elapsed(self) -> float:
        return self.ctx.state.elapsed + (time.perf_counter() - self._session_start)

    def _note_elapsed(self) -> None:
        """The training time so far into the state a checkpoint saves."""
        self.ctx.state.elapsed, self._session_start = self._elapsed(), time.perf_counter()

    def _stop_reason(self, check_collective: bool) -> str | None:
        """Why training stops after this update, or None. Signals and time are checked only where
        `check_collective` (in DDP a collective every few updates)."""
        cfg, state = self.ctx.cfg, self.ctx.state
        self.signals.check()
        if cfg.max_updates is not None and state.update >= cfg.max_updates:
            return "max-updates"
        if cfg.max_epochs is not None and state.epoch > cfg.max_epochs:  # a run resumed with a lower --max-epochs
            return "max-epochs"
        if cfg.patience is not None and state.bad_validations >= cfg.patience:
            return "patience"
        if not check_collective:
            return None
        sig = self.signals.received
        timed_out = cfg.max_time is not None and self._elapsed() >= cfg.max_time
        if self.ctx.dist.enabled:  # every rank must stop at the same update
            code = int(ddp.all_max((sig or 0) * 2 + (1 if timed_out else 0), self.ctx.dist, self.ctx.device))
            sig, timed_out = (code // 2) or None, bool(code % 2)
        if sig is not None:
            return signal.Signals(sig).name
        if timed_out:
            return "max-time"
        return None

    def _pending_validation(self) -> bool:
        """True when the run resumes from the checkpoint saved before a scheduled validation that
        did not finish: it runs first."""
        st = self.ctx.state
        return st.update > 0 and st.update % self.ctx.cfg.valid_every == 0 and st.last_valid_update != st.update

    def _save_progress(self) -> None:
        """checkpoint_last.pt, unless this state (update, validation) is already saved."""
        st = self.ctx.state
        key = (st.update, st.last_valid_update)
        if self._saved_update == key:
            return
        self._saved_update = key
        self._note_elapsed()
        self.saver.save_last()
        self._last_saved = st.update
        if self._commit is not None and self.ctx.dist.is_main:
            self.ctx.run_dir = run_dir = self._commit()  # the open log and metrics files went too
            if self.metrics is not None:
                self.metrics.run_dir, self.metrics.path = run_dir, run_dir / self.metrics.path.name
            if isinstance(self._log_handler, logging.FileHandler):
                self._log_handler.baseFilename = str(run_dir / RUN_LOG)
            self._commit = None

    # ---- reports ------------------------------------------------------------------------
    def _announce_start(self) -> None:
        ctx, cfg, st = self.ctx, self.ctx.cfg, self.ctx.state
        plan_len = len(ctx.epoch_plan(st.epoch))
        parameters = sum(p.numel() for p in ctx.params)
        ctx.cb.on_start(StartEvent(
            update=st.update, epoch=st.epoch, max_updates=cfg.max_updates, max_epochs=cfg.max_epochs,
            max_time=cfg.max_time, batches_per_epoch=plan_len, train_pairs=len(ctx.keep),
            dropped_pairs=ctx.dropped, parameters=parameters, device=str(ctx.device),
            world_size=ctx.dist.world_size, elapsed=st.elapsed, fused=ctx.model.fuse_steps,
            update_freq=cfg.update_freq))
        log.info("training %s (%d parameters, %s) on %s x%d: %d pairs (%d over --max-len %s dropped), "
                 "%d minibatches per epoch, from update %d", ctx.arch, parameters, ctx.precision, ctx.device,
                 ctx.dist.world_size, len(ctx.keep), ctx.dropped, cfg.max_len, plan_len, st.update)
        per_rank = plan_len // ctx.dist.world_size
        if cfg.update_freq > per_rank and ctx.dist.is_main:
            log.warning("--update-freq %d is above the %d minibatches an epoch gives each process: every update "
                        "takes %d (an update ends with its epoch)", cfg.update_freq, per_rank, max(per_rank, 1))
        idle = ["--patience"] * (cfg.patience is not None) + ["--lr-schedule plateau"] * (cfg.lr_schedule == "plateau")
        for what, first, unused in ((f"--valid-every {cfg.valid_every} schedules no validation", cfg.valid_every, idle),
                                    (f"--ema-start {cfg.ema_start} starts no average", cfg.ema_start,
                                     ["--ema-decay"] * bool(cfg.ema_decay))):  # a copy of the weights up to it
            if unused and cfg.max_updates is not None and first >= cfg.max_updates and ctx.dist.is_main:
                log.warning("%s before --max-updates %d: %s change%s nothing", what, cfg.max_updates,
                            " and ".join(unused), "" if len(unused) > 1 else "s")

    def _log_interval(self) -> None:
        """Read the accumulated statistics and report them."""
        ctx, acc = self.ctx, self.ctx.acc
        if acc.updates == 0:
            return
        obj, nll, gnorm_sum, tokens = acc.read(ctx.dist)
        seconds = max(1e-9, time.perf_counter() - acc.start)
        loss = nll / max(1.0, tokens)
        event = LogEvent(
            update=ctx.state.update, epoch=ctx.state.epoch, loss=loss, ppl=perplexity(loss),
            objective=obj / max(1.0, tokens), grad_norm=gnorm_sum / acc.updates / ctx.dist.world_size,
            lr=ctx.lr, tgt_tokens_per_s=acc.tokens_global / seconds, sents_per_s=acc.sents / seconds,
            updates_per_s=acc.updates / seconds, elapsed=self._elapsed(), skipped=ctx.state.skipped_batches)
        acc.reset()
        if ctx.dist.is_main:
            assert self.metrics is not None
            self.metrics.write(event.record())
            log.info("update %d epoch %d loss %.4f ppl %.2f lr %.3g tok/s %.0f", event.update, event.epoch,
                     event.loss, event.ppl, event.lr, event.tgt_tokens_per_s)
            ctx.cb.on_log(event)

    # ---- validation ---------------------------------------------------------------------
    def validate(self, final: bool = False) -> ValidationEvent | None:
        """Dev loss (and BLEU); keeps checkpoint_best.pt. A `final` validation leaves the lr schedule
        and early stopping alone. None when a stop signal ended it unfinished."""
        ctx, cfg, st = self.ctx, self.ctx.cfg, self.ctx.state
        t0 = time.perf_counter()
        try:
            with ctx.ema.swapped_in() if ctx.ema is not None else contextlib.nullcontext():  # the average's scores
                loss, bleu = dev_scores(ctx, None if ctx.dist.enabled else lambda: self.signals.received is not None)
        except ValidationStopped:  # a --resume runs it again (`_pending_validation`)
            log.info("validation at update %d stopped by a signal, unfinished", st.update)
            return None
        score = bleu if cfg.best_metric == "bleu" else loss
        improved = st.record_best(score, cfg.best_metric == "bleu")
        if not final:
            st.record_scheduled(score, cfg.best_metric == "bleu")
            if ctx.schedule.on_validation(score):
                msg = (f"dev {cfg.best_metric} did not improve: learning rate decayed to "
                       f"{ctx.schedule.lr_at(st.update):.3g}")
                log.info(msg)
                ctx.cb.on_message(msg)
        event = ValidationEvent(
            update=st.update, epoch=st.epoch, loss=loss, ppl=perplexity(loss),
            bleu=bleu if math.isfinite(bleu) else None, best=improved, best_score=st.best_score,
            best_update=st.best_update, seconds=time.perf_counter() - t0, elapsed=self._elapsed(), final=final)
        if improved:
            self.saver.save_model(BEST)
        if ctx.dist.is_main:
            assert self.metrics is not None
            self.metrics.write(event.record())
            self.metrics.draw_curves()
            log.info("validation at update %d: dev loss %.4f ppl %.2f bleu %s%s", event.update, event.loss, event.ppl,
                     "-" if event.bleu is None else f"{event.bleu:.2f}", " (best)" if event.best else "")
            ctx.cb.on_validation(event)
        if not math.isfinite(loss):  # weights that overflow: every later update is nan too, so skipping cannot help
            best = (f"; {BEST} (update {st.best_update}) is the best model before it" if st.best_update is not None
                    else "")
            raise TrainingError(f"dev loss is {loss} at update {st.update}: the model has diverged; start a new run "
                                f"with a lower --lr{best}")
        return event

    def _check_validation_needs(self) -> None:
        """Before the first update: warn of the dev pairs validation leaves out; try dev BLEU once."""
        if self.ctx.dist.is_main:
            warn_unvalidated(self.ctx.valid_data)
            if self.ctx.bleu_enabled:
                check_dev_bleu(self.ctx)

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        if self._log_handler is not None:
            logging.getLogger("nmtkit").removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None
        self.ctx.close()


class StopSignals:
    """The stop signal `received` (None until one arrives), noted by the handler `handle`. What the
    handler raises (a second Ctrl-C, an exception of on_message) is noted too, and raised again by
    `check`: the code the signal cut in may drop it (a __del__, an `except Exception`)."""

    def __init__(self, on_message: Callable[[str], None]):
        self.on_message = on_message
        self.received: int | None = None
        self.raised: BaseException | None = None

    def handle(self, signum: int, frame: Any) -> None:
        try:
            if self.received is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C aborts at once
            self.received = signum
            self.on_message(f"{signal.Signals(signum).name}: saving a checkpoint after this update "
                            "(Ctrl-C again to abort at once)")
        except BaseException as err:
            self.raised = err
            raise

    def check(self) -> None:
        if self.raised is not None:
            raise self.raised


class RunCheckpoints:
    """Writes the run's checkpoints (rank 0 only), with the decode lexicon: the resumed checkpoint's,
    else built from the training split."""

    def __init__(self, ctx: TrainContext):
        self.ctx = ctx
        self.lexicon = ctx.resumed_lexicon if ctx.dist.is_main else None
        if ctx.dist.is_main and self.lexicon is None:
            from nmtkit.decode.shortlist import build_lexicon

            data = ctx.data
            self.lexicon = torch.from_numpy(build_lexicon(*ctx.arrays, len(data.src_vocab), len(data.tgt_vocab),
                                                          seed=ctx.cfg.seed))

    def checkpoint(self, with_optimizer: bool = True, rng_states: list[dict[str, Any]] | None = None
                   ) -> dict[str, Any]:
        """The dict saved to checkpoint_*.pt (primitives and tensors only)."""
        ctx = self.ctx
        training: dict[str, Any] = {
            "trainer": {**asdict(ctx.state), "world_size": ctx.dist.world_size, "precision": ctx.precision},
            "schedule_state": ctx.schedule.state_dict(),
            "rng": {"ranks": rng_states if rng_states is not None else [rng_state(ctx.device)]},
        }
        if with_optimizer:
            if ctx.ema is not None:  # what --resume trains on; model_state is the average
                training["raw_model_state"] = ctx.model.state_dict()
            training["optimizer_state"] = ctx.optimizer.state_dict()
            training["scaler_state"] = ctx.scaler.state_dict() if ctx.scaler is not None else None
        data = ctx.data
        return make_checkpoint(
            arch=ctx.arch, model_config=ctx.model_config,
            model_state=ctx.ema.state_dict() if ctx.ema is not None else ctx.model.state_dict(),
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

    def save_model(self, name: str) -> None:
        """The model as at this update, without optimiser state."""
        if self.ctx.dist.is_main:
            save_checkpoint(self.checkpoint(False), self.ctx.run_dir / name)
            log.info("saved %s at update %d", name, self.ctx.state.update)
