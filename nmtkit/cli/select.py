"""`nmtkit select-data`: pick the in-domain-looking pairs of a general pool (Axelrod et al. 2011)."""
from __future__ import annotations

from typing import Any

import click

from nmtkit.cli.common import (
    config_options,
    config_values,
    make_console,
    progress_enabled,
    quiet_option,
    quiet_warnings,
)
from nmtkit.select.config import SelectConfig


@click.command("select-data")
@config_options(SelectConfig)
@quiet_option("No progress bar, summary or warnings on stderr")
def select_data_cmd(quiet: bool, **options: Any) -> None:
    """Select in-domain pairs from a pool by cross-entropy difference (Axelrod et al. 2011).

    Lowest scores first, ties by pool line number, until the budget (exactly one of --lines,
    --words, --fraction) is met. Cross-entropies are per token in bits with </s> counted.
    """
    quiet_warnings(quiet)
    from nmtkit.select.selection import run_selection

    values = config_values(SelectConfig, options)
    cfg = SelectConfig(**values)
    console = make_console()
    if progress_enabled(quiet):
        with _progress(console) as cb:
            summary = run_selection(cfg, cb)
    else:
        summary = run_selection(cfg)
    if not quiet:
        sel = summary["selected"]
        click.echo(f"selected {sel['pairs']} of {summary['pool']['pairs']} pairs "
                   f"({sel['src_tokens']} source tokens) -> {summary['outputs']['src']}, "
                   f"{summary['outputs']['tgt']}", err=True)


class _progress:
    """A rich progress bar per stage, with pairs/s, fed by the library's (stage, done, total) callback."""

    LABELS = {"sample": "sampling pool", "score": "scoring", "write": "writing"}

    def __init__(self, console):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TaskProgressColumn(), TextColumn("{task.fields[rate]} pairs/s"),
                                 TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)
        self.tasks: dict[str, int] = {}

    def __enter__(self):
        self.progress.__enter__()
        return self.update

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def update(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.progress.add_task(self.LABELS.get(stage, stage), total=total, rate="-")
        tid = self.tasks[stage]
        self.progress.update(tid, completed=done)
        speed = self.progress.tasks[tid].speed
        self.progress.update(tid, rate=f"{speed:,.0f}" if speed else "-")
