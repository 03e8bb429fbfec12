"""Kernel launches per training step and per beam-search step, counted on the CPU.

On a GPU every launched op costs a kernel launch plus Python/dispatcher work, about 5-10 us,
whatever its size. A step that launches thousands of small ops is bounded by launches, not by
arithmetic: its ceiling is about tokens_per_step / (ops_per_step * launch_cost). This benchmark
counts those ops with torch.profiler on the CPU, so it runs on any machine.

What counts as a kernel-launching op: see devtools/launches.py, which counts them.
CPU caveat: on the CPU, nn.GRU / nn.LSTM (the packed encoders) run as a loop of aten ops per
time step, while on a GPU cuDNN runs each layer in a few kernels. The column "rnn fwd" gives
the leaf ops inside aten::gru / aten::lstm in the forward pass (their backward is not
attributed); on a GPU most of those (and of their backward) disappear. The decoder's own
recurrence is a Python loop on every device and counts the same on a GPU.

Workload (fixed, synthetic, seeded): 1,600 pairs whose source and target lengths are drawn
uniformly from 27..33 tokens (mean 30; numpy default_rng(0)), token ids uniform over the
vocabulary's non-special ids; vocabularies of 30,000 types (8,000 for `small`), as the presets
say. A training batch is the first 80 pairs (the paper's batch: 2,469 target tokens with EOS,
34 decoder steps), or, for `--max-tokens 8000`, the 235 leading pairs whose padded tokens
(pairs * max(source, target + 1)) fit in 8,000 (7,274 target tokens). The step is the
trainer's own `train_step` (forward, backward, clip_grad_norm_, optimiser step, zero_grad,
loss accumulation, the finiteness check) with the optimiser the trainer builds for the preset
(Adadelta foreach for the paper presets, torch's one-kernel Adam for small and lstm-attention), counted
after one warm-up step (which allocates the optimiser state).

Beam-search step: (ops of `beam_search` over the first 80 sources at beam 12, each sentence
limited to its reference length, minus the ops of encode + init_state) / iterations of the
search loop. The model is as initialised (untrained, so hypotheses end at their length limit,
with few early EOS); the first iteration (B rows, then K copies) is averaged in. The column
"reads" gives the `_local_scalar_dense` (scalar host reads) among the ops: on a GPU tensor each
is a synchronising copy. `HostReads` counts every kind of host read (`.item()`, `.tolist()`,
`.cpu()`, `bool(t)`, `int(t)`, `nonzero`, boolean-mask indexing) by the Python calls that make
them, whatever the device: the training step makes one (the finiteness check) and a beam-search
step one (tests/test_host_reads.py; the search keeps its bookkeeping in numpy).

`--quick` keeps vocabularies, batches and lengths but sets every hidden size to 64 (op counts
do not depend on widths, only on lengths, batch and vocabulary, which sets the chunks of the
loss; checked on rnnsearch-50: same counts at full widths).

  python benchmarks/launches.py            # full widths (tens of minutes on 2 shared cores)
  python benchmarks/launches.py --quick    # widths 64 (several minutes)
  make bench QUICK=1                       # all benchmarks, quick

Baseline: main at 2a49aed, torch 2.13.0 CPU, `python benchmarks/launches.py --quick --top 0`
(the full-width run gives the same training counts for rnnsearch-50: 4,178 and 4,412). "bwd":
ops in the backward pass; "rnn fwd": ops inside the CPU nn.GRU/nn.LSTM forward (a few cuDNN
kernels on a GPU); ceilings in target tokens/s (for the beam step, in tokens added per second,
one per sentence per step); "reads": host reads (see above).

  preset          what                     pairs tgt tok   ops reads  bwd rnn fwd ops/tok  tok/s@5us tok/s@10us
  small           beam 12 step, 80 sents      80      80   215   101    -      -    2.68     74,541     37,270
  small           train, batch 80             80    2470  4099     1 2550    758    1.66    120,517     60,259
  small           train, max-tokens 8000     235    7270  4151     1 2550    758    0.57    350,277    175,139
  rnnsearch-50    beam 12 step, 80 sents      80      80   215   101    -      -    2.68     74,551     37,276
  rnnsearch-50    train, batch 80             80    2469  4178     1 2547    758    1.69    118,191     59,095
  rnnsearch-50    train, max-tokens 8000     235    7274  4412     1 2547    758    0.61    329,737    164,869
  rnnencdec-50    beam 12 step, 80 sents      80      80   178   101    -      -    2.22     90,051     45,026
  rnnencdec-50    train, batch 80             80    2469  2609     3 1679    378    1.06    189,268     94,634
  rnnencdec-50    train, max-tokens 8000     235    7274  2843     3 1679    378    0.39    511,713    255,856
  lstm-attention  beam 12 step, 80 sents      80      80   182   101    -      -    2.28     87,813     43,906
  lstm-attention  train, batch 80             80    2469  4994     3 3201    769    2.02     98,879     49,439
  lstm-attention  train, max-tokens 8000     235    7274  5228     3 3201    769    0.72    278,271    139,135

With the recurrences' step bodies compiled (`--quick --fuse on`, i.e. `nmtkit train --fuse on`;
not the default on any device: `--fuse auto` runs the eager step bodies):

  preset          what                     pairs tgt tok   ops reads  bwd rnn fwd ops/tok  tok/s@5us tok/s@10us
  small           beam 12 step, 80 sents      80      80   193   101    -      -    2.41     82,851     41,426
  small           train, batch 80             80    2470   572     1  277      0    0.23    863,636    431,818
  small           train, max-tokens 8000     235    7270   581     1  277      0    0.08  2,502,582  1,251,291
  rnnsearch-50    beam 12 step, 80 sents      80      80   185   101    -      -    2.31     86,432     43,216
  rnnsearch-50    train, batch 80             80    2469   579     1  274      0    0.23    852,850    426,425
  rnnsearch-50    train, max-tokens 8000     235    7274   597     1  274      0    0.08  2,436,851  1,218,425
  rnnencdec-50    beam 12 step, 80 sents      80      80   172   101    -      -    2.15     93,087     46,543
  rnnencdec-50    train, batch 80             80    2469  1501     1 1014      0    0.61    328,981    164,490
  rnnencdec-50    train, max-tokens 8000     235    7274  1519     1 1014      0    0.21    957,735    478,868
  lstm-attention  beam 12 step, 80 sents      80      80   169   101    -      -    2.11     94,724     47,362
  lstm-attention  train, batch 80             80    2469  4882     3 3201    769    1.98    101,147     50,574
  lstm-attention  train, max-tokens 8000     235    7274  4900     3 3201    769    0.67    296,898    148,449

Later, at 4d846c8 (`--quick --presets rnnsearch-50 --no-beam --top 0`), training steps of
rnnsearch-50, batch 80 / max-tokens 8000: fp32 eager 4,320 / 4,368, fp32 fused 617 / 635,
bf16 eager 5,452 / 5,984, bf16 fused 833 / 1,061 (`--precision bf16`).

rnnsearch-50 at batch 80: 4,178 -> 579 launches (7.2x fewer by this count). Per decoder step,
forward: s W_q, one fused attention+gates kernel, U (r s), one fused update kernel; backward:
one fused kernel, two products, one fused kernel; the keys' gradient, the loss chunks (2^26
logits each) and the deep output's maxout are one kernel each. RNNencdec's decoder and the
LSTM model's recurrences are not fused yet (their encoders: RNNencdec's is).

Under bf16 autocast (`--quick --precision bf16`) rnnsearch-50 launches 5,082 ops at batch 80
and 5,343 at 8,000 tokens: the casts add about 1,100 copy_ (1,849 in all).

Outside the models the step is already lean: gradient clipping (foreach norm and scale) plus
the finiteness check plus Adadelta (foreach) take 25 launches, or 15 with torch's one-kernel Adam, whatever
the number of parameter tensors. The rest is the decoder recurrence (34 steps forward and
backward) and the CPU's per-step GRU/LSTM encoder.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repo root: nmtkit, devtools/ and benchmarks/ import from it

from devtools.launches import (  # noqa: E402
    LAUNCH_US,
    SCALAR_READ,
    Launches,
    count_launches,
    enable_inductor_kernel_profile,
)

# ---- the workloads ---------------------------------------------------------------------------
PRESETS = ("small", "rnnsearch-50", "rnnencdec-50", "lstm-attention")
LENGTHS = (27, 33)  # source and target lengths, uniform, inclusive
N_PAIRS = 1600
BEAM = 12
QUICK_WIDTH = 64
WIDTH_KEYS = ("emb_dim", "enc_hidden", "dec_hidden", "att_hidden", "maxout")


def vocab_size(preset: str) -> int:
    from nmtkit.train.presets import preset as get_preset

    return get_preset(preset)[1]["tgt_vocab_size"]


def write_data_dir(path: Path, vocab: int, seed: int = 0, lengths: tuple[int, int] = LENGTHS,
                   n_pairs: int = N_PAIRS) -> Path:
    """A data directory as `nmtkit preprocess` writes it: `n_pairs` seeded random pairs whose
    sides are `lengths` (inclusive) tokens long."""
    import json

    import numpy as np

    from nmtkit.data.binarized import write_split
    from nmtkit.data.manifest import new_manifest
    from nmtkit.text.pipeline import TextPipeline
    from nmtkit.text.vocab import SPECIALS, Vocab

    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for lang in ("src", "tgt"):
        Vocab(list(SPECIALS) + [f"{lang}{k}" for k in range(vocab - len(SPECIALS))]).save(path / f"vocab.{lang}.txt")
    for split, n in (("train", n_pairs), ("valid", 8)):
        for lang in ("src", "tgt"):
            lens = rng.integers(lengths[0], lengths[1] + 1, size=n)
            write_split(path, split, lang, [rng.integers(len(SPECIALS), vocab, size=int(k)).tolist() for k in lens])
    manifest = new_manifest("src", "tgt", {"src": "vocab.src.txt", "tgt": "vocab.tgt.txt"},
                            pipeline=TextPipeline("src", "tgt").to_dict(), settings={})
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return path


def make_context(preset: str, data_dir: Path, run_dir: Path, max_tokens: int | None, quick: bool, threads: int,
                 precision: str = "fp32", fuse: str = "off", device: str = "cpu", cuda_graphs: str = "auto"):
    """The training context `nmtkit train --preset <preset>` builds (its optimiser included)."""
    from nmtkit.train.config import TrainConfig, training_defaults
    from nmtkit.train.context import TrainContext
    from nmtkit.train.data import DataDir
    from nmtkit.train.presets import resolve_model

    data = DataDir.open(data_dir)
    widths = {k: QUICK_WIDTH for k in WIDTH_KEYS} if quick else {}
    arch, model_config = resolve_model(None, preset, {}, len(data.src_vocab), len(data.tgt_vocab))
    model_config.update({k: v for k, v in widths.items() if k in model_config})
    values = training_defaults(arch, preset)
    values.update(arch=arch, preset=preset, max_updates=1, valid_bleu_samples=0, device=device, threads=threads,
                  precision=precision, fuse=fuse, cuda_graphs=cuda_graphs)
    if max_tokens is not None:
        values.update(batch_size=None, max_tokens=max_tokens)
    return TrainContext(TrainConfig.from_dict(values), data, run_dir, arch, model_config)


def fixed_batch(ctx, max_tokens: int | None):
    """The first 80 pairs, or the most leading pairs whose padded tokens fit in max_tokens."""
    import numpy as np

    if max_tokens is None:
        return np.arange(80)
    src, tgt = ctx.train_data.src.lengths, ctx.train_data.tgt.lengths
    cost = np.maximum.accumulate(np.maximum(src, tgt + 1)) * np.arange(1, len(src) + 1)
    return np.arange(int(np.searchsorted(cost, max_tokens, side="right")))


def train_step_launches(ctx, batch) -> tuple[Launches, int]:
    """(launches of one steady-state `train_step`, target tokens of the batch incl. EOS)."""
    from nmtkit.train.context import train_step

    for _ in range(2):  # the first step allocates the optimiser state; count the second
        launches, ok = count_launches(train_step, ctx, [batch])
        assert ok, "the synthetic step was skipped (non-finite loss)"
    return launches, ctx.target_tokens(batch)


def beam_step_launches(model, data, n: int = 80) -> tuple[float, int]:
    """(launches per iteration of the beam-search loop, of which host reads, both averaged;
    iterations run)."""
    import numpy as np
    import torch

    from nmtkit.data.binarized import collate
    from nmtkit.decode.search import beam_search

    src_a, src_o = np.asarray(data.src.ids), np.asarray(data.src.offsets)
    tgt_a, tgt_o = np.asarray(data.tgt.ids), np.asarray(data.tgt.offsets)
    src, src_lens, _, _ = (torch.from_numpy(a) for a in collate(src_a, src_o, tgt_a, tgt_o, np.arange(n)))
    limit = torch.as_tensor(np.asarray(data.tgt.lengths[:n]), dtype=torch.long)
    was_training = model.training
    model.eval()
    steps = [0]
    step = model.step

    def counting_step(*args, **kw):
        steps[0] += 1
        return step(*args, **kw)

    def encode_init():
        with torch.inference_mode():
            return model.init_state(model.encode(src, src_lens))

    model.step = counting_step
    try:
        enc, _ = count_launches(encode_init)
        total, _ = count_launches(beam_search, model, src, src_lens, beam=BEAM, max_len=limit)
    finally:
        del model.step
        model.train(was_training)
    reads = total.by_op[SCALAR_READ] - enc.by_op[SCALAR_READ]
    return (total.total - enc.total) / steps[0], reads / steps[0], steps[0]


# ---- the report ------------------------------------------------------------------------------
def measure(preset: str, quick: bool, threads: int, beam: bool, top: int, precision: str = "fp32",
            fuse: str = "off") -> list[dict]:
    """Rows for one preset: the batch of 80, the 8000-token batch, and the beam-search step."""
    import torch

    torch.set_num_threads(threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = write_data_dir(Path(tmp) / "data", vocab_size(preset))
        for max_tokens in (None, 8000):
            ctx = make_context(preset, data_dir, Path(tmp) / f"run{max_tokens}", max_tokens, quick, threads,
                               precision, fuse)
            try:
                if beam and max_tokens is None:  # the untrained model, as initialised
                    per_step, reads, steps = beam_step_launches(ctx.model, ctx.train_data)
                    rows.append(dict(preset=preset, what=f"beam {BEAM} step, 80 sents", pairs=80,
                                     tokens=80, ops=per_step, reads=reads, steps=steps))
                batch = fixed_batch(ctx, max_tokens)
                launches, tokens = train_step_launches(ctx, batch)
                label = "batch 80" if max_tokens is None else f"max-tokens {max_tokens}"
                rows.append(dict(preset=preset, what=f"train, {label}", pairs=len(batch), tokens=tokens,
                                 launches=launches))
            finally:
                ctx.close()
    for r in rows:
        print_row(r, top)
    return rows


HEADER = (f"{'preset':15s} {'what':24s} {'pairs':>5s} {'tgt tok':>7s} {'ops':>7s} {'reads':>6s} {'bwd':>6s} "
          f"{'rnn fwd':>7s} "
          f"{'ops/tok':>7s} " + " ".join(f"{'tok/s@' + format(us, 'g') + 'us':>11s}" for us in LAUNCH_US))


def print_row(r: dict, top: int = 0) -> None:
    """One table line: ops per step and per target token, launch-bound ceilings in tokens/s.

    For the beam-search step, 'tgt tok' is the sentences (each step extends every one by a token)."""
    launches: Launches | None = r.get("launches")
    ops = launches.total if launches is not None else r["ops"]
    reads = launches.by_op[SCALAR_READ] if launches is not None else r["reads"]
    bwd = f"{launches.backward:6d}" if launches is not None else f"{'-':>6s}"
    rnn = f"{launches.rnn_forward:7d}" if launches is not None else f"{'-':>7s}"
    ceil = " ".join(f"{r['tokens'] / (ops * us * 1e-6):11,.0f}" for us in LAUNCH_US)
    print(f"{r['preset']:15s} {r['what']:24s} {r['pairs']:5d} {r['tokens']:7d} {ops:7.0f} {reads:6.0f} {bwd} {rnn} "
          f"{ops / r['tokens']:7.2f} {ceil}", flush=True)
    if launches is not None and top:
        print("    top ops: " + ", ".join(f"{n[6:] if n.startswith('aten::') else n} {c}"
                                          for n, c in launches.by_op.most_common(top)), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", default=bool(os.environ.get("NMTKIT_BENCH_QUICK")),
                    help="hidden sizes 64 (same counts, a minute instead of several)")
    ap.add_argument("--presets", default=",".join(PRESETS), help="comma-separated, default all four")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="training step under bf16 autocast counts its casts too (the beam step is fp32)")
    ap.add_argument("--fuse", default="off", choices=["off", "on"],
                    help="train (and decode) with the recurrences' step bodies compiled (nmtkit train --fuse)")
    ap.add_argument("--no-beam", action="store_true", help="skip the beam-search step")
    ap.add_argument("--top", type=int, default=8, help="show the N most frequent ops of each step")
    args = ap.parse_args()
    enable_inductor_kernel_profile()
    print(f"kernel-launching ops per step ({'--quick: widths 64' if args.quick else 'full widths'}, {args.precision}, "
          f"--fuse {args.fuse}; ceiling = target tokens/s if each op costs 5 or 10 us)")
    print(HEADER)
    for preset in args.presets.split(","):
        measure(preset, args.quick, args.threads, not args.no_beam, args.top, args.precision, args.fuse)


if __name__ == "__main__":
    main()
