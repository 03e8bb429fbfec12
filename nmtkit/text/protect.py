"""Protected patterns: spans the Moses tokeniser must leave whole (tokenizer.perl's -protected).

`preprocess --protect` takes regular-expression files (one regex a line, as tokenizer.perl's
-protected FILE; blank lines and lines starting with "#" are skipped) and the named sets below,
several of each. The expanded list of regexes is recorded in the text pipeline
(`TextPipeline.protected_patterns`), so translate and serve protect exactly what preprocess did,
and sacremoses' `MosesTokenizer.tokenize(protected_patterns=...)` applies it: every match is
replaced by a placeholder before tokenisation and restored as one token afterwards. Detokenisation
then joins that token to its neighbours like a word, so `%s` comes back as `%s`, not `% s`.
sacremoses matches case-insensitively (re.IGNORECASE), so the patterns are checked that way here.
Punctuation normalisation, which runs before tokenisation, is kept off the matches too
(nmtkit.text.moses). As in tokenizer.perl, a match is not split from letters touching it
("one<br/>two" stays one token) and whitespace inside a match still separates tokens.
"""
from __future__ import annotations

import os
import re
from typing import Sequence

from nmtkit.errors import ConfigError, InputError

# C and POSIX printf conversions (%s, %d, %5.2f, %-10s, %1$s, %lu, %.*s, %%) and Python's %(name)s.
# No space flag: "% s" in running text ("100 % sure") is not a placeholder.
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

NAMED_SETS = {
    "printf": lambda: PRINTF,
    "url": lambda: URL,
    "email": lambda: EMAIL,
    "xml": lambda: XML,
    "basic": _basic,
}


def compile_pattern(pattern: str) -> re.Pattern:
    """The regex as sacremoses compiles it; ValueError for one that matches the empty string
    (sacremoses would insert its placeholder between every two characters)."""
    rx = re.compile(pattern, re.IGNORECASE)
    if rx.search("") is not None:
        raise ValueError("it matches the empty string")
    return rx


def read_patterns(path: str) -> list[str]:
    """The regexes of a -protected file; InputError naming the file (and line) for a missing
    file, an invalid regex or a file without any."""
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
            raise InputError(f"invalid regular expression {line!r}: {err.msg} at position {err.pos}", path,
                             number) from None
        except (OverflowError, RecursionError) as err:  # a{99999999999}, or nesting past Python's limit
            raise InputError(f"invalid regular expression {line!r:.80}: {err}", path, number) from None
        except ValueError as err:
            raise InputError(f"regular expression {line!r} cannot be protected: {err}", path, number) from None
        out.append(line)
    if not out:
        raise InputError("protected-patterns file holds no pattern (one regular expression a line)", path)
    return out


def resolve_protect(specs: Sequence[str]) -> tuple[str, ...]:
    """`--protect` values -> the regexes, in order, without repeats. A value is a named set
    (NAMED_SETS) unless it names an existing file or contains a path separator (write ./url for
    a file called url)."""
    out: list[str] = []
    for spec in specs:
        if spec in NAMED_SETS and not os.path.exists(spec):
            patterns = list(NAMED_SETS[spec]())
        elif os.sep in spec or os.path.exists(spec) or "." in spec:
            patterns = read_patterns(spec)
        else:
            raise ConfigError(f"--protect {spec}: not a file, nor a named set ({', '.join(NAMED_SETS)})")
        out += [p for p in patterns if p not in out]
    return tuple(out)
