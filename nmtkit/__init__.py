"""nmtkit: a neural machine translation toolkit. Reproduces Bahdanau et al. (2015) RNNsearch, the
Cho et al. (2014) RNNencdec baseline and an LSTM with multiplicative attention, with Moses-style
preprocessing, Axelrod data selection, batched beam search, forced decoding and sacrebleu scoring.

From Python (docs/python-api.md), the hardware at load and the search at each call:
    model = nmtkit.load("run/checkpoint_best.pt", device="cpu")
    model.translate(["Hello, world!"], beam=5)                  # -> ["Bonjour, le monde !"]
    model.generate(["Hello"], beam=5, nbest=3)[0].nbest         # -> (Translation, ...)
    model.score(["Hello"], ["Bonjour"])                         # -> [log p(y | x)]
Importing this package imports nothing heavy: torch is imported when a model is loaded.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

from nmtkit.errors import CheckpointError, ConfigError, InputError, NmtkitError, OutputError

if TYPE_CHECKING:
    from nmtkit.translate.alignment import Result, Translation
    from nmtkit.translate.config import DecodeConfig, SearchConfig
    from nmtkit.translate.translator import TokenScores, Translator

__version__ = "0.1.0"
__all__ = ["CheckpointError", "ConfigError", "DecodeConfig", "InputError", "NmtkitError", "OutputError", "Result",
           "SearchConfig", "TokenScores", "Translation", "Translator", "__version__", "load", "presets", "train"]

# the public names that live in modules imported only when asked for (torch comes with some)
_LAZY = {"Translator": "nmtkit.translate.translator", "TokenScores": "nmtkit.translate.translator",
         "Result": "nmtkit.translate.alignment", "Translation": "nmtkit.translate.alignment",
         "DecodeConfig": "nmtkit.translate.config", "SearchConfig": "nmtkit.translate.config"}


def load(checkpoints: str | os.PathLike | Sequence[str | os.PathLike], *, device: str = "auto",
         precision: str = "auto", threads: int | None = None, workers: int | None = None,
         **options: Any) -> Translator:
    """Load a checkpoint (or a list of them, as an ensemble) for translation and scoring.

    device: "auto", "cpu", "cuda:N"; precision: "auto", "fp32", "bf16", "fp16", "int8" (CPU);
    threads: torch CPU threads; workers: decoding processes on the CPU; `options`: the other
    `DecodeConfig` fields (batch_size, max_tokens, input_format, warn, ...). Search options (beam,
    nbest, lenpen, ...) are each call's. A bad option raises ConfigError; a missing or broken
    checkpoint CheckpointError.
    """
    from nmtkit.translate.translator import Translator

    return Translator.load(checkpoints, device=device, precision=precision, threads=threads, workers=workers,
                           **options)


def presets() -> dict[str, dict[str, Any]]:
    """Every `--preset` of `nmtkit train`: {name: {"arch": ..., model sizes ..., training settings ...}}."""
    from nmtkit.train.presets import preset_table

    return preset_table()


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name == "train":  # the training package, callable as nmtkit.train(data_dir, run_dir, ...)
        return importlib.import_module("nmtkit.train")
    raise AttributeError(f"module 'nmtkit' has no attribute '{name}'")
