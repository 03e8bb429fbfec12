"""`TrainConfig`: every option of `nmtkit train` that shapes a run, as one frozen dataclass.

Each field declares its option once (`nmtkit.options.option`): help, choices, range, and whether
it may change on `--resume`; `nmtkit train`'s click options are generated from these fields. The
config is saved as a plain dict in every checkpoint and rebuilt with `TrainConfig.from_dict`.
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmtkit.devices import (
    CUDA_GRAPHS,
    DECODE_PRECISIONS,
    DEVICE_HELP,
    FUSE,
    MAX_THREADS,
    PRECISIONS,
    check_device_name,
)
from nmtkit.errors import ConfigError
from nmtkit.models import ARCHS
from nmtkit.options import check_fields, option, path_error, refuse_without
from nmtkit.train.presets import PAPER_PRESETS, PRESETS, TRAIN_DEFAULTS, ModelOverrides, train_defaults

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([smhd]?)\s*$")
# the smallest number float32 does not round to 0: an optimiser epsilon below it divides 0 by 0 for every
# weight whose gradient is 0 (NaN at once); an --lr or --clip-norm below it makes every update 0
_F32_MIN = 1e-45
_EPS = dict(min=_F32_MIN, message=f"must be at least {_F32_MIN} (float32 rounds a smaller epsilon to 0)")


def parse_duration(text: str) -> float:
    """'90' or '90s' -> 90.0, '30m' -> 1800.0, '2h' -> 7200.0, '1.5d' -> 129600.0 (seconds)."""
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"--max-time: expected a duration like 3600, 90m, 12h or 2d, got '{text}'")
    value = float(m.group(1))
    return value * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


@dataclass(frozen=True)
class TrainConfig:
    """How to train. Field names match the `nmtkit train` options (`--max-len` -> max_len)."""

    # model
    arch: str = option("rnnsearch", choices=tuple(ARCHS), help="Architecture when no --preset is given (the paper's sizes; "
                                                                   "lstm-attention: its preset's).")
    preset: str | None = option(
        None, choices=tuple(PRESETS),
        help="Model preset: the paper's rnnsearch and rnnencdec, trained on pairs of up to 30 or 50 words (their "
             "sizes and training procedure), lstm-attention, small (emb 256, enc 256, dec 512, Adam).")
    # data
    max_len: int | None = option(50, min=1, metavar="N", shown_default="preset: 30 or 50; default 50",
                                 help="Drop training pairs with a side longer than N words (tokens after Moses "
                                      "tokenisation, before BPE: the unit of preprocess --max-len and of the paper's "
                                      "30 and 50), however many subwords BPE makes of them.")
    batch_size: int | None = option(
        80, min=1, metavar="N", shown_default="paper presets 80, others 64",
        help="Pairs per minibatch and GPU/process. With --max-tokens: an extra cap. An update sees processes "
             "x --update-freq minibatches.")
    max_tokens: int | None = option(
        None, min=1, metavar="N",
        help="Batch by a token budget instead: at most N padded tokens (pairs x longest side) per minibatch "
             "and GPU/process.")
    sort_pool: int = option(1600, min=0, metavar="N",
                            shown_default="1600 (the paper's 20 x 80); with --max-tokens 0",
                            help="Pairs read, sorted by length and split into minibatches at a time; 0: the whole "
                                 "corpus each epoch (fairseq's way: the least padding, and the fewest shapes for "
                                 "--cuda-graphs).")
    update_freq: int = option(
        1, min=1, metavar="N",
        help="Sum the gradients of N minibatches per process into each update (N x the batch at the memory of "
             "one; the paper's 80 pairs on 2 GPUs: --batch-size 40; on 1 GPU with less memory: --batch-size 40 "
             "--update-freq 2).")
    # objective and optimiser
    optimizer: str = option("adadelta", choices=("adadelta", "adam", "sgd"), shown_default="",
                            help="Paper presets: adadelta (lr 1.0, rho 0.95, eps 1e-6); others: adam (lr 1e-3).")
    lr: float = option(1.0, min=0, min_open=True, shown_default="adadelta 1.0, adam 1e-3",
                       help="Base learning rate.")
    adadelta_rho: float = option(0.95, min=0.0, max=1.0, help="Adadelta decay rho.")
    adadelta_eps: float = option(1e-6, **_EPS, help="Adadelta epsilon.")
    adam_beta1: float = option(0.9, min=0.0, max=1.0, max_open=True, help="Adam beta1.")
    adam_beta2: float = option(0.999, min=0.0, max=1.0, max_open=True, help="Adam beta2.")
    adam_eps: float = option(1e-8, **_EPS, help="Adam epsilon.")
    weight_decay: float = option(0.0, min=0, help="L2 weight decay.")
    clip_norm: float = option(1.0, min=0, shown_default="preset", message="must be >= 0 (0 disables clipping)",
                              help="Rescale the gradient to at most this L2 norm (paper: 1; 0 disables).")
    label_smoothing: float = option(0.0, min=0, max=1, max_open=True, help="Label smoothing epsilon.")
    normalize_loss: str = option(
        "sentences", choices=("sentences", "tokens"), shown_default="",
        help="Divide an update's summed loss (all its minibatches') by its pairs (paper presets) or its target "
             "tokens, EOS included (others).")
    # learning-rate schedule
    lr_schedule: str = option(
        "constant", choices=("constant", "plateau"),
        help="constant, or plateau: multiply the lr by --lr-decay when the dev metric has not improved for "
             "more than --lr-patience validations.")
    warmup_updates: int = option(0, min=0, metavar="N", help="Linear lr warm-up over N updates.")
    lr_decay: float = option(0.5, min=0, min_open=True, max=1, help="Plateau decay factor.")
    lr_patience: int = option(0, min=0, metavar="N", help="Validations without improvement before a decay.")
    min_lr: float = option(0.0, min=0, help="Never decay the lr below this.")
    ema_decay: float | None = option(
        None, min=0, max=1, max_open=True, metavar="D",
        help="Keep an exponential moving average of the weights (ema = d * ema + (1 - d) * weights after each "
             "update, d = min(D, (1 + k) / (10 + k)) at the k-th; Marian's --exponential-smoothing, fairseq's "
             "--ema-decay): validation, early stopping and checkpoint_best.pt use it, every checkpoint holds it "
             "as the model (what translate and average read), and checkpoint_last.pt keeps the raw weights for "
             "--resume. E.g. 0.999; 0: none [the small preset: 0.998].")
    ema_start: int = option(0, min=0, metavar="N",
                            help="With --ema-decay: the average is a copy of the weights until update N.")
    # stopping
    max_updates: int | None = option(None, min=1, metavar="N", resume=True, help="Stop after N updates.")
    max_epochs: int | None = option(None, min=1, metavar="N", resume=True, help="Stop after N epochs.")
    max_time: float | None = option(
        None, min=0, min_open=True, metavar="DURATION", resume=True, convert=parse_duration,
        help="Stop after this much training time over all sessions of the run: 3600, 90m, 12h, 2d.")
    patience: int | None = option(
        None, min=1, metavar="N", resume=True,
        help="Early stopping: stop after N validations without improvement of --best-metric.")
    # validation, checkpoints, logs
    valid_every: int = option(1000, min=1, metavar="N", resume=True, help="Validate every N updates.")
    valid_bleu_samples: int = option(500, min=0, metavar="N", resume=True,
                                     help="Dev BLEU on the first N dev sentences (0: loss only).")
    valid_beam: int = option(1, min=1, metavar="K", resume=True, help="Beam for dev BLEU (1: greedy).")
    valid_batch_size: int = option(64, min=1, metavar="N", resume=True, help="Sentences per validation batch.")
    best_metric: str = option("loss", choices=("loss", "bleu"),
                              help="Dev metric that selects checkpoint_best.pt (of tied scores: the later), early stopping and "
                                   "plateau decay (a tie: no improvement).")
    save_every: int = option(1000, min=1, metavar="N", resume=True, help="Write checkpoint_last.pt every N updates.")
    keep_every: int = option(
        0, min=0, metavar="N", resume=True, message="must be >= 0 (0: never)",
        help="Also keep checkpoint_<update>.pt (the model, no optimiser state) every N updates, for scoring or "
             "averaging later; 0: never.")
    log_every: int = option(100, min=1, metavar="N", resume=True, help="Log training statistics every N updates.")
    on_nan: str = option("stop", choices=("stop", "skip"), resume=True,
                         help="On a non-finite loss: stop with a message or skip the minibatch.")
    tensorboard: str | None = option(
        None, metavar="DIR", resume=True, convert=os.path.abspath, path="directory",
        help="Also write metrics.jsonl's records (train loss, dev loss and BLEU, lr, gradient norm, tokens/s) as "
             "TensorBoard scalars into DIR (`tensorboard --logdir DIR`); a resumed run appends to it. Needs pip "
             "install 'nmtkit[tensorboard]'.")
    # reproducibility and hardware
    seed: int = option(1, min=0, max=2**63 - 1, message="must be between 0 and 2^63-1",
                       help="Seed of initialisation, data order and dropout.")
    device: str = option("auto", metavar="auto|cpu|cuda|cuda:N", resume=True, help=DEVICE_HELP)
    precision: str = option(
        "fp32", choices=DECODE_PRECISIONS, resume=True, shown_default="fp32; the small preset: auto",
        help="Autocast dtype (fp32 master weights): bf16 on CPU or GPU; fp16 with loss scaling, meant for GPUs "
             "(it runs on a CPU, slowly); auto: bf16 on GPUs that have it (else fp16) and on CPUs with native "
             "BF16 (AVX512-BF16, AMX) whose bf16 products a check of ~25 ms finds faster, else fp32. int8 is "
             "for translate and serve only: refused here.")
    fuse: str = option(
        "auto", choices=FUSE, resume=True,
        help="on: fuse each recurrence step's elementwise work into a few compiled kernels (torch.compile; the "
             "first run compiles for up to a minute, later runs reuse the cache). auto: off; on an H200 a step is "
             "bound by the host either way and fusing did not make it faster (benchmarks/GPU.md).")
    cuda_graphs: str = option(
        "auto", choices=CUDA_GRAPHS, resume=True,
        help="Run the decoder recurrence's loops (forward and backward) as CUDA graphs, over batches padded to "
             "multiples of 8 pairs and tokens: one launch per loop instead of ~40 per target word. auto: on for "
             "rnnsearch on CUDA; on: an error where that is impossible.")
    tf32: bool = option(
        True, flag=True, resume=True,
        help="fp32 runs on CUDA: matrix products and convolutions in TF32 (Ampere and newer; about fp32's range "
             "with a 10-bit mantissa, several times faster). --no-tf32 for exact fp32.")
    threads: int | None = option(None, min=1, max=MAX_THREADS, metavar="N", resume=True,
                                 shown_default="all cores, divided among local ranks", help="torch CPU threads.")
    loss_chunk_tokens: int = option(4096, min=1, cli=False, help="Target tokens per chunk of the output layer's loss.")

    def __post_init__(self) -> None:
        """Reject out-of-range or inconsistent values with one clear line."""
        if self.precision in DECODE_PRECISIONS and self.precision not in PRECISIONS:
            raise ConfigError(f"--precision {self.precision} is for decoding (translate, serve); "
                              "train with fp32, bf16, fp16 or auto")
        check_fields(self)
        check_device_name(self.device)
        if self.batch_size is None and self.max_tokens is None:
            raise ConfigError("need --batch-size or --max-tokens")
        if self.ema_start and not self.ema_decay:
            refuse_without(["--ema-start"], "--ema-decay", " above 0" if self.ema_decay == 0 else "")
        if self.min_lr > self.lr:  # the floor would replace the learning rate at every update
            raise ConfigError(f"--min-lr {self.min_lr} is above --lr {self.lr}: it is the floor decay stops at")
        for opt, value in (("--lr", self.lr), ("--clip-norm", self.clip_norm)):  # 0 itself: refused, or no clipping
            if 0 < value < _F32_MIN:
                raise ConfigError(f"{opt} {value} is below {_F32_MIN}, which float32 rounds to 0: no update would "
                                  "change a weight")
        if self.best_metric == "bleu" and self.valid_bleu_samples == 0:
            raise ConfigError("--best-metric bleu needs dev BLEU: --valid-bleu-samples must be > 0")
        if all(v is None for v in (self.max_updates, self.max_epochs, self.max_time, self.patience)):
            raise ConfigError("no stopping criterion: give --max-updates, --max-epochs, --max-time or --patience")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        valid = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - valid)
        if unknown:
            raise ConfigError(f"unknown train config keys {unknown}; valid keys: {sorted(valid)}")
        return cls(**d)


@dataclass(frozen=True)
class TrainOptions:
    """The TrainConfig fields a user gave (None: not given), each checked as TrainConfig checks it;
    a test holds the two field lists equal."""

    arch: str | None = None
    preset: str | None = None
    max_len: int | None = None
    batch_size: int | None = None
    max_tokens: int | None = None
    sort_pool: int | None = None
    update_freq: int | None = None
    optimizer: str | None = None
    lr: float | None = None
    adadelta_rho: float | None = None
    adadelta_eps: float | None = None
    adam_beta1: float | None = None
    adam_beta2: float | None = None
    adam_eps: float | None = None
    weight_decay: float | None = None
    clip_norm: float | None = None
    label_smoothing: float | None = None
    normalize_loss: str | None = None
    lr_schedule: str | None = None
    warmup_updates: int | None = None
    lr_decay: float | None = None
    lr_patience: int | None = None
    min_lr: float | None = None
    ema_decay: float | None = None
    ema_start: int | None = None
    max_updates: int | None = None
    max_epochs: int | None = None
    max_time: float | None = None
    patience: int | None = None
    valid_every: int | None = None
    valid_bleu_samples: int | None = None
    valid_beam: int | None = None
    valid_batch_size: int | None = None
    best_metric: str | None = None
    save_every: int | None = None
    keep_every: int | None = None
    log_every: int | None = None
    on_nan: str | None = None
    tensorboard: str | None = None
    seed: int | None = None
    device: str | None = None
    precision: str | None = None
    fuse: str | None = None
    cuda_graphs: str | None = None
    tf32: bool | None = None
    threads: int | None = None
    loss_chunk_tokens: int | None = None

    def __post_init__(self) -> None:
        check_fields(self, like=TrainConfig)

    given = ModelOverrides.given

    def replace(self, **changes: Any) -> TrainOptions:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class RunConfig:
    """Everything `nmtkit.train.run` takes: the data and run directories, the options given, and
    whether to continue the run there (`resume`) or replace it (`force`)."""

    data_dir: str | Path
    save_dir: str | Path
    options: TrainOptions = field(default_factory=TrainOptions)
    model: ModelOverrides = field(default_factory=ModelOverrides)
    resume: bool = False
    force: bool = False

    def __post_init__(self) -> None:
        """Refuse what the command line refuses (an empty folder), and a resume or force not a bool."""
        if not isinstance(self.options, TrainOptions) or not isinstance(self.model, ModelOverrides):
            raise TypeError("nmtkit.train.run takes a TrainOptions and a ModelOverrides")
        for name in ("resume", "force"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"nmtkit.train.run's {name} is True or False, not {getattr(self, name)!r}")
        if self.resume and self.force:
            raise ConfigError("--resume and --force exclude each other")
        for opt, path in (("--data", self.data_dir), ("--save-dir", self.save_dir)):
            if not isinstance(path, (str, os.PathLike)):
                raise TypeError(f"nmtkit.train.run's folder for {opt} is a path, not {type(path).__name__}")
            error = path_error(opt, path, "directory")
            if error:
                raise ConfigError(error)


def training_defaults(arch: str, preset_name: str | None) -> dict[str, Any]:
    """TrainConfig defaults implied by the model preset (for a bare architecture, those of the preset
    named after it where there is one, lstm-attention, else rnnsearch-50's)."""
    name = preset_name if preset_name is not None else (arch if arch in TRAIN_DEFAULTS else None)
    out = train_defaults(name if name is not None else "rnnsearch-50")
    if "sort_batches" in out:  # a pool of `sort_batches` minibatches, in pairs
        out["sort_pool"] = int(out.pop("sort_batches")) * int(out.get("batch_size", 80))
    out["normalize_loss"] = "sentences" if name is None or name in PAPER_PRESETS else "tokens"
    return out
