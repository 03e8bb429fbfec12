"""`nmtkit tokenize`: Moses-normalise and tokenise one file once, in parallel, for recipes that
feed the result to both `select-data --input-format tok` and `preprocess --input-format tok`."""
from __future__ import annotations

from typing import Any

import click

from nmtkit.cli.common import config_options, config_values, quiet_option, quiet_warnings
from nmtkit.text.tokenize import TokenizeConfig, run


@click.command("tokenize")
@config_options(TokenizeConfig)
@quiet_option("No warnings on stderr; tokenize prints no progress")
def tokenize_cmd(quiet: bool, **options: Any) -> None:
    """Moses-normalise and tokenise raw text with the settings preprocess uses (sacremoses, escape=False).

    \b
    Examples:
      nmtkit tokenize --lang en -i corpus.en -o corpus.tok.en
      zcat news.fr.gz | nmtkit tokenize --lang fr > news.tok.fr
    """
    quiet_warnings(quiet)
    run(TokenizeConfig(**config_values(TokenizeConfig, options)))
