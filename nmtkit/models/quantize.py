"""int8 decoding on the CPU (`--precision int8`): dynamic quantisation of a model's projections.

Each architecture lists in `Seq2Seq.int8_linears` the nn.Linear layers that decoding only ever
calls as modules (never reading `.weight`): the attention's query and key projections, the gate
inputs and recurrent products of the decoder step, the deep output and the output layer.
`quantize_for_decoding` replaces them by `torch.ao.nn.quantized.dynamic.Linear`: int8 weights
(per output channel), activations quantised to int8 per call, the product in int8 with int32
accumulation (fbgemm/oneDNN), the result in float32. Everything else stays float32: the
embeddings, the encoder's nn.GRU/LSTM (its CPU path calls torch.gru with the weights directly),
the attention's tanh/softmax/weighted sums, the elementwise gate arithmetic, log-softmax.

Why torch.ao.quantization.quantize_dynamic and not its announced successor, torchao's
`quantize_(model, Int8DynamicActivationInt8WeightConfig())`: torchao's int8 tensors are meant to
be run through torch.compile; in eager mode on this project's CPU they made a 320x512x1024 +
320x1024x10000 pair of products 1.8x *slower* than float32, while quantize_dynamic's fused
kernels made it faster (docs/int8.md has the measurement). torch.ao.quantization is
deprecated (PyTorch plans to remove it); when it is gone, `--precision int8` says so in one line.

Shortlist decoding (nmtkit.decode.shortlist) takes a batch's rows of the int8 output layer and
packs them once per batch (`shortlist_rows`), so the shortlisted output layer runs in int8 too.
"""
from __future__ import annotations

import warnings
from typing import Any

from nmtkit.errors import ConfigError

INT8_ON_CUDA = ("--precision int8 runs on the CPU only (dynamic int8 quantisation has no CUDA kernels): "
                "use --device cpu, or --precision bf16/fp16 on a GPU")


def _quantization_api():
    """(quantize_dynamic, the dynamic quantized Linear class, per-channel qconfig), or a
    ConfigError when this torch no longer ships torch.ao.quantization."""
    try:
        with warnings.catch_warnings():  # its deprecation notice, once per import: said in the docs
            warnings.simplefilter("ignore")
            from torch.ao.nn.quantized.dynamic import Linear as QLinear
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError as err:
        raise ConfigError(f"--precision int8 needs torch.ao.quantization, which this torch lacks ({err})") from None
    return quantize_dynamic, QLinear, per_channel_dynamic_qconfig


def quantize_for_decoding(model: Any) -> Any:
    """The model (eval mode, CPU, float32) with its `int8_linears` replaced by dynamically
    quantised int8 layers, in place; returns it. Not for training: the int8 layers have no
    gradients. A model that names no such layer is a ConfigError."""
    import torch

    names = tuple(getattr(model, "int8_linears", ()))
    if not names:
        raise ConfigError(f"--precision int8: {type(model).__name__} has no layers to quantise")
    if next(model.parameters()).device.type != "cpu":
        raise ConfigError(INT8_ON_CUDA)
    quantize_dynamic, _, qconfig = _quantization_api()
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(model, {name: qconfig for name in names}, dtype=torch.qint8, inplace=True)
    return model


def is_quantized(module: Any) -> bool:
    """True for a layer `quantize_for_decoding` made (cheap: imports nothing)."""
    import sys

    dynamic = sys.modules.get("torch.ao.nn.quantized.dynamic")  # imported by any quantisation
    return dynamic is not None and isinstance(module, dynamic.Linear)


def shortlist_rows(proj: Any, vocab: Any) -> tuple[Any, None]:
    """The rows `vocab` (L,) of a quantised output layer (V, F), packed for int8 products:
    (packed params, None), the form `Seq2Seq.step`'s `out` takes; `project` applies it."""
    import torch

    values, scales, zero_points, bias = _unpacked(proj)
    rows = torch._make_per_channel_quantized_tensor(
        values.index_select(0, vocab), scales.index_select(0, vocab), zero_points.index_select(0, vocab), 0)
    bias = bias.index_select(0, vocab) if bias is not None else None
    return torch.ops.quantized.linear_prepack(rows, bias), None


def _unpacked(proj: Any) -> tuple[Any, Any, Any, Any]:
    """A quantised layer's int8 weight values (V, F), per-channel scales and zero points (V,) and
    bias, unpacked once per layer and kept on it: `proj.weight()` and `proj.bias()` each unpack
    the whole packed matrix (for the benchmark's output layer, ~3 ms a call, twice a batch)."""
    cached = getattr(proj, "_nmtkit_unpacked", None)
    if cached is None:
        weight = proj.weight()  # qint8, per output channel
        cached = (weight.int_repr(), weight.q_per_channel_scales(), weight.q_per_channel_zero_points(), proj.bias())
        proj._nmtkit_unpacked = cached
    return cached


def project(features: Any, packed: Any) -> Any:
    """features (N, F) float32 times packed int8 rows (L, F) -> (N, L) float32, as the
    quantised layer itself computes it."""
    import torch

    return torch.ops.quantized.linear_dynamic(features, packed, reduce_range=True)
