"""RNNsearch's fast paths: `FastRNNSearch` computes what `models.rnnsearch.RNNSearch` does, faster.

What does not depend on s_{i-1} is computed for all positions at once. Teacher forcing runs the
decoder as recurrence.py's loop, the deep output and W_o after it over all steps. Decoding averages
[C h_j ; C_o h_j] with the attention weights and reads each sentence's keys once for its G
hypotheses (`_step_grouped`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmtkit.models.base import EncoderOut, append_eos, length_mask, on_device, run_packed
from nmtkit.models.fast.accelerated import Accelerated
from nmtkit.models.fast.fusion import step_fn
from nmtkit.models.fast.gru_recurrence import bigru_annotations, reversal_index
from nmtkit.models.fast.quantize import Int8BiGRU
from nmtkit.models.fast.recurrence import (
    additive_scores,
    additive_scores_grouped,
    bahdanau_recurrence,
    pair_product_dtype,
    tanh_,
)
from nmtkit.models.rnnsearch import RNNSearch, RNNSearchConfig, masked_softmax, maxout_pairs


def maxout_of_sum(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """maxout_pairs(a + b + c): the deep output's elementwise part, as a fusable step body."""
    return maxout_pairs(a + b + c)


def encode_bigru(embed: nn.Embedding, rnn: nn.GRU | nn.LSTM, drop: nn.Module, src: Tensor,
                 src_lens: Tensor, src_eos: bool, fuse_steps: bool = False):
    """Shared by the attention models: (annotations (B, S', 2n), zero at padding; mask (B, S');
    the final rnn state, or None on the fused, CPU and int8 GRU paths). S' = S + 1 with `src_eos`."""
    if src_eos:
        src, src_lens = append_eos(src, src_lens)
    if isinstance(rnn, Int8BiGRU):  # int8 decoding (quantize.py): the GRU quantises the rows it looks up
        mask = length_mask(src_lens, src.size(1))
        return rnn(embed, src, src_lens, mask), mask, None
    emb = drop(embed(src))
    lens = on_device(src_lens, emb.device)
    mask = length_mask(lens, src.size(1))
    if isinstance(rnn, nn.GRU) and rnn.bidirectional and (fuse_steps or emb.device.type == "cpu"):
        ann = bigru_annotations(rnn, emb, lens, mask, fuse=True) if fuse_steps else _bigru_cpu(rnn, emb, lens, mask)
        return ann, mask, None
    ann, final = run_packed(rnn, emb, src_lens)
    return ann, mask, final


def _bigru_cpu(rnn: nn.GRU, emb: Tensor, lens: Tensor, mask: Tensor) -> Tensor:
    """The annotations of a packed bidirectional nn.GRU, without packing (faster on the CPU): the
    backward direction runs over each sentence reversed within its length, then is reversed back.
    Under CPU autocast the GRU runs in its dtype, states included (products at bf16's rate:
    docs/experiments.md); the annotations come back in emb's dtype."""
    rev = reversal_index(lens, mask)
    idx = rev.unsqueeze(2).expand(-1, -1, emb.size(2))
    out_dtype = emb.dtype
    ws = [getattr(rnn, f"{name}_l0{side}") for side in ("", "_reverse")
          for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    if torch.is_autocast_enabled("cpu"):  # the autocast dtype throughout (autocast leaves torch.gru alone)
        dt = torch.get_autocast_dtype("cpu")
        emb, ws = emb.to(dt), [t.to(dt) for t in ws]
    h0 = emb.new_zeros(1, emb.size(0), rnn.hidden_size)
    args = (1, 0.0, rnn.training, False, True)  # layers, dropout, train, bidirectional, batch_first
    out_f, _ = torch.gru(emb, h0, ws[:4], True, *args)
    out_r, _ = torch.gru(emb.gather(1, idx), h0, ws[4:], True, *args)
    out_b = out_r.gather(1, rev.unsqueeze(2).expand(-1, -1, out_r.size(2)))
    return (torch.cat([out_f, out_b], dim=2) * mask.unsqueeze(2).to(out_f.dtype)).to(out_dtype)


class FastRNNSearch(Accelerated, RNNSearch):
    """`RNNSearch` with the fast paths (module docstring); the same parameters."""

    config: RNNSearchConfig

    def encode(self, src: Tensor, src_lens: Tensor) -> EncoderOut:
        """`RNNSearch.encode`, plus values [C_z; C_r; C] h_j (B, S', 3d)."""
        ann, mask = self._annotate(src, src_lens)
        return self._encoder_out(ann, mask, self.U_a(ann), values=self.C(ann))

    def encode_for_steps(self, src: Tensor, src_lens: Tensor) -> EncoderOut:
        """`encode`, with step_values [C; C_z; C_r; C_o] h_j (B, S', 3d + 2l) in the place of values."""
        ann, mask = self._annotate(src, src_lens)
        stack = self.decode_stacks.get("annotations")
        if stack is None:
            keys, step_values = self.U_a(ann), torch.cat([self.C(ann), self.C_o(ann)], dim=2)
        else:
            keys, step_values = stack(ann).split([self.config.att_hidden, sum(stack.sizes[1:])], dim=2)
        return self._encoder_out(ann, mask, keys, step_values=step_values)

    def _annotate(self, src: Tensor, src_lens: Tensor) -> tuple[Tensor, Tensor]:
        """(annotations h_j (B, S', 2n), mask (B, S'))."""
        ann, mask, _ = encode_bigru(self.src_embed, self.encoder, self.drop_src, src, src_lens,
                                    self.config.src_eos, self.fuse_steps)
        return ann, mask

    def _encoder_out(self, ann: Tensor, mask: Tensor, keys: Tensor, **projections: Tensor) -> EncoderOut:
        """The EncoderOut of `ann` with its keys and `projections`; init = bwd h_1."""
        return EncoderOut(annotations=ann, keys=keys, mask=mask, init=ann[:, 0, self.config.enc_hidden:],
                          src_eos=self.config.src_eos, **projections)

    def attend_and_update(self, s: Tensor, x_gates: Tensor, enc: EncoderOut, w_q: Tensor | None,
                           update: bool = True) -> tuple[Tensor, Tensor]:
        """From s_{i-1} (B, d) and W[z,r,cand] E y_{i-1} (B, 3d): (alpha_i (B, S), s_i (B, d)).
        w_q: [W_a; U_z; U_r] (n' + 2d, d), or None to call W_a and U_zr."""
        na, d = self.config.att_hidden, self.config.dec_hidden
        if w_q is None:  # decoding: no weight concatenation per step
            q_a, q_zr = self.W_a(s), self.U_zr(s)
        else:  # split, not slicing: the backward of a slice zero-fills a full-size gradient
            q_a, q_zr = F.linear(s, w_q).split([na, 2 * d], dim=1)
        alpha = masked_softmax(additive_scores(q_a, enc.keys, self.v_a), enc.mask)
        if not update:
            return alpha, s
        cg = torch.bmm(alpha.unsqueeze(1).to(enc.values.dtype), enc.values).squeeze(1)  # C c_i
        return alpha, self._gru_update(s, x_gates + cg, q_zr)

    def _gru_update(self, s: Tensor, x: Tensor, q_zr: Tensor) -> Tensor:
        """s_i from s_{i-1} (B, d), x = W[z,r,cand] E y + C[z,r,cand] c_i (B, 3d) and q_zr = U[z,r] s
        (B, 2d). Without autograd, x is overwritten in place."""
        d = self.config.dec_hidden
        x_zr, x_h = x.split([2 * d, d], dim=1)
        if torch.is_grad_enabled():
            z, r = torch.sigmoid(x_zr + q_zr).chunk(2, dim=1)
            return s + z * (torch.tanh(x_h + self.U(r * s)) - s)
        z, r = torch.sigmoid_(x_zr.add_(q_zr)).chunk(2, dim=1)
        cand = tanh_(x_h.add_(self.U(r * s)))
        return torch.lerp(s, cand.to(s.dtype), z.to(s.dtype))  # s + z (s~ - s) in one pass

    def deep_output(self, s_prev: Tensor, s_new: Tensor, emb_out: Tensor, ctx: Tensor) -> Tensor:
        """`RNNSearch.maxout_layer` from s_{i-1}, s_i and V_o E y_{i-1}, any leading shape."""
        s = s_new if self.config.readout == "new" else s_prev
        return self.drop(step_fn(maxout_of_sum, self.fuse_steps)(self.U_o(s), emb_out, self.C_o(ctx)))

    def decode_features(self, enc: EncoderOut, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing. tgt_in (B, T) -> (t (B, T, l), alpha (B, T, S'))."""
        emb = self.drop_tgt(self.tgt_embed(tgt_in))
        x_gates = self.W_in(emb)  # (B, T, 3d), all steps at once
        emb_out = self.V_o(emb)  # (B, T, 2l)
        w_q = torch.cat([self.W_a.weight, self.U_zr.weight], dim=0)
        s = self.init_state(enc)
        states, alpha = bahdanau_recurrence(x_gates, s, enc.keys, enc.values, enc.mask, w_q,
                                            self.v_a, self.U.weight, fuse=self.fuse_steps, graphs=self.graph_loops)
        dev = tgt_in.device.type
        mmd = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else enc.annotations.dtype
        pmd = pair_product_dtype(mmd, dev)
        with torch.autocast(dev, enabled=False):  # c_i for all i, in pmd as the recurrence's g_values
            ctx = torch.bmm(alpha.to(pmd), enc.annotations.to(pmd))
        return self.deep_output(states[:, :-1], states[:, 1:], emb_out, ctx), alpha

    grouped_encoder = True  # see `step_features`
    graph_loops_supported = True
    # W_s (once per sentence, its dtype read in init_state) stays float
    int8_linears = ("U_a", "C", "W_in", "W_a", "U_zr", "U", "U_o", "V_o", "C_o", "W_o")
    int8_encoder = "encoder"

    def int8_stacks(self) -> dict[str, tuple[str | None, tuple[str, ...]]]:
        """A step's products of s_{i-1} and of E y_{i-1}; the keys and step_values of h_j."""
        return {"state": (None, self._state_layers()), "embedding": ("tgt_embed", ("W_in", "V_o")),
                "annotations": (None, ("U_a", "C", "C_o"))}

    def step_features(self, prev_tokens: Tensor, state: Tensor, enc: EncoderOut
                      ) -> tuple[Tensor, Tensor, Tensor]:
        """y_{i-1} (N,), s_{i-1} (N, d) -> (t_i (N, l), s_i, alpha_i (N, S')): N = B, or B * G over
        `encode_for_steps`."""
        if enc.step_values is not None:
            return self._step_grouped(prev_tokens, state, enc)
        emb = self.drop_tgt(self.tgt_embed(prev_tokens))
        alpha, s_new = self.attend_and_update(state, self.W_in(emb), enc, None)
        ctx = torch.bmm(alpha.unsqueeze(1).to(enc.annotations.dtype), enc.annotations).squeeze(1)
        return self.deep_output(state, s_new, self.V_o(emb), ctx), s_new, alpha

    def _state_layers(self) -> tuple[str, ...]:
        """The layers a decoding step applies to s_{i-1}."""
        return ("W_a", "U_zr") + (("U_o",) if self.config.readout == "prev" else ())

    def _step_grouped(self, prev_tokens: Tensor, s: Tensor, enc: EncoderOut
                      ) -> tuple[Tensor, Tensor, Tensor]:
        """`step_features` for N = B * G state rows over the B sentences of an `encode_for_steps`
        output: (B, G, S) batched products against the encoder tensors, never G copies of them."""
        B, S = enc.mask.shape
        N = s.size(0)
        if N % B:
            raise ValueError(f"{N} state rows cannot be grouped over {B} sentences")
        G = N // B
        d = self.config.dec_hidden
        stack = self.decode_stacks.get("state")
        if stack is not None:  # q: (W_a s, [U_z; U_r] s), and U_o s + b_o with readout "prev"
            q = stack(s).split(stack.sizes, dim=1)
        else:
            q = tuple(getattr(self, name)(s) for name in self._state_layers())
        e = additive_scores_grouped(q[0].view(B, G, -1), enc.keys, self.v_a, enc.mask)  # (B, G, S)
        alpha = masked_softmax(e, enc.mask.unsqueeze(1))  # (B, G, S)
        stack = self.decode_stacks.get("embedding")
        if stack is not None:  # x: [W; W_z; W_r] E y + b and V_o E y side by side (N, 3d + 2l)
            x = stack(prev_tokens)
        else:
            emb = self.drop_tgt(self.tgt_embed(prev_tokens))
            x = torch.cat([self.W_in(emb), self.V_o(emb)], dim=1)
        x = x.view(B, G, -1)
        alpha_v = alpha.to(enc.step_values.dtype)
        if x.dtype == enc.step_values.dtype:  # a fresh tensor: the sum goes into it
            x = x.baddbmm_(alpha_v, enc.step_values).view(N, -1)
        else:  # 16-bit autocast: baddbmm casts its operands
            x = torch.baddbmm(x, alpha_v, enc.step_values).view(N, -1)
        x_gates, x_out = x.split([3 * d, x.size(1) - 3 * d], dim=1)
        s_new = self._gru_update(s, x_gates, q[1])
        u_o = q[2] if self.config.readout == "prev" else self.U_o(s_new)
        return self.drop(maxout_pairs(x_out.add_(u_o))), s_new, alpha.view(N, S)
