"""What a training run tells its caller and remembers: typed events, the `Callbacks` that receive
them, the `TrainState` saved in every checkpoint and the `TrainResult` a run returns (raised in a
`TrainInterrupted` after a stop signal). A log and a validation event are also the records of
metrics.jsonl (`record()`)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class StartEvent:
    """The run is about to train from `update` (0, or the resumed update)."""

    update: int
    epoch: int
    max_updates: int | None
    max_epochs: int | None
    max_time: float | None  # seconds
    batches_per_epoch: int
    train_pairs: int  # the pairs kept by --max-len
    dropped_pairs: int
    parameters: int
    device: str
    world_size: int
    elapsed: float  # training seconds before this session (a resumed run's)
    fused: bool = False  # the step bodies run compiled (--fuse): the first updates compile them
    update_freq: int = 1  # minibatches per process in an update: an epoch makes fewer updates than minibatches


@dataclass(frozen=True)
class LogEvent:
    """Training statistics over the updates since the previous log event (summed over ranks)."""

    update: int
    epoch: int
    loss: float  # mean NLL per target token (EOS included)
    ppl: float
    objective: float  # the optimised loss per target token (label smoothing included)
    grad_norm: float  # mean over the updates, before clipping (an fp16 overflow's, a skipped step: 0)
    lr: float
    tgt_tokens_per_s: float
    sents_per_s: float
    updates_per_s: float
    elapsed: float
    skipped: int  # minibatches skipped for a non-finite loss, over the whole run

    def record(self) -> dict[str, Any]:
        return {"kind": "train", **asdict(self)}


@dataclass(frozen=True)
class ValidationEvent:
    """A validation's dev scores, and whether it made a new best checkpoint."""

    update: int
    epoch: int
    loss: float  # mean NLL per dev target token
    ppl: float
    bleu: float | None  # None where dev BLEU is off
    best: bool  # a dev score at least as good as the best before: checkpoint_best.pt was written
    best_score: float | None
    best_update: int | None
    seconds: float
    elapsed: float
    final: bool  # the validation when training stopped between two scheduled ones

    def record(self) -> dict[str, Any]:
        return {"kind": "valid", **asdict(self)}


CALLBACK_METHODS = ("on_start", "on_update", "on_log", "on_validation", "on_message", "on_config")


class Callbacks:
    """What the trainer tells its caller; every method does nothing unless overridden."""

    def on_start(self, event: StartEvent) -> None: ...

    def on_update(self, update: int, epoch: int) -> None: ...

    def on_log(self, event: LogEvent) -> None: ...

    def on_validation(self, event: ValidationEvent) -> None: ...

    def on_message(self, msg: str) -> None: ...

    def on_config(self, text: str) -> None:
        """The run's resolved configuration, as written to config.json."""


class FanOut(Callbacks):
    """Several callbacks as one: each event goes to each, in order."""

    def __init__(self, many: list[Any]):
        self.many = many


def _fan_out(name: str) -> Any:
    def method(self: FanOut, *args: Any) -> None:
        for one in self.many:
            getattr(one, name)(*args)
    return method


for _name in CALLBACK_METHODS:
    setattr(FanOut, _name, _fan_out(_name))


@dataclass
class TrainState:
    """Where the run is; saved in every checkpoint under "trainer"."""

    update: int = 0
    epoch: int = 1
    batch_in_epoch: int = 0  # index of the next minibatch in the epoch's plan
    best_score: float | None = None  # the best dev score of all validations: checkpoint_best.pt's
    best_update: int | None = None
    bad_validations: int = 0
    # the best of the scheduled validations only: what --patience counts against, so that the final
    # validation of a run that stops in between does not change when a resumed run stops early
    scheduled_best: float | None = None
    last_valid_update: int | None = None
    elapsed: float = 0.0  # training seconds over all sessions of the run
    skipped_batches: int = 0

    def record_best(self, score: float, higher_is_better: bool) -> bool:
        """Note a dev score at this update; True when none before was better (never a non-finite one): a
        tie makes the later model the best, as in fairseq, while --patience and plateau count it as no gain."""
        improved = _better(score, self.best_score, higher_is_better, tie=True)
        self.last_valid_update = self.update
        if improved:
            self.best_score, self.best_update = score, self.update
        return improved

    def record_scheduled(self, score: float, higher_is_better: bool) -> None:
        """Note the dev score of a scheduled validation: the best of them, or one more bad validation."""
        if _better(score, self.scheduled_best, higher_is_better):
            self.scheduled_best, self.bad_validations = score, 0
        else:
            self.bad_validations += 1


def _better(score: float, best: float | None, higher_is_better: bool, tie: bool = False) -> bool:
    return math.isfinite(score) and (best is None or (tie and score == best)
                                     or (score > best if higher_is_better else score < best))


@dataclass
class TrainResult:
    reason: str  # max-updates | max-epochs | max-time | patience | SIGINT | SIGTERM | SIGHUP
    update: int
    epoch: int
    best_score: float | None
    best_update: int | None
    last_valid: ValidationEvent | None

    @property
    def interrupted(self) -> bool:
        return self.reason.startswith("SIG")


class TrainInterrupted(KeyboardInterrupt):
    """A stop signal ended the run once it saved checkpoint_last.pt (`result`: where): raised as Ctrl-C
    raises elsewhere, so that a caller's code after the run does not go on as after a finished one."""

    def __init__(self, result: TrainResult):
        super().__init__(f"{result.reason} at update {result.update}: checkpoint_last.pt saved (resume=True "
                         "continues)")
        self.result = result
