"""RNNencdec: the encoder-decoder of Cho et al. (EMNLP 2014), "Learning Phrase Representations
using RNN Encoder-Decoder for Statistical Machine Translation", as the baseline of Bahdanau et al.
(2015): same sizes, initialisation and maxout deep output (docs/paper-notes.md).

A one-direction GRU encoder, c = tanh(V h_T), s_0 = tanh(V' c); c enters every decoder gate
and the deep output, which reads s_i, the state that has read y_{i-1} (Cho et al.'s
p(y_t | ...) = g(h_t, y_{t-1}, c), h_t = f(h_{t-1}, y_{t-1}, c)). No attention: `step` and
`decode_features` return all-zero weights in its place, so that beam search and ensembles need
no special case.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from nmtkit.models.base import (
    PAD_ID,
    EncoderOut,
    append_eos,
    apply_init_,
    dropout,
    length_mask,
    on_device,
    paper_init_,
)
from nmtkit.models.fast.accelerated import Accelerated
from nmtkit.models.fast.gru_recurrence import gru_states, last_states
from nmtkit.models.rnnsearch import check_common, maxout_pairs


@dataclass(frozen=True)
class RNNEncDecConfig:
    """Hyper-parameters of RNNencdec; defaults are the paper's (RNNencdec-50 without vocab sizes)."""

    src_vocab_size: int
    tgt_vocab_size: int
    emb_dim: int = 620  # m
    enc_hidden: int = 1000  # n (also the size of c)
    dec_hidden: int = 1000
    maxout: int = 500  # l
    dropout: float = 0.0
    init: str = "paper"
    src_eos: bool = True

    def __post_init__(self) -> None:
        check_common(self, ("src_vocab_size", "tgt_vocab_size", "emb_dim", "enc_hidden",
                            "dec_hidden", "maxout"))


class RNNEncDec(Accelerated):
    """Cho et al. (2014) encoder-decoder with a fixed-length summary c."""

    int8_linears = ("V", "W_in", "U_zr", "U", "C", "U_o", "V_o", "C_o", "W_o")
    has_attention = False

    def __init__(self, config: RNNEncDecConfig, fuse_steps: bool = False):
        super().__init__(fuse_steps=fuse_steps)
        self.config = config
        m, n, d, lo = config.emb_dim, config.enc_hidden, config.dec_hidden, config.maxout
        self.drop = dropout(config.dropout)
        self.src_embed = nn.Embedding(config.src_vocab_size, m, padding_idx=PAD_ID)
        self.encoder = nn.GRU(m, n, batch_first=True)
        self.V = nn.Linear(n, n)  # c = tanh(V h_T)
        self.V_s = nn.Linear(n, d)  # s_0 = tanh(V' c)
        self.tgt_embed = nn.Embedding(config.tgt_vocab_size, m, padding_idx=PAD_ID)
        self.W_in = nn.Linear(m, 3 * d)  # [W_z; W_r; W] E y (+ biases)
        self.U_zr = nn.Linear(d, 2 * d, bias=False)
        self.U = nn.Linear(d, d, bias=False)
        self.C = nn.Linear(n, 3 * d, bias=False)  # [C_z; C_r; C] c
        self.U_o = nn.Linear(d, 2 * lo)
        self.V_o = nn.Linear(m, 2 * lo, bias=False)
        self.C_o = nn.Linear(n, 2 * lo, bias=False)
        self.W_o = nn.Linear(lo, config.tgt_vocab_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        n, d = self.config.enc_hidden, self.config.dec_hidden
        apply_init_(self, self.config.init, paper=lambda: paper_init_(
            self, recurrent=[(self.encoder.weight_hh_l0, n), (self.U_zr.weight, d), (self.U.weight, d)], align=[]))

    def encode(self, src: Tensor, src_lens: Tensor) -> EncoderOut:
        """src (B, S) -> summary c (B, n), and the encoder states (B, S', n) and their mask."""
        if self.config.src_eos:
            src, src_lens = append_eos(src, src_lens)
        emb = self.drop(self.src_embed(src))
        lens = on_device(src_lens, emb.device)
        mask = length_mask(lens, src.size(1))
        if self.fuse_steps:
            states, h_last = gru_states(self.encoder, emb, lens, mask, fuse=True)
        else:  # over the padded batch: a forward GRU's states up to each length are the packed run's
            out, _ = self.encoder(emb)
            states, h_last = out * mask.unsqueeze(2).to(out.dtype), last_states(out, lens)
        c = torch.tanh(self.V(h_last))
        return EncoderOut(annotations=states, keys=None, mask=mask, summary=c, src_eos=self.config.src_eos)

    def encode_for_steps(self, src: Tensor, src_lens: Tensor) -> EncoderOut:
        """`encode`, plus summary_out (C c (B, 3d), C_o c (B, 2l)), the same at every step."""
        enc = self.encode(src, src_lens)
        return dataclasses.replace(enc, summary_out=(self.C(enc.summary), self.C_o(enc.summary)))

    def init_state(self, enc: EncoderOut) -> Tensor:
        """s_0 = tanh(V' c): (B, d)."""
        return torch.tanh(self.V_s(enc.summary)).to(self.V_s.weight.dtype)

    def _update(self, s: Tensor, x_gates: Tensor) -> Tensor:
        """s_i from s_{i-1} (B, d) and the gate inputs [W.. E y + C.. c] (B, 3d)."""
        d = self.config.dec_hidden
        zr = torch.sigmoid(x_gates[:, : 2 * d] + self.U_zr(s))
        z, r = zr[:, :d], zr[:, d:]
        cand = torch.tanh(x_gates[:, 2 * d :] + self.U(r * s))
        return s + z * (cand - s)

    def _inputs(self, enc: EncoderOut, tgt: Tensor) -> tuple[Tensor, Tensor]:
        """Gate inputs (..., 3d) and deep-output inputs (..., 2l) of tokens tgt (B,) or (B, T)."""
        if tgt.dim() == 1 and enc.summary_out is not None:
            c_gates, c_out = enc.summary_out
        else:
            c = enc.summary if tgt.dim() == 1 else enc.summary.unsqueeze(1)
            c_gates, c_out = self.C(c), self.C_o(c)
        stack = self.decode_stacks.get("embedding")
        if stack is not None and tgt.dim() == 1:
            x_gates, x_out = stack(tgt).split(stack.sizes, dim=1)
            return x_gates + c_gates, x_out + c_out
        emb = self.drop(self.tgt_embed(tgt))
        return self.W_in(emb) + c_gates, self.V_o(emb) + c_out

    def int8_stacks(self) -> dict[str, tuple[str | None, tuple[str, ...]]]:
        """A step's products of E y_{i-1} ([W; W_z; W_r; V_o])."""
        return {"embedding": ("tgt_embed", ("W_in", "V_o"))}

    def decode_features(self, enc: EncoderOut, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing. tgt_in (B, T) -> (t (B, T, l), zeros (B, T, S'))."""
        x_gates, x_out = self._inputs(enc, tgt_in)
        s = self.init_state(enc)
        states = []
        for xg in x_gates.unbind(1):  # unbind: one stack in the backward pass
            s = self._update(s, xg)
            states.append(s)
        s_new = torch.stack(states, dim=1)
        no_attn = s_new.new_zeros(s_new.size(0), s_new.size(1), enc.mask.size(1))
        return self.drop(maxout_pairs(self.U_o(s_new) + x_out)), no_attn

    def step_features(self, prev_tokens: Tensor, state: Tensor, enc: EncoderOut
                      ) -> tuple[Tensor, Tensor, Tensor]:
        """y_{i-1} (B,), s_{i-1} (B, d) -> (t_i (B, l), s_i, zeros (B, S'))."""
        x_gates, x_out = self._inputs(enc, prev_tokens)
        s = self._update(state, x_gates)
        return self.drop(maxout_pairs(self.U_o(s) + x_out)), s, state.new_zeros(state.size(0), enc.mask.size(1))

    def output_projection(self) -> nn.Linear:
        return self.W_o
