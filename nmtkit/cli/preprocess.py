"""`nmtkit preprocess`: options -> PreprocessConfig -> nmtkit.preprocess.preprocess.

Progress bars (one per stage) and the summary table go to stderr; stdout stays empty.
"""
from __future__ import annotations

import click

from nmtkit.cli.common import make_console, progress_enabled, protect_option, quiet_warnings
from nmtkit.devices import available_cores


class _RichProgress:
    """Turns preprocess's progress(stage, done, total) callbacks into rich bars, one per stage."""

    def __init__(self, console):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description:<26}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                                 console=console, transient=False)
        self.tasks: dict[str, int] = {}

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        task = self.tasks.get(stage)
        if task is None:
            task = self.tasks[stage] = self.progress.add_task(stage, total=total)
        self.progress.update(task, completed=done, total=total)

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)


def _summary(console, manifest: dict) -> None:
    """The end-of-run table (stderr): lines, tokens and UNK rates per split, drops, vocabularies."""
    from rich import box
    from rich.table import Table

    src, tgt = manifest["src_lang"], manifest["tgt_lang"]
    table = Table(title=f"nmtkit preprocess {src}-{tgt}: {manifest['settings']['dest']}", title_justify="left",
                  box=box.SIMPLE_HEAD)
    for col in ("split", "lines in", "kept", f"{src} tokens", f"{tgt} tokens", f"{src} UNK%", f"{tgt} UNK%"):
        table.add_column(col, justify="left" if col == "split" else "right", no_wrap=True)
    for name, s in manifest["splits"].items():
        table.add_row(name, f"{s['lines_in']:,}", f"{s['lines']:,}", f"{s['src_tokens']:,}", f"{s['tgt_tokens']:,}",
                      f"{100 * s['unk_rate']['src']:.2f}", f"{100 * s['unk_rate']['tgt']:.2f}")
    console.print(table)
    dropped = manifest["splits"]["train"]["dropped"]
    console.print("dropped from train: " + (", ".join(f"{r} {n:,}" for r, n in dropped.items() if n) or "nothing"))
    v = manifest["vocab"]
    bpe = manifest["pipeline"].get("bpe")
    kind = f"BPE {bpe['merges']} merges, {'joint' if bpe['joint'] else 'separate'}" if bpe else "words"
    console.print(f"vocabularies ({kind}): {v['src']} {v['src_size']:,}, {v['tgt']} {v['tgt_size']:,} entries")


@click.command("preprocess")
@click.option("--src-lang", required=True, metavar="LANG", help="Source language code; files are PREFIX.LANG (e.g. en).")
@click.option("--tgt-lang", required=True, metavar="LANG", help="Target language code (e.g. fr).")
@click.option("--train", "train", required=True, metavar="PREFIX",
              help="Training files PREFIX.SRC / PREFIX.TGT (raw text, one sentence a line, UTF-8). "
                   "Cleaned, and used to learn truecasing, BPE and vocabularies.")
@click.option("--valid", "valid", required=True, metavar="PREFIX", help="Validation files PREFIX.SRC / PREFIX.TGT (not cleaned).")
@click.option("--test", "test", multiple=True, metavar="PREFIX",
              help="Test files (repeatable): binarised as splits test, test1, test2, ... (not cleaned).")
@click.option("--dest", required=True, type=click.Path(file_okay=False), metavar="DIR",
              help="Data directory to write (manifest.json, vocab.LANG.txt, bpe.codes, binarised splits).")
@click.option("--force", is_flag=True, help="Replace an existing non-empty --dest (only once the new one is complete), and only when "
                   "it holds nothing but a data directory's own files; an input is never replaced.")
@click.option("--input-format", type=click.Choice(["raw", "tok"]), default="raw", show_default=True,
              help="'tok': input is already Moses-tokenised ('nmtkit tokenize' with the same "
                   "--aggressive-dash-splits); normalisation/tokenisation are skipped, casing and BPE applied.")
@click.option("--no-normalize-punct", is_flag=True, help="Skip Moses punctuation normalisation before tokenising.")
@click.option("--aggressive-dash-splits", is_flag=True, help="Split hyphenated words (Moses tokenizer -a): 'a-b' -> 'a @-@ b'.")
@click.option("--lowercase", is_flag=True, help="Lowercase all tokens (cannot be undone when translating).")
@protect_option
@click.option("--truecase", is_flag=True,
              help="Moses truecasing: learn each word's most frequent casing on the training split and apply it; "
                   "translate restores sentence-initial capitals.")
@click.option("--max-len", type=int, default=50, show_default=True, metavar="N",
              help="Drop training pairs with a side longer than N tokens, counted after tokenisation and before "
                   "BPE (like clean-corpus-n); the paper used 30 and 50.")
@click.option("--max-ratio", type=float, default=9.0, show_default=True, metavar="R",
              help="Drop training pairs whose token-length ratio (either way) is above R (clean-corpus-n's ratio).")
@click.option("--dedup", is_flag=True, help="Drop repeated training pairs (identical raw source and target).")
@click.option("--bpe", type=int, default=None, metavar="MERGES",
              help="Use subwords: learn MERGES BPE merge operations (subword-nmt) on the tokenised, cleaned "
                   "training split, joint over both languages unless --bpe-separate. Without it: words.")
@click.option("--bpe-separate", is_flag=True, help="Learn separate BPE codes for each language instead of joint codes.")
@click.option("--bpe-vocab-threshold", type=int, default=None, metavar="N",
              help="subword-nmt's --vocabulary-threshold: when applying BPE, split further any subword seen fewer "
                   "than N times in that language's BPE-segmented training side.")
@click.option("--bpe-min-frequency", type=int, default=2, show_default=True, metavar="N",
              help="Stop learning merges when no pair occurs N times (subword-nmt --min-frequency).")
@click.option("--src-vocab-size", type=int, default=None, metavar="N",
              help="Keep the N most frequent source tokens, specials included; the rest become <unk>. "
                   "Default: 30000 with words (the paper), every subword with --bpe.")
@click.option("--tgt-vocab-size", type=int, default=None, metavar="N", help="Same as --src-vocab-size for the target.")
@click.option("--vocab-min-count", type=int, default=1, show_default=True, metavar="N",
              help="Leave out of the vocabularies tokens seen fewer than N times in training.")
@click.option("--workers", type=int, default=None, metavar="N",
              help="Processes for tokenisation/BPE (line order is kept). Default: all cores.")
@click.option("--chunk-size", type=int, default=500, show_default=True, metavar="N",
              help="Lines per work unit sent to a worker.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars, summary table or warnings on stderr.")
def preprocess_cmd(src_lang, tgt_lang, train, valid, test, dest, force, input_format, no_normalize_punct,
                   aggressive_dash_splits, lowercase, protect, truecase, max_len, max_ratio, dedup, bpe, bpe_separate,
                   bpe_vocab_threshold, bpe_min_frequency, src_vocab_size, tgt_vocab_size, vocab_min_count,
                   workers, chunk_size, quiet) -> None:
    """Normalise, tokenise, clean, apply BPE and binarise parallel text.

    \b
    Example:
      nmtkit preprocess --src-lang en --tgt-lang fr --train data/train --valid data/dev \\
        --test data/test --bpe 30000 --max-len 50 --dest work/data
    """
    quiet_warnings(quiet)
    from nmtkit.preprocess import PreprocessConfig, preprocess

    config = PreprocessConfig(
        src_lang=src_lang, tgt_lang=tgt_lang, train=train, valid=valid, dest=dest, test=tuple(test), force=force,
        input_format=input_format, normalize_punct=not no_normalize_punct,
        aggressive_dash_splits=aggressive_dash_splits, lowercase=lowercase, protect=tuple(protect), truecase=truecase, max_len=max_len,
        max_ratio=max_ratio, dedup=dedup, bpe=bpe, bpe_separate=bpe_separate, bpe_vocab_threshold=bpe_vocab_threshold,
        bpe_min_frequency=bpe_min_frequency, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size,
        vocab_min_count=vocab_min_count, workers=workers if workers is not None else available_cores(),
        chunk_size=chunk_size,
    )
    console = make_console()
    if progress_enabled(quiet):
        with _RichProgress(console) as bars:
            manifest = preprocess(config, bars)
    else:
        manifest = preprocess(config)
    if not quiet:
        _summary(console, manifest)
