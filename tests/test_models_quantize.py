"""`--precision int8` (nmtkit.models.fast.quantize): which layers become int8, that decoding with them
stays close to float32, that the shortlist's int8 rows are the int8 layer's own columns, and
where int8 is refused (CUDA, training)."""
from __future__ import annotations

import pytest
import torch

from nmtkit.errors import ConfigError
from nmtkit.models.fast.quantize import INT8_ON_CUDA, is_quantized, quantize_for_decoding
from tests.conftest import SIZES, make_checkpoint, tiny_model


def _model(arch: str, seed: int = 0):
    return tiny_model(arch, seed, src_vocab=30, tgt_vocab=40)


def _first_step(model, src, lens, out=None):
    """log-probs (B, V) of the first decoding step after BOS."""
    with torch.inference_mode():
        enc = model.encode(src, lens)
        bos = torch.full((src.size(0),), 2, dtype=torch.long)
        lp, _, _ = model.step(bos, model.init_state(enc), enc, out)
    return lp


@pytest.mark.parametrize("arch", list(SIZES))
def test_int8_quantises_exactly_the_listed_layers_and_stays_close_to_fp32(arch):
    model = _model(arch)
    src = torch.randint(4, 30, (3, 7))
    lens = torch.tensor([7, 5, 2])
    ref = _first_step(model, src, lens)
    quantize_for_decoding(model)
    linears = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) or is_quantized(m)}
    quantised = {name for name, m in model.named_modules() if is_quantized(m)}
    assert quantised == set(model.int8_linears) and quantised < linears
    got = _first_step(model, src, lens)
    assert got.shape == ref.shape
    assert not torch.equal(got, ref)  # the int8 products did run
    assert (got.exp() - ref.exp()).abs().max() < 0.02  # probabilities within 2 points of fp32's


def test_every_architecture_has_int8_layers_so_auto_precision_can_choose_int8_before_loading():
    """translate's --precision auto picks int8 before it reads a checkpoint (Translator.__init__):
    right only while every architecture, so every model of an ensemble, can be quantised."""
    from nmtkit.models import ARCHS, model_class

    assert set(SIZES) == set(ARCHS)  # the test above quantises each of them
    assert all(model_class(arch).int8_linears for arch in ARCHS)


def test_the_shortlists_int8_rows_are_the_int8_output_layers_own_columns():
    from nmtkit.decode.search import _shortlist_rows

    model = quantize_for_decoding(_model("rnnsearch"))
    vocab = torch.tensor([0, 1, 2, 3, 9, 17, 39])
    src, lens = torch.randint(4, 30, (2, 5)), torch.tensor([5, 3])
    full = _first_step(model, src, lens)
    rows = _first_step(model, src, lens, _shortlist_rows(model, vocab))
    # the shortlist renormalises over its rows: compare logits up to each row's constant
    expect = full[:, vocab]
    torch.testing.assert_close(rows - rows[:, :1], expect - expect[:, :1], atol=1e-5, rtol=0)
    other = torch.tensor([0, 3, 5])
    rows = _first_step(model, src, lens, _shortlist_rows(model, other))
    torch.testing.assert_close(rows - rows[:, :1], full[:, other] - full[:, :1], atol=1e-5, rtol=0)


def test_an_int8_layers_output_rows_do_not_depend_on_the_other_rows_of_its_input():
    """Each input row is quantised on its own scale: a sentence decodes the same whatever its
    batch-mates (one scale per input tensor, as in torch's dynamic quantisation, does not)."""
    from nmtkit.models.fast.quantize import Int8Linear

    torch.manual_seed(0)
    linear = torch.nn.Linear(24, 10)
    layer = Int8Linear(linear)
    x = torch.randn(6, 24)
    loud = torch.cat([x, 100 * torch.randn(3, 24)])  # other rows of a much larger range
    assert torch.equal(layer(loud)[:6], layer(x))
    assert torch.equal(layer(x[2:3]), layer(x)[2:3])
    with torch.no_grad():
        torch.testing.assert_close(layer(x), linear(x), atol=0.03, rtol=0.03)


@pytest.mark.parametrize("arch", ["rnnsearch", "rnnsearch+readout-new", "rnnencdec", "lstm-attention"])
def test_int8_stacks_give_exactly_the_separate_int8_layers_outputs(arch):
    """The products a step applies to the same input (the state; the embedding rows of
    y_{i-1}), and RNNsearch's keys and values of the annotations, run as one int8 product each,
    with the embedding's rows quantised once: the encoder outputs and two steps' outputs are bit
    for bit those of the separate int8 layers, which the stacked decoding never calls."""
    kw = {"readout": "new"} if arch == "rnnsearch+readout-new" else {}
    model = quantize_for_decoding(tiny_model(arch.split("+")[0], src_vocab=30, tgt_vocab=40, **kw))
    assert model.decode_stacks and set(model.decode_stacks) == set(model.int8_stacks())
    calls = []
    for _, members in model.int8_stacks().values():
        for name in members:
            model.get_submodule(name).register_forward_hook(lambda *_: calls.append(1))
    src, lens = torch.randint(4, 30, (2, 6)), torch.tensor([6, 3])

    def decode():
        enc = model.encode_for_steps(src, lens)
        state, out = model.init_state(enc), []
        for prev in (torch.tensor([2, 2]), torch.tensor([7, 0])):
            lp, state, attn = model.step(prev, state, enc)
            out += [lp, attn]
        return [t for t in (enc.keys, enc.step_values) if t is not None] + out

    with torch.inference_mode():
        got = decode()
        assert not calls
        model.decode_stacks.clear()
        want = decode()
    assert calls
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def test_quantising_a_whole_weight_in_blocks_gives_exactly_the_per_row_quantisation():
    """Weights and embedding tables are quantised block of rows by block at load
    (`quantize_rows_at_load`): exactly the int8 values and scales a step's `quantize_rows` of
    the same rows gives, over several blocks, a last partial one, and rows longer than a block."""
    from nmtkit.models.fast.quantize import _LOAD_BLOCK, int8_columns, quantize_rows, quantize_rows_at_load

    torch.manual_seed(0)
    for shape in [(3 * _LOAD_BLOCK // 100 + 7, 100), (4, 2 * _LOAD_BLOCK + 1)]:
        w = torch.randn(*shape) * torch.rand(shape[0], 1) * 4
        w[1] = 0.0  # an all-zero row keeps its floor scale
        q, scale = quantize_rows_at_load(w)
        want_q, want_scale = quantize_rows(w)
        assert torch.equal(q, want_q) and torch.equal(scale, want_scale)
        cols = int8_columns(w, None)
        assert torch.equal(cols.weight_t, want_q.t()) and torch.equal(cols.scale, want_scale.view(-1))


def test_the_int8_encoder_gives_the_fp32_grus_annotations_closely_and_each_sentence_its_own():
    """RNNsearch's bidirectional GRU runs in int8 (Int8BiGRU): the annotations stay close to
    nn.GRU's (both directions, every length, zero at padding), and a sentence's annotations are
    bit for bit the same alone as beside longer, louder batch-mates."""
    from nmtkit.models.fast.quantize import Int8BiGRU

    torch.manual_seed(3)
    model = _model("rnnsearch")
    src = torch.randint(4, 30, (4, 9))
    lens = torch.tensor([9, 6, 2, 1])
    src[1, 6:] = 0
    src[2, 2:] = 0
    src[3, 1:] = 0
    with torch.inference_mode():
        ref = model.encode_for_steps(src, lens).annotations
        quantize_for_decoding(model)
        assert isinstance(model.encoder, Int8BiGRU)
        got = model.encode_for_steps(src, lens).annotations
        alone = [model.encode_for_steps(src[i:i + 1, : lens[i]], lens[i:i + 1]).annotations for i in range(4)]
    assert got.shape == ref.shape
    assert not torch.equal(got, ref)  # the int8 products did run
    torch.testing.assert_close(got, ref, atol=0.03, rtol=0)
    n = model.config.enc_hidden
    assert ref[:, :, n:].abs().max() > 0.1  # the backward direction is compared too, not zeros
    for i in range(4):
        width = int(lens[i]) + 1  # the model's own EOS
        assert torch.equal(got[i, :width], alone[i][0])
        assert not got[i, width:].any()


def test_an_encoder_int8_cannot_run_stays_float32():
    model = quantize_for_decoding(_model("lstm-attention"))
    assert isinstance(model.encoder, torch.nn.LSTM)


def test_int8_translation_agrees_with_fp32_through_the_api(tmp_path):
    import nmtkit

    ckpt = make_checkpoint(tmp_path / "m.pt")
    lines = ["the cat sat on a mat .", "a dog ran in the park", "the big red house"]
    fp32 = nmtkit.load(ckpt, device="cpu", precision="fp32")
    int8 = nmtkit.load(ckpt, device="cpu", precision="int8")
    assert int8.precision == "int8" and is_quantized(int8.bundle.models[0].W_o)
    ref, got = fp32.generate(lines, beam=3), int8.generate(lines, beam=3)
    assert [r.text for r in got] == [r.text for r in ref]
    for a, b in zip(got, ref):
        assert a.score == pytest.approx(b.score, abs=0.05)


def test_a_checkpoint_of_fp16_weights_decodes_in_int8_with_float32_weights_as_fp32_does(tmp_path):
    """A checkpoint may store its weights in float16: int8 decoding gives the layers it keeps
    float the float32 weights the other precisions load, and translates as fp32 does."""
    import nmtkit

    ckpt = torch.load(make_checkpoint(tmp_path / "m.pt"), weights_only=True)
    ckpt["model_state"] = {k: v.half() for k, v in ckpt["model_state"].items()}
    torch.save(ckpt, tmp_path / "half.pt")
    lines = ["the cat sat on a mat .", "a dog ran in the park", "the big red house"]
    fp32 = nmtkit.load(tmp_path / "half.pt", device="cpu", precision="fp32")
    int8 = nmtkit.load(tmp_path / "half.pt", device="cpu", precision="int8")
    assert is_quantized(int8.bundle.models[0].W_o)
    assert {t.dtype for t in int8.bundle.models[0].state_dict().values() if t.is_floating_point()} == {torch.float32}
    ref, got = fp32.generate(lines, beam=3), int8.generate(lines, beam=3)
    assert [r.text for r in got] == [r.text for r in ref]
    for a, b in zip(got, ref):
        assert a.score == pytest.approx(b.score, abs=0.05)


def test_int8_on_cuda_is_refused_before_any_model_is_loaded(tmp_path, monkeypatch):
    import nmtkit.translate.translator as translator_mod
    from nmtkit.translate.config import DecodeConfig

    monkeypatch.setattr(translator_mod, "resolve_device", lambda name: torch.device("cuda", 0))
    with pytest.raises(ConfigError) as err:
        translator_mod.Translator(DecodeConfig(models=(str(tmp_path / "never-read.pt"),), precision="int8"))
    assert str(err.value) == INT8_ON_CUDA and "\n" not in INT8_ON_CUDA


def test_training_refuses_int8_in_one_line():
    from nmtkit.train.config import TrainConfig

    with pytest.raises(ConfigError, match=r"^--precision int8 is for decoding \(translate, serve\); train with"):
        TrainConfig(precision="int8", max_updates=1)
