"""`SelectConfig`: every option of `nmtkit select-data` (its click options are generated from these
fields). Importing this module imports neither numpy nor torch."""
from __future__ import annotations

import os
from dataclasses import dataclass

from nmtkit.devices import MAX_WORKERS
from nmtkit.errors import ConfigError
from nmtkit.options import check_fields, option
from nmtkit.text.io import input_candidates
from nmtkit.text.moses import check_lang
from nmtkit.text.pipeline import (
    CORPUS_FORMATS,
    DASH_SPLITS_OPTION,
    NFC_OPTION,
    NON_PRINTING_OPTION,
    NORMALIZE_PUNCT_OPTION,
    TextPipeline,
)

METHODS = ("bilingual", "monolingual", "in-domain")
MAX_ORDER = 10  # n-gram orders past this only cost memory (Axelrod et al. use 4, KenLM builds up to 6)


@dataclass(frozen=True)
class SelectConfig:
    """Every option of `nmtkit select-data` (one field per option)."""

    src_lang: str = option(required=True, metavar="LANG", help="Source language code: the files are PREFIX.LANG (e.g. en).")
    tgt_lang: str = option(required=True, metavar="LANG", help="Target language code: the files are PREFIX.LANG (e.g. fr).")
    in_domain: tuple[str, ...] = option(
        required=True, multiple=True, metavar="PREFIX", path="file prefix",
        help="In-domain parallel text PREFIX.{src,tgt}[.gz]; repeat to concatenate.")
    pool: tuple[str, ...] = option(
        required=True, multiple=True, metavar="PREFIX", path="file prefix",
        help="General-domain pool PREFIX.{src,tgt}[.gz]; repeat to concatenate (line numbers run on).")
    output_prefix: str = option(
        required=True, metavar="PREFIX", path="file prefix",
        help="Writes PREFIX.{src,tgt} (selected pairs, pool order, lines as in the pool), PREFIX.scores.tsv and "
             "PREFIX.summary.json; with --input-format tok, the pool's tokeniser records as PREFIX.{src,tgt}.tokinfo.json.")
    lines: int | None = option(None, min=1, help="Budget: number of pairs to keep.")
    words: int | None = option(None, min=1, help="Budget: source-side tokens to keep.")
    fraction: float | None = option(None, min=0, min_open=True, max=1, help="Budget: fraction of the pool's pairs, in (0, 1].")
    order: int = option(4, min=1, max=MAX_ORDER, help="n-gram order of the language models.")
    method: str = option(
        "bilingual", choices=METHODS,
        help="bilingual: [H_in-H_out](src) + [H_in-H_out](tgt) (Axelrod); monolingual: source side only (Moore & "
             "Lewis); in-domain: H_in(src).")
    workers: int = option(1, min=1, max=MAX_WORKERS, metavar="N", cli_default=None, shown_default="all cores",
                          help="Processes for tokenising and scoring.")
    input_format: str = option(
        "raw", choices=CORPUS_FORMATS,
        help="raw: Moses-normalise and tokenise here; tok: input is already tokenised (split on spaces).")
    min_count: int = option(1, min=1, help="In-domain words seen fewer times are <unk> in both LMs' shared vocabulary.")
    seed: int = option(1, min=0, help="Seed of the pool sample for H_out.")
    lowercase: bool = option(False,
                             help="Lowercase tokens for the language models (the output keeps the original lines).")
    aggressive_dash_splits: bool = option(False, **DASH_SPLITS_OPTION)
    nfc: bool = option(True, **NFC_OPTION)
    normalize_punct: bool = option(True, **NORMALIZE_PUNCT_OPTION)
    remove_non_printing: bool = option(True, **NON_PRINTING_OPTION)
    force: bool = option(False, help="Overwrite existing outputs (never an input: that is refused).")
    write_arpa: bool = option(False, help="Also write the four LMs as PREFIX.{in,out}.{lang}.arpa.")

    def __post_init__(self) -> None:
        check_fields(self)
        budgets = [b for b in (self.lines, self.words, self.fraction) if b is not None]
        if len(budgets) != 1:
            raise ConfigError("give exactly one budget: --lines, --words or --fraction")
        check_lang(self.src_lang, "--src-lang")
        check_lang(self.tgt_lang, "--tgt-lang")
        if self.src_lang == self.tgt_lang:
            raise ConfigError("--src-lang and --tgt-lang must differ")
        if not self.in_domain or not self.pool:
            raise ConfigError("need --in-domain and --pool")
        seen: dict[object, str] = {}
        for prefix in self.pool:
            key = _pool_key(prefix, (self.src_lang, self.tgt_lang))
            if key in seen:
                raise ConfigError(f"--pool {prefix} is the pool {seen[key]} again: its pairs would be selected twice")
            seen[key] = prefix
        if not os.path.basename(self.output_prefix):
            raise ConfigError(f"--output-prefix {self.output_prefix!r} has no file name part: give one, e.g. "
                              "out/selected for out/selected.{src,tgt}")

    def pipeline(self) -> TextPipeline:
        """The text pipeline's steps 0-3 with these settings: how a line becomes LM tokens (no BPE)."""
        return TextPipeline(self.src_lang, self.tgt_lang, nfc=self.nfc, normalize_punct=self.normalize_punct,
                            remove_non_printing=self.remove_non_printing,
                            aggressive_dash_splits=self.aggressive_dash_splits, lowercase=self.lowercase)


def _pool_key(prefix: str, langs: tuple[str, str]) -> object:
    """What makes two --pool prefixes one pool: the files of both sides that they read (whatever
    the path to them), or, where one side has none, the prefix's real path."""
    key = []
    for lang in langs:
        st = next((os.stat(p) for p in input_candidates(prefix, lang) if os.path.isfile(p)), None)
        if st is None:
            return os.path.realpath(prefix)
        key.append((st.st_dev, st.st_ino))
    return tuple(key)
