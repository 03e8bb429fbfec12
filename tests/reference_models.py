"""Reference implementations written straight from docs/paper-notes.md, for the tests.

One sentence at a time, one time step at a time, one source position at a time: no batching,
no padding, no masks, no fused matrices, no precomputation. They read the model's parameter
tensors by name (slicing the stacked gate matrices in the documented order [z, r, candidate]
for the hand-written decoders, and PyTorch's [r, z, n] for nn.GRU / [i, f, g, o] for nn.LSTM)
and return the log-likelihood of each target sentence (target y_1..y_T followed by EOS).
"""
from __future__ import annotations

import torch
from torch import Tensor

BOS, EOS = 2, 3


def sig(x: Tensor) -> Tensor:
    return 1.0 / (1.0 + torch.exp(-x))


def log_softmax(x: Tensor) -> Tensor:
    return x - torch.log(torch.exp(x - x.max()).sum()) - x.max()


def torch_gru_step(x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor, b_hh: Tensor) -> Tensor:
    """nn.GRU's cell (gate order r, z, n; reset applied after the recurrent product)."""
    n = h.numel()
    gi = w_ih @ x + b_ih
    gh = w_hh @ h + b_hh
    r = sig(gi[:n] + gh[:n])
    z = sig(gi[n : 2 * n] + gh[n : 2 * n])
    cand = torch.tanh(gi[2 * n :] + r * gh[2 * n :])
    return (1 - z) * cand + z * h


def torch_lstm_step(x, h, c, w_ih, w_hh, b_ih, b_hh):
    """nn.LSTM's cell (gate order i, f, g, o)."""
    n = h.numel()
    g = w_ih @ x + b_ih + w_hh @ h + b_hh
    i, f, gg, o = sig(g[:n]), sig(g[n : 2 * n]), torch.tanh(g[2 * n : 3 * n]), sig(g[3 * n :])
    c = f * c + i * gg
    return o * torch.tanh(c), c


def run_rnn(xs: list[Tensor], rnn, suffix: str, hidden: int, lstm: bool = False, reverse: bool = False):
    """States of one direction of `rnn` (nn.GRU/nn.LSTM) over the vectors xs, in source order."""
    p = {k: getattr(rnn, k + suffix) for k in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")}
    args = (p["weight_ih_l0"], p["weight_hh_l0"], p["bias_ih_l0"], p["bias_hh_l0"])
    h = xs[0].new_zeros(hidden)
    c = xs[0].new_zeros(hidden)
    hs, cs = [None] * len(xs), [None] * len(xs)
    order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
    for j in order:
        if lstm:
            h, c = torch_lstm_step(xs[j], h, c, *args)
        else:
            h = torch_gru_step(xs[j], h, *args)
        hs[j], cs[j] = h, c
    return hs, cs


def paper_gru_step(Ey, s, c, W, U, C, b, d):
    """The paper's decoder GRU: gates [z, r, cand] stacked in W (3d, m), U (2d + d), C (3d, .)."""
    U_z, U_r, U_h = U
    z = sig(W[:d] @ Ey + U_z @ s + C[:d] @ c + b[:d])
    r = sig(W[d : 2 * d] @ Ey + U_r @ s + C[d : 2 * d] @ c + b[d : 2 * d])
    cand = torch.tanh(W[2 * d :] @ Ey + U_h @ (r * s) + C[2 * d :] @ c + b[2 * d :])
    return (1 - z) * s + z * cand


def maxout(t: Tensor) -> Tensor:
    return torch.stack([torch.maximum(t[2 * j], t[2 * j + 1]) for j in range(t.numel() // 2)])


def source_with_eos(src: list[int], cfg) -> list[int]:
    return list(src) + [EOS] if cfg.src_eos else list(src)


def rnnsearch_loglik(model, src: list[int], tgt: list[int]) -> Tensor:
    """log p(tgt + EOS | src) under RNNsearch, equation by equation."""
    cfg = model.config
    n, d = cfg.enc_hidden, cfg.dec_hidden
    x = source_with_eos(src, cfg)
    E = model.src_embed.weight
    xs = [E[w] for w in x]
    fwd, _ = run_rnn(xs, model.encoder, "", n)
    bwd, _ = run_rnn(xs, model.encoder, "_reverse", n, reverse=True)
    h = [torch.cat([fwd[j], bwd[j]]) for j in range(len(x))]
    s = torch.tanh(model.W_s.weight @ bwd[0] + model.W_s.bias)
    Ey_all = model.tgt_embed.weight
    U = (model.U_zr.weight[:d], model.U_zr.weight[d:], model.U.weight)
    ys = [BOS] + list(tgt)
    outs = list(tgt) + [EOS]
    ll = s.new_zeros(())
    for i in range(len(outs)):
        Ey = Ey_all[ys[i]]
        e = torch.stack([model.v_a @ torch.tanh(model.W_a.weight @ s + model.U_a.weight @ hj) for hj in h])
        alpha = torch.exp(e - e.max())
        alpha = alpha / alpha.sum()
        c = sum(alpha[j] * h[j] for j in range(len(h)))
        s_new = paper_gru_step(Ey, s, c, model.W_in.weight, U, model.C.weight, model.W_in.bias, d)
        s_out = s_new if cfg.readout == "new" else s  # section 3.1's s_i or the appendix's s_{i-1}
        t_tilde = model.U_o.weight @ s_out + model.U_o.bias + model.V_o.weight @ Ey + model.C_o.weight @ c
        logits = model.W_o.weight @ maxout(t_tilde) + model.W_o.bias
        ll = ll + log_softmax(logits)[outs[i]]
        s = s_new
    return ll


def rnnencdec_loglik(model, src: list[int], tgt: list[int]) -> Tensor:
    """log p(tgt + EOS | src) under RNNencdec (Cho et al. 2014), equation by equation."""
    cfg = model.config
    n, d = cfg.enc_hidden, cfg.dec_hidden
    x = source_with_eos(src, cfg)
    E = model.src_embed.weight
    hs, _ = run_rnn([E[w] for w in x], model.encoder, "", n)
    c = torch.tanh(model.V.weight @ hs[-1] + model.V.bias)
    s = torch.tanh(model.V_s.weight @ c + model.V_s.bias)
    U = (model.U_zr.weight[:d], model.U_zr.weight[d:], model.U.weight)
    ys = [BOS] + list(tgt)
    outs = list(tgt) + [EOS]
    ll = s.new_zeros(())
    for i in range(len(outs)):
        Ey = model.tgt_embed.weight[ys[i]]
        s = paper_gru_step(Ey, s, c, model.W_in.weight, U, model.C.weight, model.W_in.bias, d)
        # g(s_i, y_{i-1}, c): the state that has read y_{i-1} (Cho et al.'s h_t = f(h_{t-1}, y_{t-1}, c))
        t_tilde = model.U_o.weight @ s + model.U_o.bias + model.V_o.weight @ Ey + model.C_o.weight @ c
        logits = model.W_o.weight @ maxout(t_tilde) + model.W_o.bias
        ll = ll + log_softmax(logits)[outs[i]]
    return ll


def lstm_attention_loglik(model, src: list[int], tgt: list[int]) -> Tensor:
    """log p(tgt + EOS | src) under the LSTM seed model (input feeding, multiplicative attention)."""
    cfg = model.config
    n, d = cfg.enc_hidden, cfg.dec_hidden
    x = source_with_eos(src, cfg)
    xs = [model.src_embed.weight[w] for w in x]
    fh, fc = run_rnn(xs, model.encoder, "", n, lstm=True)
    bh, bc = run_rnn(xs, model.encoder, "_reverse", n, lstm=True, reverse=True)
    h_enc = [torch.cat([fh[j], bh[j]]) for j in range(len(x))]
    h = model.W_h.weight @ torch.cat([bh[0], fh[-1]])
    c = model.W_c.weight @ torch.cat([bc[0], fc[-1]])
    o = h.new_zeros(d)
    # the decoder LSTM's W_ih is [W_y | W_fo] over the input [E y_t ; o_{t-1}]
    w_ih = torch.cat([model.W_y.weight, model.W_fo.weight], dim=1)
    ys = [BOS] + list(tgt)
    outs = list(tgt) + [EOS]
    ll = h.new_zeros(())
    for t in range(len(outs)):
        inp = torch.cat([model.tgt_embed.weight[ys[t]], o])
        h, c = torch_lstm_step(inp, h, c, w_ih, model.W_hh.weight, model.W_y.bias, torch.zeros_like(model.W_y.bias))
        e = torch.stack([h @ (model.W_att.weight @ hi) for hi in h_enc])
        alpha = torch.exp(e - e.max())
        alpha = alpha / alpha.sum()
        a = sum(alpha[i] * h_enc[i] for i in range(len(h_enc)))
        o = torch.tanh(model.W_u.weight @ torch.cat([a, h]))  # dropout is off in eval mode
        ll = ll + log_softmax(model.W_vocab.weight @ o)[outs[t]]
    return ll


# ---- batched references for the models' hand-written backward passes ----------------------------

def plain_chunked_loss(model, src: Tensor, src_lens: Tensor, tgt_in: Tensor, tgt_out: Tensor,
                       label_smoothing: float = 0.0, chunk_tokens: int = 4096) -> tuple[Tensor, Tensor, int]:
    """`Seq2Seq.loss` with autograd through each chunk's log-softmax instead of the chunked loss's
    hand-written backward: (loss_sum, nll_sum, n_tokens) over the non-pad targets."""
    feats, _ = model.decode_features(model.encode(src, src_lens), tgt_in)
    mask = tgt_out.ne(0)
    feats, gold = feats[mask], tgt_out[mask]  # (N, F), (N,)
    loss_sum = feats.new_zeros((), dtype=torch.float64 if feats.dtype == torch.float64 else torch.float32)
    nll_sum = torch.zeros_like(loss_sum)
    for i in range(0, feats.size(0), chunk_tokens):
        lp = torch.log_softmax(model.output_layer(feats[i : i + chunk_tokens]).to(loss_sum.dtype), dim=-1)
        nll = -lp.gather(1, gold[i : i + chunk_tokens].unsqueeze(1)).squeeze(1)
        nll_sum = nll_sum + nll.sum()
        smooth = -lp.mean(dim=-1)
        loss_sum = loss_sum + ((1 - label_smoothing) * nll + label_smoothing * smooth).sum()
    return loss_sum, nll_sum, int(gold.numel())


def rnnsearch_autograd_features(model, enc, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
    """`RNNSearch.decode_features` as a plain autograd loop over `attend_and_update`, one step at
    a time, instead of recurrence.py's hand-written backward: (t (B, T, l), alpha (B, T, S'))."""
    T = tgt_in.size(1)
    emb = model.drop_tgt(model.tgt_embed(tgt_in))
    x_gates, emb_out = model.W_in(emb), model.V_o(emb)
    w_q = torch.cat([model.W_a.weight, model.U_zr.weight], dim=0)
    s = model.init_state(enc)
    states, alphas = [s], []
    new = model.config.readout == "new"
    for i, xg in enumerate(x_gates.unbind(1)):
        alpha, s = model.attend_and_update(s, xg, enc, w_q, update=new or i + 1 < T)
        states.append(s)
        alphas.append(alpha)
    alpha = torch.stack(alphas, dim=1)
    ctx = torch.bmm(alpha.to(enc.annotations.dtype), enc.annotations)
    feats = model.deep_output(torch.stack(states[:-1], dim=1), torch.stack(states[1:], dim=1), emb_out, ctx)
    return feats, alpha
