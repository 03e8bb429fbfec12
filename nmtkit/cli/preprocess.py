"""`nmtkit preprocess`."""
from __future__ import annotations

import click

from nmtkit.errors import NotImplementedYet


@click.command("preprocess")
def preprocess_cmd() -> None:
    """Normalise, tokenise, clean, apply BPE and binarise parallel text."""
    raise NotImplementedYet("'nmtkit preprocess' is not implemented yet")
