"""The text pipeline: raw line -> model tokens, and model tokens -> raw, as plain functions.

`preprocess` records a `TextPipeline` (`to_dict()`) in manifest.json, `train` copies it into the
checkpoint, and `translate` rebuilds it to apply the same steps. Forward (`encode`), per side:
  0. Unicode NFC composition [nfc]; 1. Moses punctuation normalisation [normalize_punct] and
  non-printing characters to spaces [remove_non_printing]; 2. Moses tokenisation, escape=False,
  protected patterns kept whole [aggressive_dash_splits, protected_patterns]; 3. lowercasing or
  Moses truecasing [lowercase | truecase]; 4. BPE (subword-nmt), optional vocabulary filter [bpe].
Inverse (`decode`): join BPE, detruecase, Moses detokenisation; lowercasing cannot be undone.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any, Callable, Iterator

from nmtkit.errors import ConfigError
from nmtkit.text import moses
from nmtkit.text.bpe import SEPARATOR, Bpe, check_codes, join_bpe

PIPELINE_VERSION = 2  # the one version read; another is refused (docs/design.md, Compatibility)
SIDES = ("src", "tgt")
INPUT_FORMATS = ("raw", "tok", "bpe")
CORPUS_FORMATS = INPUT_FORMATS[:2]  # what preprocess and select-data read: raw or Moses-tokenised text

# The options preprocess and tokenize share (nmtkit.options.option's arguments): they tokenise alike.
NORMALIZE_PUNCT_OPTION = dict(flag=True, help="Moses punctuation normalisation before tokenising "
                                             "(--no-normalize-punct: skip it).")
DASH_SPLITS_OPTION = dict(help="Split hyphenated words (Moses tokenizer -a): 'a-b' -> 'a @-@ b'.")
PROTECT_OPTION = dict(multiple=True, metavar="FILE|SET", help=moses.PROTECT_HELP)
NFC_OPTION = dict(flag=True, help="Compose characters to Unicode NFC first ('e' + combining acute -> 'é'), so that "
                                   "decomposed text tokenises as composed text does (--no-nfc: leave them; the Moses "
                                   "scripts have no such step and split the marks off).")
NON_PRINTING_OPTION = dict(flag=True, help="Replace non-printing characters (controls, zero-width spaces, direction "
                                          "marks, private use) by spaces before tokenising, as Moses' "
                                          "remove-non-printing-char.perl does, but delete those that sit inside words "
                                          "(soft hyphens, zero-width joiners, byte-order marks) so that words stay "
                                          "whole (--no-remove-non-printing: keep them all).")


# ---- Moses truecasing (train-truecaser.perl, truecase.perl, detruecase.perl): the model is the surface
# forms seen where case is informative (not sentence-initial), a plain list, each word's most frequent last.
SENT_END = frozenset({".", ":", "?", "!"})
DELAYED_SENT_START = frozenset({"(", "[", '"', "'", "&apos;", "&quot;", "&#91;", "&#93;"})


@lru_cache(maxsize=None)
def _trainer():
    from sacremoses import MosesTruecaser

    return MosesTruecaser()


def truecase_weights(tokens: list[str]) -> list[tuple[str, str, float]]:
    """(lowercase, surface form, weight) observations from one tokenised sentence."""
    return _trainer().learn_truecase_weights(tokens)


def add_weights(casing: dict[str, Counter], weights: list[tuple[str, str, float]]) -> None:
    """Accumulate observations into `casing[lower][surface] += weight`."""
    for lower, surface, w in weights:
        casing[lower][surface] += w


def new_casing() -> dict[str, Counter]:
    return defaultdict(Counter)


def best_forms(casing: dict[str, Counter]) -> list[str]:
    """The model: every form seen, sorted, then each word's most frequent (ties: first seen), sorted."""
    best = {c.most_common(1)[0][0] for c in casing.values() if c}
    return sorted(f for c in casing.values() for f in c if f not in best) + sorted(best)


def sentence_starts(tokens: list[str], start: bool = True) -> Iterator[bool]:
    """Whether each token starts a sentence: the first (with `start`), or after . : ? ! and opening quotes."""
    for tok in tokens:
        yield start
        start = tok in SENT_END or (start and tok in DELAYED_SENT_START)


class Truecaser:
    """truecase.perl with a model of forms (`best_forms`, the last of each word its best): a word
    becomes its best form at a sentence start, elsewhere only when it was never seen as it is
    (truecase.perl's known words: "us" stays beside "US"); `|` is an ordinary character (sacremoses'
    `truecase` splits Moses factors there). A list of best forms alone cases as each word's best."""

    def __init__(self, forms: list[str]):
        self.best = {f.lower(): f for f in forms}
        self.known = frozenset(forms)

    def word(self, tok: str, start: bool) -> str:
        return tok if tok in self.known and not start else self.best.get(tok.lower(), tok)

    def __call__(self, tokens: list[str], start: bool = True) -> list[str]:
        return list(map(self.word, tokens, sentence_starts(tokens, start)))


def detruecase(tokens: list[str]) -> list[str]:
    """Uppercase the first letter of each sentence start (after . : ? ! and opening quotes)."""
    return [tok[:1].upper() + tok[1:] if start else tok for tok, start in zip(tokens, sentence_starts(tokens))]


def _check_side(side: str) -> None:
    if side not in SIDES:
        raise ValueError(f"side must be 'src' or 'tgt', not {side!r}")


def _words(value: Any) -> bool:
    """A list of strings (its types gathered in C: fast on a million forms)."""
    return isinstance(value, list) and set(map(type, value)) <= {str}


def _check_read(d: dict[str, Any]) -> None:
    """Each setting of a pipeline read from a file of the type it is used as, else a ConfigError naming
    it; joint BPE's one codes text becomes each side's."""
    import re

    def bad(name: str, want: str) -> None:
        raise ConfigError(f"text pipeline setting {name} is {d.get(name)!r:.60}, not {want}")

    for name in ("src_lang", "tgt_lang"):
        if not isinstance(d.get(name), str) or not d[name]:
            bad(name, "a language code")
    for name in ("nfc", "normalize_punct", "remove_non_printing", "aggressive_dash_splits", "lowercase"):
        if name in d and not isinstance(d[name], bool):
            bad(name, "true or false")
    truecase = d.get("truecase")
    if truecase is not None and not (isinstance(truecase, dict) and all(_words(truecase.get(s)) for s in SIDES)):
        bad("truecase", "a list of words for each side")
    bpe = d.get("bpe")
    if bpe is not None:
        codes = bpe.get("codes") if isinstance(bpe, dict) else None
        codes = {side: codes for side in SIDES} if isinstance(codes, str) else codes
        vocab = bpe.get("vocab") if isinstance(bpe, dict) else None
        if not (isinstance(codes, dict) and all(isinstance(codes.get(s), str) for s in SIDES)
                and isinstance(bpe.get("separator", SEPARATOR), str)
                and (vocab is None or (isinstance(vocab, dict) and all(_words(vocab.get(s)) for s in SIDES)))):
            bad("bpe", "BPE codes for each side and their settings")
        for text in dict.fromkeys(codes.values()):
            try:
                check_codes(text)
            except ValueError as err:
                raise ConfigError(f"the text pipeline's BPE codes: {err}") from None
        d["bpe"] = {**bpe, "codes": codes}
    patterns = d.get("protected_patterns") or ()
    if not (isinstance(patterns, (list, tuple)) and all(isinstance(p, str) for p in patterns)):
        bad("protected_patterns", "a list of regular expressions")
    for pattern in patterns:
        try:
            moses.compile_pattern(pattern)  # as the tokeniser compiles them; ValueError: it matches ""
        except (re.error, OverflowError, RecursionError, ValueError) as err:
            raise ConfigError(f"text pipeline protected pattern {pattern!r:.60} does not compile: {err}") from None


@dataclass(frozen=True, eq=False)
class TextPipeline:
    """Every setting needed to turn raw text into vocabulary tokens and back.

    truecase: None, or {"src": [forms], "tgt": [forms]} (see `best_forms`, `Truecaser`).
    bpe: None, or {"joint": bool, "codes": {"src": codes text, "tgt": codes text},
         "vocab": None | {"src": [subwords], "tgt": [subwords]}, "vocab_threshold": int | None,
         "merges": int (requested), "separator": "@@"}.
    """

    src_lang: str
    tgt_lang: str
    normalize_punct: bool = True
    aggressive_dash_splits: bool = False
    lowercase: bool = False
    truecase: dict | None = None
    bpe: dict | None = None
    protected_patterns: tuple[str, ...] = ()  # regexes (`resolve_protect`) the tokeniser leaves whole
    # after the fields above so that positional arguments keep their meaning
    nfc: bool = True
    remove_non_printing: bool = True
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # fresh in each copy

    def to_dict(self) -> dict[str, Any]:
        """Plain primitives (JSON- and weights_only-safe), BPE codes text included."""
        d: dict[str, Any] = {"version": PIPELINE_VERSION}
        d.update((f.name, getattr(self, f.name)) for f in fields(self) if not f.name.startswith("_"))
        if self.protected_patterns:  # left out when empty
            d["protected_patterns"] = list(self.protected_patterns)
        else:
            del d["protected_patterns"]
        if self.bpe is not None:
            codes = self.bpe["codes"]
            joint = self.bpe.get("joint") and codes["src"] == codes["tgt"]
            d["bpe"] = {**self.bpe, "codes": codes["src"] if joint else codes}  # stored once for joint BPE
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], rerun: str = "'nmtkit preprocess'") -> "TextPipeline":
        """Inverse of `to_dict`; a ConfigError (to re-run `rerun`) for unknown keys or another version."""
        d = dict(d)
        version = d.pop("version", PIPELINE_VERSION)
        if not isinstance(version, int) or isinstance(version, bool):
            raise ConfigError(f"text pipeline version {version!r:.40} is not a number")
        if version != PIPELINE_VERSION:
            raise ConfigError(f"text pipeline version {version} is not one this nmtkit reads ({PIPELINE_VERSION}); "
                              f"re-run {rerun} with this nmtkit to write it again")
        valid = [f.name for f in fields(cls) if not f.name.startswith("_")]
        unknown = sorted(set(d) - set(valid))
        if unknown:
            raise ConfigError(f"unknown text pipeline keys {unknown}; valid keys: {valid}")
        _check_read(d)
        d["protected_patterns"] = tuple(d.get("protected_patterns") or ())
        return cls(**d)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (e.g. to worker processes) without its caches, which hold closures."""
        return {**self.__dict__, "_cache": {}}

    def lang(self, side: str) -> str:
        _check_side(side)
        return self.src_lang if side == "src" else self.tgt_lang

    def _cached(self, kind: str, side: str, build: Callable[[], Any]) -> Any:
        """`build()` for `side`, made once and kept: the tokeniser, the truecaser, the BPE tables."""
        key = (kind, side)
        made = self._cache.get(key)
        if made is None:
            _check_side(side)
            made = self._cache[key] = build()
        return made

    def tokenize(self, line: str, side: str) -> list[str]:
        """Steps 0-2 (no casing change)."""
        return self._cached("tokenize", side, lambda: moses.tokenizer_fn(
            self.lang(side), self.aggressive_dash_splits, lowercase=False,
            normalize_punct=self.normalize_punct, protected_patterns=self.protected_patterns,
            remove_non_printing=self.remove_non_printing, nfc=self.nfc))(line)

    def case(self, tokens: list[str], side: str, start: bool = True) -> list[str]:
        """Step 3: lowercase or truecase (identity when neither is set); `start`: whether the first
        token starts a sentence (False: words from inside one)."""
        if self.lowercase:
            return [t.lower() for t in tokens]
        if self.truecase is not None:
            return self._cached("truecase", side, lambda: Truecaser(self.truecase[side]))(tokens, start)
        return tokens

    def apply_bpe(self, tokens: list[str], side: str) -> list[str]:
        """Step 4: BPE segmentation (identity without BPE)."""
        if self.bpe is None:
            return tokens
        vocab = self.bpe.get("vocab")
        return self._cached("bpe", side, lambda: Bpe(
            self.bpe["codes"][side], vocab=vocab[side] if vocab else None,
            separator=self.bpe.get("separator", SEPARATOR))).apply(tokens)

    def encode(self, line: str, side: str) -> list[str]:
        """Raw line -> the tokens the vocabulary sees."""
        return self.apply_bpe(self.case(self.tokenize(line, side), side), side)

    def tokenize_from(self, line: str, side: str, input_format: str = "raw") -> list[str]:
        """Steps 0-2, or for Moses-tokenised input ("tok") a split on whitespace."""
        if input_format == "raw":
            return self.tokenize(line, side)
        if input_format == "tok":
            return line.split()
        raise ValueError(f"input_format must be 'raw' or 'tok' here, not {input_format!r}")

    def encode_from(self, line: str, side: str, input_format: str = "raw") -> list[str]:
        """`encode` for raw, Moses-tokenised ("tok") or BPE'd input ("bpe": split on whitespace only)."""
        if input_format == "bpe":
            return line.split()
        if input_format not in INPUT_FORMATS:
            raise ValueError(f"input_format must be one of {INPUT_FORMATS}, not {input_format!r}")
        return self.apply_bpe(self.case(self.tokenize_from(line, side, input_format), side), side)

    def decode(self, tokens: list[str], side: str = "tgt") -> str:
        """Model tokens -> raw text: join BPE, detruecase, detokenise."""
        return self.decode_to(tokens, side, "raw")

    def decode_to(self, tokens: list[str], side: str = "tgt", output_format: str = "raw") -> str:
        """Tokens -> text as BPE pieces ("bpe"), Moses tokens ("tok") or plain text ("raw")."""
        _check_side(side)
        if output_format == "bpe":
            return " ".join(tokens)
        words = join_bpe(tokens, self.bpe.get("separator", SEPARATOR)) if self.bpe else list(tokens)
        if output_format == "tok":
            return " ".join(words)
        if output_format == "raw":
            if self.truecase is not None:
                words = detruecase(words)
            return moses.detokenize(words, self.lang(side))
        raise ValueError(f"output_format must be one of {INPUT_FORMATS}, not {output_format!r}")


def pipeline_differences(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[str]:
    """The settings in which the recorded pipeline `b` differs from `a` (`to_dict`'s dicts, or None),
    in field order: a scalar with both values ("nfc False vs True", `b`'s first), others by name."""
    a, b = a or {}, b or {}
    if not (isinstance(a, dict) and isinstance(b, dict)):  # a damaged record: nothing to compare setting by setting
        return [] if a == b else ["the whole record"]
    names = [f.name for f in fields(TextPipeline) if not f.name.startswith("_")]
    names += sorted((set(a) | set(b)) - set(names), key=str)  # "version", and any key no pipeline has
    out = []
    for name in names:
        x, y = a.get(name), b.get(name)
        if x != y:
            scalar = all(v is None or isinstance(v, (bool, int, str)) for v in (x, y))
            out.append(f"{name} {y} vs {x}" if scalar else name)
    return out
