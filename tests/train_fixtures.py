"""Helpers for the training tests: a tiny synthetic data directory and tiny model sizes.

The task is learnable in a few dozen updates: the target is the source reversed, with each
source word w<k> translated to v<k>.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from nmtkit.data.binarized import write_split
from nmtkit.data.manifest import new_manifest
from nmtkit.models.presets import ModelOverrides
from nmtkit.text.vocab import SPECIALS, Vocab
from nmtkit.train.config import TrainConfig, TrainOptions

N_WORDS = 8
TINY_MODEL = dict(emb_dim=16, enc_hidden=16, dec_hidden=24, att_hidden=16, maxout=8, init="default")
TINY_OVERRIDES = ModelOverrides(**TINY_MODEL)  # the same sizes as `nmtkit train`'s options


def make_pairs(n: int, seed: int, max_len: int = 6) -> list[tuple[list[int], list[int]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(1, max_len + 1))
        src = [int(x) + len(SPECIALS) for x in rng.integers(0, N_WORDS, size=length)]
        out.append((src, src[::-1]))
    return out


def make_varied_pairs(n: int, seed: int, max_len: int = 10, n_long: int = 0, long_len: int = 24
                      ) -> list[tuple[list[int], list[int]]]:
    """Pairs of every shape case: target as long as the source (T == S), shorter, longer, length 1,
    and `n_long` long pairs (a small token budget makes each a batch of one)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        length = long_len if k < n_long else int(rng.integers(1, max_len + 1))
        src = [int(x) + len(SPECIALS) for x in rng.integers(0, N_WORDS, size=length)]
        tgt = (src[::-1] * 2)[: max(1, length + int(rng.integers(-2, 3)))]
        out.append((src, tgt))
    return out


def make_data_dir(path: Path, n_train: int = 240, n_valid: int = 24, max_len: int = 6,
                  pipeline: bool = True, pairs: dict[str, list] | None = None) -> Path:
    """A data directory as `nmtkit preprocess` writes it (manifest, vocabularies, splits);
    `pairs` ({"train": [...], "valid": [...]}) replaces the reversal task's pairs."""
    path.mkdir(parents=True, exist_ok=True)
    src_vocab = Vocab(list(SPECIALS) + [f"w{k}" for k in range(N_WORDS)])
    tgt_vocab = Vocab(list(SPECIALS) + [f"v{k}" for k in range(N_WORDS)])
    src_vocab.save(path / "vocab.en.txt")
    tgt_vocab.save(path / "vocab.fr.txt")
    splits = {}
    for name, n, seed in (("train", n_train, 1), ("valid", n_valid, 2)):
        split = pairs[name] if pairs is not None else make_pairs(n, seed, max_len)
        write_split(path, name, "en", [s for s, _ in split])
        write_split(path, name, "fr", [t for _, t in split])
        splits[name] = {"lines": len(split), "src_tokens": sum(len(s) for s, _ in split),
                        "tgt_tokens": sum(len(t) for _, t in split)}
    pipe = {}
    if pipeline:
        from nmtkit.text.pipeline import TextPipeline

        pipe = TextPipeline("en", "fr").to_dict()
    manifest = new_manifest("en", "fr", {"src": "vocab.en.txt", "tgt": "vocab.fr.txt"}, pipeline=pipe, splits=splits,
                            settings={})
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return path


def tiny_options(**changes) -> TrainOptions:
    """Train options for a fast CPU run on the tiny data (explicit, so presets do not matter)."""
    opts = dict(arch="rnnsearch", optimizer="adam", lr=0.01, batch_size=16, sort_pool=64, max_len=20,
                max_updates=20, valid_every=10, save_every=10, log_every=5, valid_bleu_samples=8,
                threads=1, seed=3, device="cpu")
    opts.update(changes)
    return TrainOptions(**opts)



def records(run: Path, kind: str) -> list[dict]:
    """The metrics.jsonl records of one kind ("train" or "valid") of a run directory."""
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["kind"] == kind]


def tiny_config(**changes) -> TrainConfig:
    """The TrainConfig of `tiny_options` with `changes` (None unsets a field), for the tests that
    build a trainer themselves instead of through `run_training`."""
    return TrainConfig.from_dict({**tiny_options().given(), **changes})

