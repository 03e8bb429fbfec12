"""`nmtkit train`."""
from __future__ import annotations

import click

from nmtkit.errors import NotImplementedYet


@click.command("train")
def train_cmd() -> None:
    """Train an RNNsearch, RNNencdec or LSTM-attention model."""
    raise NotImplementedYet("'nmtkit train' is not implemented yet")
