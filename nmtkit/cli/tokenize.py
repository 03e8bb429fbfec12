"""`nmtkit tokenize`: Moses-normalise and tokenise one file once, in parallel, for recipes that
feed the result to both `select-data --input-format tok` and `preprocess --input-format tok`."""
from __future__ import annotations

import click

from nmtkit.cli.common import protect_option, quiet_warnings


@click.command("tokenize")
@click.option("--lang", required=True, metavar="LANG", help="Language code for sacremoses (en, fr, ...).")
@click.option("-i", "--input", "input_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              metavar="FILE", help="Raw text, one sentence a line (default: stdin).")
@click.option("-o", "--output", "output_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Tokenised text, line for line (default: stdout); beside it, FILE.tokinfo.json records the "
                   "settings, which 'preprocess --input-format tok' checks against its own flags.")
@click.option("--no-normalize-punct", is_flag=True, help="Skip Moses punctuation normalisation.")
@click.option("--aggressive-dash-splits", is_flag=True, help="Split hyphenated words (Moses tokenizer -a): 'a-b' -> 'a @-@ b'.")
@click.option("--lowercase", is_flag=True, help="Lowercase all tokens.")
@protect_option
@click.option("--workers", type=int, default=None, metavar="N",
              help="Processes (line order is kept). Default: all cores.")
@click.option("--quiet", "-q", is_flag=True, help="No warnings on stderr (tokenize prints no progress).")
def tokenize_cmd(lang, input_path, output_path, no_normalize_punct, aggressive_dash_splits, lowercase, protect,
                 workers, quiet) -> None:
    """Moses-normalise and tokenise raw text with the settings preprocess uses (sacremoses, escape=False).

    \b
    Examples:
      nmtkit tokenize --lang en -i corpus.en -o corpus.tok.en
      zcat news.fr.gz | nmtkit tokenize --lang fr > news.tok.fr
    """
    quiet_warnings(quiet)
    from nmtkit.devices import available_cores
    from nmtkit.errors import ConfigError
    from nmtkit.text.pipeline import TextPipeline
    from nmtkit.text.protect import resolve_protect
    from nmtkit.text.tokenize import tokenize_file

    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    pipeline = TextPipeline(lang, lang, normalize_punct=not no_normalize_punct,
                            aggressive_dash_splits=aggressive_dash_splits, lowercase=lowercase,
                            protected_patterns=resolve_protect(protect))
    tokenize_file(input_path, output_path, pipeline, workers or available_cores())
