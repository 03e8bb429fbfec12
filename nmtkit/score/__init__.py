"""Scoring translations: sacrebleu metrics, paper-style BLEU, the "No UNK" subset, BLEU by length.

What `nmtkit score` computes, as plain functions over lists of lines (no torch here, except
`model_text_from_checkpoint`, which reads a checkpoint):

* `metrics`: BLEU, chrF and TER through sacrebleu's metric classes (Post 2018, "A Call for
  Clarity in Reporting BLEU Scores"), each with its reproducibility signature; the BLEU that
  the 2014-15 NMT papers reported (Bahdanau et al. 2015, Table 1; Cho et al. 2014): Moses'
  `multi-bleu.perl` on Moses-tokenised, case-sensitive text. multi-bleu is plain corpus BLEU
  (clipped n-gram precisions for n = 1..4, geometric mean, brevity penalty against the closest
  reference length, shorter on ties, no smoothing), which is exactly sacrebleu's BLEU with
  `tokenize='none'` and `smooth_method='none'` applied to whitespace-joined Moses tokens.
* `subsets`: the paper's "No UNK" column (BLEU on the sentences whose source and reference(s)
  contain no token outside the model's vocabularies) and BLEU per source-length bucket (the
  paper's Figure 2); `plot` draws the latter as a matplotlib chart.
* `significance`: paired bootstrap resampling between systems (Koehn 2004) through
  `sacrebleu.significance`.
* `run`: the whole `nmtkit score` run (`ScoreOptions` -> `run_score` -> a `ScoreReport`);
  `report`: the report object and its two renderings, `format_text` and `format_json`.

Line counts are always checked: sacrebleu truncates silently when hypothesis and reference
differ in length; here that is an error naming both files and their counts.
"""
from nmtkit.score.metrics import (
    BLEU_TOKENIZERS,
    METRICS,
    PAPER_BLEU_LABEL,
    MetricScore,
    corpus_scores,
    guess_lang,
    make_metric,
    moses_tokenize_lines,
    multibleu,
    paper_bleu,
)
from nmtkit.score.plot import plot_by_length
from nmtkit.score.report import ScoreReport, format_json, format_length_table, format_significance, render
from nmtkit.score.run import ScoreOptions, run_score
from nmtkit.score.significance import SignificanceRow, paired_bootstrap
from nmtkit.score.subsets import (
    LengthBucket,
    ModelText,
    bleu_by_length,
    bucket_labels,
    bucket_of,
    model_text_from_checkpoint,
    model_text_from_data_dir,
    no_unk_indices,
    subset,
    vocab_is_bpe,
)

__all__ = [
    "BLEU_TOKENIZERS", "METRICS", "PAPER_BLEU_LABEL", "LengthBucket", "MetricScore", "ModelText", "ScoreOptions",
    "ScoreReport", "SignificanceRow", "bleu_by_length", "bucket_labels", "bucket_of", "corpus_scores",
    "format_json", "format_length_table", "format_significance", "guess_lang", "make_metric",
    "model_text_from_checkpoint", "model_text_from_data_dir", "moses_tokenize_lines", "multibleu",
    "no_unk_indices", "paired_bootstrap", "paper_bleu", "plot_by_length", "render", "run_score", "subset",
    "vocab_is_bpe",
]
