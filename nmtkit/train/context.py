"""Everything a training update needs, built at construction (`TrainContext`: device, precision,
data and batching, model, optimiser, schedule, grad scaler, `TrainState`, device-side statistics),
and the update itself, `train_step(context, batches)`, which the loop, benchmarks and tests all
drive. Also the optimisers, the lr schedule, the weights' moving average (--ema-decay) and the
RNG states checkpoints save per rank."""
from __future__ import annotations

import contextlib
import gc
import logging
import math
import random
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from nmtkit.data.binarized import BatchingConfig, collate, epoch_batches, keep_pairs, over_budget
from nmtkit.devices import PRECISIONS, resolve_device, threads_per_process, use_threads
from nmtkit.errors import CheckpointError, ConfigError, InputError, TrainingError
from nmtkit.io.dirs import LAST
from nmtkit.models import build_model
from nmtkit.models.fast.fusion import resolve_cuda_graphs, resolve_fuse
from nmtkit.models.precision import FP16_ON_CPU, autocast, resolve_precision, set_tf32
from nmtkit.options import option_name
from nmtkit.train import distributed as ddp
from nmtkit.train.config import TrainConfig
from nmtkit.train.data import DataDir
from nmtkit.train.events import Callbacks, TrainState

log = logging.getLogger("nmtkit.train")

MAX_CONSECUTIVE_SKIPS = 50  # --on-nan skip gives up when the model itself has gone bad
# tests set this to `(update, loss_sum) -> loss_sum`, applied to each minibatch's loss (e.g. to inject a NaN)
_loss_hook = None


class TrainContext:
    """One model training on one data directory; `resume`: checkpoint_last.pt's dict, or None."""

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
    ):
        self.cfg = cfg
        self.data = data
        self.run_dir = Path(run_dir)
        self.arch = arch
        self.model_config = dict(model_config)
        self.cb = callbacks or Callbacks()
        self.dist = dist_info or ddp.DistInfo()
        self.state = TrainState()
        self.resumed = resume is not None
        # the resumed checkpoint's decode lexicon, read back rather than built again
        self.resumed_lexicon: torch.Tensor | None = None
        self._setup_device(resume)
        self._setup_data()
        self._setup_model(resume)
        self.acc = Accumulators(self.device)  # statistics since the last log record
        self.consecutive_skips = 0  # updates skipped in a row for a non-finite loss
        self.lr = self.schedule.lr_at(self.state.update)  # the learning rate of the last update

    def _setup_device(self, resume: dict[str, Any] | None) -> None:
        """Device, precision (a resumed run's auto keeps its choice), CPU threads, process group."""
        cfg = self.cfg
        self.device = resolve_device(cfg.device, self.dist.local_rank)
        # threads first: on a CPU, "auto" times a product on the threads the run will use
        use_threads(cfg.threads or threads_per_process(self.dist.local_world_size))
        ddp.init(self.dist, self.device)
        # "auto" resolved; each rank may time its own product, and every rank takes rank 0's answer
        kept = resume["trainer"]["precision"] if resume and resume["train_config"]["precision"] == "auto" else None
        self.precision = ddp.rank0_choice(resolve_precision(self.device.type, cfg.precision, kept), PRECISIONS,
                                          self.dist, self.device)
        if kept and cfg.precision == "auto" and self.precision != kept and self.dist.is_main:
            log.warning("--precision auto: the resumed run trains in %s, not in %s as before (this %s does not run %s "
                        "natively)", self.precision, kept, self.device.type, kept)
        if self.precision == "fp16" and self.device.type != "cuda" and self.dist.is_main:
            log.warning(FP16_ON_CPU)
        if self.precision == "bf16" and self.device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError("--precision bf16 is not supported by this GPU (use fp16)")
        self.tf32 = set_tf32(self.device.type, self.precision, cfg.tf32)

    def _setup_data(self) -> None:
        """The training pairs kept (--max-len), the batching, the dev split and its references."""
        cfg, data = self.cfg, self.data
        self.train_data = data.split("train")
        # --max-len counts words (as preprocess's), not the subwords the model reads
        self.keep = keep_pairs(self.train_data.src.word_lengths, self.train_data.tgt.word_lengths, cfg.max_len)
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
        if cfg.batch_size is not None and 0 < cfg.sort_pool < cfg.batch_size and self.dist.is_main:
            log.warning("--sort-pool %d is below --batch-size %d: minibatches are cut from pools of %d pairs, so "
                        "they hold at most %d", cfg.sort_pool, cfg.batch_size, cfg.sort_pool, cfg.sort_pool)
        self.arrays = (np.asarray(self.train_data.src.ids), np.asarray(self.train_data.src.offsets),
                       np.asarray(self.train_data.tgt.ids), np.asarray(self.train_data.tgt.offsets))
        self.tgt_lens = self.train_data.tgt.lengths
        self._plan_epoch: int | None = None
        self._plan: list[np.ndarray] = []
        world = self.dist.world_size
        if world > 1 and len(self.epoch_plan(1)) < world:  # no update ever: each rank needs a minibatch
            raise InputError(f"the {len(self.keep)} training pair(s) make {len(self.epoch_plan(1))} minibatch(es) an "
                             f"epoch, fewer than the {world} processes, each of which needs one per update: lower "
                             f"--batch-size or --max-tokens, or start fewer processes", str(data.path))
        self.valid_data = data.valid_split()
        self.bleu_enabled = cfg.valid_bleu_samples > 0
        self.raw_refs = data.raw_references("valid") if self.bleu_enabled and self.dist.is_main else None

    def _setup_model(self, resume: dict[str, Any] | None) -> None:
        """Model (seeded alike on every rank), optimiser, schedule, scaler, resumed state, loss module."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        np.random.seed(cfg.seed % 2**32)
        self.model = build_model(self.arch, self.model_config,
                                 fuse_steps=resolve_fuse(cfg.fuse, self.device)).to(self.device)
        self.model.graph_loops = resolve_cuda_graphs(cfg.cuda_graphs, self.device, self.model)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, cfg)
        self.schedule = LRSchedule(self.optimizer, cfg)
        # fp16 needs loss scaling (its range is too small for gradients); bf16 and fp32 do not
        self.scaler = torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None
        self.ema = WeightAverage(self.model, cfg.ema_decay, cfg.ema_start) if cfg.ema_decay else None
        if resume is not None:
            self._load_resume(resume)
        elif self.dist.rank > 0:
            torch.manual_seed(cfg.seed + 7919 * self.dist.rank)  # own dropout masks per rank
        self.loss_module: nn.Module = ddp.LossModule(self.model, cfg.label_smoothing, cfg.loss_chunk_tokens)
        if self.dist.enabled:
            mine = ("threads", "device", "fuse", "cuda_graphs", "tf32")  # how a machine runs, not what it trains
            same = {option_name(k): v for k, v in cfg.to_dict().items() if k not in mine}
            same.update(self.model_config, update=self.state.update, data=f"{len(self.train_data)} pairs of "
                        f"{self.arrays[0].size}+{self.arrays[2].size} tokens")
            ddp.check_same(same, self.dist, self.device)

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.loss_module = DistributedDataParallel(self.loss_module, device_ids=ids)

    def _load_resume(self, ckpt: dict[str, Any]) -> None:
        try:
            if self.ema is not None:  # the checkpoint's model is the average; the raw weights train on
                self.model.load_state_dict(ckpt["raw_model_state"])
                self.ema.load(ckpt["model_state"])
            else:
                self.model.load_state_dict(ckpt["model_state"])
            self.optimizer.load_state_dict(ckpt["optimizer_state"])
            self.schedule.load_state_dict(ckpt["schedule_state"])
            if self.scaler is not None and ckpt.get("scaler_state"):
                self.scaler.load_state_dict(ckpt["scaler_state"])
            mine = ("world_size", "precision")  # the run's, not the state TrainState tracks
            self.state = TrainState(**{k: v for k, v in dict(ckpt["trainer"]).items() if k not in mine})
        except (KeyError, TypeError, ValueError, RuntimeError) as err:  # a damaged training state
            msg = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise CheckpointError(f"its training state cannot be restored ({msg}): it cannot be resumed",
                                  str(self.run_dir / LAST)) from None
        lexicon = ckpt.get("lexicon")
        self.resumed_lexicon = lexicon if isinstance(lexicon, torch.Tensor) else None
        restore_rng(ckpt.get("rng") or {}, self.dist.rank, self.cfg.seed, self.state.update, self.device)

    def epoch_plan(self, epoch: int) -> list[np.ndarray]:
        """The minibatches (arrays of pair indices) of `epoch`: a pure function of seed and epoch."""
        if self._plan_epoch != epoch:
            self._plan = epoch_batches(self.train_data.src.lengths, self.tgt_lens, self.batching,
                                       self.cfg.seed, epoch, self.keep)
            self._plan_epoch = epoch
        return self._plan

    def target_tokens(self, pairs: np.ndarray) -> int:
        """The target tokens of the pairs `pairs`, one EOS each included."""
        return int(self.tgt_lens[pairs].sum()) + len(pairs)

    def close(self) -> None:
        """Leave the process group. The DDP wrapper goes first: its reducer freed after `shutdown` drops
        the group holding the interpreter lock, which gloo's worker may need (a deadlock)."""
        if hasattr(self.loss_module, "reducer"):  # wrapped by DistributedDataParallel
            self.loss_module = self.loss_module.module
            gc.collect()  # DDP's hooks make cycles: free the reducer now
        ddp.shutdown(self.dist)


class Accumulators:
    """Sums since the last `reset` (the losses and gradient norm as device tensors: no host read per
    update); `start` is the wall time they cover from."""

    def __init__(self, device: torch.device):
        self.device = device
        self.reset()

    def reset(self) -> None:
        z = torch.zeros((), device=self.device)
        self.obj, self.nll, self.gnorm = z.clone(), z.clone(), z.clone()
        self.tokens_local = self.tokens_global = self.sents = self.updates = 0
        self.start = time.perf_counter()

    def add(self, loss_sum: torch.Tensor, nll_sum: torch.Tensor, gnorm: torch.Tensor, tokens_local: int,
            tokens_global: int, sents: int) -> None:
        self.obj += loss_sum.detach().float()
        self.nll += nll_sum.detach().float()
        self.gnorm += gnorm.detach().float()
        self.tokens_local += tokens_local
        self.tokens_global += tokens_global
        self.sents += sents
        self.updates += 1

    def read(self, dist_info: ddp.DistInfo) -> tuple[float, float, float, float]:
        """(objective, NLL, gradient-norm sums, target tokens), summed over ranks."""
        stats = torch.stack([self.obj, self.nll, self.gnorm,
                             torch.tensor(float(self.tokens_local), device=self.device)]).double()
        if dist_info.enabled:
            dist.all_reduce(stats)
        return tuple(stats.tolist())


def train_step(ctx: TrainContext, batches: list[np.ndarray]) -> bool:
    """One update on the minibatches of `update_batches` (this rank's: every world_size-th); a
    non-finite loss or gradient applies no step and returns False. Hot path: one host read."""
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
        gnorm = gnorm.nan_to_num(0.0, 0.0)  # an overflow's (the scaler skipped its step) counts 0 in the log
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
    """Forward and backward over this rank's minibatches, each loss sum times `scale` (world size /
    denominator: DDP averages over ranks). Returns the summed loss and NLL (detached) and tokens."""
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
    """--on-nan stop: raise. skip: count the update skipped; raise after MAX_CONSECUTIVE_SKIPS."""
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


def rng_state(device: torch.device | None = None) -> dict[str, Any]:
    """Every RNG the run uses, as weights_only-safe primitives and tensors (of CUDA, `device`'s only)."""
    version, state, gauss = random.getstate()
    np_state = np.random.get_state()
    out: dict[str, Any] = {
        "python": [version, list(state), gauss],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
    }
    if device is not None and device.type == "cuda" and torch.cuda.is_initialized():
        out["cuda_device"] = torch.cuda.get_rng_state(device)
    return out


def set_rng_state(state: dict[str, Any], device: torch.device | None = None) -> None:
    """Restore `state` (from `rng_state`); its CUDA generator goes to `device`."""
    version, values, gauss = state["python"]
    random.setstate((version, tuple(values), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if device is not None and device.type == "cuda" and torch.cuda.is_available() and "cuda_device" in state:
        torch.cuda.set_rng_state(state["cuda_device"], device)


def gather_rng_states(dist_info: ddp.DistInfo, device: torch.device | None = None) -> list[dict[str, Any]]:
    """Every rank's RNG states, on rank 0; a collective: every rank calls it."""
    mine = rng_state(device)
    if not dist_info.enabled:
        return [mine]
    gathered: list[Any] = [None] * dist_info.world_size
    dist.all_gather_object(gathered, mine)  # CPU tensors: every backend can carry them
    return gathered


def restore_rng(saved: dict[str, Any], rank: int, seed: int, update: int,
                device: torch.device | None = None) -> None:
    """This rank's saved states; a rank the run did not have when saved derives its own."""
    per_rank = saved.get("ranks") or []
    if rank < len(per_rank):
        set_rng_state(per_rank[rank], device)
    elif per_rank:  # more ranks than when saved: derive a state for the new ones
        set_rng_state({k: v for k, v in per_rank[0].items() if k != "cuda_device"})
        torch.manual_seed(seed + 7919 * rank + update)  # seeds this rank's GPU too


def build_optimizer(params: list[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """The optimiser named by `cfg.optimizer` over `params` (the trained ones), at the base learning rate:
    Adam and SGD fused where available, Adadelta multi-tensor."""
    if cfg.optimizer == "adadelta":
        return torch.optim.Adadelta(params, lr=cfg.lr, rho=cfg.adadelta_rho, eps=cfg.adadelta_eps,
                                    weight_decay=cfg.weight_decay, foreach=True)
    if cfg.optimizer == "adam":
        kw = dict(lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
        return _one_kernel_or_foreach(torch.optim.Adam, params, kw)
    if cfg.optimizer == "sgd":
        return _one_kernel_or_foreach(torch.optim.SGD, params, dict(lr=cfg.lr, weight_decay=cfg.weight_decay))
    raise AssertionError(cfg.optimizer)  # TrainConfig rejects others


def _one_kernel_or_foreach(cls, params: list, kw: dict) -> torch.optim.Optimizer:
    try:
        return cls(params, fused=True, **kw)
    except (RuntimeError, TypeError, ValueError):  # device or dtype without a one-kernel implementation
        return cls(params, foreach=True, **kw)


class LRSchedule:
    """lr(update) = base_lr * warm-up(update) * decay: a linear warm-up over `warmup_updates`; plateau:
    decay *= lr_decay after more than `lr_patience` validations without a better dev metric."""

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig):
        self.optimizer, self.cfg = optimizer, cfg
        self.decay = 1.0
        self.best: float | None = None
        self.bad = 0

    def lr_at(self, update: int) -> float:
        """The learning rate for update number `update` (0-based)."""
        warmup = self.cfg.warmup_updates
        warm = min(1.0, (update + 1) / warmup) if warmup > 0 else 1.0
        return max(self.cfg.lr * warm * self.decay, self.cfg.min_lr if update >= warmup else 0.0)

    def set_update(self, update: int) -> float:
        lr = self.lr_at(update)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def on_validation(self, metric: float) -> bool:
        """Record a dev score; return True when the learning rate was decayed."""
        cfg = self.cfg
        if cfg.lr_schedule != "plateau" or math.isnan(metric):
            return False
        improved = self.best is None or (metric > self.best if cfg.best_metric == "bleu" else metric < self.best)
        if improved:
            self.best, self.bad = metric, 0
            return False
        self.bad += 1
        if self.bad > cfg.lr_patience and cfg.lr * self.decay > cfg.min_lr:
            self.decay *= cfg.lr_decay
            self.bad = 0
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "best": self.best, "bad": self.bad}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.decay = float(state["decay"])
        self.best = None if state["best"] is None else float(state["best"])
        self.bad = int(state["bad"])


class WeightAverage:
    """The exponential moving average of `model`'s floating-point parameters, in float32 (float64 for
    a float64 model). After update u, with decay D, start update s and k = u - s:

        ema_u = theta_u                                   (u <= s)
        ema_u = d_k * ema_{u-1} + (1 - d_k) * theta_u     (u > s), d_k = min(D, (1 + k) / (10 + k))
    """

    def __init__(self, model: nn.Module, decay: float, start: int):
        self.model, self.decay, self.start = model, decay, start
        named = [(n, p) for n, p in model.named_parameters() if p.is_floating_point()]
        self.names = [n for n, _ in named]
        # the parameters' storage, read in place (the optimiser and load_state_dict write into it)
        self.params = [p.detach() for _, p in named]
        self.tensors = [p.to(torch.promote_types(p.dtype, torch.float32), copy=True) for p in self.params]

    def update(self, update: int) -> None:
        """Fold in the weights after update `update` (copy them up to the start update)."""
        with torch.no_grad():
            new = [p.to(t.dtype) for p, t in zip(self.params, self.tensors)]  # no copy where the dtypes agree
            if update <= self.start:
                torch._foreach_copy_(self.tensors, new)
            else:
                k = update - self.start
                torch._foreach_lerp_(self.tensors, new, 1.0 - min(self.decay, (1 + k) / (10 + k)))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's state_dict with the averaged parameters in place of the raw ones."""
        state = self.model.state_dict()
        for n, t in zip(self.names, self.tensors):
            state[n] = t.to(state[n].dtype, copy=True)
        return state

    def load(self, state: dict[str, torch.Tensor]) -> None:
        """Take the average from a checkpoint's model_state (as `state_dict` wrote it)."""
        for n, t in zip(self.names, self.tensors):
            t.copy_(state[n])

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The model holds the average inside the block (validation), its raw weights after."""
        with torch.no_grad():
            raw = [p.clone() for p in self.params]
            torch._foreach_copy_(self.params, self.tensors)
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_(self.params, raw)
