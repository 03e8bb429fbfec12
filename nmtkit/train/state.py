"""What a training run remembers: the `TrainState` saved in every checkpoint (with the
bookkeeping of validations) and the `TrainResult` it returns (what it reports as it goes:
`nmtkit.train.events`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from nmtkit.train.events import ValidationEvent


@dataclass
class TrainState:
    """Where the run is; saved in every checkpoint under "trainer"."""

    update: int = 0
    epoch: int = 1
    batch_in_epoch: int = 0  # index of the next minibatch in the epoch's plan
    best_score: float | None = None  # the best dev score of all validations: checkpoint_best.pt's
    best_update: int | None = None
    bad_validations: int = 0
    # the best of the scheduled validations (every --valid-every updates) only: what --patience
    # counts against, so that the validation of a run stopping in between (by --max-updates,
    # --max-time, a signal) does not change when a resumed run stops early
    scheduled_best: float | None = None
    last_valid_update: int | None = None
    elapsed: float = 0.0  # training seconds over all sessions of the run
    skipped_batches: int = 0

    def record_best(self, score: float, higher_is_better: bool) -> bool:
        """Note a dev score at this update; True when it is the best so far (never a non-finite
        one). The early-stopping count is `stopping.count_patience`'s."""
        improved = _better(score, self.best_score, higher_is_better)
        self.last_valid_update = self.update
        if improved:
            self.best_score, self.best_update = score, self.update
        return improved

    def record_scheduled(self, score: float, higher_is_better: bool) -> bool:
        """Note the dev score of a scheduled validation; True when it is the best of them."""
        improved = _better(score, self.scheduled_best, higher_is_better)
        if improved:
            self.scheduled_best = score
        return improved


def _better(score: float, best: float | None, higher_is_better: bool) -> bool:
    return math.isfinite(score) and (best is None or (score > best if higher_is_better else score < best))


@dataclass
class TrainResult:
    reason: str  # max-updates | max-epochs | max-time | patience | SIGINT | SIGTERM
    update: int
    epoch: int
    best_score: float | None
    best_update: int | None
    last_valid: ValidationEvent | None

    @property
    def interrupted(self) -> bool:
        return self.reason in ("SIGINT", "SIGTERM")
