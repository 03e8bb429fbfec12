"""`TrainConfig`: every option of `nmtkit train` that shapes a run, as one frozen dataclass.

The defaults for the paper's presets follow Bahdanau et al. 2015, section 4.2 / appendix B.2:
Adadelta (epsilon 1e-6, rho 0.95, lr 1.0), gradient L2 norm rescaled to at most 1, minibatches of
80 pairs, 1600 pairs read, sorted by length and split at a time, pairs longer than 30 or 50 words
dropped. Other presets default to Adam (lr 1e-3) with the same clipping.

The config is saved as a plain dict in every checkpoint and rebuilt with `TrainConfig.from_dict`;
unknown keys are an error that lists the valid ones (docs/design.md, convention 1).
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from nmtkit.errors import ConfigError

OPTIMIZERS = ("adadelta", "adam", "sgd")
SCHEDULES = ("constant", "plateau")
PRECISIONS = ("fp32", "bf16", "fp16", "auto")
DEVICES = ("auto", "cpu", "cuda")
FUSE = ("auto", "on", "off")
BEST_METRICS = ("loss", "bleu")
ON_NAN = ("stop", "skip")
NORMALIZE = ("sentences", "tokens")

# Presets whose training procedure is the paper's; the number is the maximum sentence length.
PAPER_PRESETS = {"rnnsearch-30": 30, "rnnsearch-50": 50, "rnnencdec-30": 30, "rnnencdec-50": 50}


@dataclass(frozen=True)
class TrainConfig:
    """How to train. Field names match the `nmtkit train` options (`--max-len` -> max_len)."""

    # model
    arch: str = "rnnsearch"
    preset: str | None = None
    # data
    max_len: int | None = 50
    batch_size: int | None = 80
    max_tokens: int | None = None
    sort_pool: int = 1600
    update_freq: int = 1  # minibatches per rank whose gradients one update sums
    # objective and optimiser
    optimizer: str = "adadelta"
    lr: float = 1.0
    adadelta_rho: float = 0.95
    adadelta_eps: float = 1e-6
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    clip_norm: float = 1.0
    label_smoothing: float = 0.0
    normalize_loss: str = "sentences"  # divide the summed loss by the pairs or the target tokens
    # learning-rate schedule
    lr_schedule: str = "constant"
    warmup_updates: int = 0
    lr_decay: float = 0.5
    lr_patience: int = 0
    min_lr: float = 0.0
    # stopping
    max_updates: int | None = None
    max_epochs: int | None = None
    max_time: float | None = None  # seconds
    patience: int | None = None  # validations without improvement
    # validation, checkpoints, logs
    valid_every: int = 1000
    valid_bleu_samples: int = 500
    valid_beam: int = 1
    valid_batch_size: int = 64
    best_metric: str = "loss"
    save_every: int = 1000
    keep_every: int = 0  # also keep checkpoint_<update>.pt (model only) every N updates; 0: never
    log_every: int = 100
    on_nan: str = "stop"
    tensorboard: str | None = None  # TensorBoard folder (nmtkit.train.tensorboard); True in old runs: RUN/tensorboard
    # reproducibility and hardware
    seed: int = 1
    device: str = "auto"
    precision: str = "fp32"
    fuse: str = "auto"  # compile the recurrences' step bodies (models/fusion.py); auto: on CUDA
    tf32: bool = True  # fp32 matrix products in TF32 on CUDA GPUs that have it (models/precision.py)
    threads: int | None = None
    loss_chunk_tokens: int = 4096

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Reject inconsistent or out-of-range values with one clear line."""

        def choice(name: str, allowed: tuple[str, ...]) -> None:
            v = getattr(self, name)
            if v not in allowed:
                raise ConfigError(f"--{_opt(name)} must be one of {', '.join(allowed)}, got '{v}'")

        choice("optimizer", OPTIMIZERS)
        choice("lr_schedule", SCHEDULES)
        choice("precision", PRECISIONS)
        choice("device", DEVICES)
        choice("fuse", FUSE)
        choice("best_metric", BEST_METRICS)
        choice("on_nan", ON_NAN)
        choice("normalize_loss", NORMALIZE)
        self._check_numbers()
        if self.batch_size is None and self.max_tokens is None:
            raise ConfigError("need --batch-size or --max-tokens")
        positive = ["sort_pool", "update_freq", "valid_every", "save_every", "log_every", "valid_batch_size", "loss_chunk_tokens"]
        positive += [n for n in ("batch_size", "max_tokens", "max_len", "max_updates", "max_epochs", "threads")
                     if getattr(self, n) is not None]
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"--{_opt(name)} must be at least 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ConfigError(f"--lr must be positive, got {self.lr}")
        if self.clip_norm < 0:
            raise ConfigError(f"--clip-norm must be >= 0 (0 disables clipping), got {self.clip_norm}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"--label-smoothing must be in [0, 1), got {self.label_smoothing}")
        if not 0.0 < self.lr_decay <= 1.0:
            raise ConfigError(f"--lr-decay must be in (0, 1], got {self.lr_decay}")
        if self.max_time is not None and self.max_time <= 0:
            raise ConfigError(f"--max-time must be positive, got {self.max_time}")
        if self.patience is not None and self.patience < 1:
            raise ConfigError(f"--patience must be at least 1, got {self.patience}")
        if self.valid_beam < 1:
            raise ConfigError(f"--valid-beam must be at least 1, got {self.valid_beam}")
        if self.valid_bleu_samples < 0:
            raise ConfigError(f"--valid-bleu-samples must be >= 0, got {self.valid_bleu_samples}")
        if self.keep_every < 0:
            raise ConfigError(f"--keep-every must be >= 0 (0: never), got {self.keep_every}")
        if self.best_metric == "bleu" and self.valid_bleu_samples == 0:
            raise ConfigError("--best-metric bleu needs dev BLEU: --valid-bleu-samples must be > 0")
        if self.warmup_updates < 0 or self.lr_patience < 0 or self.min_lr < 0:
            raise ConfigError("--warmup-updates, --lr-patience and --min-lr must be >= 0")
        if (self.max_updates is None and self.max_epochs is None and self.max_time is None
                and self.patience is None):
            raise ConfigError("no stopping criterion: give --max-updates, --max-epochs, --max-time or --patience")

    def _check_numbers(self) -> None:
        """Every float option is a finite number in its optimiser's range (nan, inf, rho 2 or a
        negative weight decay would otherwise fail inside torch with a traceback, or train on
        quietly), every int option an int."""
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type in ("float", "float | None") and v is not None:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ConfigError(f"--{_opt(f.name)} must be a finite number, got {v}")
            elif f.type in ("int", "int | None") and v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise ConfigError(f"--{_opt(f.name)} must be an integer, got {v!r}")
        ranges = {  # name: (low, high, low inclusive, high inclusive)
            "adadelta_rho": (0.0, 1.0, True, True), "adadelta_eps": (0.0, None, False, None),
            "adam_beta1": (0.0, 1.0, True, False), "adam_beta2": (0.0, 1.0, True, False),
            "adam_eps": (0.0, None, False, None), "weight_decay": (0.0, None, True, None),
            "seed": (0, None, True, None),
        }
        for name, (lo, hi, lo_in, hi_in) in ranges.items():
            v = getattr(self, name)
            bad = v < lo if lo_in else v <= lo
            if hi is not None:
                bad = bad or (v > hi if hi_in else v >= hi)
            if bad:
                span = f"{'[' if lo_in else '('}{lo}, {hi if hi is not None else 'inf'}{']' if hi_in else ')'}"
                raise ConfigError(f"--{_opt(name)} must be in {span}, got {v}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        valid = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - valid)
        if unknown:
            raise ConfigError(f"unknown train config keys {unknown}; valid keys: {sorted(valid)}")
        return cls(**d)

    def replace(self, **changes: Any) -> "TrainConfig":
        return dataclasses.replace(self, **changes)


def _opt(field_name: str) -> str:
    return field_name.replace("_", "-")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> float:
    """'90' or '90s' -> 90.0, '30m' -> 1800.0, '2h' -> 7200.0, '1.5d' -> 129600.0 (seconds)."""
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"--max-time: expected a duration like 3600, 90m, 12h or 2d, got '{text}'")
    value = float(m.group(1))
    return value * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
