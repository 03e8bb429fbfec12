"""Text in, text out: `nmtkit translate` without the command line (`run`).

The checkpoint alone is enough: it records the text pipeline and the vocabularies. Streaming:
lines are read into a buffer, translated by a `Translator` (translator.py, also the Python API),
put back in input order and written (writers.py) before the next buffer is read; the translator
and the writers do not import each other."""
from __future__ import annotations

import contextlib
import itertools
import logging
import sys
from pathlib import Path
from typing import Iterable

from nmtkit.errors import ConfigError, InputError
from nmtkit.io.checks import STDIN, Output, check_found, check_outputs_vs_inputs, file_path
from nmtkit.io.dirs import new_folders, take_back_folders
from nmtkit.io.files import OutputFile, check_output_dir, commit_all, is_stdin, is_stdout
from nmtkit.progress import Progress, no_progress
from nmtkit.text.io import check_counts, count_lines, read_lines, stream_lines
from nmtkit.text.tokenize import check_tokinfo, tokenised_as_raw
from nmtkit.translate.alignment import (
    hard_alignment,
    read_unk_dict,
    replace_unks,
    soft_alignment,
    subword_words,
)
from nmtkit.translate.config import DecodeConfig, TranslateConfig
from nmtkit.translate.translator import Translator
from nmtkit.translate.writers import Writers, is_plot_name, nbest_line

log = logging.getLogger(__name__)

__all__ = [
    "DecodeConfig", "TranslateConfig", "Translator", "Writers", "check_files", "hard_alignment", "nbest_line",
    "read_unk_dict", "replace_unks", "run", "soft_alignment", "subword_words", "translate_stream",
]


def translate_stream(translator: Translator, items: Iterable[tuple], writers: Writers, config: TranslateConfig,
                     source: str, progress: Progress = no_progress) -> int:
    """Translate numbered lines (line number, text) buffer by buffer, or with --score-reference
    score numbered pairs (line number, text, translation); returns the number of lines done."""
    search = config.search_config()
    alignments = bool(config.alignments or config.plot_attention)
    # each line answered as it arrives; a buffer past sys.maxsize lines (islice's bound) holds them all as well
    buffer_size = 1 if config.interactive else min(config.buffer_size, sys.maxsize)
    n = 0
    it = iter(items)
    while buf := list(itertools.islice(it, buffer_size)):  # takes no line beyond the buffer
        if config.score_reference:
            for s in translator._score_buffer(buf, source, file_path(config.score_reference) or "<stdin>"):
                writers.write_score(s.log_prob)
        else:
            for r in translator._translate_buffer(buf, search, alignments, source):
                writers.write(r)
        writers.flush()
        n += len(buf)
        progress("translate", n, None)
    return n


def paired_lines(sources: Iterable[str], references: Iterable[str], source: str,
                 reference: str) -> Iterable[tuple[int, str, str]]:
    """(line number, source, translation) of two files read in step, as long as both last."""
    end = object()
    for n, (src, ref) in enumerate(itertools.zip_longest(sources, references, fillvalue=end), 1):
        if src is end:
            raise InputError(f"has more lines than {source} ({n - 1}): one translation per source line", reference, n)
        if ref is end:
            raise InputError(f"has fewer lines ({n - 1}) than {source}: one translation per source line", reference, n)
        yield n, src, ref  # type: ignore[misc]


def check_files(config: TranslateConfig) -> tuple[str | None, str | None, str | None]:
    """The files of `run`, checked before the models load, as files to open (None: a stream)."""
    input_path, output_path, alignments_file = config.input_path, config.output_path, config.alignments_file
    if config.alignments and not alignments_file:
        raise ConfigError("--alignments needs --alignments-file FILE")
    if alignments_file and not config.alignments:
        raise ConfigError("--alignments-file needs --alignments hard|soft")
    input_path, output_path = file_path(input_path, "-i"), file_path(output_path, "-o")
    if alignments_file is not None and is_stdout(alignments_file) and is_stdout(output_path):
        raise ConfigError("-o and --alignments-file cannot both be stdout (/dev/stdout, or the file stdout is "
                          "redirected to, is stdout too): give one of them a file")
    alignments_file = file_path(alignments_file, "--alignments-file")
    reference = file_path(config.score_reference, "--score-reference")
    if config.score_reference is not None and is_stdin(reference) and is_stdin(input_path):
        raise ConfigError("-i and --score-reference cannot both be stdin (/dev/stdin, or the pipe or FIFO stdin "
                          "comes from, is stdin too): give one of them a file")
    if input_path:  # FIFOs, /dev/stdin and <(cmd) are read as files are
        check_found(input_path, "input file not found")
        if Path(input_path).is_dir():
            raise InputError("is a directory; give a file of sentences, one a line", input_path)
    check_outputs_vs_inputs(
        inputs=[("-i", input_path) if input_path else STDIN, *(("-m", m) for m in config.models),
                ("--unk-dict", config.unk_dict),
                ("--score-reference", reference) if reference or not config.score_reference else STDIN],
        files=[Output("-o", output_path or "-", "-o output", config.force),
               Output("--alignments-file", alignments_file or config.alignments_file, "--alignments-file",
                      config.force)],
        folders=[("--plot-attention", config.plot_attention, is_plot_name)])
    if config.plot_attention:
        check_output_dir(config.plot_attention, "--plot-attention folder")
    if reference:
        _check_reference(reference, input_path)
    return input_path, output_path, alignments_file


def _check_reference(reference: str, input_path: str | None) -> None:
    """--score-reference's file exists and, where both are regular files, has as many lines as
    the input (a stream is checked as it is read)."""
    check_found(reference, "--score-reference file not found")
    path = Path(reference)
    if path.is_dir():
        raise InputError("is a directory; give a file of translations, one a line", reference)
    if input_path and Path(input_path).is_file() and path.is_file():
        check_counts((f"-i {input_path}", count_lines(input_path)[0]),
                     [(f"--score-reference {reference}", count_lines(reference)[0])],
                     ": give one translation per source line")


def run(config: TranslateConfig, progress: Progress | None = None) -> dict[str, int]:
    """`nmtkit translate`: lines of `config.input_path` (stdin when None or "-") -> translations
    in `config.output_path` (stdout when None or "-") and alignments in `config.alignments_file`
    (stdout when "-"); returns {"lines": lines translated}. `progress` hears ("translate", lines
    done, None) after every buffer. Files appear whole or not at all (nmtkit.io.files); a
    --plot-attention folder the run creates goes again, with its plots, if it fails."""
    if not isinstance(config, TranslateConfig):
        raise TypeError(f"nmtkit.translate.run takes a TranslateConfig, not {type(config).__name__}")
    created = new_folders(config.plot_attention) if config.plot_attention else []
    try:
        return _run(config, progress or no_progress)
    except BaseException:
        take_back_folders(created, is_plot_name)
        raise


def _run(config: TranslateConfig, progress: Progress) -> dict[str, int]:
    align_stdout = config.alignments_file == "-"
    input_path, output_path, alignments_file = check_files(config)
    translator = Translator(config.decode_config())
    pipeline = translator.bundle.pipeline
    for path, side in ((input_path, "src"), (file_path(config.score_reference), "tgt")):  # both read as --input-format
        if path and config.input_format == "raw" and (tokenised := tokenised_as_raw(path)):
            log.warning(tokenised)  # as preprocess and select-data warn
        elif path and config.input_format == "tok":  # as preprocess, a record of other settings is refused
            if not check_tokinfo(path, pipeline.lang(side), pipeline, fix="tokenise it as the model's training data "
                                 "was (its checkpoint records how), or give raw text with --input-format raw") and (
                    marks := tokenised_as_raw(path, tok=True)):
                log.warning(marks)
    translator._check_attention(("--replace-unk", config.replace_unk), ("--alignments", config.alignments),
                                ("--plot-attention", config.plot_attention))
    source = input_path or "<stdin>"
    with contextlib.ExitStack() as stack:
        out_file = stack.enter_context(OutputFile(output_path)) if output_path else None
        align_file = stack.enter_context(OutputFile(alignments_file)) if alignments_file else None
        writers = Writers(out_file.file if out_file else sys.stdout,
                          align_file.file if align_file else (sys.stdout if align_stdout else None),
                          config, flush_each=config.interactive or config.buffer_size == 1,
                          stage_plots=out_file is not None and out_file.write_path != out_file.path)
        stack.callback(lambda: [plot.abort() for plot in writers.plots or []])  # no-ops once committed
        # stdin line by line as lines arrive (a terminal or a pipe is answered without waiting)
        texts = read_lines(input_path) if input_path else stream_lines(sys.stdin.buffer, source)
        items = enumerate(texts, 1)
        if config.score_reference:  # "-": the translations on stdin, the source in -i FILE
            reference = file_path(config.score_reference)
            refs = read_lines(reference) if reference else stream_lines(sys.stdin.buffer, "<stdin>")
            items = paired_lines(texts, refs, source, reference or "<stdin>")
        n = translate_stream(translator, items, writers, config, source, progress)
        # both files committed, or (a signal before) neither: never a mismatched pair
        commit_all([f for f in (align_file, out_file) if f is not None] + (writers.plots or []))
        return {"lines": n}
