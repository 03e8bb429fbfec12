"""`nmtkit select-data`."""
from __future__ import annotations

import click

from nmtkit.errors import NotImplementedYet


@click.command("select-data")
def select_data_cmd() -> None:
    """Select in-domain pairs from a pool by cross-entropy difference (Axelrod et al. 2011)."""
    raise NotImplementedYet("'nmtkit select-data' is not implemented yet")
