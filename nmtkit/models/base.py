"""The interface every architecture implements, used by training and by beam search, and the
weight initialisations they share.

Shapes: B batch, S source length, T target length, V target vocabulary, A annotation size.
Sources carry no BOS/EOS unless the model adds them; `tgt_in` starts with BOS, `tgt_out` ends
with EOS; `forward` must equal a loop of `step` (docs/design.md, 3-4).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from nmtkit.text.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: F401 (re-exported)

State = Any  # a Tensor or a tuple of Tensors, each with the batch on dim 0


@dataclass
class EncoderOut:
    """What `encode` returns, batch on dim 0: annotations (B, S, A) h_j; keys (B, S, K) U_a h_j;
    mask (B, S) bool, True at real positions; summary (B, D) RNNencdec's c; init what `init_state`
    needs; values (B, S, G) projections of h_j averaged with the attention weights, step_values
    (B, S, O) the same for `encode_for_steps`; summary_out projections of `summary` every step
    adds; src_eos: EOS appended at src_lens[b] (S counts it). Optional fields may be None."""

    annotations: Tensor
    keys: Tensor | None
    mask: Tensor
    summary: Tensor | None = None
    init: Any = None
    values: Tensor | None = None
    step_values: Tensor | None = None
    summary_out: tuple[Tensor, ...] | None = None
    src_eos: bool = False

    def index_select(self, index: Tensor) -> "EncoderOut":
        """Rows `index` of the batch (beam search expands and reorders with this)."""
        return dataclasses.replace(self, **{f.name: _index(getattr(self, f.name), index) for f in fields(self)
                                            if f.name != "src_eos"})

    def narrow(self, width: int) -> "EncoderOut":
        """The first `width` source positions of every per-position field; itself when it has no more."""
        if width >= self.mask.size(1):
            return self
        return dataclasses.replace(self, **{name: getattr(self, name)[:, :width]
                                            for name in ("annotations", "keys", "values", "step_values", "mask")
                                            if getattr(self, name) is not None})

    def positions(self, src_len: int) -> int:
        """The source positions attention sees for a sentence of `src_len` tokens (its EOS included)."""
        return src_len + int(self.src_eos)

    def split_attention(self, attention: Tensor, src_len: int) -> tuple[Tensor, Tensor | None]:
        """One sentence's attention (..., >= positions(src_len)) -> (the weights on its `src_len`
        tokens (..., src_len), the weights on its source EOS (...,), or None without one)."""
        return attention[..., :src_len], attention[..., src_len] if self.src_eos else None


def _index(x: Any, index: Tensor) -> Any:
    if x is None:
        return None
    if isinstance(x, Tensor):
        return x.index_select(0, index)
    if isinstance(x, (tuple, list)):
        return type(x)(_index(v, index) for v in x)
    raise TypeError(f"cannot index {type(x)}")


def append_eos(src: Tensor, src_lens: Tensor, eos_id: int = EOS_ID) -> tuple[Tensor, Tensor]:
    """src (B, S) padded with 0 -> (B, S+1) with EOS written after each sentence, lens + 1."""
    out = F.pad(src, (0, 1), value=PAD_ID)
    out[torch.arange(src.size(0), device=src.device), on_device(src_lens, src.device)] = eos_id
    return out, src_lens + 1


def on_device(lens: Tensor, device: torch.device) -> Tensor:
    """Lengths (B,) on `device`, copied without waiting for the queued kernels."""
    return lens.to(device, non_blocking=True)


def length_mask(lens: Tensor, max_len: int) -> Tensor:
    """(B,) lengths -> (B, max_len) bool, True at real positions."""
    return torch.arange(max_len, device=lens.device).unsqueeze(0) < lens.unsqueeze(1)


def run_packed(rnn: nn.RNNBase, emb: Tensor, lens: Tensor) -> tuple[Tensor, Any]:
    """A batch_first nn.GRU/nn.LSTM over emb (B, S, m) packed by `lens` (B,): (outputs (B, S, H),
    zero at padding; each sentence's final state). Packed on the host, without pack_padded_sequence's
    blocking copies."""
    host = (lens if lens.device.type == "cpu" else lens.cpu()).to(torch.int64)
    host, order = torch.sort(host, descending=True)
    B, S = emb.shape[:2]
    keep = torch.arange(S).unsqueeze(1) < host.unsqueeze(0)  # (S, B): step t of sorted sentence b
    rows = (order.unsqueeze(0) * S + torch.arange(S).unsqueeze(1)).masked_select(keep)  # rows of emb (B*S, m)
    rows = on_device(rows, emb.device)
    data = emb.reshape(B * S, -1).index_select(0, rows)
    packed = nn.utils.rnn.PackedSequence(data, keep.sum(1), on_device(order, emb.device),
                                         on_device(torch.argsort(order), emb.device))
    # oneDNN has no fp16 LSTM on most CPUs ("could not create a primitive descriptor"): float32 there
    fp32 = isinstance(rnn, nn.LSTM) and emb.device.type == "cpu" and torch.is_autocast_enabled("cpu") and (
        torch.get_autocast_dtype("cpu") == torch.float16)
    with torch.autocast("cpu", enabled=False) if fp32 else contextlib.nullcontext():
        out, final = rnn(packed)
    padded = out.data.new_zeros(B * S, out.data.size(1)).index_copy(0, rows, out.data)
    return padded.view(B, S, -1), final


class Seq2Seq(nn.Module):
    """Base class of the encoder-decoder models: subclasses implement the methods below the first
    marker; `forward`, `step` and `loss` are derived plainly (the fast paths: fast/accelerated.py)."""

    config: Any  # the architecture's <Arch>Config dataclass
    # True when `step` accepts N = B * G state rows over B encoder rows (a sentence's G hypotheses
    # are consecutive rows): beam search then never copies the encoder outputs
    grouped_encoder: bool = False
    # False for a model without attention (RNNencdec): alignments, plots, <unk> replacement refused
    has_attention: bool = True

    # ---- to implement -------------------------------------------------------------------
    def encode(self, src: Tensor, src_lens: Tensor) -> EncoderOut:
        """src: (B, S) ids, src_lens: (B,) -> EncoderOut."""
        raise NotImplementedError

    def init_state(self, enc: EncoderOut) -> State:
        """The decoder state before the first target token (s_0)."""
        raise NotImplementedError

    def encode_for_steps(self, src: Tensor, src_lens: Tensor) -> EncoderOut:
        """`encode` for decoding step by step, plus what `step_features` reads (`step_values`)."""
        return self.encode(src, src_lens)

    def decode_features(self, enc: EncoderOut, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing. tgt_in: (B, T) -> (features (B, T, F), attention (B, T, S))."""
        raise NotImplementedError

    def step_features(self, prev_tokens: Tensor, state: State, enc: EncoderOut) -> tuple[Tensor, State, Tensor]:
        """One step. prev_tokens: (B,) -> (features (B, F), new state, attention (B, S))."""
        raise NotImplementedError

    def output_layer(self, features: Tensor) -> Tensor:
        """(..., F) -> logits (..., V); by default `output_projection()`."""
        return self.output_projection()(features)

    def output_projection(self) -> nn.Linear | None:
        """The nn.Linear that `output_layer` is, if it is exactly one (the chunked loss reads it)."""
        return None

    # ---- derived ------------------------------------------------------------------------
    def forward(self, src: Tensor, src_lens: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: log-probabilities (B, T, V) in float32 (or float64)."""
        feats, _ = self.decode_features(self.encode(src, src_lens), tgt_in)
        return _log_softmax(self.output_layer(feats))

    def step(self, prev_tokens: Tensor, state: State, enc: EncoderOut,
             out: tuple[Tensor, Tensor | None] | None = None) -> tuple[Tensor, State, Tensor]:
        """One decoding step: (log_probs (B, V), new state, attention (B, S)). `out` = (weight
        (L, F), bias (L,) or None), the output rows of a shortlist of L ids, gives (B, L)."""
        return Seq2Seq._step(self, prev_tokens, state, enc, out)

    def _step(self, prev_tokens: Tensor, state: State, enc: EncoderOut,
              out: tuple[Tensor, Tensor | None] | None = None) -> tuple[Tensor, State, Tensor]:
        feats, state, attn = self.step_features(prev_tokens, state, enc)
        if out is None:
            logits = self.output_layer(feats)
        elif isinstance(out[0], Tensor):  # a shortlist's rows: (weight, bias) or (int8 columns, None)
            logits = F.linear(feats, out[0], out[1])
        else:
            logits = out[0].project(feats)
        return _log_softmax(logits), state, attn

    def reorder(self, state: State, index: Tensor) -> State:
        """Select/reorder batch rows of the state for beam search."""
        return _index(state, index)

    def loss(self, src: Tensor, src_lens: Tensor, tgt_in: Tensor, tgt_out: Tensor,
             label_smoothing: float = 0.0, chunk_tokens: int = 4096, n_tokens: int | None = None
             ) -> tuple[Tensor, Tensor, int]:
        """(loss_sum, nll_sum, n_tokens) over the non-pad targets: the objective (label smoothing:
        (1 - ls) nll + ls mean_v(-log p_v)) and the plain NLL; `chunk_tokens`, `n_tokens`: Accelerated."""
        feats, _ = self.decode_features(self.encode(src, src_lens), tgt_in)
        mask = tgt_out.ne(PAD_ID)
        gold = tgt_out[mask]
        lp = _log_softmax(self.output_layer(feats[mask]))
        nll = -lp.gather(1, gold.unsqueeze(1)).squeeze(1)
        loss = (1 - label_smoothing) * nll + label_smoothing * -lp.mean(dim=-1)
        return loss.sum(), nll.sum(), int(gold.numel())


def dropout(p: float) -> nn.Module:
    """nn.Dropout(p), or nn.Identity for p = 0 (the paper presets): no op launched at all."""
    return nn.Dropout(p) if p > 0 else nn.Identity()


def _log_softmax(logits: Tensor) -> Tensor:
    """log_softmax in float32 at least (bf16/fp16 logits from autocast are upcast)."""
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    return F.log_softmax(logits, dim=-1)


# ---- weight initialisation -------------------------------------------------------------------
PAPER_STD = 0.01
PAPER_ALIGN_STD = 0.001
INITS = ("paper", "default", "uniform", "uniform-emb")
UNIFORM_SCALE = 0.1


@torch.no_grad()
def paper_init_(model: nn.Module, recurrent: Iterable[tuple[Tensor, int]], align: Iterable[Tensor],
                zero: Iterable[Tensor] = ()) -> None:
    """Appendix B.1: the square blocks of the `recurrent` (weight, block size) pairs orthogonal,
    `align` from N(0, 0.001^2), `zero` and every `*bias*` zero, every other parameter N(0, 0.01^2)."""
    done: set[int] = set()
    for weight, block in recurrent:  # weight (k*block, block)
        assert weight.size(0) % block == 0 and weight.size(1) == block, (weight.shape, block)
        for i in range(0, weight.size(0), block):
            nn.init.orthogonal_(weight[i : i + block])
        done.add(id(weight))
    for weight in align:
        weight.normal_(0.0, PAPER_ALIGN_STD)
        done.add(id(weight))
    for p in zero:
        p.zero_()
        done.add(id(p))
    for name, p in model.named_parameters():
        if id(p) in done:
            continue
        if "bias" in name.rsplit(".", 1)[-1]:
            p.zero_()
        else:
            p.normal_(0.0, PAPER_STD)


@torch.no_grad()
def uniform_init_(model: nn.Module, scale: float = UNIFORM_SCALE, embeddings_only: bool = False) -> None:
    """Draw every parameter (or only the nn.Embedding weights) from U(-scale, scale); padding rows stay zero."""
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            module.weight.uniform_(-scale, scale)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
    if embeddings_only:
        return
    emb = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for p in model.parameters():
        if id(p) not in emb:
            p.uniform_(-scale, scale)


def apply_init_(model: nn.Module, init: str, paper: Callable[[], None], default: Callable[[], None] = lambda: None) -> None:
    """Initialise `model` by `init`: "paper" runs `paper` (appendix B.1), "default" PyTorch's plus
    `default`, "uniform" every parameter U(-0.1, 0.1), "uniform-emb" "default" with embeddings
    U(-0.1, 0.1). Under `uninitialised()` it does nothing."""
    if _skipping.get():
        return
    if init == "paper":
        paper()
    elif init == "uniform":
        uniform_init_(model)
    else:
        default()
        if init == "uniform-emb":
            uniform_init_(model, embeddings_only=True)


# PyTorch's initialisers its modules call in their constructors, and the fills they are made of
_FILLS = frozenset({
    nn.init.uniform_, nn.init.normal_, nn.init.constant_, nn.init.kaiming_uniform_,
    Tensor.uniform_, Tensor.normal_, Tensor.zero_, Tensor.fill_,
})
_skipping = contextvars.ContextVar("nmtkit_skip_init", default=False)


class _SkipFills(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _FILLS:
            return args[0] if args else (kwargs or {})["tensor"]
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def uninitialised() -> Iterator[None]:
    """Models built inside are left uninitialised (neither `apply_init_` nor PyTorch's module
    initialisers run), for a model a strict `load_state_dict` then fills."""
    token = _skipping.set(True)
    try:
        with _SkipFills():
            yield
    finally:
        _skipping.reset(token)
