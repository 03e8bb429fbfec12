"""`nmtkit score`: options -> ScoreConfig -> `nmtkit.score.run` -> its report on stdout."""
from __future__ import annotations

from typing import Any

import click

from nmtkit.cli.common import config_options, config_values, quiet_option, quiet_warnings
from nmtkit.score import ScoreConfig


@click.command("score")
@config_options(ScoreConfig)
@quiet_option("No notes or warnings on stderr; the scores on stdout are unchanged")
def score_cmd(quiet: bool, **options: Any) -> None:
    """Score translations with BLEU, chrF and TER (sacrebleu), with signatures.

    \b
    Examples:
      nmtkit score --hyp out.fr --ref newstest2014.fr
      nmtkit score --hyp out.fr --ref ref.fr --paper-bleu --json
      nmtkit score --hyp search.fr --hyp encdec.fr --label RNNsearch --label RNNencdec \\
          --ref ref.fr --src src.en --by-length --plot bleu_by_length.png
      nmtkit score --hyp search.fr --src src.en --ref ref.fr --no-unk -m run/checkpoint_best.pt
      nmtkit score --hyp base.fr --hyp new.fr --ref ref.fr --significance

    Every --hyp must have as many lines as every --ref (and --src): a mismatch is an error.
    """
    quiet_warnings(quiet)
    from nmtkit.score import run
    from nmtkit.score.report import format_json, format_text

    config = ScoreConfig(**config_values(ScoreConfig, options))
    report = run(config)
    click.echo(format_json(report) if config.as_json else format_text(report), nl=False)
