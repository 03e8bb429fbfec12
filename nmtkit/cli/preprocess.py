"""`nmtkit preprocess`: options -> PreprocessConfig -> nmtkit.preprocess.run; progress and summary on stderr."""
from __future__ import annotations

import contextlib
from typing import Any

import click

from nmtkit.cli.common import (
    config_options,
    config_values,
    make_console,
    quiet_option,
    quiet_warnings,
    stage_bars,
    stage_progress,
)
from nmtkit.preprocess import PreprocessConfig


def _bars(console) -> contextlib.AbstractContextManager:
    """A bar per stage (tokenise, clean, learn BPE, binarise, ...) with a spinner."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return stage_bars(console, [SpinnerColumn(), TextColumn("{task.description:<26}"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn()])


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
    # as wide as the table needs: a narrow terminal would cut its numbers short ("6,2…")
    console.width = max(console.width, console.measure(table, options=console.options.update_width(10**4)).maximum)
    console.print(table)
    dropped = manifest["splits"]["train"]["dropped"]
    console.print("dropped from train: " + (", ".join(f"{r} {n:,}" for r, n in dropped.items() if n) or "nothing"))
    v = manifest["vocab"]
    bpe = manifest["pipeline"].get("bpe")
    if bpe:
        from nmtkit.text.bpe import count_merges

        codes = {"src": bpe["codes"], "tgt": bpe["codes"]} if isinstance(bpe["codes"], str) else bpe["codes"]
        learned = {side: count_merges(c) for side, c in codes.items()}
        if len(set(learned.values())) > 1:  # separate codes may stop at different counts: say each
            merges = f"{learned['src']:,} {src} / {learned['tgt']:,} {tgt} of {bpe['merges']:,}"
        else:
            n = learned["src"]
            merges = f"{bpe['merges']:,}" if n == bpe["merges"] else f"{n:,} of {bpe['merges']:,}"
        kind = f"BPE {merges} merges, {'joint' if bpe['joint'] else 'separate'}"
    else:
        kind = "words"
    console.print(f"vocabularies ({kind}): {v['src']} {v['src_size']:,}, {v['tgt']} {v['tgt_size']:,} entries")


@click.command("preprocess")
@config_options(PreprocessConfig)
@quiet_option("No progress bars, summary table or warnings on stderr")
def preprocess_cmd(quiet: bool, **options: Any) -> None:
    """Normalise, tokenise, clean, apply BPE and binarise parallel text.

    \b
    Example:
      nmtkit preprocess --src-lang en --tgt-lang fr --train data/train --valid data/dev \\
        --test data/test --bpe 30000 --max-len 50 --dest work/data
    """
    quiet_warnings(quiet)
    from nmtkit import preprocess

    config = PreprocessConfig(**config_values(PreprocessConfig, options))
    console = make_console()
    with stage_progress(quiet, lambda: _bars(console)) as progress:
        manifest = preprocess.run(config, progress)
    if not quiet:
        _summary(console, manifest)
