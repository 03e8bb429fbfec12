"""`nmtkit tokenize` as `run(config, progress)`: Moses-normalise and tokenise a file once, in parallel.

A large corpus is tokenised once for both `select-data` and `preprocess --input-format tok`, since
sacremoses is the slow step of both. Beside an output file, `OUTPUT.tokinfo.json` records the
settings, which `preprocess` checks against its own flags (it records them), `translate` against its checkpoint's.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from nmtkit.devices import MAX_WORKERS
from nmtkit.errors import ConfigError, InputError, NmtkitError
from nmtkit.io.checks import STDIN, Output, check_outputs_vs_inputs, file_path
from nmtkit.io.files import OutputFile, commit_all, writes_in_place
from nmtkit.options import check_fields, option
from nmtkit.progress import Progress, no_progress
from nmtkit.text.io import read_lines, stream_lines
from nmtkit.text.moses import check_lang, resolve_protect
from nmtkit.text.parallel import parallel_map
from nmtkit.text.pipeline import (
    DASH_SPLITS_OPTION,
    NFC_OPTION,
    NON_PRINTING_OPTION,
    NORMALIZE_PUNCT_OPTION,
    PROTECT_OPTION,
    TextPipeline,
)

TOKINFO_SUFFIX = ".tokinfo.json"
# pipeline setting -> the flag that sets it (the same flag in this tool and in preprocess)
_FLAGS = {"nfc": "--no-nfc", "normalize_punct": "--no-normalize-punct",
          "remove_non_printing": "--no-remove-non-printing", "aggressive_dash_splits": "--aggressive-dash-splits",
          "lowercase": "--lowercase"}


@dataclass(frozen=True)
class TokenizeConfig:
    """Every option of `nmtkit tokenize` (its click options are generated from these fields)."""

    lang: str = option(required=True, metavar="LANG", help="Language code for sacremoses (en, fr, ...).")
    input_path: str | None = option(None, names=("--input", "-i"), metavar="FILE", shown_default="stdin",
                                    help="Raw text, one sentence a line ('-': stdin; FILE.gz is gunzipped).")
    output_path: str | None = option(
        None, names=("--output", "-o"), metavar="FILE", shown_default="stdout",
        help="Tokenised text, line for line ('-': stdout); beside it, FILE.tokinfo.json records the settings, "
             "which 'preprocess --input-format tok' checks against its own flags.")
    nfc: bool = option(True, **NFC_OPTION)
    normalize_punct: bool = option(True, **NORMALIZE_PUNCT_OPTION)
    remove_non_printing: bool = option(True, **NON_PRINTING_OPTION)
    aggressive_dash_splits: bool = option(False, **DASH_SPLITS_OPTION)
    lowercase: bool = option(False, help="Lowercase all tokens.")
    protect: tuple[str, ...] = option((), **PROTECT_OPTION)
    workers: int = option(1, min=1, max=MAX_WORKERS, metavar="N", cli_default=None, shown_default="all cores",
                          help="Processes (line order is kept).")
    force: bool = option(False, help="Overwrite an existing -o file (never an input: that is refused).")

    def __post_init__(self) -> None:
        check_fields(self)
        check_lang(self.lang, "--lang")

    def pipeline(self) -> TextPipeline:
        """The text pipeline these settings give (reads the --protect files)."""
        return TextPipeline(self.lang, self.lang, nfc=self.nfc, normalize_punct=self.normalize_punct,
                            remove_non_printing=self.remove_non_printing,
                            aggressive_dash_splits=self.aggressive_dash_splits, lowercase=self.lowercase,
                            protected_patterns=resolve_protect(self.protect))


def _tok_line(line: str, pipeline: TextPipeline) -> str:
    """Preprocess's steps 0-3 (compose, normalise, tokenise, lowercase), one side, as a line."""
    return " ".join(pipeline.case(pipeline.tokenize(line.rstrip("\r\n"), "src"), "src"))


def tokinfo(pipeline: TextPipeline) -> dict[str, Any]:
    """What `_tok_line` did, as recorded beside its output."""
    return {"tool": "nmtkit tokenize", "lang": pipeline.src_lang,
            **{k: getattr(pipeline, k) for k in _FLAGS}, "protected_patterns": list(pipeline.protected_patterns)}


def tokinfo_path(path: str) -> str:
    """`path.tokinfo.json`, or for a `FILE.gz` without one, FILE's (tokenised, then gzipped)."""
    info_path = path + TOKINFO_SUFFIX
    if path.endswith(".gz") and not os.path.lexists(info_path):
        return path[: -len(".gz")] + TOKINFO_SUFFIX
    return info_path


def read_tokinfo(path: str) -> dict[str, Any] | None:
    """The record `nmtkit tokenize` wrote beside `path`; None when there is none, InputError when damaged."""
    info_path = tokinfo_path(path)
    try:
        with open(info_path, encoding="utf-8") as f:
            info = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise InputError(f"unreadable tokeniser record: {err}", info_path) from None
    if not isinstance(info, dict) or not isinstance(info.get("protected_patterns", []), list):
        raise InputError("not a tokeniser record (a JSON object as 'nmtkit tokenize' writes it): re-run 'nmtkit "
                         "tokenize'", info_path)
    missing = [k for k in ("lang", *_FLAGS) if k not in info]
    if missing or not isinstance(info["lang"], str) or any(not isinstance(info.get(k, False), bool) for k in _FLAGS):
        what = f"lacks {missing}" if missing else "has settings of the wrong type"
        raise InputError(f"a tokeniser record that {what}: from another nmtkit, edited or damaged; re-run "
                         "'nmtkit tokenize'", info_path)
    return info


MOSES_ESCAPES = ("&quot;", "&apos;", "&amp;", "&lt;", "&gt;", "&#91;", "&#93;", "&#124;")  # tokenizer.perl's
# what another pipeline leaves in its output: tokenizer.perl's XML escapes and -a's "@-@", BPE's "@@", sentencepiece's "▁"
_PROCESSED = re.compile("|".join(map(re.escape, MOSES_ESCAPES)) + r"|(?<= )@-@(?= )|\S+@@(?= |$)|\u2581")


def tokenised_as_raw(path: str, tok: bool = False) -> str | None:
    """--input-format raw: a warning when `path` has the record of `nmtkit tokenize` beside it, or
    when one of its first 1,000 lines holds the marks of another pipeline's tokenised or subword output;
    `tok` (tokenised input without a record): when they hold its XML escapes or subword marks."""
    info_path = tokinfo_path(path)
    if os.path.isfile(info_path) and not tok:
        return (f"{path}: {info_path} records it as 'nmtkit tokenize' output, read here as raw text and tokenised "
                "a second time, which splits it further (\"J' aime\" -> \"J ' aime\"): give --input-format tok")
    lines = enumerate(itertools.islice(read_lines(path), 1000), 1) if os.path.isfile(path) else ()
    found = next(((n, m[0]) for n, line in lines for m in _PROCESSED.finditer(line) if not tok or m[0] != "@-@"), None)
    return found and (f"{path}: line {found[0]} holds '{found[1]}', the mark of text already tokenised (Moses' XML "
                      "escapes, @-@) or split into subwords (@@, ▁), which " + ("tokenised input keeps as words of "
                      "its own (\"&apos;s\")" if tok else "raw input is tokenised and split again (\"&apos;s\" -> "
                      "\"& apos ; s\")") + ": give the original text (deescape-special-chars.perl undoes the "
                      "escapes), or the --input-format it is in")


def check_tokinfo(path: str, lang: str, pipeline: TextPipeline, protect: bool = True,
                  fix: str = "give the tokeniser and this command the same flags, since translate replays this "
                             "command's") -> bool:
    """Check that the tokenised file `path` was made with `pipeline`'s steps 0-3: False without a
    record, a ConfigError ending with `fix` where the settings differ (text that kept its case may be
    lowercased here, not the reverse). `protect`: compare the protected patterns too."""
    info = read_tokinfo(path)
    if info is None:
        return False
    info_path = tokinfo_path(path)
    if info.get("lang") != lang:
        raise ConfigError(f"tokenised as language '{info.get('lang')}' ({info_path}), used here as '{lang}'", path)
    wrong = [f"{k}={info.get(k)} there, {getattr(pipeline, k)} here (tokenize's {flag})"
             for k, flag in _FLAGS.items() if info.get(k) != getattr(pipeline, k)
             and not (k == "lowercase" and pipeline.lowercase)]
    if protect and list(info.get("protected_patterns") or []) != list(pipeline.protected_patterns):
        wrong.append(f"{len(info.get('protected_patterns') or [])} protected patterns there, "
                     f"{len(pipeline.protected_patterns)} here (tokenize's --protect)")
    if wrong:
        raise ConfigError(f"tokenised with other settings ({info_path}): {'; '.join(wrong)}; {fix}", path)
    return True


def _check_outputs(config: TokenizeConfig) -> tuple[str | None, str | None, str | None]:
    """Refuse an output or record that is an input: (input, output, record) paths, None for stdio or none."""
    input_path, output_path = file_path(config.input_path, "-i"), file_path(config.output_path, "-o")
    inputs = [("-i", input_path) if input_path else STDIN,
              *(("--protect", p) for p in config.protect if os.path.isfile(p))]
    tokinfo_out = output_path + TOKINFO_SUFFIX if output_path and not writes_in_place(output_path) else None
    tokinfo = f"-o's {TOKINFO_SUFFIX}"
    check_outputs_vs_inputs(inputs, files=[Output("-o", output_path or "-", "-o output", config.force),
                                           Output(tokinfo, tokinfo_out, tokinfo, True)])
    return input_path, output_path, tokinfo_out


def run(config: TokenizeConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Tokenise the input (stdin by default) into the output (stdout by default) line for line; an
    output file and its record appear only when complete. Returns {"lines": N, "tokinfo": path or None}."""
    if not isinstance(config, TokenizeConfig):
        raise TypeError(f"nmtkit.text.tokenize.run takes a TokenizeConfig, not {type(config).__name__}")
    input_path, output_path, tokinfo_out = _check_outputs(config)
    pipeline = config.pipeline()
    report = progress or no_progress
    func = functools.partial(_tok_line, pipeline=pipeline)
    # decoded strictly by text.io, not by sys.stdin, which may be set to replace or escape bad bytes
    lines = read_lines(input_path) if input_path else stream_lines(sys.stdin.buffer, "<stdin>")
    n = 0
    with contextlib.ExitStack() as stack:
        out_file = stack.enter_context(OutputFile(output_path)) if output_path else None
        out = out_file.file if out_file is not None else sys.stdout
        try:
            for n, tok in enumerate(parallel_map(func, lines, workers=config.workers, chunk_size=2000), 1):
                out.write(tok + "\n")
                report("tokenize", n, None)
        except NmtkitError as err:
            if err.path is not None or getattr(err, "item", None) is None:
                raise
            raise InputError(err.bare_message, input_path or "<stdin>", err.item + 1) from None
        if tokinfo_out is not None and out_file is not None:  # both appear, or (a signal before) neither
            record = stack.enter_context(OutputFile(tokinfo_out))
            record.file.write(json.dumps(tokinfo(pipeline), indent=1) + "\n")
            commit_all([record, out_file])
    return {"lines": n, "tokinfo": tokinfo_out}
