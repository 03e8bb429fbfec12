"""gru_recurrence.py: the GRU encoders as a loop of step bodies equal PyTorch's packed nn.GRU."""
from __future__ import annotations

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmtkit.models.base import length_mask
from nmtkit.models.fast import gru_recurrence
from nmtkit.models.fast.gru_recurrence import bigru_annotations, gru_states, reversal_index
from tests.conftest import random_batch, tiny_model

LENS = (6, 1, 3, 6, 4, 1, 5)  # includes length 1 and several at the maximum


def _gru(bidirectional: bool, dtype=torch.float64, m: int = 4, n: int = 3, seed: int = 0):
    torch.manual_seed(seed)
    rnn = torch.nn.GRU(m, n, batch_first=True, bidirectional=bidirectional).to(dtype)
    with torch.no_grad():  # larger than the default init, so that every gate matters
        for p in rnn.parameters():
            p.normal_(0.0, 0.7)
    return rnn


def _inputs(m: int = 4, dtype=torch.float64, lens=LENS):
    lens = torch.tensor(lens)
    mask = length_mask(lens, int(lens.max()))
    emb = torch.randn(len(lens), int(lens.max()), m, dtype=dtype, generator=torch.Generator().manual_seed(3))
    return emb.requires_grad_(), lens, mask


def _packed(rnn, emb, lens):
    out, h_n = rnn(pack_padded_sequence(emb, lens, batch_first=True, enforce_sorted=False))
    return pad_packed_sequence(out, batch_first=True, total_length=emb.size(1))[0], h_n


def _grads(out, rnn, emb, seed: int = 5):
    g = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(seed))
    return torch.autograd.grad((out * g).sum(), [emb, *rnn.parameters()])


def test_bigru_outputs_and_all_gradients_equal_packed_nn_gru_in_float64():
    rnn = _gru(bidirectional=True)
    emb, lens, mask = _inputs()
    ref, _ = _packed(rnn, emb, lens)
    out = bigru_annotations(rnn, emb, lens, mask)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)
    assert torch.all(out[~mask] == 0)
    # gradients of the inputs, W_ih, W_hh, b_ih, b_hh of both directions
    for got, want in zip(_grads(out, rnn, emb), _grads(ref, rnn, emb), strict=True):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


def test_unidirectional_gru_states_last_state_and_gradients_equal_packed_nn_gru():
    rnn = _gru(bidirectional=False)
    emb, lens, mask = _inputs()
    ref, h_n = _packed(rnn, emb, lens)
    states, last = gru_states(rnn, emb, lens, mask)
    torch.testing.assert_close(states, ref, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(last, h_n[0], atol=1e-12, rtol=1e-12)
    assert torch.all(states[~mask] == 0)
    for got, want in zip(_grads(states + last.sum(), rnn, emb), _grads(ref + h_n[0].sum(), rnn, emb),
                         strict=True):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


def test_reversal_index_reverses_within_length_and_is_an_involution():
    lens = torch.tensor([3, 1, 4])
    rev = reversal_index(lens, length_mask(lens, 4))
    assert rev.tolist() == [[2, 1, 0, 3], [0, 1, 2, 3], [3, 2, 1, 0]]
    assert torch.equal(rev.gather(1, rev), torch.arange(4).expand(3, 4))


def test_without_grad_the_same_outputs_and_no_graph():
    rnn = _gru(bidirectional=True)
    emb, lens, mask = _inputs()
    with_grad = bigru_annotations(rnn, emb, lens, mask)
    with torch.no_grad():
        out = bigru_annotations(rnn, emb, lens, mask)
    assert out.grad_fn is None
    torch.testing.assert_close(out, with_grad, atol=0, rtol=0)


def test_bf16_autocast_is_close_to_float32_and_returns_float32():
    rnn = _gru(bidirectional=True, dtype=torch.float32, m=16, n=16)
    emb, lens, mask = _inputs(m=16, dtype=torch.float32)
    ref = bigru_annotations(rnn, emb, lens, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = bigru_annotations(rnn, emb, lens, mask)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=5e-2, rtol=0)
    assert torch.all(out[~mask] == 0)
    for got, want in zip(_grads(out, rnn, emb), _grads(ref, rnn, emb), strict=True):
        scale = want.abs().max().item()
        torch.testing.assert_close(got, want, atol=5e-2 * scale, rtol=0)


@pytest.fixture
def eager_steps(monkeypatch):
    """The models' fuse_steps path with its step bodies run eagerly (no compilation)."""
    monkeypatch.setattr(gru_recurrence, "step_fn", lambda body, fuse: body)


@pytest.mark.parametrize("arch", ["rnnsearch", "rnnencdec"])
def test_fuse_steps_encoder_equals_the_default_encoder(arch, eager_steps):
    model = tiny_model(arch, exact=True)
    src, src_lens, _, _, _ = random_batch()
    enc = model.encode(src, src_lens)
    fused = model.with_fused_steps(True)
    enc_f = fused.encode(src, src_lens)
    torch.testing.assert_close(enc_f.annotations, enc.annotations, atol=1e-12, rtol=1e-12)
    for name in ("keys", "values", "summary", "init"):
        if getattr(enc, name) is not None:
            torch.testing.assert_close(getattr(enc_f, name), getattr(enc, name), atol=1e-12, rtol=1e-12)
    params = [*model.encoder.parameters(), model.src_embed.weight]
    params_f = [*fused.encoder.parameters(), fused.src_embed.weight]
    for got, want in zip(torch.autograd.grad(_encoder_loss(enc_f), params_f),
                         torch.autograd.grad(_encoder_loss(enc), params), strict=True):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


def _encoder_loss(enc):
    """A scalar that reaches every encoder output the decoder reads."""
    return enc.annotations.square().sum() + (0 if enc.summary is None else enc.summary.sum())


def test_compiled_step_bodies_match_eager_in_float32():
    """The one compiled test (tens of seconds): fuse=True through RNNSearch.encode, outputs and
    encoder gradients against the eager nn.GRU path, at tiny sizes."""
    pytest.importorskip("torch._inductor")
    from nmtkit.models.fast.fusion import fusion_available

    ok, why = fusion_available("cpu")
    if not ok:
        pytest.skip(why)
    model = tiny_model("rnnsearch", dtype=torch.float32, exact=True)
    src, src_lens, _, _, _ = random_batch()
    enc = model.encode(src, src_lens)
    fused = model.with_fused_steps(True)
    enc_f = fused.encode(src, src_lens)
    torch.testing.assert_close(enc_f.annotations, enc.annotations, atol=1e-5, rtol=1e-5)
    params = [*model.encoder.parameters(), model.src_embed.weight]
    params_f = [*fused.encoder.parameters(), fused.src_embed.weight]
    for got, want in zip(torch.autograd.grad(_encoder_loss(enc_f), params_f),
                         torch.autograd.grad(_encoder_loss(enc), params), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["lstm", "bigru", "gru"])
def test_run_packed_equals_torchs_pack_and_pad_exactly_with_host_lengths(kind):
    """base.run_packed (the packing planned on the host, no device read) gives what
    pack_padded_sequence -> rnn -> pad_packed_sequence gives: outputs, final states, gradients."""
    from devtools.launches import HostReads
    from nmtkit.models.base import run_packed

    torch.manual_seed(0)
    rnn = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(4, 3, batch_first=True, bidirectional=kind != "gru")
    rnn = rnn.double()
    emb, lens, _ = _inputs()
    ref, ref_final = _packed(rnn, emb, lens)
    with HostReads() as reads:
        out, final = run_packed(rnn, emb, lens)
    assert torch.equal(out, ref)
    for got, want in zip(final if kind == "lstm" else [final], ref_final if kind == "lstm" else [ref_final],
                         strict=True):
        assert torch.equal(got, want)
    for got, want in zip(_grads(out, rnn, emb), _grads(ref, rnn, emb), strict=True):
        assert torch.equal(got, want)
    assert reads.calls.get("cpu", 0) == 0 and reads.calls.get("nonzero", 0) == 0, reads.calls


def test_rnnencdec_encoder_over_the_padded_batch_equals_a_packed_gru():
    """RNNencdec's encoder runs its GRU over the padded batch (no packing, no host read): the
    states up to each length and the summary's last state are those of a packed run."""
    model = tiny_model("rnnencdec", exact=True)
    src, src_lens, _, _, _ = random_batch()
    enc = model.encode(src, src_lens)
    src_e = torch.nn.functional.pad(src, (0, 1))
    src_e[torch.arange(src.size(0)), src_lens] = 3
    ref, h_n = _packed(model.encoder, model.src_embed(src_e), src_lens + 1)
    torch.testing.assert_close(enc.annotations, ref, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(enc.summary, torch.tanh(model.V(h_n[0])), atol=1e-12, rtol=1e-12)
