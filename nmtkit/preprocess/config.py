"""`PreprocessConfig`: every option of `nmtkit preprocess`, recorded in manifest["settings"]."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any

from nmtkit.devices import MAX_WORKERS
from nmtkit.errors import ConfigError, InputError
from nmtkit.options import check_fields, off_default, option, refuse_without
from nmtkit.text.io import resolve_input
from nmtkit.text.moses import check_lang, resolve_protect
from nmtkit.text.pipeline import (
    CORPUS_FORMATS,
    DASH_SPLITS_OPTION,
    NFC_OPTION,
    NON_PRINTING_OPTION,
    NORMALIZE_PUNCT_OPTION,
    PROTECT_OPTION,
    TextPipeline,
)

DEFAULT_WORD_VOCAB = 30000  # the paper's vocabulary size, used without --bpe


@dataclass(frozen=True)
class PreprocessConfig:
    """Every option of `nmtkit preprocess` (its click options are generated from these fields)."""

    src_lang: str = option(required=True, metavar="LANG", help="Source language code: the files are PREFIX.LANG (e.g. en).")
    tgt_lang: str = option(required=True, metavar="LANG", help="Target language code: the files are PREFIX.LANG (e.g. fr).")
    train: str = option(required=True, metavar="PREFIX", path="file prefix",
                        help="Training files PREFIX.SRC / PREFIX.TGT (raw text, one sentence a line, UTF-8). "
                             "Cleaned, and used to learn truecasing, BPE and vocabularies.")
    valid: str = option(required=True, metavar="PREFIX", path="file prefix", help="Validation files PREFIX.SRC / PREFIX.TGT (not cleaned).")
    dest: str = option(required=True, metavar="DIR", path="directory",
                       help="Data directory to write (manifest.json, vocab.LANG.txt, bpe.codes, binarised splits).")
    test: tuple[str, ...] = option(
        (), multiple=True, metavar="PREFIX", path="file prefix",
        help="Test files (repeatable): binarised as splits test, test1, test2, ... (not cleaned).")
    force: bool = option(False, help="Replace an existing non-empty --dest (only once the new one is complete), and "
                                      "only when it holds nothing but a data directory's own files; an input is never "
                                      "replaced.")
    input_format: str = option(
        "raw", choices=CORPUS_FORMATS,
        help="raw: Moses-normalise and tokenise here; tok: input is already tokenised ('nmtkit tokenize' with the same "
             "flags, which its .tokinfo.json records and this command checks): casing and BPE still applied.")
    nfc: bool = option(True, **NFC_OPTION)
    normalize_punct: bool = option(True, **NORMALIZE_PUNCT_OPTION)
    remove_non_printing: bool = option(True, **NON_PRINTING_OPTION)
    aggressive_dash_splits: bool = option(False, **DASH_SPLITS_OPTION)
    lowercase: bool = option(False, help="Lowercase all tokens (cannot be undone when translating).")
    protect: tuple[str, ...] = option((), **PROTECT_OPTION)
    truecase: bool = option(
        False, help="Moses truecasing: learn each word's most frequent casing on the training split and give it to "
                    "sentence starts and to forms never seen inside a sentence (truecase.perl); translate restores "
                    "sentence-initial capitals.")
    max_len: int = option(
        50, min=1, metavar="N",
        help="Drop training pairs with a side longer than N words (tokens after Moses tokenisation, before BPE, like "
             "clean-corpus-n; the unit of train --max-len); the paper used 30 and 50. Each pair's word lengths are "
             "stored, so train --max-len can drop more.")
    max_ratio: float = option(
        9.0, min=1, metavar="R",
        help="Drop training pairs whose token-length ratio (either way) is above R (clean-corpus-n's ratio).")
    dedup: bool = option(False, help="Drop repeated training pairs (identical raw source and target).")
    bpe: int | None = option(
        None, min=1, metavar="MERGES", message="must be a positive number of merges",
        help="Use subwords: learn MERGES BPE merge operations (subword-nmt) on the tokenised, cleaned training split, "
             "joint over both languages unless --bpe-separate. Without it: words.")
    bpe_separate: bool = option(False, help="Learn separate BPE codes for each language instead of joint codes.")
    bpe_vocab_threshold: int | None = option(
        None, min=1, metavar="N",
        help="subword-nmt's --vocabulary-threshold: when applying BPE, split further any subword seen fewer than N "
             "times in that language's BPE-segmented training side.")
    bpe_min_frequency: int = option(
        2, min=1, metavar="N", help="Stop learning merges when no pair occurs N times (subword-nmt --min-frequency).")
    src_vocab_size: int | None = option(
        None, min=5, metavar="N", message="must be at least 5 (4 special symbols + 1)",
        help="Keep the N most frequent source tokens, specials included; the rest become <unk>. Default: 30000 with "
             "words (the paper), every subword with --bpe.")
    tgt_vocab_size: int | None = option(None, min=5, metavar="N", message="must be at least 5 (4 special symbols + 1)",
                                        help="Same as --src-vocab-size for the target.")
    vocab_min_count: int = option(1, min=1, metavar="N",
                                  help="Leave out of the vocabularies tokens seen fewer than N times in training.")
    workers: int = option(1, min=1, max=MAX_WORKERS, metavar="N", cli_default=None, shown_default="all cores",
                          help="Processes for tokenisation/BPE (line order is kept).")
    chunk_size: int = option(500, min=1, metavar="N", help="Lines per work unit sent to a worker.")

    def __post_init__(self) -> None:
        check_fields(self)
        check_lang(self.src_lang, "--src-lang")
        check_lang(self.tgt_lang, "--tgt-lang")
        if self.src_lang == self.tgt_lang:
            raise ConfigError(f"--src-lang and --tgt-lang must differ (both are '{self.src_lang}')")
        if self.lowercase and self.truecase:
            raise ConfigError("--lowercase and --truecase exclude each other")
        if self.bpe is None:
            refuse_without(off_default(self, ("bpe_separate", "bpe_vocab_threshold", "bpe_min_frequency")), "--bpe MERGES",
                           " (without it the vocabularies are words)")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field (manifest["settings"])."""
        return {**asdict(self), "test": list(self.test), "protect": list(self.protect)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PreprocessConfig":
        """Inverse of `to_dict`; unknown keys are a ConfigError listing the valid ones."""
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(d) - set(valid))
        if unknown:
            raise ConfigError(f"unknown preprocess settings {unknown}; valid: {valid}")
        d = dict(d)
        for key in ("test", "protect"):
            if key in d:
                d[key] = tuple(d[key])
        return cls(**d)

    def base_pipeline(self) -> TextPipeline:
        """The text pipeline's steps 0-3 (BPE and truecasing are learnt later); reads the --protect files."""
        return TextPipeline(self.src_lang, self.tgt_lang, normalize_punct=self.normalize_punct,
                            remove_non_printing=self.remove_non_printing, nfc=self.nfc,
                            aggressive_dash_splits=self.aggressive_dash_splits, lowercase=self.lowercase,
                            protected_patterns=resolve_protect(self.protect))

    def vocab_size(self, side: str) -> int | None:
        """Effective cap: the given size, else 30000 for words and no cap for BPE."""
        v = self.src_vocab_size if side == "src" else self.tgt_vocab_size
        return DEFAULT_WORD_VOCAB if v is None and self.bpe is None else v

    def splits(self) -> list[tuple[str, str]]:
        """(split name, file prefix): train, valid, then test, test1, test2, ..."""
        return [("train", self.train), ("valid", self.valid),
                *(("test" if i == 0 else f"test{i}", p) for i, p in enumerate(self.test))]

    def files(self, prefix: str) -> tuple[str, str]:
        """PREFIX.lang for both languages, or PREFIX.lang.gz where only that exists (as select-data)."""
        return _input_file(prefix, self.src_lang), _input_file(prefix, self.tgt_lang)


def _input_file(prefix: str, lang: str) -> str:
    try:
        return resolve_input(prefix, lang)
    except InputError:
        if os.path.isfile(prefix):  # `--train tr.en`: the error names the prefix meant
            raise
        return f"{prefix}.{lang}"  # reported as "file not found" by the input checks
