"""Each model's log-likelihood equals a per-time-step reference written from the equations."""
from __future__ import annotations

import pytest
import torch

from tests import reference_models as ref
from tests.conftest import random_batch, tiny_model

ARCHS = [a for a in ("rnnsearch", "rnnencdec", "lstm-attention") if hasattr(ref, a.replace("-", "_") + "_loglik")]


def model_logliks(model, src, src_lens, tgt_in, tgt_out) -> torch.Tensor:
    """Per-sentence log-likelihood from the model's teacher-forced forward pass."""
    lp = model(src, src_lens, tgt_in)
    tok = lp.gather(2, tgt_out.unsqueeze(2)).squeeze(2)
    return (tok * tgt_out.ne(0)).sum(1)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("src_eos", [True, False])
def test_loglik_equals_equation_reference(arch, src_eos):
    torch.set_num_threads(1)
    model = tiny_model(arch, seed=3, src_eos=src_eos, exact=True)
    src, src_lens, tgt_in, tgt_out, sents = random_batch()
    with torch.no_grad():
        got = model_logliks(model, src, src_lens, tgt_in, tgt_out)
        want = torch.stack([getattr(ref, arch.replace("-", "_") + "_loglik")(model, x, y) for x, y in sents])
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


def test_rnnsearch_new_state_readout_equals_section_3_1_reference():
    """readout "new" reads s_i, not s_{i-1}, in the deep output (section 3.1's g(y_{i-1}, s_i, c_i)):
    teacher forcing and the summed training loss equal the equation-by-equation reference."""
    torch.set_num_threads(1)
    model = tiny_model("rnnsearch", seed=3, readout="new", exact=True)
    src, src_lens, tgt_in, tgt_out, sents = random_batch()
    with torch.no_grad():
        got = model_logliks(model, src, src_lens, tgt_in, tgt_out)
        want = torch.stack([ref.rnnsearch_loglik(model, x, y) for x, y in sents])
        prev = model_logliks(tiny_model("rnnsearch", seed=3, exact=True), src, src_lens, tgt_in, tgt_out)
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
    assert (got - prev).abs().max() > 1e-3  # the readout changes the model
    loss, _, _ = model.loss(src, src_lens, tgt_in, tgt_out, chunk_tokens=2)
    torch.testing.assert_close(loss.detach(), -want.sum(), atol=1e-10, rtol=1e-10)


def test_rnnencdec_deep_output_reads_the_state_that_has_read_the_previous_word():
    """Cho et al. (2014): p(y_t | y_<t, c) = g(h_t, y_{t-1}, c), h_t = f(h_{t-1}, y_{t-1}, c) (Bahdanau et
    al.'s eq. 3: g(y_{t-1}, s_t, c)). The first word's probabilities already pass through one decoder GRU
    step, so they move with its input weights; the whole log-likelihood equals the equation reference."""
    torch.set_num_threads(1)
    model = tiny_model("rnnencdec", seed=3, exact=True)
    src, src_lens, tgt_in, tgt_out, sents = random_batch()
    with torch.no_grad():
        first = model(src, src_lens, tgt_in)[:, 0]
        torch.testing.assert_close(model_logliks(model, src, src_lens, tgt_in, tgt_out),
                                   torch.stack([ref.rnnencdec_loglik(model, x, y) for x, y in sents]),
                                   atol=1e-10, rtol=1e-10)
        model.W_in.weight.mul_(2.0)
        assert (model(src, src_lens, tgt_in)[:, 0] - first).abs().max() > 1e-3


@pytest.mark.parametrize("arch", ARCHS)
def test_loss_sum_equals_reference_nll(arch):
    """The training loss (fused chunked path, tiny chunks) is the summed reference NLL."""
    model = tiny_model(arch, seed=4, exact=True)
    src, src_lens, tgt_in, tgt_out, sents = random_batch(seed=5)
    loss, nll, n = model.loss(src, src_lens, tgt_in, tgt_out, chunk_tokens=2)
    with torch.no_grad():
        want = -sum(getattr(ref, arch.replace("-", "_") + "_loglik")(model, x, y) for x, y in sents)
    assert n == sum(len(y) + 1 for _, y in sents)
    torch.testing.assert_close(loss.detach(), want, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(nll, want, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("readout,src_eos", [("prev", True), ("new", False)])
def test_readable_rnnsearch_is_what_the_fast_model_computes(readout, src_eos):
    """models/rnnsearch.py's plain RNNSearch (the paper's model, one eager step at a time) and the
    FastRNNSearch that training and decoding build, on the same float64 weights: equal
    log-likelihoods (and both equal the equation reference), equal loss gradients for every
    parameter, and equal decoding steps (log-probabilities, state, attention)."""
    from nmtkit.models.rnnsearch import RNNSearch

    torch.set_num_threads(1)
    fast = tiny_model("rnnsearch", seed=6, readout=readout, src_eos=src_eos, exact=True)
    plain = RNNSearch(fast.config).to(torch.float64).eval()
    plain.load_state_dict(fast.state_dict())
    assert type(plain) is RNNSearch and type(fast) is not RNNSearch
    src, src_lens, tgt_in, tgt_out, sents = random_batch(seed=7)
    with torch.no_grad():
        got = model_logliks(plain, src, src_lens, tgt_in, tgt_out)
        want = torch.stack([ref.rnnsearch_loglik(plain, x, y) for x, y in sents])
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(model_logliks(fast, src, src_lens, tgt_in, tgt_out), got, atol=1e-10, rtol=1e-10)

    for model in (plain, fast):
        model.zero_grad()
        model.loss(src, src_lens, tgt_in, tgt_out)[0].backward()
    grads = dict(fast.named_parameters())
    for name, p in plain.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, atol=1e-10, rtol=1e-10, msg=name)

    with torch.no_grad():
        states = []
        for model in (plain, fast):
            enc = model.encode_for_steps(src, src_lens)
            state, steps = model.init_state(enc), []
            for tokens in tgt_in.unbind(1):
                log_probs, state, attention = model.step(tokens, state, enc)
                steps.append((log_probs, state, attention))
            states.append(steps)
    for (lp_a, s_a, att_a), (lp_b, s_b, att_b) in zip(*states):
        torch.testing.assert_close(lp_a, lp_b, atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(s_a, s_b, atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(att_a, att_b, atol=1e-10, rtol=1e-10)
