"""`PreprocessConfig`: every option of `nmtkit preprocess`, recorded in manifest["settings"]."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from nmtkit.errors import ConfigError, InputError
from nmtkit.text.io import resolve_input

if TYPE_CHECKING:
    from nmtkit.text.pipeline import TextPipeline

DEFAULT_WORD_VOCAB = 30000  # the paper's vocabulary size, used without --bpe


@dataclass(frozen=True)
class PreprocessConfig:
    """Every option of `nmtkit preprocess` (1:1 with the CLI), recorded in manifest["settings"]."""

    src_lang: str
    tgt_lang: str
    train: str
    valid: str
    dest: str
    test: tuple[str, ...] = ()
    force: bool = False
    input_format: str = "raw"  # "raw" or "tok" (already Moses-tokenised, e.g. by `nmtkit tokenize`)
    normalize_punct: bool = True
    aggressive_dash_splits: bool = False
    lowercase: bool = False
    protect: tuple[str, ...] = ()  # --protect: files of regexes and named sets (nmtkit.text.protect)
    truecase: bool = False
    max_len: int = 50
    max_ratio: float = 9.0
    dedup: bool = False
    bpe: int | None = None
    bpe_separate: bool = False
    bpe_vocab_threshold: int | None = None
    bpe_min_frequency: int = 2
    src_vocab_size: int | None = None
    tgt_vocab_size: int | None = None
    vocab_min_count: int = 1
    workers: int = 1
    chunk_size: int = 500

    def validate(self) -> None:
        """Raise ConfigError for inconsistent or out-of-range settings."""
        if not self.src_lang or not self.tgt_lang:
            raise ConfigError("--src-lang and --tgt-lang are required")
        if self.src_lang == self.tgt_lang:
            raise ConfigError(f"--src-lang and --tgt-lang must differ (both are '{self.src_lang}')")
        if self.input_format not in ("raw", "tok"):
            raise ConfigError(f"--input-format must be 'raw' or 'tok', not '{self.input_format}'")
        if self.lowercase and self.truecase:
            raise ConfigError("--lowercase and --truecase exclude each other")
        if self.max_len < 1:
            raise ConfigError(f"--max-len must be at least 1 (got {self.max_len})")
        if not self.max_ratio >= 1.0:
            raise ConfigError(f"--max-ratio must be at least 1 (got {self.max_ratio})")
        if self.bpe is not None and self.bpe < 1:
            raise ConfigError(f"--bpe must be a positive number of merges (got {self.bpe})")
        if self.bpe is None and (self.bpe_separate or self.bpe_vocab_threshold is not None):
            raise ConfigError("--bpe-separate and --bpe-vocab-threshold need --bpe MERGES")
        if self.bpe_vocab_threshold is not None and self.bpe_vocab_threshold < 1:
            raise ConfigError(f"--bpe-vocab-threshold must be at least 1 (got {self.bpe_vocab_threshold})")
        for name in ("src_vocab_size", "tgt_vocab_size"):
            v = getattr(self, name)
            if v is not None and v < 5:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 5 (4 special symbols + 1)")
        if self.bpe_min_frequency < 1 or self.vocab_min_count < 1:
            raise ConfigError("--bpe-min-frequency and --vocab-min-count must be at least 1")
        if self.workers < 1 or self.chunk_size < 1:
            raise ConfigError("--workers and the chunk size must be at least 1")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field (manifest["settings"])."""
        d = asdict(self)
        d["test"] = list(self.test)
        d["protect"] = list(self.protect)
        return d

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
        """The text pipeline's steps 1-3 as these settings give them (BPE and truecasing are
        learnt later); reads the --protect files, so a bad one fails here."""
        from nmtkit.text.pipeline import TextPipeline
        from nmtkit.text.protect import resolve_protect

        return TextPipeline(self.src_lang, self.tgt_lang, normalize_punct=self.normalize_punct,
                            aggressive_dash_splits=self.aggressive_dash_splits, lowercase=self.lowercase,
                            protected_patterns=resolve_protect(self.protect))

    def vocab_size(self, side: str) -> int | None:
        """Effective cap: the given size, else 30000 for words and no cap for BPE."""
        v = self.src_vocab_size if side == "src" else self.tgt_vocab_size
        if v is None and self.bpe is None:
            return DEFAULT_WORD_VOCAB
        return v

    def splits(self) -> list[tuple[str, str]]:
        """(split name, file prefix): train, valid, then test, test1, test2, ..."""
        out = [("train", self.train), ("valid", self.valid)]
        out += [("test" if i == 0 else f"test{i}", p) for i, p in enumerate(self.test)]
        return out

    def files(self, prefix: str) -> tuple[str, str]:
        """PREFIX.lang for both languages, or PREFIX.lang.gz where only that exists (as select-data)."""
        return _input_file(prefix, self.src_lang), _input_file(prefix, self.tgt_lang)


def _input_file(prefix: str, lang: str) -> str:
    try:
        return resolve_input(prefix, lang)
    except InputError:
        return f"{prefix}.{lang}"  # reported as "file not found" by the input checks
