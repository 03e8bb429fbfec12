"""Moses punctuation normalisation, tokenisation and detokenisation through sacremoses.

Always `escape=False`: we keep `&`, `'`, `"` as they are rather than Moses' XML entities,
so that tokens round-trip to plain text.
"""
from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=None)
def _normalizer(lang: str):
    from sacremoses import MosesPunctNormalizer

    return MosesPunctNormalizer(lang=lang)


@lru_cache(maxsize=None)
def _tokenizer(lang: str):
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


@lru_cache(maxsize=None)
def _perl_tokenizer(lang: str):
    """sacremoses' tokeniser with tokenizer.perl's rule for the last word of a line, which
    sacremoses 0.2 lacks: a line's last word ending in "." is always split ("un art." ->
    "art ."), since it is unlikely to be a nonbreaking prefix (tokenizer.perl, "split last
    words independently")."""
    import re

    from sacremoses import MosesTokenizer

    last_period = re.compile(r"^(\S+)\.$")

    class PerlTokenizer(MosesTokenizer):
        def handles_nonbreaking_prefixes(self, text: str) -> str:
            tokens = text.split()
            if tokens:
                m = last_period.search(tokens[-1])
                if m:
                    tokens[-1] = m.group(1) + " ."
            return super().handles_nonbreaking_prefixes(" ".join(tokens))

    return PerlTokenizer(lang=lang)


def tokenize_like_perl(line: str, lang: str) -> list[str]:
    """Exactly `tokenizer.perl -l LANG -no-escape` (no punctuation normalisation, no -a): the
    tokenisation of the papers' BLEU (multi-bleu.perl on Moses-tokenised text)."""
    return _perl_tokenizer(lang).tokenize(line, escape=False)


@lru_cache(maxsize=None)
def _detokenizer(lang: str):
    from sacremoses import MosesDetokenizer

    return MosesDetokenizer(lang=lang)


def normalize(line: str, lang: str) -> str:
    """Moses `normalize-punctuation.perl`."""
    return _normalizer(lang).normalize(line)


def tokenize(line: str, lang: str, aggressive_dash_splits: bool = False, lowercase: bool = False,
             normalize_punct: bool = True) -> list[str]:
    """Normalise punctuation (optional) and tokenise one line into Moses tokens."""
    if normalize_punct:
        line = normalize(line, lang)
    toks = _tokenizer(lang).tokenize(line, aggressive_dash_splits=aggressive_dash_splits, escape=False)
    if lowercase:
        toks = [t.lower() for t in toks]
    return toks


def detokenize(tokens: list[str], lang: str) -> str:
    """Moses detokenisation (the inverse of `tokenize` up to normalisation)."""
    return _detokenizer(lang).detokenize(tokens)


def tokenizer_fn(lang: str, aggressive_dash_splits: bool = False, lowercase: bool = False,
                 normalize_punct: bool = True):
    """`tokenize` with its settings bound once: a `str -> list[str]` for hot loops (same output)."""
    norm = _normalizer(lang).normalize if normalize_punct else None
    tok = _tokenizer(lang).tokenize

    def run(line: str) -> list[str]:
        toks = tok(norm(line) if norm is not None else line, aggressive_dash_splits=aggressive_dash_splits,
                   escape=False)
        return [t.lower() for t in toks] if lowercase else toks

    return run
