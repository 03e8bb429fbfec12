"""Named model presets: the paper's configurations and a small one for CPUs.

`PRESETS[name] = (arch, model config dict)`; `TRAIN_DEFAULTS[name]` holds the training settings
that belong to the preset; `resolve_model` builds a run's model config from a preset or an
architecture and `ModelOverrides`. The paper presets follow Bahdanau et al. (2015) section 4.2
and appendix B, RNNencdec Cho et al. (2014) at the same sizes (docs/paper-notes.md); "small"'s
choices are by the ablations in docs/experiments.md.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from nmtkit.errors import ConfigError
from nmtkit.options import check_fields, option

_PAPER = dict(src_vocab_size=30000, tgt_vocab_size=30000, emb_dim=620, enc_hidden=1000,
              dec_hidden=1000, maxout=500, dropout=0.0, init="paper")
_PAPER_TRAIN = dict(optimizer="adadelta", adadelta_eps=1e-6, adadelta_rho=0.95, lr=1.0,
                    batch_size=80, clip_norm=1.0, sort_batches=20)

PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "rnnsearch-30": ("rnnsearch", dict(_PAPER, att_hidden=1000)),
    "rnnsearch-50": ("rnnsearch", dict(_PAPER, att_hidden=1000)),
    "rnnencdec-30": ("rnnencdec", dict(_PAPER)),
    "rnnencdec-50": ("rnnencdec", dict(_PAPER)),
    "lstm-attention": ("lstm-attention", dict(src_vocab_size=30000, tgt_vocab_size=30000,
                                              emb_dim=256, enc_hidden=256, dec_hidden=256,
                                              dropout=0.3, init="uniform")),
    "small": ("rnnsearch", dict(src_vocab_size=8000, tgt_vocab_size=8000, emb_dim=256,
                                enc_hidden=256, dec_hidden=512, att_hidden=512, maxout=256,
                                dropout=0.2, init="uniform", dropout_sites="out", readout="new")),
}

TRAIN_DEFAULTS: dict[str, dict[str, Any]] = {
    "rnnsearch-30": dict(_PAPER_TRAIN, max_len=30),
    "rnnsearch-50": dict(_PAPER_TRAIN, max_len=50),
    "rnnencdec-30": dict(_PAPER_TRAIN, max_len=30),
    "rnnencdec-50": dict(_PAPER_TRAIN, max_len=50),
    "lstm-attention": dict(optimizer="adam", lr=1e-3, batch_size=64, clip_norm=5.0, max_len=50),
    "small": dict(optimizer="adam", lr=1e-3, batch_size=64, clip_norm=1.0, max_len=50, precision="auto",
                  ema_decay=0.998),
}


# The presets trained with the paper's procedure (Adadelta, loss per sentence).
PAPER_PRESETS = ("rnnsearch-30", "rnnsearch-50", "rnnencdec-30", "rnnencdec-50")


def preset(name: str) -> tuple[str, dict[str, Any]]:
    """(arch, a fresh copy of the model config dict) of a named preset."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset '{name}' (choose from {', '.join(PRESETS)})")
    arch, cfg = PRESETS[name]
    return arch, copy.deepcopy(cfg)


def train_defaults(name: str) -> dict[str, Any]:
    """The training settings that come with a preset (max_len, optimiser, batch size, ...)."""
    if name not in TRAIN_DEFAULTS:
        raise ConfigError(f"unknown preset '{name}' (choose from {', '.join(TRAIN_DEFAULTS)})")
    return copy.deepcopy(TRAIN_DEFAULTS[name])


def preset_table() -> dict[str, dict[str, Any]]:
    """Every preset as one dict: {"arch": ..., its model sizes ..., its training settings ...}."""
    return {name: {"arch": preset(name)[0], **preset(name)[1], **train_defaults(name)} for name in PRESETS}


@dataclass(frozen=True)
class ModelOverrides:
    """The model sizes and choices `nmtkit train` may set over the preset's (None: the preset's)."""

    emb_dim: int | None = option(None, metavar="M", help="Word embedding size m (overrides the preset).")
    enc_hidden: int | None = option(None, metavar="N", help="Encoder GRU/LSTM units per direction n.")
    dec_hidden: int | None = option(None, metavar="N", help="Decoder units n.")
    att_hidden: int | None = option(None, metavar="N", help="Alignment model hidden size n'.")
    maxout: int | None = option(None, metavar="L", help="Maxout units l of the deep output.")
    dropout: float | None = option(None, metavar="P", help="Dropout probability (preset's default).")
    init: str | None = option(
        None, choices=("paper", "default", "uniform", "uniform-emb"),
        help="Weight initialisation: paper (the appendix: orthogonal recurrent matrices, N(0, 0.01^2) elsewhere; "
             "the paper presets), default (PyTorch's: N(0, 1) embeddings), uniform (every weight U(-0.1, 0.1), as "
             "OpenNMT-py; lstm-attention, as its assignment; small: it learns more per update) or uniform-emb "
             "(PyTorch's, embeddings U(-0.1, 0.1)).")
    dropout_sites: str | None = option(
        None, metavar="LIST",
        help="rnnsearch: where --dropout applies, a comma-separated subset of src,tgt,out (source and target "
             "embeddings, the deep output) [src,tgt,out; the small preset: out].")
    readout: str | None = option(
        None, choices=("prev", "new"),
        help="rnnsearch: the decoder state in the deep output for y_i: prev, s_{i-1} as the paper's appendix "
             "(the paper presets), or new, s_i as its section 3.1 (the small preset: it learns more per update).")

    def __post_init__(self) -> None:
        check_fields(self)

    def given(self) -> dict[str, Any]:
        """The fields that were set."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def resolve_model(
    arch: str | None, preset_name: str | None, overrides: dict[str, Any], src_vocab: int, tgt_vocab: int
) -> tuple[str, dict[str, Any]]:
    """(arch, model config dict) from a preset and/or an arch, size overrides and the vocab sizes."""
    from nmtkit.models import ARCHS, config_class, make_config

    if preset_name is not None:
        p_arch, cfg = preset(preset_name)
        if arch is not None and arch != p_arch:
            raise ConfigError(f"--arch {arch} contradicts --preset {preset_name} (a {p_arch} preset)")
        arch = p_arch
    else:
        arch = arch or "rnnsearch"
        if arch not in ARCHS:
            raise ConfigError(f"unknown architecture '{arch}' (choose from {', '.join(ARCHS)})")
        cfg = preset(arch)[1] if arch in PRESETS else {}
    valid = {f.name for f in dataclasses.fields(config_class(arch))}
    for key, value in overrides.items():
        if key not in valid:
            raise ConfigError(f"--{key.replace('_', '-')} does not apply to {arch}")
        cfg[key] = value
    cfg["src_vocab_size"], cfg["tgt_vocab_size"] = src_vocab, tgt_vocab
    try:
        model_config = make_config(arch, {k: v for k, v in cfg.items() if k in valid})
    except ConfigError as err:  # "RNNSearchConfig.dropout must be ..." -> "--dropout must be ..."
        raise ConfigError(re.sub(r"\b\w+Config\.(\w+)", lambda m: "--" + m[1].replace("_", "-"), str(err))) from None
    return arch, dataclasses.asdict(model_config)
