"""Data selection, `nmtkit select-data`: Axelrod, He & Gao (2011) bilingual cross-entropy
difference, with Moore & Lewis (2010) and in-domain cross-entropy as baselines, over 4-gram
interpolated modified Kneser-Ney LMs (Chen & Goodman 1998) estimated with numpy. Torch-free.

`run(config: SelectConfig, progress=None)` runs the selection and returns its summary. Importing
this package imports neither numpy nor torch: `run` loads on first use. Modules: `config`,
`ngram` (the LMs, their vocabulary and flat batches), `scoring` (reading the corpora, scoring
pairs in parallel), `selection` (the command, and its checks of inputs that leave the ranking
meaningless).
"""
from nmtkit.select.config import SelectConfig


def __getattr__(name: str):
    """`run` on first use, so that importing the config (as the CLI does to build its options)
    does not import numpy."""
    if name == "run":
        from nmtkit.select.selection import run

        return run
    raise AttributeError(f"module 'nmtkit.select' has no attribute {name!r}")


__all__ = ["SelectConfig", "run"]
