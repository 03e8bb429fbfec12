"""The training side of a data directory written by `nmtkit preprocess`: manifest, vocabularies,
memory-mapped binarised splits, the dev pairs validation scores (`validated`) and the raw dev
references dev BLEU scores against."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from nmtkit.data.binarized import ParallelData, check_npy, split_paths
from nmtkit.data.manifest import Manifest, read_manifest_files, recorded_digests
from nmtkit.errors import ConfigError, InputError
from nmtkit.io.checks import check_found
from nmtkit.io.dirs import read_one_folder
from nmtkit.text.io import read_lines_and_hash, resolve_input

log = logging.getLogger(__name__)

# the most tokens either side of a dev pair may have to be validated (translate's --max-src-len default):
# a longer pair's cost grows with the square of its length, and preprocess does not clean the valid split
VALID_MAX_TOKENS = 250


def within_bound(data: ParallelData, n: int | None = None) -> np.ndarray:
    """(min(n, len),) bool: which of the first `n` (all) dev pairs have both sides within bound."""
    return (data.src.lengths[:n] <= VALID_MAX_TOKENS) & (data.tgt.lengths[:n] <= VALID_MAX_TOKENS)


def validated(data: ParallelData, n: int | None = None) -> np.ndarray:
    """Indices of the first `n` (all) dev pairs scored: within bound, with a non-empty source."""
    return np.flatnonzero(within_bound(data, n) & (data.src.lengths[:n] > 0))


@dataclass
class DataDir(Manifest):
    """A preprocessed data directory: manifest and vocabularies, splits."""

    _splits: dict[str, ParallelData] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, path: str | Path) -> "DataDir":
        """The data directory at `path`, every binarised file checked against the manifest's counts and
        each split opened, so that a damaged file is named before training starts."""
        return read_one_folder(path, lambda: cls._open(path))

    @classmethod
    def _open(cls, path: str | Path) -> "DataDir":
        m = read_manifest_files(Path(path))
        data = cls(**{f.name: getattr(m, f.name) for f in fields(Manifest)})
        splits = data.manifest.get("splits")
        for name, info in (splits.items() if isinstance(splits, dict) else ()):
            if not isinstance(info, dict) or not data.has_split(name):
                continue
            for side, lang in (("src", data.src_lang), ("tgt", data.tgt_lang)):
                ids_path, off_path, w_path = split_paths(data.path, name, lang)
                check_found(w_path, "missing (the word lengths --max-len reads): re-run 'nmtkit preprocess'")
                lines, tokens = info.get("lines"), info.get(f"{side}_tokens")
                check_npy(off_path, lines + 1 if isinstance(lines, int) else None)
                check_npy(w_path, lines if isinstance(lines, int) else None)
                check_npy(ids_path, tokens if isinstance(tokens, int) else None)
            data.split(name)  # the arrays' structure and ids, before a run writes anything
        return data

    def has_split(self, name: str) -> bool:  # its ids and offsets: `open` names missing word lengths
        return all(p.exists() for lang in (self.src_lang, self.tgt_lang)
                   for p in split_paths(self.path, name, lang)[:2])

    def split(self, name: str) -> ParallelData:
        if name not in self._splits:
            data = ParallelData(self.path, name, self.src_lang, self.tgt_lang)
            for side, lang, text, vocab in (("source", self.src_lang, data.src, self.src_vocab),
                                            ("target", self.tgt_lang, data.tgt, self.tgt_vocab)):
                if text.max_id >= len(vocab):
                    raise InputError(f"split '{name}' {side} has ids beyond the vocabulary (id {text.max_id}, "
                                     f"{len(vocab)} words): rerun 'nmtkit preprocess'",
                                     str(split_paths(self.path, name, lang)[0]))
            self._splits[name] = data
        return self._splits[name]

    def valid_split(self) -> ParallelData:
        """The 'valid' split, refused without a pair validation can score (a dev set of nothing
        scores a loss of 0, which early stopping and the best checkpoint would act on)."""
        if not self.has_split("valid"):
            raise InputError("no 'valid' split in the data directory (validation needs a dev set)", str(self.path))
        data = self.split("valid")
        if not (data.src.lengths > 0).any():
            raise InputError(f"its 'valid' split has no pair with a non-empty source ({len(data)} pairs): nothing "
                             "to validate on; give 'nmtkit preprocess --valid' a dev set of sentences", str(self.path))
        if len(validated(data)) == 0:  # the rest have a side over the bound validation leaves out
            long = int((~within_bound(data)).sum())
            rest = ", the others with an empty source" if long < len(data) else ""
            raise InputError(f"its 'valid' split has no pair validation can score ({len(data)} pairs: {long} with a "
                             f"side over {VALID_MAX_TOKENS} tokens{rest}): nothing to validate on; give 'nmtkit "
                             "preprocess --valid' a dev set of shorter sentences", str(self.path))
        return data

    def check_bleu_samples(self, n: int) -> None:
        """Refuse --valid-bleu-samples `n` where the first n dev pairs all have a side over the
        bound validation scores (dev BLEU of nothing: nan, never a best)."""
        data = self.split("valid")
        if n > 0 and not within_bound(data, n).any():
            raise ConfigError(f"--valid-bleu-samples {n}: the first {min(n, len(data))} dev pair(s) all have a side "
                              f"over {VALID_MAX_TOKENS} tokens, which validation leaves out, so dev BLEU would score "
                              "nothing: raise --valid-bleu-samples (0: no dev BLEU)", str(self.path))

    def raw_references(self, name: str = "valid") -> list[str] | None:
        """The raw target side of split `name` (lowercased where the pipeline lowercases), when the
        manifest says where it was read from and that file is still the one preprocess read; else None."""
        info = (self.manifest.get("splits") or {}).get(name) or {}
        settings = self.manifest.get("settings") or {}
        prefix = info.get("prefix")
        if not isinstance(prefix, str) or not Path(prefix).is_absolute() or settings.get("input_format",
                                                                                           "raw") != "raw":
            return None
        try:
            path = resolve_input(prefix, self.tgt_lang)  # .gz input too, as preprocess read it
            lines, digest = read_lines_and_hash(path)
        except (OSError, InputError):
            lines, digest = [], ""
        if len(lines) != len(self.split(name)) or digest not in recorded_digests(self.manifest, prefix, self.tgt_lang):
            # moved, deleted or edited since preprocess read it: BLEU against other references, said once
            log.warning("dev BLEU scores against the binarised dev text: %s.%s, the raw text preprocess read, is "
                        "gone or changed (the BLEU is not that of a run that read it)", prefix, self.tgt_lang)
            return None
        # a lowercasing pipeline's model writes lowercase: scored as such, not as errors of case
        return [line.lower() for line in lines] if self.pipeline.get("lowercase") else lines
