"""Choosing the autocast dtype: bf16 on CPUs only with native BF16 instructions."""
from __future__ import annotations

import pytest
import torch

from nmtkit.models.precision import autocast_dtype, cpu_has_fast_bf16

XEON = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512bw avx512_vnni avx512vl\n"
EPYC = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 avx512vl\n"


def test_bf16_is_fast_only_with_native_instructions():
    assert not cpu_has_fast_bf16(XEON)
    assert cpu_has_fast_bf16(EPYC)
    assert cpu_has_fast_bf16("flags : amx_bf16 amx_tile\n")
    assert not cpu_has_fast_bf16("no flags line at all\n")


def test_explicit_precisions():
    assert autocast_dtype("cpu", "fp32") is None
    assert autocast_dtype("cpu", "bf16") is torch.bfloat16
    assert autocast_dtype("cuda", "fp16") is torch.float16
    assert autocast_dtype("cpu", "auto") in (None, torch.bfloat16)
    with pytest.raises(ValueError):
        autocast_dtype("cpu", "fp8")


def test_auto_precision_resolves_to_one_concrete_name_per_device(monkeypatch):
    """--precision auto means bf16 on CPUs where bf16 pays off, else fp32; others pass through."""
    import nmtkit.models.precision as prec

    monkeypatch.setattr(prec, "cpu_bf16_pays_off", lambda: True)
    assert prec.resolve_precision("cpu", "auto") == "bf16"
    monkeypatch.setattr(prec, "cpu_bf16_pays_off", lambda: False)
    assert prec.resolve_precision("cpu", "auto") == "fp32"
    for name in ("fp32", "bf16", "fp16"):
        assert prec.resolve_precision("cpu", name) == name


@pytest.mark.parametrize(("native", "speedup", "expected"), [
    (True, 1.7, "bf16"),   # an EPYC with avx512_bf16: bf16 products much faster
    (True, 0.6, "fp32"),   # a Xeon with avx512_bf16 and no AMX: bf16 products slower
    (True, 1.1, "fp32"),   # a near tie is not worth bf16's rounding
    (False, None, "fp32"),  # emulated bf16: not even timed
])
def test_auto_chooses_bf16_on_a_cpu_only_where_its_native_products_beat_float32(monkeypatch, native, speedup,
                                                                                 expected):
    import nmtkit.models.precision as prec

    def timed():
        assert speedup is not None, "a CPU without native BF16 must not time a bf16 product"
        return speedup

    monkeypatch.setattr(prec, "cpu_has_fast_bf16", lambda cpuinfo=None: native)
    monkeypatch.setattr(prec, "cpu_bf16_speedup", timed)
    assert prec.resolve_precision("cpu", "auto") == expected


def test_the_bf16_speedup_is_timed_once_per_process():
    """The measurement behind auto is a real ratio of two timings, taken once (a process's
    training and decoding agree on what auto means)."""
    from nmtkit.models.precision import cpu_bf16_speedup

    first = cpu_bf16_speedup()
    assert 0.0 < first < float("inf")
    assert cpu_bf16_speedup() == first
    assert cpu_bf16_speedup.cache_info().hits >= 1


def test_tf32_is_on_for_cuda_fp32_runs_unless_switched_off_and_untouched_elsewhere():
    import torch

    from nmtkit.models.precision import set_tf32

    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.fp32_precision, cudnn.fp32_precision)
    try:
        matmul.fp32_precision = cudnn.fp32_precision = "ieee"
        assert set_tf32("cpu", "fp32", True) is False and matmul.fp32_precision == "ieee"
        assert set_tf32("cuda", "bf16", True) is False and matmul.fp32_precision == "ieee"
        assert set_tf32("cuda", "fp32", True) is True
        assert (matmul.fp32_precision, cudnn.fp32_precision) == ("tf32", "tf32")
        assert set_tf32("cuda", "fp32", False) is False  # --no-tf32: exact fp32
        assert (matmul.fp32_precision, cudnn.fp32_precision) == ("ieee", "ieee")
    finally:
        matmul.fp32_precision, cudnn.fp32_precision = saved


@pytest.mark.parametrize("n_rows", [1, 63, 64, 130])
def test_bf16_chunked_loss_with_padded_rows_equals_the_unpadded_one(monkeypatch, n_rows):
    """The zero rows that pad a 16-bit chunk to a multiple of ROW_MULTIPLE change neither the
    loss nor any gradient (up to bf16 rounding of a differently blocked product)."""
    from nmtkit.models.fast import accelerated as chunked_loss

    g = torch.Generator().manual_seed(n_rows)
    feats = torch.randn(n_rows, 24, generator=g)
    weight = torch.randn(50, 24, generator=g) * 0.3
    bias = torch.randn(50, generator=g) * 0.1
    gold = torch.randint(0, 50, (n_rows,), generator=g)

    def run(row_multiple):
        monkeypatch.setattr(chunked_loss, "ROW_MULTIPLE", row_multiple)
        leaves = [t.clone().requires_grad_(True) for t in (feats, weight, bias)]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, nll = chunked_loss.linear_cross_entropy(*leaves, gold, label_smoothing=0.1, chunk_tokens=128)
        loss.backward()
        return [loss.detach(), nll.detach()] + [t.grad for t in leaves]

    padded, plain = run(64), run(1)
    for a, b in zip(padded, plain):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)


def test_cpu_bf16_training_runs_the_products_of_both_lengths_in_float32():
    """Under CPU bf16 autocast, the products of a training step whose shapes hold both the target
    length T and the source length S' (the contexts c_i, their two gradients, the values'
    gradient) run in float32, since oneDNN would build a primitive for every (T, S') pair; the
    step's other products stay bf16."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from nmtkit.models import build_model
    from tests.conftest import random_batch

    products = {torch.ops.aten.mm.default, torch.ops.aten.bmm.default, torch.ops.aten.addmm.default,
                torch.ops.aten.baddbmm.default}
    seen = []

    class Products(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in products:
                tensors = [a for a in args if isinstance(a, torch.Tensor)]
                seen.append(({n for t in tensors for n in t.shape}, {t.dtype for t in tensors}))
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    model = build_model("rnnsearch", dict(src_vocab_size=50, tgt_vocab_size=60, emb_dim=16, enc_hidden=8,
                                          dec_hidden=12, att_hidden=10, maxout=4, dropout=0.0))
    src, lens, tgt_in, tgt_out, _ = random_batch(50, 60, src_lens=(5, 3), tgt_lens=(10, 4))
    S, T = src.size(1) + 1, tgt_in.size(1)  # S' counts the source EOS
    assert (S, T) == (6, 11)
    with Products():
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the trainer's backward runs outside it too
            loss, _, n = model.loss(src, lens, tgt_in, tgt_out, n_tokens=int(tgt_out.ne(0).sum()))
        (loss / n).backward()
    pairs = [dtypes for dims, dtypes in seen if {S, T} <= dims]
    assert len(pairs) == 4 and all(dtypes == {torch.float32} for dtypes in pairs), pairs
    assert any(torch.bfloat16 in dtypes for dims, dtypes in seen if not {S, T} <= dims)


def test_the_bf16_speedup_is_float32_time_over_bf16_time(monkeypatch):
    """A bf16 product twice as fast as float32's is a speedup of 2, not 0.5 (auto would pick bf16
    exactly where it is slower)."""
    import nmtkit.models.precision as prec

    dtypes = []
    monkeypatch.setattr(prec.torch, "mm", lambda x, y: dtypes.append(x.dtype))
    monkeypatch.setattr(prec.timeit, "repeat", lambda stmt, repeat, number: [
        stmt() or (2.0 if dtypes[-1] == torch.float32 else 1.0)] * repeat)
    assert prec.cpu_bf16_speedup.__wrapped__() == 2.0


@pytest.mark.parametrize("bf16", [True, False])
def test_auto_on_cuda_is_bf16_where_the_gpu_supports_it_else_fp16(monkeypatch, bf16):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    assert autocast_dtype("cuda", "auto") is (torch.bfloat16 if bf16 else torch.float16)


def test_a_resumed_auto_keeps_fp16_only_on_cuda(monkeypatch):
    """fp16 is what auto chose on a GPU; the same run resumed on a CPU resolves auto afresh (fp16 is
    emulated and slow there)."""
    import nmtkit.models.precision as prec

    monkeypatch.setattr(prec, "cpu_bf16_pays_off", lambda: False)
    assert prec.resolve_precision("cuda", "auto", kept="fp16") == "fp16"
    assert prec.resolve_precision("cpu", "auto", kept="fp16") == "fp32"


@pytest.mark.parametrize("arch", ["lstm-attention", "rnnencdec", "rnnsearch"])
def test_every_architecture_trains_and_decodes_under_fp16_on_the_cpu_as_the_help_says(arch):
    """--precision fp16 'runs on a CPU, slowly': oneDNN, which runs nn.LSTM over a batch of one
    sentence length, has no fp16 LSTM on most CPUs, so the lstm-attention model's encoder ended
    train and translate (`-m lstm.pt --precision fp16`, one line) in a RuntimeError; it runs in
    float32 there."""
    from nmtkit.decode.search import beam_search
    from tests.conftest import random_batch, tiny_model

    model = tiny_model(arch, seed=2)
    src, src_lens, tgt_in, tgt_out, _ = random_batch(model.config.src_vocab_size, model.config.tgt_vocab_size,
                                                     src_lens=(4, 4), tgt_lens=(3, 2))  # one length: oneDNN's LSTM
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model.loss(src, src_lens, tgt_in, tgt_out)[0]
        loss.backward()
        assert torch.isfinite(loss) and all(beam_search(model, src, src_lens, beam=2))


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_chunked_loss_in_row_blocks_equals_one_block(monkeypatch, label_smoothing):
    """Normalising a chunk's logits in blocks of rows (on the CPU, to keep them in the caches)
    changes neither the loss, nor the NLL, nor any gradient: float64, blocks of 1, 7 and all rows."""
    from nmtkit.models.fast import accelerated as chunked_loss

    g = torch.Generator().manual_seed(3)
    feats = torch.randn(30, 12, generator=g, dtype=torch.float64)
    weight = torch.randn(40, 12, generator=g, dtype=torch.float64) * 0.3
    bias = torch.randn(40, generator=g, dtype=torch.float64) * 0.1
    gold = torch.randint(0, 40, (30,), generator=g)

    def run(block_rows):
        monkeypatch.setattr(chunked_loss, "BLOCK_LOGITS", block_rows * 40)
        monkeypatch.setattr(chunked_loss, "MIN_BLOCK_ROWS", 1)
        leaves = [t.clone().requires_grad_(True) for t in (feats, weight, bias)]
        loss, nll = chunked_loss.linear_cross_entropy(*leaves, gold, label_smoothing, chunk_tokens=16)
        loss.backward()
        return [loss.detach(), nll.detach()] + [t.grad for t in leaves]

    whole = run(1 << 10)
    for block_rows in (1, 7):
        for a, b in zip(run(block_rows), whole):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


def test_chunked_loss_blocks_hold_enough_rows_for_a_large_vocabulary():
    """On the CPU a block holds BLOCK_LOGITS worth of rows but never fewer than MIN_BLOCK_ROWS (a
    30,000-word vocabulary would otherwise launch a block every 17 rows); compiled or off the CPU,
    a block is the whole chunk."""
    from nmtkit.models.fast.accelerated import BLOCK_LOGITS, MIN_BLOCK_ROWS, block_rows

    assert block_rows(7161, 4096, True) == BLOCK_LOGITS // 7161 > MIN_BLOCK_ROWS
    assert block_rows(30000, 4096, True) == MIN_BLOCK_ROWS > BLOCK_LOGITS // 30000
    assert block_rows(30000, 4096, False) == 4096


def test_cpu_bf16_autocast_runs_the_bigru_encoder_in_bf16_and_returns_float32_annotations(monkeypatch):
    """torch.gru is not on autocast's list; under CPU bf16 autocast the encoder casts its input and
    weights and runs the GRU in bf16 (its products at bf16's rate). The annotations come back in
    float32, within bf16's rounding of float32's, and the float32 weights get their gradients."""
    from nmtkit.models import build_model
    from tests.conftest import random_batch

    gru_dtypes, gru = [], torch.gru

    def recorded(x, h, weights, *args):
        gru_dtypes.append({x.dtype, h.dtype} | {w.dtype for w in weights})
        return gru(x, h, weights, *args)

    torch.manual_seed(0)
    model = build_model("rnnsearch", dict(src_vocab_size=50, tgt_vocab_size=60, emb_dim=16, enc_hidden=8,
                                          dec_hidden=12, att_hidden=10, maxout=4, dropout=0.0))
    src, lens, *_ = random_batch(50, 60, src_lens=(5, 3), tgt_lens=(4, 4))
    exact = model.encode(src, lens).annotations
    monkeypatch.setattr(torch, "gru", recorded)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ann = model.encode(src, lens).annotations
    assert gru_dtypes == [{torch.bfloat16}, {torch.bfloat16}]
    assert ann.dtype == torch.float32
    torch.testing.assert_close(ann, exact, atol=2e-2, rtol=2e-2)
    assert not torch.equal(ann, exact)
    ann.sum().backward()
    grads = [model.encoder.weight_hh_l0.grad, model.encoder.weight_ih_l0_reverse.grad]
    assert all(g is not None and g.dtype == torch.float32 and g.abs().sum() > 0 for g in grads)
