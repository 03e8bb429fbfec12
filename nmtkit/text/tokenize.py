"""`python -m nmtkit.text.tokenize`: Moses-normalise and tokenise a file once, in parallel.

Recipes tokenise a large corpus once and feed the result to both `nmtkit select-data
--input-format tok` and `nmtkit preprocess --input-format tok`, since sacremoses is the slow
step of both. Same functions and defaults as `preprocess` (escape=False). Reads stdin or
--input, writes stdout or --output (through nmtkit.outputs: temp name, then rename), line for line.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys

from nmtkit.errors import NmtkitError, describe_os_error
from nmtkit.outputs import OutputFile
from nmtkit.text.io import read_lines
from nmtkit.text.moses import tokenize
from nmtkit.text.parallel import parallel_map


def _tok_line(line: str, lang: str, aggressive: bool, lowercase: bool) -> str:
    return " ".join(tokenize(line.rstrip("\r\n"), lang, aggressive_dash_splits=aggressive, lowercase=lowercase))


def _lines(path: str | None):
    """Lines of --input (UTF-8 errors name file and line, via text.io) or of stdin."""
    if path not in (None, "-"):
        yield from read_lines(path)
        return
    # decode stdin strictly ourselves: sys.stdin may be set to replace or escape bad bytes
    for lineno, raw in enumerate(sys.stdin.buffer, 1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise NmtkitError(f"invalid UTF-8 ({err.reason})", "<stdin>", lineno) from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nmtkit.text.tokenize", description=__doc__.splitlines()[0])
    p.add_argument("--lang", required=True, help="language code for sacremoses (en, fr, ...)")
    p.add_argument("-i", "--input", help="input file (default: stdin)")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="processes")
    p.add_argument("--aggressive-dash-splits", action="store_true", help="split hyphens (Moses -a)")
    p.add_argument("--lowercase", action="store_true", help="lowercase tokens")
    args = p.parse_args(argv)
    func = functools.partial(_tok_line, lang=args.lang, aggressive=args.aggressive_dash_splits,
                             lowercase=args.lowercase)
    try:
        with contextlib.ExitStack() as stack:
            out = stack.enter_context(OutputFile(args.output)).file if args.output else sys.stdout
            for tok in parallel_map(func, _lines(args.input), workers=args.workers, chunk_size=2000):
                out.write(tok + "\n")
    except NmtkitError as err:
        print(f"nmtkit.text.tokenize: error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"nmtkit.text.tokenize: error: {describe_os_error(err)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
