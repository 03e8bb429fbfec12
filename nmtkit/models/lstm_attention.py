"""LSTM encoder-decoder with multiplicative attention and input feeding: the model of seed
`003_...` (the Stanford CS224n NMT assignment; Luong et al. 2015 "general" attention).

Equations in docs/paper-notes.md: h_0, c_0 = W_h, W_c [bwd ; fwd] final encoder states; the
decoder LSTM reads [E y_t ; o_{t-1}], attends with the new h_t, and o_t = dropout(tanh(W_u [a_t ;
h_t])). The decoder state is (h, c, o).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmtkit.models.base import PAD_ID, EncoderOut, apply_init_, dropout, paper_init_
from nmtkit.models.fast.accelerated import Accelerated
from nmtkit.models.fast.quantize import is_quantized
from nmtkit.models.fast.rnnsearch import encode_bigru
from nmtkit.models.rnnsearch import check_common, masked_softmax


@dataclass(frozen=True)
class LSTMAttentionConfig:
    """Hyper-parameters of the LSTM-attention model; defaults: the seed's assignment (one h: dec = enc)."""

    src_vocab_size: int
    tgt_vocab_size: int
    emb_dim: int = 256  # e
    enc_hidden: int = 256  # h per direction
    dec_hidden: int = 256
    dropout: float = 0.3
    init: str = "uniform"
    src_eos: bool = True

    def __post_init__(self) -> None:
        check_common(self, ("src_vocab_size", "tgt_vocab_size", "emb_dim", "enc_hidden", "dec_hidden"))


class LSTMAttention(Accelerated):
    """BiLSTM encoder, input-feeding LSTM decoder with multiplicative attention."""

    # W_h (dtype read) and W_u (read in slices) stay float; W_fo, W_hh: concatenated in training only
    int8_linears = ("W_c", "W_att", "W_y", "W_fo", "W_hh", "W_vocab")

    def __init__(self, config: LSTMAttentionConfig, fuse_steps: bool = False):
        super().__init__(fuse_steps=fuse_steps)
        self.config = config
        m, n, d = config.emb_dim, config.enc_hidden, config.dec_hidden
        self.src_embed = nn.Embedding(config.src_vocab_size, m, padding_idx=PAD_ID)
        self.encoder = nn.LSTM(m, n, batch_first=True, bidirectional=True)
        self.W_h = nn.Linear(2 * n, d, bias=False)
        self.W_c = nn.Linear(2 * n, d, bias=False)
        self.W_att = nn.Linear(2 * n, d, bias=False)  # W_attProj
        self.tgt_embed = nn.Embedding(config.tgt_vocab_size, m, padding_idx=PAD_ID)
        # decoder LSTM over [E y_t ; o_{t-1}], gates [i, f, g, o] as in nn.LSTM
        self.W_y = nn.Linear(m, 4 * d)  # the E y part of W_ih, with the gate biases
        self.W_fo = nn.Linear(d, 4 * d, bias=False)  # the o_{t-1} part of W_ih
        self.W_hh = nn.Linear(d, 4 * d, bias=False)
        self.W_u = nn.Linear(2 * n + d, d, bias=False)  # [a_t ; h_t] -> v_t
        self.W_vocab = nn.Linear(d, config.tgt_vocab_size, bias=False)
        self.drop = dropout(config.dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        n, d = self.config.enc_hidden, self.config.dec_hidden
        apply_init_(self, self.config.init, paper=lambda: paper_init_(
            self, recurrent=[(self.encoder.weight_hh_l0, n), (self.encoder.weight_hh_l0_reverse, n),
                             (self.W_hh.weight, d)], align=[self.W_att.weight]))

    def encode(self, src: Tensor, src_lens: Tensor) -> EncoderOut:
        """-> annotations (B, S', 2n), keys W_attProj h (B, S', d), values W_u[:, :2n] h (B, S', d),
        init (h_0, c_0) each (B, d)."""
        ann, mask, (h_n, c_n) = encode_bigru(self.src_embed, self.encoder, nn.Identity(), src,
                                             src_lens, self.config.src_eos)
        h0 = self.W_h(torch.cat([h_n[1], h_n[0]], dim=-1))
        c0 = self.W_c(torch.cat([c_n[1], c_n[0]], dim=-1))
        values = F.linear(ann, self.W_u.weight[:, : 2 * self.config.enc_hidden])
        return EncoderOut(annotations=ann, keys=self.W_att(ann), mask=mask, init=(h0, c0), values=values,
                          src_eos=self.config.src_eos)

    def init_state(self, enc: EncoderOut) -> tuple[Tensor, Tensor, Tensor]:
        """(h_0, c_0, o_0 = 0), each (B, d)."""
        dtype = self.W_h.weight.dtype
        h0, c0 = enc.init
        return h0.to(dtype), c0.to(dtype), h0.new_zeros(h0.shape, dtype=dtype)

    def _step(self, x_gates: Tensor, state, enc: EncoderOut, w_rec: Tensor | None):
        """x_gates = W_y E y_t (B, 4d) -> (o_t (B, d), (h_t, c_t, o_t), alpha_t (B, S')). w_rec:
        [W_fo W_hh] (4d, 2d), or None to call the two layers."""
        h, c, o_prev = state
        d = self.config.dec_hidden
        if w_rec is None:
            gates = x_gates + self.W_fo(o_prev) + self.W_hh(h)
        else:
            gates = x_gates + F.linear(torch.cat([o_prev, h], dim=-1), w_rec)
        i, f = torch.sigmoid(gates[:, :d]), torch.sigmoid(gates[:, d : 2 * d])
        g, og = torch.tanh(gates[:, 2 * d : 3 * d]), torch.sigmoid(gates[:, 3 * d :])
        c = f * c + i * g
        h = og * torch.tanh(c)
        e = torch.bmm(enc.keys, h.to(enc.keys.dtype).unsqueeze(2)).squeeze(2)  # h_t . (W_attProj h_i)
        alpha = masked_softmax(e, enc.mask)
        ua = torch.bmm(alpha.unsqueeze(1).to(enc.values.dtype), enc.values).squeeze(1)  # W_u[:, :2n] a_t
        uh = F.linear(h, self.W_u.weight[:, 2 * self.config.enc_hidden :])
        o = self.drop(torch.tanh(ua + uh))
        return o, (h, c, o.to(h.dtype)), alpha

    def decode_features(self, enc: EncoderOut, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing. tgt_in (B, T) -> (o (B, T, d), alpha (B, T, S'))."""
        x_gates = self.W_y(self.tgt_embed(tgt_in))  # (B, T, 4d), all steps at once
        w_rec = torch.cat([self.W_fo.weight, self.W_hh.weight], dim=1)
        state = self.init_state(enc)
        outs, alphas = [], []
        for xg in x_gates.unbind(1):  # unbind: one stack in the backward pass, not T slices
            o, state, alpha = self._step(xg, state, enc, w_rec)
            outs.append(o)
            alphas.append(alpha)
        return torch.stack(outs, dim=1), torch.stack(alphas, dim=1)

    def step_features(self, prev_tokens: Tensor, state, enc: EncoderOut):
        """y_t (B,), (h, c, o)_{t-1} -> (o_t (B, d), (h, c, o)_t, alpha_t (B, S'))."""
        # int8 layers have no float weight to concatenate
        w_rec = None if is_quantized(self.W_fo) else torch.cat([self.W_fo.weight, self.W_hh.weight], dim=1)
        stack = self.decode_stacks.get("embedding")
        x_gates = stack(prev_tokens) if stack is not None else self.W_y(self.tgt_embed(prev_tokens))
        return self._step(x_gates, state, enc, w_rec)

    def int8_stacks(self) -> dict[str, tuple[str | None, tuple[str, ...]]]:
        """W_y E y_t from the embedding's rows quantised once."""
        return {"embedding": ("tgt_embed", ("W_y",))}

    def output_projection(self) -> nn.Linear:
        return self.W_vocab
