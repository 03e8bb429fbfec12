"""`nmtkit preprocess`: raw parallel text -> a binarised data directory, as `run(config, progress)`.

The classic Moses + subword-nmt recipe (Bahdanau et al. 2015; Sennrich et al. 2016: BPE). The
train split takes two parallel passes (normalise, tokenise, clean and count; then case + BPE +
ids), with the truecaser, BPE codes and vocabularies learnt from the counts in between; valid and
test take one pass, uncleaned. Lines stream in chunks: memory grows with the types only.
Everything is built under a temporary folder that replaces DEST only when complete. No torch here.
"""
from nmtkit.preprocess.config import DEFAULT_WORD_VOCAB, PreprocessConfig

__all__ = ["DEFAULT_WORD_VOCAB", "PreprocessConfig", "run"]


def __getattr__(name: str):
    """`run` on first use, so that importing the config (as the CLI does) does not import numpy."""
    if name == "run":
        from nmtkit.preprocess.build import run

        return run
    raise AttributeError(f"module 'nmtkit.preprocess' has no attribute {name!r}")
