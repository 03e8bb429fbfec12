"""The Moses scripts through sacremoses: punctuation normalisation, tokenisation (with
tokenizer.perl's protected patterns), detokenisation, and corpus cleaning (clean-corpus-n.perl).
Always `escape=False`: `&`, `'`, `"` stay as they are, not XML entities, so tokens round-trip.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from functools import lru_cache
from typing import Sequence

from nmtkit.errors import ConfigError, InputError

log = logging.getLogger(__name__)

# a language code: ISO 639 letters, lower case (en, fr, mni), perhaps with subtags (pt-BR, zh_hant)
_LANG_CODE = re.compile(r"[a-z]{2,3}([-_][A-Za-z0-9]{2,8})*")


def check_lang(lang: str, option: str) -> None:
    """Refuse what is not a language code (a ConfigError naming `option`), which the Moses tools would
    take silently; warn once about a code they have no rules for, as tokenizer.perl does."""
    if not _LANG_CODE.fullmatch(lang):
        lower = lang[:3].lower() + lang[3:]  # the primary subtag lower-cased, region subtags as given
        if _LANG_CODE.fullmatch(lower):
            raise ConfigError(f"{option} {lang!r}: language codes are lower case: give {lower!r}")
        raise ConfigError(f"{option} {lang!r} is not a language code: two or three lower-case letters (en, fr, ...)")
    _warn_without_rules(lang, option)


@lru_cache(maxsize=None)
def _warn_without_rules(lang: str, option: str) -> None:
    from sacremoses.corpus import NonbreakingPrefixes

    if lang not in NonbreakingPrefixes().available_langs.values():
        log.warning("%s %s: sacremoses has no Moses rules for this language; tokenising with the generic ones and "
                    "English nonbreaking prefixes, as tokenizer.perl -l %s does", option, lang, lang)


@lru_cache(maxsize=None)
def _moses(kind: str, lang: str):
    """sacremoses' `kind` (MosesPunctNormalizer, MosesTokenizer, MosesDetokenizer) for `lang`, built once."""
    import sacremoses

    return getattr(sacremoses, kind)(lang=lang)


@lru_cache(maxsize=None)
def _perl_tokenizer(lang: str):
    """sacremoses' tokeniser with tokenizer.perl's rules where sacremoses 0.2 departs from them: a
    line's last word ending in "." is always split ("un art." -> "art ."); a word is never split
    around a letter that sacremoses' tables lack but \\p{IsAlnum} holds (CJK ideographs and Hangul
    outside -l zh/ja/ko, letters past U+FFFF: "sie和食Tiffany" is one word); -l fi/sv keep a colon
    before a lower-case letter ("EU:ssa"), -l ca every middle dot ("il·lusió": the script's other rule
    for it never matches); -l ca/ga split apostrophes as -l fr does ("l' home"); U+001C-U+001F are
    deleted as the other ASCII controls are."""
    from unicodedata import category

    from sacremoses import MosesTokenizer

    last_period = re.compile(r"^(\S+)\.$")
    codes = sorted({ord(c) for c in MosesTokenizer.IsAlnum}
                   | {i for i in range(0x110000) if chr(i).isalpha() or category(chr(i)) == "Nd"})
    starts = [c for k, c in enumerate(codes) if k == 0 or codes[k - 1] != c - 1]  # as ranges: a class of
    ends = [c for k, c in enumerate(codes) if k + 1 == len(codes) or codes[k + 1] != c + 1]  # 100,000 is slow
    alnum = "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in zip(starts, ends))
    inner = ":" if lang in ("fi", "sv") else ""
    pad = re.compile(f"[^{alnum}\\s.'`,\\-{inner}{'·' if lang == 'ca' else ''}]" + (f"|{inner}" if inner else ""))

    def padded(m: re.Match) -> str:
        after = m.string[m.end():m.end() + 1]
        return m[0] if m[0] == inner and after and category(after) == "Ll" else f" {m[0]} "

    class PerlTokenizer(MosesTokenizer):
        DEDUPLICATE_SPACE = re.compile(r"[^\S\x1c-\x1f]+"), " "  # Perl's \s lacks them

        def __init__(self) -> None:
            super().__init__(lang=lang)
            self.PAD_NOT_ISALNUM = pad, padded
            if lang in ("ca", "ga"):  # sacremoses reads self.lang only to pick the apostrophe rules
                self.lang = "fr"

        def handles_nonbreaking_prefixes(self, text: str) -> str:
            tokens = text.split()
            if tokens and (m := last_period.search(tokens[-1])):
                tokens[-1] = m.group(1) + " ."
            return super().handles_nonbreaking_prefixes(" ".join(tokens))

    return PerlTokenizer()


def tokenize_like_perl(line: str, lang: str) -> list[str]:
    """Exactly `tokenizer.perl -l LANG -no-escape`: the tokenisation of the papers' BLEU."""
    return _perl_tokenizer(lang).tokenize(line, escape=False)


# Format characters that only ever sit inside a word (a hyphenation point, joining controls, "no
# break here"): deleted, so that they do not split it; every other non-printing character is a space.
INSIDE_WORD = frozenset("\u00ad\u200c\u200d\u2060\ufeff")
NON_PRINTING = frozenset(("Cc", "Cf", "Co", "Cs"))  # Unicode category C but Cn, unassigned


def space_non_printing(line: str) -> str:
    """Moses `remove-non-printing-char.perl`: controls, format characters, private-use code points
    and surrogates become spaces. Two departures: unassigned code points (Cn) are kept, since which
    they are depends on Python's Unicode version (translate must replay preprocess exactly), and
    `INSIDE_WORD` characters are deleted, not spaced ("Fuß<SHY>ball" -> "Fußball")."""
    if line.isprintable():
        return line
    from unicodedata import category

    return "".join("" if c in INSIDE_WORD else " " if category(c) in NON_PRINTING else c for c in line)


def compose(line: str) -> str:
    """Unicode NFC ("e" + U+0301 -> "é"), so that decomposed text tokenises as composed text does."""
    from unicodedata import is_normalized, normalize

    return line if is_normalized("NFC", line) else normalize("NFC", line)


def tokenize(line: str, lang: str, aggressive_dash_splits: bool = False, lowercase: bool = False,
             normalize_punct: bool = True, protected_patterns: tuple[str, ...] = (), *,
             remove_non_printing: bool = True, nfc: bool = True) -> list[str]:
    """One line -> Moses tokens, each match of `protected_patterns` left whole (`tokenizer_fn`)."""
    return tokenizer_fn(lang, aggressive_dash_splits, lowercase, normalize_punct, protected_patterns,
                        remove_non_printing=remove_non_printing, nfc=nfc)(line)


def detokenize(tokens: list[str], lang: str) -> str:
    """Moses detokenisation (the inverse of `tokenize` up to normalisation)."""
    return _moses("MosesDetokenizer", lang).detokenize(tokens)


# sacremoses' stand-in for a run of dots, turned back into dots after: a user's own is hidden like a match
MULTIDOT_MARKER = r"(?-i:(?:DOT)+MULTI)"
# the most the protected patterns may take on one line, together; more in proportion past PROTECT_LINE_CHARS
PROTECT_SECONDS, PROTECT_LINE_CHARS = 1.0, 10_000
_GLOBAL_FLAGS = re.compile(r"(?:\(\?[aiLmsux]+\))*")


class Protector:
    """Every match of the protected patterns in a line, matched as one alternation (a branch reset
    per set of global inline flags), so that many patterns cost one scan a line. At a position the
    first listed pattern that matches wins. Within PROTECT_SECONDS a line (more on a long one), a
    pattern that backtracks without end is a one-line InputError naming it, not a hang."""

    def __init__(self, patterns: Sequence[str]):
        import regex

        by_flags: dict[str, list[str]] = {}  # by their leading global flags, "(?x)" and the like
        for pattern in patterns:
            by_flags.setdefault(_GLOBAL_FLAGS.match(pattern).group(), []).append(pattern)
        self.groups = []
        for group in by_flags.values():
            try:
                rx = regex.compile("(?|" + "|".join(f"(?:{p})" for p in group) + ")",
                                   regex.IGNORECASE | regex.VERSION0 | regex.POSIX)
                if rx.search("") is not None:
                    raise ValueError
                self.groups.append((group, rx))
            except (regex.error, ValueError):  # one by one: the error names its pattern, or the branch
                self.groups.extend(([p], compile_pattern(p)) for p in group)  # reset could not number them

    def spans(self, line: str) -> list[str]:
        """The distinct non-empty matches, longest first, those of a length in the order they matched
        (never a set's order, which changes with the hash seed, so that every process hides alike)."""
        limit = PROTECT_SECONDS * max(1, len(line) / PROTECT_LINE_CHARS)
        deadline = time.monotonic() + limit
        found: dict[str, None] = {}
        for group, rx in self.groups:
            try:
                found.update(dict.fromkeys(m.group() for m in rx.finditer(
                    line, timeout=max(deadline - time.monotonic(), 1e-3))))
            except TimeoutError:
                raise InputError(f"the protected pattern {self._slow(group, line, limit)!r:.80} takes over "
                                 f"{limit:.3g} s on this line of {len(line):,} characters (it backtracks "
                                 "without end on it): fix or drop the pattern (tokenize's or preprocess's --protect)") from None
        found.pop("", None)
        return sorted(found, key=len, reverse=True)

    @staticmethod
    def _slow(group: list[str], line: str, limit: float) -> str:
        """The first pattern of `group` that alone takes over `limit` seconds on `line`, else the slowest."""
        times = []
        for pattern in group:
            start = time.monotonic()
            try:
                list(compile_pattern(pattern).finditer(line, timeout=limit))
            except TimeoutError:
                return pattern
            times.append((time.monotonic() - start, pattern))
        return max(times)[1]

    def shielded(self, line: str, tokenize, prepare) -> list[str]:
        """`tokenize(prepare(line), protected_patterns)` with every match hidden behind a letters-only
        name, which neither `prepare` ("%(name)s" -> "% (name) s") nor sacremoses can touch.
        Whitespace in a match still separates tokens, as in tokenizer.perl."""
        spans = self.spans(line)
        if not spans:
            return tokenize(prepare(line), None)
        marker = "NMTKITSHIELD"
        while marker in line:
            marker += "Q"
        names = [marker + "".join("ABCDEFGHIJ"[int(c)] for c in str(i).zfill(4)) + "Z"
                 for i in range(len(spans))]
        hidden: list[str | int] = [line]  # the line's text, and the numbers of the spans hidden in it so far
        for i, span in enumerate(spans):  # a short span ("IT") is never replaced inside a name ("NMTKITSHIELD...")
            hidden = [x for part in hidden for x in _hide(part, span, i)]
        line = "".join(names[x] if isinstance(x, int) else x for x in hidden)
        toks = tokenize(prepare(line), [re.escape(marker) + "[A-J]{4}Z"])
        found = dict(zip(names, spans))
        text = re.sub(re.escape(marker) + "[A-J]{4}Z", lambda m: found.get(m[0], m[0]), " ".join(toks))
        return text.split()


def _hide(part: str | int, span: str, i: int) -> list[str | int]:
    """`part` with each `span` in it replaced by the number `i` (a number, a span hidden already, stays)."""
    if isinstance(part, int):
        return [part]
    out: list[str | int] = []
    for k, piece in enumerate(part.split(span)):
        out += [i, piece] if k else [piece]
    return out


def tokenizer_fn(lang: str, aggressive_dash_splits: bool = False, lowercase: bool = False,
                 normalize_punct: bool = True, protected_patterns: tuple[str, ...] = (), *,
                 remove_non_printing: bool = True, nfc: bool = True):
    """`tokenize` with its settings bound once: a `str -> list[str]` for hot loops. NFC first, then
    the Moses order: normalize-punctuation.perl, remove-non-printing-char.perl, tokenizer.perl."""
    # a carriage return inside a line is a space (normalize-punctuation.perl deletes it, merging words)
    steps: list = [lambda line: line.replace("\r", " ")]
    if normalize_punct:  # its regular expressions are compiled only when used
        steps.append(_moses("MosesPunctNormalizer", lang).normalize)
    if remove_non_printing:
        steps.append(space_non_printing)
    moses = _moses("MosesTokenizer", lang).tokenize

    def prepare(line: str) -> str:
        for step in steps:
            line = step(line)
        return line

    def tok(text: str, protect: list[str] | None) -> list[str]:
        try:
            return moses(text, aggressive_dash_splits=aggressive_dash_splits, escape=False, protected_patterns=protect)
        except ValueError as err:  # sacremoses: more protected matches in one line than it can number
            count = re.match(r"too many protected tokens: (\d+) matches exceeds the limit of (\d+)", str(err))
            why = (f"{int(count[1]):,} matches, over the {int(count[2]):,} a line the Moses tokeniser can keep whole "
                   "(shorten or drop the line, or narrow tokenize's or preprocess's --protect)") if count else str(err)
            raise InputError(f"cannot tokenise a line with protected patterns: {why}") from None

    protector = Protector((*protected_patterns, MULTIDOT_MARKER)) if protected_patterns else None
    multidots = Protector((MULTIDOT_MARKER,))

    def run(line: str) -> list[str]:
        if nfc:  # before the protected patterns match: a mark after a match would compose with the name
            line = compose(line)  # hiding it ("NMTKITSHIELDAAAAZ" + U+0301 -> "NMTKITSHIELDAAAAŹ") and leak it
        shield = protector or (multidots if "MULTI" in line else None)
        toks = shield.shielded(line, tok, prepare) if shield else tok(prepare(line), None)
        return [t.lower() for t in toks] if lowercase else toks

    return run


# ---- protected patterns (tokenizer.perl's -protected): `--protect` takes regex files and the named sets
# below. printf: C and POSIX conversions, Python's %(name)s; no space flag ("100 % sure" is no placeholder).
PRINTF = (
    r"%(?:\d+\$)?[-+#0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?[diouxefgacspnm%]",
    r"%\([A-Za-z_][A-Za-z0-9_]*\)[-+#0]*\d*(?:\.\d+)?[diouxefgcrsa]",
)
URL = (r"(?:(?:https?|ftp|rsync)://|www\.)[^\s<>\"']*[^\s<>\"'.,;:!?)\]}]",)
EMAIL = (r"[\w\-\.]+@(?:[\w\-]+\.)+[a-zA-Z]{2,}",)
XML = (r"</?[A-Za-z][\w:\-]*(?:\s+[\w:\-]+\s*=\s*(?:\"[^\"]*\"|'[^']*'))*\s*/?>",)


def _basic() -> tuple[str, ...]:
    """Moses' own scripts/tokenizer/basic-protected-patterns (XML tags, e-mail addresses, URLs)."""
    from sacremoses import MosesTokenizer

    return tuple(MosesTokenizer.BASIC_PROTECTED_PATTERNS)


PROTECT_HELP = (
    "Keep the matches of these regular expressions whole when tokenising (tokenizer.perl -protected): a FILE "
    "with one regex a line, or a named set: printf (%s, %d, %1$s, %(name)s), url, email, xml (tags), basic (Moses' "
    "basic-protected-patterns). Repeatable; recorded with the output (preprocess: in the data directory, so "
    "translate and serve protect the same; tokenize: in FILE.tokinfo.json, which preprocess --input-format tok "
    "checks).")

NAMED_SETS = {"printf": lambda: PRINTF, "url": lambda: URL, "email": lambda: EMAIL, "xml": lambda: XML,
              "basic": _basic}


def compile_pattern(pattern: str):
    """The regex as `Protector` matches it (case-insensitively): checked by `re` first (its error
    messages), then compiled by `regex` (a time limit); ValueError where it matches the empty string."""
    import regex

    re.compile(pattern, re.IGNORECASE)
    try:
        rx = regex.compile(pattern, regex.IGNORECASE | regex.VERSION0)
    except regex.error as err:
        raise re.error(err.msg, pattern, err.pos) from None
    if rx.search("") is not None:
        raise ValueError("it matches the empty string")
    return rx


def read_patterns(path: str) -> list[str]:
    """The regexes of a -protected file; InputError naming the file (and line) for a bad one, or none."""
    try:
        with open(path, encoding="utf-8-sig") as f:  # a leading BOM dropped, as every reader does
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise InputError("protected-patterns file not found", path) from None
    except UnicodeDecodeError as err:
        raise InputError(f"protected-patterns file is not UTF-8 ({err.reason})", path) from None
    except OSError as err:
        raise InputError(f"cannot read the protected-patterns file: {err.strerror}", path) from None
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            compile_pattern(line)
        except re.error as err:
            at = "" if err.pos is None else f" at character {err.pos + 1}"  # None: look-behind's width
            raise InputError(f"invalid regular expression {line!r}: {err.msg}{at}", path, number) from None
        except (OverflowError, RecursionError) as err:  # a{99999999999}, or nesting past Python's limit
            raise InputError(f"invalid regular expression {line!r:.80}: {err}", path, number) from None
        except ValueError as err:
            raise InputError(f"regular expression {line!r} cannot be protected: {err}", path, number) from None
        out.append(line)
    if not out:
        raise InputError("protected-patterns file holds no pattern (one regular expression a line)", path)
    return out


def resolve_protect(specs: Sequence[str]) -> tuple[str, ...]:
    """`--protect` values -> the regexes, in order, without repeats. A name of NAMED_SETS is that
    set, even where a file of that name is here; anything else is a file."""
    out: list[str] = []
    for spec in specs:
        if spec in NAMED_SETS:
            if os.path.exists(spec):
                log.warning(f"--protect {spec} is the named set; the file {spec} in this folder is not read (write "
                            f"./{spec} for the file)")
            patterns = list(NAMED_SETS[spec]())
        elif os.sep in spec or os.path.exists(spec) or "." in spec:
            patterns = read_patterns(spec)
        else:
            raise ConfigError(f"--protect {spec}: not a file, nor a named set ({', '.join(NAMED_SETS)})")
        out += [p for p in patterns if p not in out]
    return tuple(out)


# ---- corpus cleaning, after clean-corpus-n.perl: a pair is dropped for the first reason that applies, empty,
# too_long, ratio, then (dedup on) duplicate. Lengths are in Moses tokens, before BPE, as clean-corpus-n's.
DROP_REASONS = ("duplicate", "empty", "too_long", "ratio")


def drop_reason(src_len: int, tgt_len: int, max_len: int, max_ratio: float) -> str | None:
    """Why clean-corpus-n would drop a pair with these token counts, or None to keep it."""
    if src_len == 0 or tgt_len == 0:
        return "empty"
    if src_len > max_len or tgt_len > max_len:
        return "too_long"
    if src_len / tgt_len > max_ratio or tgt_len / src_len > max_ratio:
        return "ratio"
    return None


class PairDeduper:
    """64-bit hashes of the pairs seen so far (about 70 bytes each): memory that grows with the corpus."""

    def __init__(self) -> None:
        self._seen: set[int] = set()

    def seen_before(self, src: str, tgt: str) -> bool:
        """True when this exact pair (surrounding whitespace ignored) was seen already."""
        pair = f"{src.strip()}\x00{tgt.strip()}".encode("utf-8")
        key = int.from_bytes(hashlib.blake2b(pair, digest_size=8).digest(), "little")
        seen = key in self._seen
        self._seen.add(key)
        return seen
