"""`nmtkit average`: options -> the checkpoint list -> nmtkit.average.average."""
from __future__ import annotations

import click

from nmtkit.cli.common import quiet_warnings


@click.command("average")
@click.option("-m", "--model", "models", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="A checkpoint to average (repeatable, at least one).")
@click.option("--last", type=int, default=None, metavar="N",
              help="Average the run's N newest checkpoint_<update>.pt (kept by train --keep-every); needs --save-dir.")
@click.option("--save-dir", type=click.Path(file_okay=False), default=None, metavar="RUN",
              help="The run directory whose kept checkpoints --last takes.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="The averaged checkpoint to write (not one of the inputs); translate and serve read it like any other.")
@click.option("--force", is_flag=True, help="Overwrite an existing --output.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on stderr (on a terminal, each checkpoint read is named).")
def average_cmd(models, last, save_dir, output, force, quiet) -> None:
    """Average the parameters of compatible checkpoints (same model, vocabularies, preprocessing).

    The mean is taken in float64 and stored in the checkpoints' own dtype; the result keeps the
    newest input's configs, text pipeline and decoding lexicon.

    \b
    Examples:
      nmtkit average -m run/checkpoint_9000.pt -m run/checkpoint_10000.pt -o run/avg.pt
      nmtkit average --last 5 --save-dir run -o run/checkpoint_avg5.pt
    """
    quiet_warnings(quiet)
    from nmtkit.average import average, last_checkpoints
    from nmtkit.errors import ConfigError

    if (last is None) != (save_dir is None):
        raise ConfigError("--last N and --save-dir RUN go together")
    if last is not None and models:
        raise ConfigError("give either -m FILE ... or --last N --save-dir RUN, not both")
    paths = list(models) if last is None else [str(p) for p in last_checkpoints(save_dir, last)]
    from nmtkit.cli.common import progress_enabled

    report = (lambda path: click.echo(f"nmtkit average: read {path}", err=True)) if progress_enabled(quiet) else None
    average(paths, output, force=force, progress=report)
    if not quiet:
        click.echo(f"nmtkit average: wrote {output}, the mean of {len(paths)} checkpoints", err=True)
