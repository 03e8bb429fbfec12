"""Named model presets: the paper's configurations and a small one for CPUs.

`PRESETS[name] = (arch, model config dict)`; `TRAIN_DEFAULTS[name]` holds the training
settings that belong to the preset's definition (maximum sentence length for the -30/-50
models, the paper's optimiser and batch size), for the trainer to use as defaults. Vocabulary
sizes here are the paper's (30,000); the trainer replaces them with the data's.

Sources: Bahdanau et al. (2015) section 4.2 and appendix B (m=620, n=1000, n'=1000, l=500,
30k vocabularies, Adadelta eps 1e-6 rho 0.95, batches of 80, gradient norm 1, sentences up to
30 or 50 words); Cho et al. (2014) for RNNencdec at the same sizes. "small" is the setup of
../shared/BENCHMARKS.md (embeddings 256, encoder 256 per direction, decoder 512, dropout 0.2,
Adam 1e-3, batches of 64); its alignment (512) and maxout (256) sizes are our choice, and so is
its initialisation and the place of its dropout, taken from issue 13's ablation below:
`init="uniform"`, every weight U(-0.1, 0.1) (OpenNMT-py's `param_init 0.1`), rather than the
paper's N(0, 0.01^2) (with Adam its tiny weights cost the first thousand updates: dev BLEU 5.5 vs
18.4 at update 900 against PyTorch's defaults) or PyTorch's defaults (N(0, 1) embeddings, ~17x
the scale of every other weight); dropout on the deep output t_i only
(`dropout_sites="out"`), not on the embeddings; and the deep output reads the new decoder state
s_i, as section 3.1 writes p(y_i | ...) = g(y_{i-1}, s_i, c_i), not the appendix's s_{i-1}
(`readout="new"`: one more GRU transition between y_{i-1} and the prediction of y_i, at no cost).

Ablation at equal updates (issue 13): the benchmark's BPE'd Tatoeba data (`../shared/peers-bench`,
the nmtkit adapter's preprocessing and training flags: Adam 1e-3, clip 1, batches of 64, dropout
0.2), 1 thread, seed 42, one run per row, each change alone against the preset as it was
(init "default", dropout on src, tgt, out). Dev BLEU from metrics.jsonl: greedy, the first 500
dev sentences, scored on the BPE pieces (the data directory has no BPE model to join them), and
noisy: seed 43 of the unchanged preset moves it by up to 1.5, while the dev loss (per token,
all 2,000 dev sentences) moves by 0.03 at most. Train loss: the mean over updates 901-1000
(in brackets: over 701-750, for the runs stopped at 750).

| change | 250 | 500 | 750 | 1000 updates | dev loss 750 / 1000 | train loss |
|---|---|---|---|---|---|---|
| none (init "default") | 4.08 | 9.32 | 11.99 | 15.63 | 2.693 / 2.464 | 2.715 |
| none, seed 43 | 4.85 | 10.24 | 13.13 | 17.08 | 2.713 / 2.470 | 2.727 |
| init "uniform" (taken) | 3.44 | 10.42 | 15.13 | 17.54 | 2.583 / 2.300 | 2.502 |
| init "uniform-emb" | 0.93 | stopped at 412 | | | 4.157 at 250 (none: 3.750) | |
| --normalize-loss sentences | 3.74 | 9.32 | 12.78 | | 2.693 / - | (3.047) |
| --sort-pool 1000000 (whole corpus) | 4.03 | 9.54 | 12.60 | | 2.734 / - | (2.972) |
| dropout on t_i only (taken) | 4.53 | 10.73 | 14.86 | | 2.584 / - | (2.835) |
| --maxout 512 | 4.91 | 9.99 | 14.29 | | 2.560 / - | (2.883) |
| init "uniform" + dropout on t_i only (the preset now) | 3.94 | 11.36 | 15.53 | 18.09 | 2.513 / 2.231 | 2.397 |

- Loss per sentence instead of per token changes nothing here (dev loss within 0.002 at 250,
  500, 750): with the old init the per-token gradient norm averages 1.2-1.3 and the per-sentence
  one ~12, both above the clipping threshold 1, so both are rescaled to (nearly) the same update.
  With init "uniform" the per-token norm averages ~1.0; the two were not compared again there.
- A whole-corpus length sort (OpenNMT-py's batching) does not learn more per update.
- A 512-unit maxout learns more per update but costs ~40% more arithmetic per target token (by a
  count of the matrix products: W_o over the vocabulary doubles), and the unchanged preset at
  1000 updates (about the same arithmetic) is ahead of it at 750 (dev loss 2.464 vs 2.560).
- Adam's epsilon was not varied: OpenNMT-py 3.5.1 uses 1e-8 too. Input feeding is not RNNsearch.
- Not measured: longer runs without embedding dropout (an epoch here is 2,502 updates; the
  10-minute benchmark made 1,650, the 30-minute recipe 4,559).

Second round, the same setup against the preset of the last row (session 4; 2-core EPYC with
avx512_bf16, so bf16 autocast, two 1-thread runs side by side; dev loss at 250 / 500 / 750 / 1000,
then the benchmark's scoring of the update-1000 checkpoint, beam 5 / greedy):

| change | dev loss 250 / 500 / 750 / 1000 | BLEU beam 5 / greedy at 1000 |
|---|---|---|
| none (the preset of the row above) | 3.804 / 3.053 / 2.510 / 2.233 | 25.26 / 22.47 |
| readout "new" (taken) | 3.680 / 2.920 / 2.383 / 2.124 | 26.47 / 23.78 |
| readout "new", maxout 512 | 3.513 / 2.801 / 2.275 / 2.030 | 27.54 / 24.87 |
| readout "new", Adam lr 2e-3 (not the benchmark's lr; the Tatoeba recipe's) | 3.290 / 2.524 / 2.136 / 1.918 | 28.44 / 24.73 |

- readout "new" costs nothing (the recurrence computes s_T anyway) and learns more at every point.
- maxout 512 again learns more per update, at ~40% more output-layer arithmetic (not taken).
- lr 2e-3 learns the most; the benchmark fixes Adam's lr at 1e-3, the recipe does not.

Benchmark scoring (BPE joined, Moses-detokenised, sacrebleu against raw dev.fr, all 2,000 dev
sentences) at update 1000, greedy / beam 5: init "default" 19.78 / 22.19 (seed 43: 20.31
greedy), init "uniform" 21.94 greedy, the preset now 22.57 / 24.92 (OpenNMT-py in the
benchmark's last run, after 1,060 updates: 23.0 / 26.2).

Precision: the small preset trains with `precision="auto"`, i.e. bf16 autocast (fp32 master
weights) on CPUs with native BF16 (AVX512-BF16, AMX) and on GPUs, fp32 elsewhere. On a 2-core
EPYC with avx512_bf16 a small-preset step took half the CPU time in bf16, and at equal updates
it learned as much (same data and flags as the table, 1 thread: dev loss 3.752 / 3.111 at
updates 250 / 500 against fp32's 3.750 / 3.103; dev BLEU 4.05 / 9.89 against 4.08 / 9.32).
"""
from __future__ import annotations

import copy
from typing import Any

from nmtkit.errors import ConfigError

_PAPER = dict(src_vocab_size=30000, tgt_vocab_size=30000, emb_dim=620, enc_hidden=1000,
              dec_hidden=1000, maxout=500, dropout=0.0, init="paper")
_PAPER_TRAIN = dict(optimizer="adadelta", adadelta_eps=1e-6, adadelta_rho=0.95, lr=1.0,
                    batch_size=80, clip_norm=1.0, sort_batches=20)

PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "rnnsearch-30": ("rnnsearch", dict(_PAPER, att_hidden=1000)),
    "rnnsearch-50": ("rnnsearch", dict(_PAPER, att_hidden=1000)),
    "rnnencdec-30": ("rnnencdec", dict(_PAPER)),
    "rnnencdec-50": ("rnnencdec", dict(_PAPER)),
    "lstm-attention": ("lstm-attention", dict(src_vocab_size=30000, tgt_vocab_size=30000,
                                              emb_dim=256, enc_hidden=256, dec_hidden=512,
                                              dropout=0.3, init="default")),
    "small": ("rnnsearch", dict(src_vocab_size=8000, tgt_vocab_size=8000, emb_dim=256,
                                enc_hidden=256, dec_hidden=512, att_hidden=512, maxout=256,
                                dropout=0.2, init="uniform", dropout_sites="out", readout="new")),
}

TRAIN_DEFAULTS: dict[str, dict[str, Any]] = {
    "rnnsearch-30": dict(_PAPER_TRAIN, max_len=30),
    "rnnsearch-50": dict(_PAPER_TRAIN, max_len=50),
    "rnnencdec-30": dict(_PAPER_TRAIN, max_len=30),
    "rnnencdec-50": dict(_PAPER_TRAIN, max_len=50),
    "lstm-attention": dict(optimizer="adam", lr=1e-3, batch_size=64, clip_norm=5.0, max_len=50),
    "small": dict(optimizer="adam", lr=1e-3, batch_size=64, clip_norm=1.0, max_len=50, precision="auto"),
}


def preset(name: str) -> tuple[str, dict[str, Any]]:
    """(arch, a fresh copy of the model config dict) of a named preset."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset '{name}' (choose from {', '.join(PRESETS)})")
    arch, cfg = PRESETS[name]
    return arch, copy.deepcopy(cfg)


def train_defaults(name: str) -> dict[str, Any]:
    """The training settings that come with a preset (max_len, optimiser, batch size, ...)."""
    if name not in TRAIN_DEFAULTS:
        raise ConfigError(f"unknown preset '{name}' (choose from {', '.join(TRAIN_DEFAULTS)})")
    return copy.deepcopy(TRAIN_DEFAULTS[name])
