"""Tiny models and padded random batches shared by the model tests."""
from __future__ import annotations

import torch

from nmtkit.models import build_model

TINY = {
    "rnnsearch": dict(src_vocab_size=11, tgt_vocab_size=13, emb_dim=6, enc_hidden=5,
                      dec_hidden=7, att_hidden=4, maxout=3),
    "rnnencdec": dict(src_vocab_size=11, tgt_vocab_size=13, emb_dim=6, enc_hidden=5,
                      dec_hidden=7, maxout=3),
    "lstm-attention": dict(src_vocab_size=11, tgt_vocab_size=13, emb_dim=6, enc_hidden=5,
                           dec_hidden=7),
}


def tiny_model(arch: str, seed: int = 0, dtype=torch.float64, **over):
    """A tiny model with random (not paper) weights, in float64, eval mode."""
    torch.manual_seed(seed)
    cfg = dict(TINY[arch], init="default", dropout=0.0)
    cfg.update(over)
    model = build_model(arch, cfg).to(dtype)
    with torch.no_grad():  # make every parameter matter (paper init zeroes v_a and biases)
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model.eval()


def random_batch(src_vocab: int = 11, tgt_vocab: int = 13, seed: int = 1,
                 src_lens=(5, 2, 3, 1), tgt_lens=(4, 1, 3, 2)):
    """Padded batch: (src (B,S), src_lens, tgt_in (B,T), tgt_out (B,T), sentences).

    Source ids avoid the specials; tgt_in = [BOS] + y, tgt_out = y + [EOS], padded with 0.
    `sentences` is the list of (src ids, tgt ids) without specials, for the references.
    """
    g = torch.Generator().manual_seed(seed)
    B = len(src_lens)
    S, T = max(src_lens), max(tgt_lens) + 1
    src = torch.zeros(B, S, dtype=torch.long)
    tgt_in = torch.zeros(B, T, dtype=torch.long)
    tgt_out = torch.zeros(B, T, dtype=torch.long)
    sents = []
    for b in range(B):
        x = torch.randint(4, src_vocab, (src_lens[b],), generator=g)
        y = torch.randint(4, tgt_vocab, (tgt_lens[b],), generator=g)
        src[b, : len(x)] = x
        tgt_in[b, : len(y) + 1] = torch.cat([torch.tensor([2]), y])
        tgt_out[b, : len(y) + 1] = torch.cat([y, torch.tensor([3])])
        sents.append((x.tolist(), y.tolist()))
    return src, torch.tensor(src_lens), tgt_in, tgt_out, sents


def random_sources(seed: int = 1, B: int = 7, vocab: int = 22, S: int = 9):
    """A padded source batch for decoding: (src (B, S) ids in 4..vocab-1, the first row of full
    length S, src_lens (B,))."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, S + 1, (B,), generator=g)
    lens[0] = S
    src = torch.zeros(B, S, dtype=torch.long)
    for i, n in enumerate(lens.tolist()):
        src[i, :n] = torch.randint(4, vocab, (n,), generator=g)
    return src, lens
