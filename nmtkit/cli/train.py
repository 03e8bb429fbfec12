"""`nmtkit train`: options -> RunConfig (TrainOptions, ModelOverrides: the fields given) -> `nmtkit.train.run`.
Every option defaults to "not given" (None), so that the preset's and, on --resume, the checkpoint's
settings apply unless the user says otherwise."""
from __future__ import annotations

import signal
import sys
import time
from typing import Any

import click

from nmtkit.cli.common import (
    config_options,
    config_values,
    make_console,
    path_callback,
    progress_enabled,
    quiet_option,
    quiet_warnings,
)
from nmtkit.train.config import TrainConfig, TrainOptions
from nmtkit.train.events import Callbacks, LogEvent, StartEvent, ValidationEvent
from nmtkit.train.presets import ModelOverrides

EPILOG = """\b
Examples:
  nmtkit train --data work/data --save-dir runs/rnnsearch50 --preset rnnsearch-50 --patience 10
  nmtkit train --data work/data --save-dir runs/small --preset small --max-time 20m --valid-every 500
  nmtkit train --data work/data --save-dir runs/small --resume          # continue exactly
  torchrun --nproc_per_node 4 -m nmtkit train --data work/data --save-dir runs/big --preset rnnsearch-50 ...
"""


@click.command("train", epilog=EPILOG)
@click.option("--data", "data_dir", required=True, type=click.Path(), metavar="DIR", callback=path_callback(),
              help="Data directory written by 'nmtkit preprocess' (manifest.json, vocabularies, train/valid splits).")
@click.option("--save-dir", required=True, type=click.Path(), metavar="RUN", callback=path_callback(),
              help="Run directory: checkpoint_best.pt, checkpoint_last.pt, config.json, metrics.jsonl, curves.png, "
                   "train.log.")
@click.option("--resume", is_flag=True,
              help="Continue the run in --save-dir exactly from checkpoint_last.pt (model, optimiser, schedule, "
                   "RNG states, position in the data). Only stopping, reporting and hardware options may change; "
                   "a change stays the run's, as its checkpoints record it.")
@click.option("--force", is_flag=True,
              help="Start over in a --save-dir that already holds a run: it is replaced when the new run saves "
                   "its first checkpoint, and kept if the new run fails before that.")
@config_options(TrainConfig, ModelOverrides, unset=True)
@quiet_option("No progress display, log lines or warnings on stderr; the run's files are still written")
@click.pass_context
def train_cmd(ctx: click.Context, data_dir: str, save_dir: str, resume: bool, force: bool, quiet: bool,
              **options: Any) -> None:
    """Train an RNNsearch, RNNencdec or LSTM-attention model.

    Reads a data directory from 'nmtkit preprocess' and writes a run directory. The paper's
    presets train as in Bahdanau et al. (2015): Adadelta, gradient norm 1, minibatches of 80
    pairs cut from 1600 pairs sorted by length. Ctrl-C, SIGTERM or SIGHUP saves
    checkpoint_last.pt and exits; --resume continues exactly. Under torchrun, each process trains
    on its own minibatches (--batch-size is per process; DistributedDataParallel averages the
    gradients) and only rank 0 writes.
    """
    quiet_warnings(quiet)
    train_options = TrainOptions(**config_values(TrainConfig, options, given_only=True))
    model_overrides = ModelOverrides(**config_values(ModelOverrides, options, given_only=True))

    from nmtkit.devices import import_torch

    import_torch()  # before the modules that import it, with interrupts held (see there)
    from nmtkit import train
    from nmtkit.train import distributed as ddp

    info = ddp.env_info()
    quiet_warnings(not info.is_main)  # the job's warnings once, from rank 0 (errors: every rank's)
    reporter = Reporter(quiet=quiet or not info.is_main)
    try:
        config = train.RunConfig(data_dir, save_dir, train_options, model_overrides, resume=resume, force=force)
        result = train.run(config, reporter)
    except train.TrainInterrupted as stop:  # its checkpoint saved: one line and a signal's exit status
        result = stop.result
    finally:
        reporter.close()
    if info.is_main and not quiet:
        best = "-" if result.best_score is None else f"{result.best_score:.4g} at update {result.best_update}"
        click.echo(f"nmtkit train: stopped ({result.reason}) at update {result.update}, epoch {result.epoch}; "
                   f"best dev: {best}; run: {save_dir}", err=True)
    if result.interrupted:
        if info.is_main:  # one line for the job, not one a process
            click.echo(f"nmtkit: {result.reason}: checkpoint saved to {save_dir}/checkpoint_last.pt; "
                       "continue with --resume", err=True)
        sys.exit(128 + signal.Signals[result.reason])  # 130, 143 or 129 (SIGHUP), as a shell expects


def _ppl(ppl: float, decimals: int) -> str:
    """A perplexity with `decimals` decimals, or in scientific notation once too large (a diverging model's)."""
    return f"{ppl:.{decimals}f}" if ppl < 1e6 else f"{ppl:.3g}"


def _fmt_time(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "-"
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Reporter(Callbacks):
    """Trainer events -> a rich live display on a terminal, else plain log lines on stderr."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.live = progress_enabled(quiet)
        self.progress = None
        self.update = 0
        self.epoch = 1
        self.total: int | None = None
        self.last: LogEvent | None = None
        self.dev = "-"
        self.t0 = time.perf_counter()
        self.start_update = 0
        self.max_time: float | None = None
        self.elapsed0 = 0.0

    def on_start(self, event: StartEvent) -> None:
        self.start_update = event.update
        self.max_time = event.max_time
        self.elapsed0 = event.elapsed
        per_epoch = -(-(event.batches_per_epoch // event.world_size) // event.update_freq)  # a short last update
        self.total = min((n for n in (event.max_updates, event.max_epochs and event.max_epochs * per_epoch) if n),
                         default=None)  # whichever stops the run first
        self.t0 = time.perf_counter()
        line = (f"training {event.parameters:,} parameters on {event.device} x{event.world_size}: "
                f"{event.train_pairs:,} pairs ({event.dropped_pairs:,} over --max-len dropped), "
                f"{event.batches_per_epoch:,} minibatches per epoch, from update {event.update:,}")
        if event.fused:  # else the first update looks hung on a fresh GPU machine
            line += "; the first updates compile the fused steps (up to a minute where nothing is cached)"
        if not self.live:  # quiet, or stderr is no terminal: a log line unless quiet
            self.on_message(line)
            return
        from rich.live import Live

        console = make_console()
        console.print(line)
        self.update, self.epoch = event.update, event.epoch
        self.progress = Live(get_renderable=self._render, console=console, refresh_per_second=4, transient=False)
        self.progress.start()

    def _render(self):
        """Three lines: progress and ETA, training statistics, last dev score."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        head = Table.grid(padding=(0, 1))
        total = f"/{self.total:,} ({100 * self.update / self.total:.0f}%)" if self.total else ""
        bar = [ProgressBar(total=self.total, completed=self.update, width=24)] if self.total else []
        head.add_row(Text("train", style="bold"), *bar, Text(f"update {self.update:,}{total}  epoch {self.epoch}  "
                                                             f"ETA {_fmt_time(self._eta(self.update))}"))
        r = self.last
        stats = (f"loss {r.loss:.3f}  ppl {_ppl(r.ppl, 1)}  lr {r.lr:.3g}  "
                 f"{r.tgt_tokens_per_s:,.0f} tgt tok/s" if r is not None else "loss -")
        return Group(head, Text("  " + stats), Text(f"  dev {self.dev}"))

    def _eta(self, update: int) -> float | None:
        done = update - self.start_update
        spent = time.perf_counter() - self.t0
        etas = []
        if self.total and done > 0:
            etas.append((self.total - update) * spent / done)
        if self.max_time:
            etas.append(max(0.0, self.max_time - self.elapsed0 - spent))
        return min(etas) if etas else None

    def on_update(self, update: int, epoch: int) -> None:
        self.update, self.epoch = update, epoch

    def on_log(self, event: LogEvent) -> None:
        self.last = event
        if not self.quiet and self.progress is None:
            click.echo(f"nmtkit train: update {event.update:,} | epoch {event.epoch} | loss {event.loss:.4f} | "
                       f"ppl {_ppl(event.ppl, 2)} | lr {event.lr:.3g} | {event.tgt_tokens_per_s:,.0f} tgt tok/s | "
                       f"ETA {_fmt_time(self._eta(event.update))}", err=True)

    def on_validation(self, event: ValidationEvent) -> None:
        bleu = "" if event.bleu is None else f" BLEU {event.bleu:.2f}"
        best = "  (best)" if event.best else ""
        self.dev = f"loss {event.loss:.3f}  ppl {_ppl(event.ppl, 1)}{bleu}  at update {event.update:,}{best}"
        self.on_message(f"validation at update {event.update:,}: dev loss {event.loss:.3f} "
                        f"ppl {_ppl(event.ppl, 1)}{bleu}{' (best)' if event.best else ''}")

    def on_config(self, text: str) -> None:
        if not self.quiet:
            click.echo(f"nmtkit train: configuration (also in config.json):\n{text}", err=True, nl=False)

    def on_message(self, msg: str) -> None:
        if self.quiet:
            return
        if self.progress is not None:
            self.progress.console.print(msg)
        else:
            click.echo(f"nmtkit train: {msg}", err=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
