"""`nmtkit preprocess` as a plain function: raw parallel text -> a binarised data directory.

Follows the classic Moses + subword-nmt recipe used for RNNsearch-style systems (Bahdanau et
al. 2015 trained on tokenised text, sentences up to 50 words, 30k-word vocabularies;
Sennrich et al. 2016 replaced the word vocabularies with BPE):

  train split:  pass 1 (parallel)  normalise + tokenise, clean (clean-corpus-n), count words
                                   and truecasing evidence -> work/train.tok.{src,tgt}
                learn              truecaser, BPE codes, vocabularies, all from the counts
                                   (casing and BPE act word by word, so the counts of the
                                   final tokens follow from the word counts without a pass)
                pass 2 (parallel)  case + BPE + vocabulary ids -> train.{lang}.ids/offsets/words.npy
  valid, test:  one pass (parallel) raw -> ids, no cleaning.

Memory stays bounded: lines stream through `parallel_map` in chunks (order kept), the
word/subword counts grow with the number of distinct types only, ids are appended to raw
files and turned into .npy arrays block by block. Only `dedup=True` keeps one 64-bit hash
per distinct training pair. Everything is written under `DEST.tmp-HOST-PID-XXXX` (nmtkit.io.dirs), which replaces
DEST only when complete (with `force`), so a failure never leaves a data directory that
looks complete; the next run removes such a directory left by a killed run. No torch here.

Modules: `config` (PreprocessConfig), `workers` (what runs in the worker processes), `learn`
(truecaser, BPE, vocabularies from the counts), `run` (`preprocess`: the phases in order).
"""
from nmtkit.preprocess.config import DEFAULT_WORD_VOCAB, PreprocessConfig

_RUN_NAMES = ("ProgressFn", "preprocess")


def __getattr__(name: str):
    """The names of `run` on first use, so that importing the config (as the CLI does to build
    its options) does not import numpy."""
    if name in _RUN_NAMES:
        from nmtkit.preprocess import run

        return getattr(run, name)
    raise AttributeError(f"module 'nmtkit.preprocess' has no attribute {name!r}")

__all__ = ["DEFAULT_WORD_VOCAB", "PreprocessConfig", "ProgressFn", "preprocess"]
