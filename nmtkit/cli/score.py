"""`nmtkit score`: BLEU/chrF/TER with signatures, paper-style BLEU, No-UNK subset, BLEU by length.

Only click here; the work is done by plain functions in `nmtkit.score` (imported inside the
command so `nmtkit --help` stays fast). Torch is imported only for `--no-unk -m CHECKPOINT`.
"""
from __future__ import annotations

import click

from nmtkit.devices import available_cores

_TOKENIZERS = ("13a", "intl", "none", "char", "zh", "ja-mecab", "ko-mecab", "spm", "flores101", "flores200")


def _metric_list(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    keys = [k.strip().lower() for k in value.split(",") if k.strip()]
    bad = [k for k in keys if k not in ("bleu", "chrf", "ter")]
    if bad or not keys:
        raise click.BadParameter(f"{', '.join(bad) or 'nothing'}: choose from bleu, chrf, ter (comma-separated)")
    return list(dict.fromkeys(keys))


@click.command("score")
@click.option("--hyp", "hyp_paths", multiple=True, required=True, metavar="FILE",
              help="System output, one detokenised sentence a line ('-' = stdin). Repeat for several systems.")
@click.option("--ref", "-r", "ref_paths", multiple=True, required=True, metavar="FILE",
              help="Reference translation(s), as many lines as each --hyp. Repeat for multiple references.")
@click.option("--label", "labels", multiple=True, metavar="NAME",
              help="Name of each --hyp system, in the same order (default: the file names).")
@click.option("--metrics", default="bleu,chrf,ter", show_default=True, callback=_metric_list,
              help="Comma-separated subset of bleu,chrf,ter.")
@click.option("--tokenize", "-tok", type=click.Choice(_TOKENIZERS), default=None,
              help="sacrebleu BLEU tokeniser (default 13a).")
@click.option("--lowercase", "-lc", is_flag=True, help="Case-insensitive BLEU and chrF (as sacrebleu -lc).")
@click.option("--json", "as_json", is_flag=True, help="Write one JSON object on stdout instead of text.")
@click.option("--paper-bleu", is_flag=True,
              help="Also the BLEU of the 2014-15 papers: multi-bleu.perl on Moses-tokenised, case-sensitive text.")
@click.option("--lang", "tgt_lang", metavar="LANG",
              help="Target language for Moses tokenisation (default: from the --ref file suffix, else en).")
@click.option("--src", "src_path", metavar="FILE", help="Source sentences (raw), for --no-unk and --by-length.")
@click.option("--src-lang", metavar="LANG", help="Source language (default: from the --src file suffix, else en).")
@click.option("--no-unk", is_flag=True,
              help="Also score the paper's 'No UNK' subset: sentences whose source and reference are "
                   "covered by the model's vocabularies. Needs --src and -m or --data.")
@click.option("--model", "-m", "model_path", metavar="CHECKPOINT",
              help="Checkpoint whose pipeline and vocabularies define --no-unk.")
@click.option("--data", "data_dir", metavar="DIR",
              help="Or: an 'nmtkit preprocess' data directory (manifest + vocab files) for --no-unk.")
@click.option("--by-length", is_flag=True, help="BLEU per source-length bucket (paper Figure 2). Needs --src.")
@click.option("--bucket-width", type=click.IntRange(min=1), default=10, show_default=True,
              help="Width of a length bucket in source words.")
@click.option("--max-length", type=click.IntRange(min=1), default=60, show_default=True,
              help="Longer source sentences share one last bucket.")
@click.option("--plot", "plot_path", metavar="FILE.png",
              help="Draw BLEU by length (one line per system) to this PNG (implies --by-length).")
@click.option("--significance", is_flag=True,
              help="Paired bootstrap resampling of each --hyp against the first one; prints p-values.")
@click.option("--bootstrap-samples", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Number of bootstrap resamples.")
@click.option("--seed", type=click.IntRange(min=1), default=12345, show_default=True,
              help="Seed of the bootstrap resampling.")
@click.option("--workers", "-j", type=click.IntRange(min=1), default=None,
              help="Processes for Moses tokenisation [default: all cores].")
def score_cmd(hyp_paths, ref_paths, labels, metrics, tokenize, lowercase, as_json, paper_bleu, tgt_lang,
              src_path, src_lang, no_unk, model_path, data_dir, by_length, bucket_width, max_length,
              plot_path, significance, bootstrap_samples, seed, workers) -> None:
    """Score translations with BLEU, chrF and TER (sacrebleu), with signatures.

    \b
    Examples:
      nmtkit score --hyp out.fr --ref newstest2014.fr
      nmtkit score --hyp out.fr --ref ref.fr --paper-bleu --json
      nmtkit score --hyp search.fr --hyp encdec.fr --label RNNsearch --label RNNencdec \\
          --ref ref.fr --src src.en --by-length --plot bleu_by_length.png
      nmtkit score --hyp search.fr --src src.en --ref ref.fr --no-unk -m run/checkpoint_best.pt
      nmtkit score --hyp base.fr --hyp new.fr --ref ref.fr --significance

    Every --hyp must have as many lines as every --ref (and --src): a mismatch is an error.
    """
    from nmtkit.score import ScoreOptions, render, run_score

    opts = ScoreOptions(
        hyp_paths=list(hyp_paths), ref_paths=list(ref_paths), labels=list(labels), metrics=metrics,
        tokenize=tokenize, lowercase=lowercase, as_json=as_json, paper_bleu=paper_bleu, tgt_lang=tgt_lang,
        src_path=src_path, src_lang=src_lang, no_unk=no_unk, model_path=model_path, data_dir=data_dir,
        by_length=by_length or plot_path is not None, bucket_width=bucket_width, max_length=max_length,
        plot_path=plot_path, significance=significance, bootstrap_samples=bootstrap_samples, seed=seed,
        workers=workers or available_cores(),
    )
    report = run_score(opts, warn=lambda msg: click.echo(f"nmtkit: note: {msg}", err=True))
    click.echo(render(report, as_json), nl=False)
