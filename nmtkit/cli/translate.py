"""`nmtkit translate`: raw text in, translations out (library: nmtkit.translate)."""
from __future__ import annotations

import logging
import sys
from typing import Any

import click
from click.core import ParameterSource

from nmtkit.cli.common import config_options, config_values, quiet_option, quiet_warnings
from nmtkit.io.checks import file_path
from nmtkit.translate.config import TranslateConfig

log = logging.getLogger(__name__)


@click.command("translate")
@config_options(TranslateConfig)
@click.option("-i", "--input", "input_path", metavar="FILE",
              help="Input text, one sentence a line ('-': stdin; FILE.gz is gunzipped). [stdin]")
@click.option("-o", "--output", "output_path", metavar="FILE",
              help="Output file, written under a temporary name and renamed at the end ('-': stdout). [stdout]")
@click.option("--alignments-file", metavar="FILE", help="Where --alignments go ('-': stdout, with -o FILE).")
@click.option("--force", is_flag=True, help="Overwrite existing -o / --alignments-file files (never an input: that is refused).")
@click.option("--interactive", is_flag=True,
              help="Answer each line at once (implied when stdin is a terminal; same as --buffer-size 1).")
@quiet_option("No warnings or summary on stderr")
def translate_cmd(input_path: str | None, output_path: str | None, alignments_file: str | None, force: bool,
                  interactive: bool, quiet: bool, **options: Any) -> None:
    """Translate raw text with batched beam search (or sampling: --sampling).

    Reads one sentence a line (stdin or -i), applies exactly the preprocessing recorded in the
    checkpoint, decodes, joins BPE, detokenises and writes one line per input line, in order
    (empty lines stay empty). Example:

        nmtkit translate -m run/checkpoint_best.pt < test.en > test.hyp.fr
    """
    quiet_warnings(quiet)
    from nmtkit.translate import run

    stdin_tty = file_path(input_path) is None and sys.stdin.isatty()
    values = config_values(TranslateConfig, options)
    source = click.get_current_context().get_parameter_source
    given_buffer = source("buffer_size") != ParameterSource.DEFAULT
    cfg = TranslateConfig(**values, input_path=input_path, output_path=output_path, alignments_file=alignments_file,
                          force=force, interactive=interactive or stdin_tty)
    if (interactive or stdin_tty) and given_buffer and values["buffer_size"] != 1:
        implied = "" if interactive else " (implied by stdin being a terminal)"
        log.warning(f"--buffer-size is ignored with --interactive{implied}, which translates each line as it arrives")

    report = run(cfg)
    if not quiet and not stdin_tty:
        done = "scored" if cfg.score_reference else "translated"
        click.echo(f"nmtkit: {done} {report['lines']} lines", err=True)
