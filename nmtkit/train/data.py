"""The training side of a data directory written by `nmtkit preprocess`.

Reads `manifest.json` (languages, text pipeline, vocabulary file names), the two vocabularies
and the memory-mapped binarised splits. `train` never reads raw text, except that dev BLEU is
scored against the raw dev references when the manifest records where they are.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from pathlib import Path

from nmtkit.data.binarized import ParallelData, check_npy, split_paths
from nmtkit.data.manifest import Manifest, read_manifest_files, recorded_digests
from nmtkit.errors import ConfigError, InputError
from nmtkit.io.checks import check_found
from nmtkit.io.dirs import read_one_folder
from nmtkit.text.io import read_lines_and_hash, resolve_input

log = logging.getLogger(__name__)


@dataclass
class DataDir(Manifest):
    """A preprocessed data directory: manifest and vocabularies (data.manifest.Manifest), splits."""

    _splits: dict[str, ParallelData] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, path: str | Path) -> "DataDir":
        """The data directory at `path` (its manifest read by `data.manifest.read_manifest_files`), every
        binarised file checked against the manifest's counts before training starts (lines + 1
        offsets, lines word lengths, src_tokens / tgt_tokens ids) and each split opened (its
        structure and ids checked: `split`): a truncated, missing or damaged file is named. All of
        one folder where `preprocess --force` replaces it meanwhile (`read_one_folder`)."""
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
        """The dev set validation scores: the 'valid' split, with at least one pair whose source is
        not empty and whose sides are within VALID_MAX_TOKENS (validation skips the others, and a
        dev set of nothing scored a loss of 0, which early stopping and the best checkpoint then
        acted on)."""
        if not self.has_split("valid"):
            raise InputError("no 'valid' split in the data directory (validation needs a dev set)", str(self.path))
        data = self.split("valid")
        if not (data.src.lengths > 0).any():
            raise InputError(f"its 'valid' split has no pair with a non-empty source ({len(data)} pairs): nothing "
                             "to validate on; give 'nmtkit preprocess --valid' a dev set of sentences", str(self.path))
        from nmtkit.train.validate import VALID_MAX_TOKENS, validated, within_bound

        if len(validated(data)) == 0:  # the rest have a side over the bound validation leaves out
            long = int((~within_bound(data)).sum())
            rest = ", the others with an empty source" if long < len(data) else ""
            raise InputError(f"its 'valid' split has no pair validation can score ({len(data)} pairs: {long} with a "
                             f"side over {VALID_MAX_TOKENS} tokens{rest}): nothing to validate on; give 'nmtkit "
                             "preprocess --valid' a dev set of shorter sentences", str(self.path))
        return data

    def check_bleu_samples(self, n: int) -> None:
        """Refuse --valid-bleu-samples `n` where the first n dev pairs all have a side over the
        bound validation scores: dev BLEU of nothing was nan at every validation, never shown, and
        with --best-metric bleu never a best (no checkpoint_best.pt)."""
        from nmtkit.train.validate import VALID_MAX_TOKENS, within_bound

        data = self.split("valid")
        if n > 0 and not within_bound(data, n).any():
            raise ConfigError(f"--valid-bleu-samples {n}: the first {min(n, len(data))} dev pair(s) all have a side "
                              f"over {VALID_MAX_TOKENS} tokens, which validation leaves out, so dev BLEU would score "
                              "nothing: raise --valid-bleu-samples (0: no dev BLEU)", str(self.path))

    def raw_references(self, name: str = "valid") -> list[str] | None:
        """The raw (untokenised) target side of split `name`, when the manifest says where it
        was read from (`splits[name]["prefix"]`, an absolute path, with raw input) and that file
        is still the one preprocess read (its sha256 in the manifest's "inputs" and the split's
        number of lines); else None (BLEU then uses the binarised references).
        Lowercased where the pipeline lowercases."""
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
