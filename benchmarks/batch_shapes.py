"""How full one epoch's minibatches are, and how many shapes they give the CUDA-graph path.

For a data directory (`nmtkit preprocess` output) and each batching given, over one epoch's plan:
the number of minibatches, the distinct (B, T, S) shapes once padded as the graphed recurrence
pads them (`nmtkit.models.fast.fusion.bucket`), and the share of real target cells, `pairs x
(longest target + 1)` per minibatch, before and after that padding. No training: the plan alone.

    python benchmarks/batch_shapes.py DATA_DIR [--src-lang en --tgt-lang fr]
"""
from __future__ import annotations

import argparse

from nmtkit.data.binarized import BatchingConfig, ParallelData, epoch_batches
from nmtkit.models.fast.fusion import bucket

BATCHINGS = ((64, None, 1600), (None, 8000, 1600), (None, 8000, 16000), (None, 8000, 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--src-lang", default="en")
    ap.add_argument("--tgt-lang", default="fr")
    args = ap.parse_args()
    d = ParallelData(args.data, "train", args.src_lang, args.tgt_lang)
    src, tgt = d.src.lengths, d.tgt.lengths
    print(f"{len(src):,} pairs\n\n| batching | batches | padded (B, T, S) shapes | real / padded target cells | "
          "with graph padding |\n|---|---|---|---|---|")
    for batch_size, max_tokens, pool in BATCHINGS:
        plan = epoch_batches(src, tgt, BatchingConfig(batch_size, max_tokens, pool), seed=42, epoch=1)
        shapes, real, padded, graphed = set(), 0, 0, 0
        for b in plan:
            n, t, s = len(b), int(tgt[b].max()) + 1, int(src[b].max()) + 1  # BOS/EOS and the source's EOS
            shapes.add((bucket(n), bucket(t), bucket(s)))
            real += int(tgt[b].sum()) + n
            padded += n * t
            graphed += bucket(n) * bucket(t)
        what = f"{batch_size} pairs" if batch_size else f"--max-tokens {max_tokens}"
        where = "the whole corpus" if pool == 0 else f"pools of {pool:,}"
        print(f"| {what}, {where} | {len(plan):,} | {len(shapes)} | {real / padded:.3f} | {real / graphed:.3f} |")


if __name__ == "__main__":
    main()
