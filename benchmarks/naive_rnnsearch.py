"""A straightforward step-by-step RNNsearch, the baseline of benchmarks/train_speed.py.

Same sizes and same equations as nmtkit.models.rnnsearch (Bahdanau et al. 2015), written the
way a tutorial would, with all projections inside the decoder loop (the baseline's definition): the encoder is the same packed bidirectional nn.GRU, but every step embeds its
input token, computes U_a h_j and W_a s_{i-1}, the attention, runs an nn.GRUCell on
[E y_{i-1}; c_i], computes the deep output, the maxout, the full vocabulary projection and the
log-softmax; the loss is the NLL of the stacked log-probabilities.

`precompute_keys=True` gives the stronger baseline that computes U_a h_j once per batch (the
one optimisation the paper itself spells out). Not used by nmtkit; it exists to show what the
time-batched decoder of docs/design.md (convention 4) buys.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class NaiveRNNSearch(nn.Module):
    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, emb_dim: int, enc_hidden: int,
                 dec_hidden: int, att_hidden: int, maxout: int, dropout: float = 0.0,
                 precompute_keys: bool = False, **_):
        super().__init__()
        self.precompute_keys = precompute_keys
        m, n, d = emb_dim, enc_hidden, dec_hidden
        self.src_embed = nn.Embedding(src_vocab_size, m, padding_idx=0)
        self.encoder = nn.GRU(m, n, batch_first=True, bidirectional=True)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, m, padding_idx=0)
        self.W_s = nn.Linear(n, d)
        self.W_a = nn.Linear(d, att_hidden, bias=False)
        self.U_a = nn.Linear(2 * n, att_hidden, bias=False)
        self.v_a = nn.Linear(att_hidden, 1, bias=False)
        self.cell = nn.GRUCell(m + 2 * n, d)
        self.U_o = nn.Linear(d, 2 * maxout)
        self.V_o = nn.Linear(m, 2 * maxout, bias=False)
        self.C_o = nn.Linear(2 * n, 2 * maxout, bias=False)
        self.W_o = nn.Linear(maxout, tgt_vocab_size)
        self.drop = nn.Dropout(dropout)
        self.n = n

    def loss(self, src: Tensor, src_lens: Tensor, tgt_in: Tensor, tgt_out: Tensor):
        """(summed NLL, summed NLL, number of target tokens), like Seq2Seq.loss."""
        src = F.pad(src, (0, 1))
        src[torch.arange(src.size(0)), src_lens] = 3  # EOS, as nmtkit's model does
        lens = src_lens + 1
        emb = self.drop(self.src_embed(src))
        out, _ = self.encoder(pack_padded_sequence(emb, lens, batch_first=True, enforce_sorted=False))
        ann, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        mask = torch.arange(src.size(1))[None] < lens[:, None]
        keys = self.U_a(ann) if self.precompute_keys else None
        s = torch.tanh(self.W_s(ann[:, 0, self.n :]))
        log_probs = []
        for i in range(tgt_in.size(1)):
            ey = self.drop(self.tgt_embed(tgt_in[:, i]))
            if not self.precompute_keys:
                keys = self.U_a(ann)
            e = self.v_a(torch.tanh(self.W_a(s).unsqueeze(1) + keys)).squeeze(2)
            alpha = F.softmax(e.float().masked_fill(~mask, float("-inf")), dim=-1)
            c = torch.bmm(alpha.unsqueeze(1).to(ann.dtype), ann).squeeze(1)
            t = self.U_o(s) + self.V_o(ey) + self.C_o(c)
            t = self.drop(t.view(t.size(0), -1, 2).amax(-1))
            log_probs.append(F.log_softmax(self.W_o(t).float(), dim=-1))
            s = self.cell(torch.cat([ey, c], dim=-1), s)
        lp = torch.stack(log_probs, dim=1)
        nll = F.nll_loss(lp.flatten(0, 1), tgt_out.flatten(), ignore_index=0, reduction="sum")
        return nll, nll.detach(), int(tgt_out.ne(0).sum())
