"""`nmtkit select-data`: pick the in-domain-looking pairs of a general pool (Axelrod et al. 2011)."""
from __future__ import annotations

import click

from nmtkit.cli.common import make_console, progress_enabled, quiet_warnings
from nmtkit.devices import available_cores


@click.command("select-data")
@click.option("--src-lang", required=True, help="Source language code (file suffix), e.g. en.")
@click.option("--tgt-lang", required=True, help="Target language code (file suffix), e.g. fr.")
@click.option("--in-domain", "in_domain", required=True, multiple=True, metavar="PREFIX",
              help="In-domain parallel text PREFIX.{src,tgt}[.gz]; repeat to concatenate.")
@click.option("--pool", required=True, multiple=True, metavar="PREFIX",
              help="General-domain pool PREFIX.{src,tgt}[.gz]; repeat to concatenate (line numbers run on).")
@click.option("--dest", required=True, metavar="PREFIX",
              help="Writes PREFIX.{src,tgt} (selected pairs, pool order, lines as in the pool), "
                   "PREFIX.scores.tsv and PREFIX.summary.json.")
@click.option("--lines", type=int, default=None, help="Budget: number of pairs to keep.")
@click.option("--words", type=int, default=None, help="Budget: source-side tokens to keep.")
@click.option("--fraction", type=float, default=None, help="Budget: fraction of the pool's pairs, in (0, 1].")
@click.option("--order", type=int, default=4, show_default=True, help="n-gram order of the language models.")
@click.option("--method", type=click.Choice(["bilingual", "monolingual", "in-domain"]), default="bilingual",
              show_default=True,
              help="bilingual: [H_in-H_out](src) + [H_in-H_out](tgt) (Axelrod); monolingual: source side "
                   "only (Moore & Lewis); in-domain: H_in(src).")
@click.option("--workers", type=int, default=None, help="Processes for tokenising and scoring [all cores].")
@click.option("--input-format", type=click.Choice(["raw", "tok"]), default="raw", show_default=True,
              help="raw: Moses-normalise and tokenise here; tok: text already tokenised (split on spaces).")
@click.option("--lowercase/--no-lowercase", default=False, show_default=True,
              help="Lowercase tokens for the language models (the output keeps the original lines).")
@click.option("--aggressive-dash-splits", is_flag=True, help="Moses -a: split hyphenated words.")
@click.option("--min-count", type=int, default=1, show_default=True,
              help="In-domain words seen fewer times are <unk> in both LMs' shared vocabulary.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the pool sample for H_out.")
@click.option("--write-arpa", is_flag=True, help="Also write the four LMs as PREFIX.{in,out}.{lang}.arpa.")
@click.option("--force", is_flag=True, help="Overwrite existing outputs.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no warnings on stderr.")
def select_data_cmd(src_lang, tgt_lang, in_domain, pool, dest, lines, words, fraction, order, method, workers,
                    input_format, lowercase, aggressive_dash_splits, min_count, seed, write_arpa, force,
                    quiet) -> None:
    """Select in-domain pairs from a pool by cross-entropy difference (Axelrod et al. 2011).

    Lowest scores first, ties by pool line number, until the budget (exactly one of --lines,
    --words, --fraction) is met. Cross-entropies are per token in bits with </s> counted.
    """
    quiet_warnings(quiet)
    from nmtkit.select.selection import SelectConfig, run_selection

    cfg = SelectConfig(
        src_lang=src_lang, tgt_lang=tgt_lang, in_domain=tuple(in_domain), pool=tuple(pool), dest=dest,
        lines=lines, words=words, fraction=fraction, order=order, method=method,
        workers=workers if workers is not None else available_cores(), input_format=input_format,
        min_count=min_count, seed=seed, lowercase=lowercase, aggressive_dash_splits=aggressive_dash_splits,
        force=force, write_arpa=write_arpa,
    )
    console = make_console()
    if progress_enabled(quiet):
        with _progress(console) as cb:
            summary = run_selection(cfg, cb)
    else:
        summary = run_selection(cfg)
    if not quiet:
        sel = summary["selected"]
        click.echo(f"selected {sel['pairs']} of {summary['pool']['pairs']} pairs "
                   f"({sel['src_tokens']} source tokens) -> {summary['outputs']['src']}, "
                   f"{summary['outputs']['tgt']}", err=True)


class _progress:
    """A rich progress bar per stage, with pairs/s, fed by the library's (stage, done, total) callback."""

    LABELS = {"sample": "sampling pool", "score": "scoring", "write": "writing"}

    def __init__(self, console):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TaskProgressColumn(), TextColumn("{task.fields[rate]} pairs/s"),
                                 TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)
        self.tasks: dict[str, int] = {}

    def __enter__(self):
        self.progress.__enter__()
        return self.update

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def update(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.progress.add_task(self.LABELS.get(stage, stage), total=total, rate="-")
        tid = self.tasks[stage]
        self.progress.update(tid, completed=done)
        speed = self.progress.tasks[tid].speed
        self.progress.update(tid, rate=f"{speed:,.0f}" if speed else "-")
