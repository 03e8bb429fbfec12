"""`nmtkit average`: options -> AverageConfig -> nmtkit.average.run -> its summary."""
from __future__ import annotations

from typing import Any

import click

from nmtkit.average import AverageConfig
from nmtkit.cli.common import config_options, config_values, progress_enabled, quiet_option, quiet_warnings


@click.command("average")
@config_options(AverageConfig)
@quiet_option("No summary on stderr, and on a terminal no line per checkpoint read")
def average_cmd(quiet: bool, **options: Any) -> None:
    """Average the parameters of compatible checkpoints (same model, vocabularies, preprocessing).

    The mean is taken in float64 and stored in the checkpoints' own dtype; the result keeps the
    newest input's configs, text pipeline and decoding lexicon.

    \b
    Examples:
      nmtkit average -m run/checkpoint_9000.pt -m run/checkpoint_10000.pt -o run/avg.pt
      nmtkit average --last 5 --save-dir run -o run/checkpoint_avg5.pt
    """
    quiet_warnings(quiet)
    from nmtkit.average import run

    config = AverageConfig(**config_values(AverageConfig, options))
    shown = (lambda path, done, total: click.echo(f"nmtkit average: read {path}", err=True)) \
        if progress_enabled(quiet) else None
    report = run(config, progress=shown)
    if not quiet:
        n = len(report["inputs"])
        click.echo(f"nmtkit average: wrote {report['output']}, the mean of {n} checkpoint{'s' * (n != 1)}", err=True)
