"""`nmtkit score`."""
from __future__ import annotations

import click

from nmtkit.errors import NotImplementedYet


@click.command("score")
def score_cmd() -> None:
    """Score translations with BLEU, chrF and TER (sacrebleu)."""
    raise NotImplementedYet("'nmtkit score' is not implemented yet")
