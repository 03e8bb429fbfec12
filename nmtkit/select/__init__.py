"""Data selection, `nmtkit select-data`: Axelrod, He & Gao (2011) bilingual cross-entropy
difference, with Moore & Lewis (2010) and in-domain cross-entropy as baselines. Torch-free.

`run(config: SelectConfig, progress=None)` runs the selection and returns its summary.
"""
from nmtkit.select.config import SelectConfig


def __getattr__(name: str):
    """`run` on first use, so that importing the config (as the CLI does) does not import numpy."""
    if name == "run":
        from nmtkit.select.selection import run

        return run
    raise AttributeError(f"module 'nmtkit.select' has no attribute {name!r}")


__all__ = ["SelectConfig", "run"]
