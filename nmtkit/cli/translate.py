"""`nmtkit translate`."""
from __future__ import annotations

import click

from nmtkit.errors import NotImplementedYet


@click.command("translate")
def translate_cmd() -> None:
    """Translate raw text with batched beam search."""
    raise NotImplementedYet("'nmtkit translate' is not implemented yet")
