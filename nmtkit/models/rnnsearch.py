"""RNNsearch: Bahdanau, Cho & Bengio (ICLR 2015), "Neural Machine Translation by Jointly
Learning to Align and Translate", as plain eager PyTorch, one decoder step at a time
(docs/paper-notes.md has the equations). Training and decoding build
`models.fast.rnnsearch.FastRNNSearch`, the same parameters computed faster, held to this one.

Choices the paper leaves open: EOS is appended to every source sentence inside the model
(`src_eos`); the encoder is nn.GRU (cuDNN's candidate tanh(W x + r (U h + b))), the decoder the
paper's U [r s]; biases in the GRU gates, W_s, U_o and W_o; dropout on the embeddings and on t_i
(`dropout_sites`); readout "prev" reads s_{i-1} in the deep output (appendix A.2.2), "new" s_i
(section 3.1).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmtkit.errors import ConfigError
from nmtkit.models.base import (
    INITS,
    PAD_ID,
    EncoderOut,
    Seq2Seq,
    append_eos,
    apply_init_,
    dropout,
    length_mask,
    on_device,
    paper_init_,
    run_packed,
)

DROPOUT_SITES = ("src", "tgt", "out")  # source / target embeddings, the deep output t_i
READOUTS = ("prev", "new")  # the deep output reads s_{i-1} (appendix A.2.2) or s_i (section 3.1)


def check_common(cfg, ints: tuple[str, ...]) -> None:
    """Validate the fields every config shares; raise ConfigError naming the field."""
    for name in ints:
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:  # 2^63: a TypeError in torch
            raise ConfigError(f"{type(cfg).__name__}.{name} must be a positive integer below 2^31, got {value!r}")
    if not 0.0 <= float(cfg.dropout) < 1.0:
        raise ConfigError(f"{type(cfg).__name__}.dropout must be in [0, 1), got {cfg.dropout!r}")
    if cfg.init not in INITS:
        raise ConfigError(f"{type(cfg).__name__}.init must be one of {INITS}, got {cfg.init!r}")


@dataclass(frozen=True)
class RNNSearchConfig:
    """Hyper-parameters of RNNsearch; defaults are the paper's (RNNsearch-50 without vocab sizes)."""

    src_vocab_size: int
    tgt_vocab_size: int
    emb_dim: int = 620  # m
    enc_hidden: int = 1000  # n, per direction
    dec_hidden: int = 1000  # n (decoder)
    att_hidden: int = 1000  # n', alignment model
    maxout: int = 500  # l (the deep output has 2l pre-maxout units)
    dropout: float = 0.0
    init: str = "paper"  # one of models.base.INITS: "paper" (appendix B.1), "default" (PyTorch's), ...
    src_eos: bool = True  # append EOS to each source sentence inside the model
    dropout_sites: str = "src,tgt,out"  # where `dropout` applies: comma-separated DROPOUT_SITES
    readout: str = "prev"  # the deep output's state: one of READOUTS (module docstring)

    def __post_init__(self) -> None:
        check_common(self, ("src_vocab_size", "tgt_vocab_size", "emb_dim", "enc_hidden",
                            "dec_hidden", "att_hidden", "maxout"))
        sites = self.dropout_sites.split(",") if self.dropout_sites else []
        if any(s not in DROPOUT_SITES for s in sites):
            raise ConfigError(f"RNNSearchConfig.dropout_sites must be a comma-separated subset of "
                              f"{DROPOUT_SITES}, got {self.dropout_sites!r}")
        if self.readout not in READOUTS:
            raise ConfigError(f"RNNSearchConfig.readout must be one of {READOUTS}, got {self.readout!r}")


def maxout_pairs(x: Tensor) -> Tensor:
    """(..., 2l) -> (..., l): t_j = max(x_{2j-1}, x_{2j}) over adjacent pairs. torch.maximum, not
    amax: inductor's amax backward gave NaN on bf16 ties; torch.unflatten, not the method, which
    dynamo cannot trace under a TorchFunctionMode."""
    pairs = torch.unflatten(x, -1, (-1, 2))
    return torch.maximum(pairs[..., 0], pairs[..., 1])


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """scores (..., S), mask (..., S) bool (True = real position) -> weights (..., S), in
    float32 at least; padding gets weight exactly 0; every row must have a real position."""
    if scores.dtype not in (torch.float32, torch.float64):
        scores = scores.float()
    scores = scores.masked_fill(~mask, float("-inf"))
    return F.softmax(scores, dim=-1)


class RNNSearch(Seq2Seq):
    """Bahdanau et al. (2015) attention-based encoder-decoder. See the module docstring."""

    def __init__(self, config: RNNSearchConfig):
        super().__init__()
        self.config = config
        m, n, d = config.emb_dim, config.enc_hidden, config.dec_hidden
        na, lo = config.att_hidden, config.maxout
        sites = set(config.dropout_sites.split(","))
        self.drop_src, self.drop_tgt, self.drop = (dropout(config.dropout) if s in sites else nn.Identity()
                                                   for s in DROPOUT_SITES)
        # encoder
        self.src_embed = nn.Embedding(config.src_vocab_size, m, padding_idx=PAD_ID)
        self.encoder = nn.GRU(m, n, batch_first=True, bidirectional=True)
        # alignment model: e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)
        self.W_a = nn.Linear(d, na, bias=False)
        self.U_a = nn.Linear(2 * n, na, bias=False)
        self.v_a = nn.Parameter(torch.zeros(na))
        # decoder GRU; gate order everywhere: [z (update), r (reset), candidate]
        self.W_s = nn.Linear(n, d)  # s_0 = tanh(W_s bwd h_1)
        self.tgt_embed = nn.Embedding(config.tgt_vocab_size, m, padding_idx=PAD_ID)
        self.W_in = nn.Linear(m, 3 * d)  # [W_z; W_r; W] E y (+ gate biases)
        self.U_zr = nn.Linear(d, 2 * d, bias=False)  # [U_z; U_r] s
        self.U = nn.Linear(d, d, bias=False)  # U [r * s]
        self.C = nn.Linear(2 * n, 3 * d, bias=False)  # [C_z; C_r; C] c
        # deep output with maxout
        self.U_o = nn.Linear(d, 2 * lo)
        self.V_o = nn.Linear(m, 2 * lo, bias=False)
        self.C_o = nn.Linear(2 * n, 2 * lo, bias=False)
        self.W_o = nn.Linear(lo, config.tgt_vocab_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        n, d = self.config.enc_hidden, self.config.dec_hidden
        apply_init_(
            self, self.config.init,
            paper=lambda: paper_init_(
                self,
                recurrent=[(self.encoder.weight_hh_l0, n), (self.encoder.weight_hh_l0_reverse, n),
                           (self.U_zr.weight, d), (self.U.weight, d)],
                align=[self.W_a.weight, self.U_a.weight],
                zero=[self.v_a],
            ),
            # PyTorch's defaults, and v_a, which has none
            default=lambda: nn.init.normal_(self.v_a, 0.0, self.config.att_hidden ** -0.5),
        )

    # ---- encoder --------------------------------------------------------------------------
    def encode(self, src: Tensor, src_lens: Tensor) -> EncoderOut:
        """src (B, S), src_lens (B,) -> annotations h_j = [fwd h_j ; bwd h_j] (B, S', 2n), zero
        at padding, keys U_a h_j (B, S', n') (they do not depend on i: made once per sentence),
        init = bwd h_1 (B, n); S' = S + 1 with `src_eos`."""
        if self.config.src_eos:
            src, src_lens = append_eos(src, src_lens)
        emb = self.drop_src(self.src_embed(src))
        mask = length_mask(on_device(src_lens, emb.device), src.size(1))
        ann, _ = run_packed(self.encoder, emb, src_lens)
        return EncoderOut(annotations=ann, keys=self.U_a(ann), mask=mask, init=ann[:, 0, self.config.enc_hidden:],
                          src_eos=self.config.src_eos)

    def init_state(self, enc: EncoderOut) -> Tensor:
        """s_0 = tanh(W_s bwd h_1): (B, d)."""
        return torch.tanh(self.W_s(enc.init)).to(self.W_s.weight.dtype)

    # ---- decoder --------------------------------------------------------------------------
    def attend(self, s: Tensor, enc: EncoderOut) -> tuple[Tensor, Tensor]:
        """The alignment model: s_{i-1} (B, d) -> (alpha_i (B, S'), c_i (B, 2n)), with
        e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j), alpha_ij = softmax_j(e_ij), c_i = sum_j alpha_ij h_j."""
        e = torch.tanh(self.W_a(s).unsqueeze(1) + enc.keys).matmul(self.v_a)
        alpha = masked_softmax(e, enc.mask)
        c = torch.bmm(alpha.unsqueeze(1).to(enc.annotations.dtype), enc.annotations).squeeze(1)
        return alpha, c

    def gru(self, s: Tensor, emb: Tensor, c: Tensor) -> Tensor:
        """s_i from s_{i-1} (B, d), E y_{i-1} (B, m) and c_i: z, r = sigmoid(W_{z,r} E y +
        U_{z,r} s + C_{z,r} c), s~ = tanh(W E y + U [r * s] + C c), s_i = (1 - z) s + z s~."""
        d = self.config.dec_hidden
        x_zr, x_h = (self.W_in(emb) + self.C(c)).split([2 * d, d], dim=-1)
        z, r = torch.sigmoid(x_zr + self.U_zr(s)).chunk(2, dim=-1)
        return (1 - z) * s + z * torch.tanh(x_h + self.U(r * s))

    def maxout_layer(self, s: Tensor, emb: Tensor, c: Tensor) -> Tensor:
        """t_i = maxout(U_o s + V_o E y_{i-1} + C_o c_i) (..., l): the deep output with one
        maxout layer; s is s_{i-1} (readout "prev") or s_i ("new")."""
        return self.drop(maxout_pairs(self.U_o(s) + self.V_o(emb) + self.C_o(c)))

    def step_features(self, prev_tokens: Tensor, state: Tensor, enc: EncoderOut
                      ) -> tuple[Tensor, Tensor, Tensor]:
        """prev_tokens y_{i-1} (B,), state s_{i-1} (B, d) -> (t_i (B, l), s_i, alpha_i (B, S'))."""
        return self._decoder_step(self.drop_tgt(self.tgt_embed(prev_tokens)), state, enc)

    def _decoder_step(self, emb: Tensor, s: Tensor, enc: EncoderOut) -> tuple[Tensor, Tensor, Tensor]:
        alpha, c = self.attend(s, enc)
        s_new = self.gru(s, emb, c)
        t = self.maxout_layer(s_new if self.config.readout == "new" else s, emb, c)
        return t, s_new, alpha

    def decode_features(self, enc: EncoderOut, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing, a loop of decoder steps: tgt_in = [BOS, y_1..y_T-1] (B, T) ->
        (t (B, T, l), alpha (B, T, S'))."""
        emb = self.drop_tgt(self.tgt_embed(tgt_in))
        s = self.init_state(enc)
        feats, alphas = [], []
        for e in emb.unbind(1):
            t, s, alpha = self._decoder_step(e, s, enc)
            feats.append(t)
            alphas.append(alpha)
        return torch.stack(feats, dim=1), torch.stack(alphas, dim=1)

    def output_projection(self) -> nn.Linear:
        """W_o: t (..., l) -> logits W_o t (..., V)."""
        return self.W_o
