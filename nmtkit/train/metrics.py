"""What a run writes for people to read: metrics.jsonl (one JSON record per log interval and
validation), curves.png (redrawn at each validation), train.log, and with --tensorboard the same
records as TensorBoard scalars. On resume, records after the checkpoint being resumed are dropped,
so the files describe the run that the checkpoints continue.
"""
from __future__ import annotations

import json
import logging
import logging.handlers
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

from nmtkit.errors import ConfigError, NmtkitError
from nmtkit.io.dirs import RUN_LOG, run_lock
from nmtkit.io.files import name_error, save_figure, use_agg, write_text
from nmtkit.train.events import Callbacks, FanOut, LogEvent, ValidationEvent

log = logging.getLogger(__name__)

_STOPPED = "stopped by an error after update"


class MetricsLog:
    """metrics.jsonl + curves.png in a run directory."""

    def __init__(self, run_dir: str | Path, resume: tuple[int, int | None] | None = None):
        """`resume`: (the checkpoint's update, the update of its last validation)."""
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        self.records: list[dict[str, Any]] = []
        if resume is not None and self.path.exists():
            update, validated = resume
            for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    rec = json.loads(line)
                    last = validated if rec.get("kind") == "valid" else update
                    if last is not None and int(rec.get("update", 0)) <= last:
                        self.records.append(rec)
                except (ValueError, TypeError, AttributeError):
                    continue  # a line cut by a kill, or damaged
        write_text(self.path, "".join(json.dumps(rec) + "\n" for rec in self.records))
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, rec: dict[str, Any]) -> None:
        self.records.append(rec)
        try:
            self._file.write(json.dumps(rec) + "\n")
            self._file.flush()
        except OSError as err:  # a full disk: name the file (a failed write names none)
            raise name_error(err, str(self.path)) from None

    def draw_curves(self) -> None:
        try:
            draw_curves(self.records, self.run_dir / "curves.png")
        except Exception as err:  # a plot must never stop a week-long run
            log.warning("could not draw curves.png: %s", err)

    def close(self) -> None:
        self._file.close()


def draw_curves(records: list[dict[str, Any]], path: Path) -> None:
    """Losses (train, dev) and dev BLEU against updates."""
    use_agg()
    from matplotlib.figure import Figure

    train = [r for r in records if r.get("kind") == "train"]
    valid = [r for r in records if r.get("kind") == "valid"]
    bleu = [r for r in valid if r.get("bleu") is not None]
    fig = Figure(figsize=(10, 4), dpi=100)
    ax1, ax2 = fig.subplots(1, 2)
    if train:
        ax1.plot([r["update"] for r in train], [r["loss"] for r in train], label="train loss", lw=1)
    if valid:
        ax1.plot([r["update"] for r in valid], [r["loss"] for r in valid], "o-", label="dev loss", lw=1.5, ms=3)
    ax1.set_xlabel("updates")
    ax1.set_ylabel("loss (nats per target token)")
    ax1.grid(alpha=0.3)
    if train or valid:
        ax1.legend()
    if bleu:
        ax2.plot([r["update"] for r in bleu], [r["bleu"] for r in bleu], "o-", color="C2", lw=1.5, ms=3)
    ax2.set_xlabel("updates")
    ax2.set_ylabel("dev BLEU")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)


class _RunLog(logging.FileHandler):
    """train.log: a write that fails (a full disk) stops the run with one line naming the file."""

    def __init__(self, run_dir: Path):
        super().__init__(run_dir / RUN_LOG, encoding="utf-8", errors="surrogateescape")  # a non-UTF-8 name as its bytes
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))

    def handleError(self, record: logging.LogRecord) -> None:
        err = sys.exc_info()[1]
        if isinstance(err, OSError):
            raise name_error(err, self.baseFilename)
        super().handleError(record)

    def close(self) -> None:
        try:
            super().close()
        except OSError as err:
            raise name_error(err, self.baseFilename) from None


class _EarlyRecords(logging.handlers.MemoryHandler):
    """The `nmtkit` loggers' records of a run before its train.log opens, written there first."""


def keep_early_records() -> logging.Handler:
    """Keep the `nmtkit` loggers' records (the data's and options' warnings) for `setup_file_log`."""
    early = _EarlyRecords(1 << 20, flushLevel=logging.CRITICAL + 1)
    early.setLevel(logging.INFO)
    logging.getLogger("nmtkit").addHandler(early)
    return early


def setup_file_log(run_dir: Path) -> logging.Handler:
    """Send the `nmtkit` loggers' INFO records to run_dir/train.log (appending on resume), those kept
    by `keep_early_records` first."""
    handler = _RunLog(run_dir)
    handler.setLevel(logging.INFO)
    logger = logging.getLogger("nmtkit")
    for early in [h for h in logger.handlers if isinstance(h, _EarlyRecords)]:
        early.setTarget(handler)
        early.close()  # writes them
        logger.removeHandler(early)
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler


def error_record(update: int, err: BaseException, by: str = "") -> str:
    """train.log's record of the error that stopped a run; `by` names a writer other than rank 0."""
    first = str(err).splitlines()[0] if str(err) else ""
    return f"{_STOPPED} {update}{by}: {type(err).__name__}: {first}"


def record_for_a_lost_writer(run_dir: Path, record: str, wait_s: float = 3.0) -> bool:
    """Append `record` to train.log from a rank other than 0 once rank 0 is gone (the run's lock, which
    it holds while it lives, is free within `wait_s`), unless the log ends with such a record."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            lock = run_lock(run_dir).acquire()
            break
        except NmtkitError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        except OSError:
            return False
    try:
        path = run_dir / RUN_LOG
        if not path.is_file() or f" ERROR {_STOPPED} " in _last_line(path):
            return False
        handler = _RunLog(run_dir)
        try:
            handler.handle(logging.makeLogRecord({"name": log.name, "levelno": logging.ERROR,
                                                  "levelname": "ERROR", "msg": record}))
        finally:
            handler.close()
        return True
    finally:
        lock.release()


def _last_line(path: Path, tail: int = 4096) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - tail))
        lines = f.read().decode("utf-8", "replace").splitlines()
    return lines[-1] if lines else ""


INSTALL = "pip install 'nmtkit[tensorboard]' (or pip install tensorboard)"
TRAIN_SCALARS = ("loss", "ppl", "objective", "grad_norm", "lr", "tgt_tokens_per_s", "sents_per_s", "updates_per_s",
                 "skipped")
VALID_SCALARS = ("loss", "ppl", "bleu", "best_score")


def require_tensorboard() -> Any:
    """torch's SummaryWriter class, or a ConfigError saying how to install tensorboard."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(f"--tensorboard needs the tensorboard package: {INSTALL}") from None
    return SummaryWriter


class TensorBoardCallbacks(FanOut):
    """Writes log and validation events as scalars (rank 0 only); forwards every callback to `inner`.
    The writer purges what a killed session logged after the update resumed, as metrics.jsonl does."""

    def __init__(self, log_dir: str | Path, inner: Callbacks | None = None, start_update: int = 0):
        writer_class = require_tensorboard()
        self.inner = inner or Callbacks()
        super().__init__([self.inner])
        self.writer = writer_class(log_dir=str(Path(log_dir)), purge_step=start_update + 1)

    def _scalars(self, prefix: str, names: tuple[str, ...], event: LogEvent | ValidationEvent) -> None:
        step = int(event.update)
        for name in names:
            value = getattr(event, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(f"{prefix}/{name}", value, step)
        self.writer.flush()

    def on_log(self, event: LogEvent) -> None:
        self._scalars("train", TRAIN_SCALARS, event)
        self.inner.on_log(event)

    def on_validation(self, event: ValidationEvent) -> None:
        self._scalars("valid", VALID_SCALARS, event)
        self.inner.on_validation(event)

    def reopened_after(self, commit: Callable[[], Path]) -> Path:
        """`commit()`, which moves the writer's folder (the run's tensorboard/) into the run folder it
        returns; then the events go to a new file there (the writer opens its file by name at each write)."""
        self.writer.close()
        run_dir = commit()
        self.writer = type(self.writer)(log_dir=str(run_dir / "tensorboard"))
        return run_dir

    def close(self) -> None:
        self.writer.close()
