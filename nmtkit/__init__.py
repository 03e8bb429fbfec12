"""nmtkit: a neural machine translation toolkit.

Reproduces Bahdanau et al. (2015) RNNsearch, the Cho et al. (2014) RNNencdec baseline and an
LSTM with multiplicative attention, with Moses-style preprocessing, Axelrod data selection,
batched beam search and sacrebleu scoring. Importing this package imports nothing heavy.
"""

__version__ = "0.1.0"
