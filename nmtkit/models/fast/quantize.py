"""int8 decoding on the CPU (`--precision int8`): the projections as int8 products.

`Int8Linear`: the weight in int8 with one scale per output channel; each input row quantised on
its own scale (a row's result does not depend on its batch), multiplied with exact int32
accumulation (`torch._int_mm`), scaled back to float32, plus the float32 bias (docs/int8.md).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from nmtkit.errors import ConfigError
from nmtkit.models.fast.gru_recurrence import gru_gates, source_order, step_order

INT8_ON_CUDA = ("--precision int8 runs on the CPU only (its int8 products are CPU kernels): "
                "use --device cpu, or --precision bf16/fp16 on a GPU")


class Int8Rows(NamedTuple):
    """An int8 layer's weight (F, V), transposed, its scales (V,) and float32 bias (V,) or None:
    the whole layer, or a shortlist's columns of it."""

    weight_t: Tensor
    scale: Tensor
    bias: Tensor | None

    def project(self, x: Tensor) -> Tensor:
        """x (..., F) float -> x W^T + b (..., V) float32."""
        shape = x.shape
        y = int8_rows_matmul(*quantize_rows(x.reshape(-1, shape[-1]).float()), self)
        return y.reshape(*shape[:-1], y.size(1))


def quantize_rows(x: Tensor) -> tuple[Tensor, Tensor]:
    """x (N, F) float32 -> (int8 (N, F), scales (N, 1)): each row on its own scale, max |x_n| -> 127."""
    x_scale = x.abs().amax(1, keepdim=True).clamp_min_(1e-30).div_(127.0)
    return torch.div(x, x_scale).round_().to(torch.int8), x_scale


_LOAD_BLOCK = 1 << 16  # floats quantised at a time, so that each block's passes run in the cache


def quantize_rows_at_load(x: Tensor) -> tuple[Tensor, Tensor]:
    """`quantize_rows` of a whole weight or embedding (float32, (N, F)), block by block of rows."""
    q = torch.empty(x.shape, dtype=torch.int8)
    scale = torch.empty(x.size(0), 1, dtype=x.dtype)
    step = max(1, _LOAD_BLOCK // max(1, x.size(1)))
    for i in range(0, x.size(0), step):
        q[i : i + step], scale[i : i + step] = quantize_rows(x[i : i + step])
    return q, scale


def int8_rows_matmul(xq: Tensor, x_scale: Tensor, rows: Int8Rows) -> Tensor:
    """Rows quantised by `quantize_rows` -> x W^T + b (N, V) float32, over the int32 product."""
    acc = torch._int_mm(xq, rows.weight_t)
    y = acc.view(torch.float32)
    y.copy_(acc).mul_(x_scale)
    if rows.bias is not None:
        return torch.addcmul(rows.bias, y, rows.scale, out=y)
    return y.mul_(rows.scale)


def int8_columns(weight: Tensor, bias: Tensor | None) -> Int8Rows:
    """A float weight (V, F) and bias (V,) or None -> Int8Rows (one scale per output channel)."""
    q, scale = quantize_rows_at_load(weight.detach().float())  # a channel's weights are a row
    return Int8Rows(q.t().contiguous(), scale.view(-1), bias.detach().float().clone() if bias is not None else None)


class Int8Stack(nn.Module):
    """Int8 layers a decoding step applies to the same input, as one product of their columns side
    by side: (N, sum of `sizes`). With `embedding`, the input is token ids (N,) and the embedding's
    rows are quantised once, here, as a step would quantise the rows it looks up."""

    def __init__(self, layers: list[Int8Rows], embedding: nn.Embedding | None = None):
        super().__init__()
        self.sizes = tuple(layer.weight_t.size(1) for layer in layers)
        self.register_buffer("weight_t", torch.cat([layer.weight_t for layer in layers], dim=1))
        self.register_buffer("scale", torch.cat([layer.scale for layer in layers]))
        bias = None
        if any(layer.bias is not None for layer in layers):  # a layer without one adds zeros
            bias = torch.cat([layer.bias if layer.bias is not None else torch.zeros_like(layer.scale)
                              for layer in layers])
        self.register_buffer("bias", bias)
        table, table_scale = (quantize_rows_at_load(embedding.weight.detach().float()) if embedding is not None
                              else (None, None))
        self.register_buffer("table", table)
        self.register_buffer("table_scale", table_scale)

    def rows(self) -> Int8Rows:
        return Int8Rows(self.weight_t, self.scale, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        if self.table is not None:
            return int8_rows_matmul(self.table.index_select(0, x), self.table_scale.index_select(0, x), self.rows())
        return self.rows().project(x)

    def extra_repr(self) -> str:
        return f"sizes={self.sizes}, int8" + (", from embedding rows" if self.table is not None else "")


class Int8Linear(Int8Stack):
    """An nn.Linear for decoding: int8 weight per output channel, int8 input per row."""

    def __init__(self, linear: nn.Linear):
        super().__init__([int8_columns(linear.weight, linear.bias)])
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def quantize_for_decoding(model: Any) -> Any:
    """The model (eval mode, CPU, float32) with its `int8_linears` replaced by `Int8Linear`, its
    `int8_stacks()` built in `decode_stacks` and its `int8_encoder` made an `Int8BiGRU`, in place."""
    names = tuple(getattr(model, "int8_linears", ()))
    if not names:
        raise ConfigError(f"--precision int8: {type(model).__name__} has no layers to quantise")
    if next(model.parameters()).device.type != "cpu":
        raise ConfigError(INT8_ON_CUDA)
    model.eval()
    for name in names:
        setattr(model, name, Int8Linear(getattr(model, name)))
    for key, (embedding, members) in model.int8_stacks().items():
        model.decode_stacks[key] = Int8Stack([model.get_submodule(m).rows() for m in members],
                                             model.get_submodule(embedding) if embedding else None)
    if model.int8_encoder is not None:
        setattr(model, model.int8_encoder, Int8BiGRU(model.get_submodule(model.int8_encoder)))
    return model


class Int8BiGRU(nn.Module):
    """A one-layer bidirectional nn.GRU (batch_first) for decoding over token ids: gru_recurrence.py's
    equations with both products int8 as in `Int8Linear`, the gates float32."""

    def __init__(self, rnn: nn.GRU):
        super().__init__()
        if not (rnn.bidirectional and rnn.num_layers == 1 and rnn.batch_first and rnn.bias):
            raise ConfigError("int8 encoders are one-layer bidirectional batch-first GRUs with biases")
        self.hidden_size = n = rnn.hidden_size
        self.inputs = Int8Stack([int8_columns(rnn.weight_ih_l0, rnn.bias_ih_l0),
                                 int8_columns(rnn.weight_ih_l0_reverse, rnn.bias_ih_l0_reverse)])
        fwd = int8_columns(rnn.weight_hh_l0, rnn.bias_hh_l0)
        bwd = int8_columns(rnn.weight_hh_l0_reverse, rnn.bias_hh_l0_reverse)
        self.register_buffer("weight_t", torch.stack([fwd.weight_t, bwd.weight_t]))  # (2, n, 3n)
        self.register_buffer("scale", torch.stack([fwd.scale, bwd.scale]).view(2, 1, 3 * n))
        self.register_buffer("bias", torch.stack([fwd.bias, bwd.bias]).view(2, 1, 3 * n))

    def forward(self, embedding: nn.Embedding, src: Tensor, lens: Tensor, mask: Tensor) -> Tensor:
        """src (B, S) ids, lens (B,), mask (B, S) -> annotations [fwd h_j ; bwd h_j] (B, S, 2n)."""
        B, S = src.shape
        n = self.hidden_size
        steps = step_order(lens, mask)
        x = self.inputs(embedding.weight.index_select(0, src.reshape(-1)))
        x = x.view(B, S, 2, 3 * n).permute(2, 1, 0, 3)  # (2, S, B, 3n)
        xs = x.gather(1, steps.expand(-1, -1, -1, 3 * n))
        acc = torch.empty(2, B, 3 * n, dtype=torch.int32)
        gh = acc.view(torch.float32)  # W_hh h_{t-1} + b_hh, written over the int32 products
        h = xs.new_zeros(2, B, n)
        states = []
        for t in range(S):
            hq, h_scale = quantize_rows(h.view(2 * B, n))
            torch._int_mm(hq[:B], self.weight_t[0], out=acc[0])
            torch._int_mm(hq[B:], self.weight_t[1], out=acc[1])
            gh.copy_(acc).mul_(h_scale.view(2, B, 1)).mul_(self.scale)
            _, z, c, _ = gru_gates(xs[:, t], gh, self.bias, n)
            h = c + z * (h - c)
            states.append(h)
        return source_order(torch.stack(states, dim=1), steps, mask)

    def extra_repr(self) -> str:
        return f"hidden_size={self.hidden_size}, bidirectional, int8"


def is_quantized(module: Any) -> bool:
    """True for a layer `quantize_for_decoding` made."""
    return isinstance(module, Int8Linear)


def shortlist_rows(proj: Int8Linear, vocab: Tensor) -> tuple[Int8Rows, None]:
    """The columns `vocab` (L,) of an int8 output layer, as `Seq2Seq.step`'s `out`."""
    bias = proj.bias.index_select(0, vocab) if proj.bias is not None else None
    return Int8Rows(proj.weight_t.index_select(1, vocab), proj.scale.index_select(0, vocab), bias), None
