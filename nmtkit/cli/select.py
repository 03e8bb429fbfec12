"""`nmtkit select-data`: pick the in-domain-looking pairs of a general pool (Axelrod et al. 2011)."""
from __future__ import annotations

import contextlib
from typing import Any

import click

from nmtkit.cli.common import (
    config_options,
    config_values,
    make_console,
    quiet_option,
    quiet_warnings,
    stage_bars,
    stage_progress,
)
from nmtkit.select import SelectConfig


@click.command("select-data")
@config_options(SelectConfig)
@quiet_option("No progress bar, summary or warnings on stderr")
def select_data_cmd(quiet: bool, **options: Any) -> None:
    """Select in-domain pairs from a pool by cross-entropy difference (Axelrod et al. 2011).

    Lowest scores first, ties by pool line number, until the budget (exactly one of --lines,
    --words, --fraction) is met. Cross-entropies are per token in bits with </s> counted.
    """
    quiet_warnings(quiet)
    from nmtkit.select import run

    cfg = SelectConfig(**config_values(SelectConfig, options))
    with stage_progress(quiet, lambda: _bars(make_console())) as progress:
        summary = run(cfg, progress)
    if not quiet:
        sel = summary["selected"]
        click.echo(f"selected {sel['pairs']} of {summary['pool']['pairs']} pairs "
                   f"({sel['src_tokens']} source tokens) -> {summary['outputs']['src']}, "
                   f"{summary['outputs']['tgt']}", err=True)


def _bars(console) -> contextlib.AbstractContextManager:
    """A bar per stage, with pairs/s."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return stage_bars(console, [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TaskProgressColumn(), TextColumn("{task.fields[rate]} pairs/s"),
                                TimeElapsedColumn(), TimeRemainingColumn()],
                      labels={"sample": "sampling pool", "score": "scoring", "write": "writing"}, rate=True)
