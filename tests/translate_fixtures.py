"""Tiny checkpoints for the decode / translate tests (random RNNsearch, word-level pipeline)."""
from __future__ import annotations

from pathlib import Path

SRC_WORDS = "the cat sat on a mat dog ran in park big small red house . , and is".split()
TGT_WORDS = "le chat assis sur un tapis chien courait dans parc grand petit rouge maison . , et est".split()
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]

TINY = dict(emb_dim=16, enc_hidden=16, dec_hidden=24, att_hidden=12, maxout=8, dropout=0.0, init="default")


def tiny_model(seed: int = 0, src_vocab: int | None = None, tgt_vocab: int | None = None, **over):
    """A random tiny RNNsearch (eval mode) over the test vocabularies; `over` changes config fields."""
    import torch

    from nmtkit.models import build_model

    torch.manual_seed(seed)
    cfg = dict(TINY, src_vocab_size=src_vocab or len(SPECIALS) + len(SRC_WORDS),
               tgt_vocab_size=tgt_vocab or len(SPECIALS) + len(TGT_WORDS), **over)
    return build_model("rnnsearch", cfg).eval(), cfg


def make_checkpoint(path: Path, seed: int = 0, tgt_words: list[str] | None = None, pipeline=None,
                    src_words: list[str] | None = None, model=None, **extra) -> Path:
    """Write a checkpoint (nmtkit.checkpoint.make_checkpoint, as the trainer does) around a random
    tiny model; `extra` overrides fields (e.g. a future format_version)."""
    from nmtkit import checkpoint
    from nmtkit.text.pipeline import TextPipeline
    from nmtkit.train.config import TrainConfig

    src_vocab = SPECIALS + list(src_words or SRC_WORDS)
    tgt_vocab = SPECIALS + list(tgt_words or TGT_WORDS)
    m, cfg = tiny_model(seed, len(src_vocab), len(tgt_vocab))
    if model is not None:
        m = model
        cfg = dict(TINY, src_vocab_size=len(src_vocab), tgt_vocab_size=len(tgt_vocab))
    pipe = pipeline or TextPipeline(src_lang="en", tgt_lang="fr")
    ckpt = checkpoint.make_checkpoint(
        arch="rnnsearch", model_config=cfg, model_state=m.state_dict(), pipeline=pipe.to_dict(), src_lang="en",
        tgt_lang="fr", src_vocab=src_vocab, tgt_vocab=tgt_vocab, train_config=TrainConfig(max_len=50, max_updates=1).to_dict())
    ckpt.update(extra)
    checkpoint.save_checkpoint(ckpt, path)
    return path
