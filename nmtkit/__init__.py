"""nmtkit: a neural machine translation toolkit. Reproduces Bahdanau et al. (2015) RNNsearch, the
Cho et al. (2014) RNNencdec baseline and an LSTM with multiplicative attention, with Moses-style
preprocessing, Axelrod data selection, batched beam search and sacrebleu scoring.

From Python (`nmtkit translate` without the command line):
    import nmtkit
    model = nmtkit.load("run/checkpoint_best.pt", device="cpu", beam=5)
    model.translate(["Hello, world!"])          # -> ["Bonjour, le monde !"]
    model.generate(["Hello"], nbest=3, alignments=True)[0].nbest   # -> [Translation, ...]

Importing this package imports nothing heavy: torch is imported when a model is loaded.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from nmtkit.translate.alignment import Result, Translation
    from nmtkit.translate.translator import Translator

__version__ = "0.1.0"
__all__ = ["load", "Translator", "Result", "Translation", "__version__"]


def load(checkpoints: str | os.PathLike | Sequence[str | os.PathLike], **options: Any) -> Translator:
    """Load a checkpoint (or a list of them, as an ensemble) for translation: a `Translator`.

    `options` are `nmtkit translate`'s options by their `TranslateConfig` names: device ("auto",
    "cpu", "cuda:N"), beam, lenpen, nbest, max_len_a, max_len_b, batch_size, replace_unk,
    input_format / output_format ("raw", "tok", "bpe"), sampling, sampling_topk, temperature,
    seed, precision, threads, ... An unknown or bad option raises `nmtkit.errors.ConfigError`;
    a missing or broken checkpoint `nmtkit.errors.CheckpointError`. Warnings (a truncated
    long line) go to the `logging` module unless `warn=callable` is given.
    """
    from nmtkit.translate.translator import Translator

    return Translator.load(checkpoints, **options)


def __getattr__(name: str) -> Any:
    if name == "Translator":
        from nmtkit.translate.translator import Translator

        return Translator
    if name in ("Result", "Translation"):
        from nmtkit.translate import alignment

        return getattr(alignment, name)
    raise AttributeError(f"module 'nmtkit' has no attribute '{name}'")
