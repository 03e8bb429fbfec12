"""Model architectures, one file each, behind the `Seq2Seq` interface of `base.py`.

The registry is a plain dict (no decorators): name -> (module, config class name, model class
name), imported lazily so that importing `nmtkit.models` does not import torch.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from nmtkit.errors import ConfigError

ARCHS: dict[str, tuple[str, str, str]] = {
    "rnnsearch": ("nmtkit.models.fast.rnnsearch", "RNNSearchConfig", "FastRNNSearch"),
    "rnnencdec": ("nmtkit.models.rnnencdec", "RNNEncDecConfig", "RNNEncDec"),
    "lstm-attention": ("nmtkit.models.lstm_attention", "LSTMAttentionConfig", "LSTMAttention"),
}


def _lookup(arch: str):
    if arch not in ARCHS:
        raise ConfigError(f"unknown architecture '{arch}' (choose from {', '.join(ARCHS)})")
    mod_name, cfg_name, model_name = ARCHS[arch]
    mod = importlib.import_module(mod_name)
    return getattr(mod, cfg_name), getattr(mod, model_name)


def config_class(arch: str):
    return _lookup(arch)[0]


def model_class(arch: str):
    """The model class of `arch` (its class attributes say what it supports)."""
    return _lookup(arch)[1]


def make_config(arch: str, values: dict[str, Any]):
    """Rebuild `<Arch>Config(**values)`; unknown keys are an error listing the valid ones."""
    cls = config_class(arch)
    valid = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - valid)
    if unknown:
        raise ConfigError(f"unknown {arch} config keys {unknown}; valid keys: {sorted(valid)}")
    return cls(**values)


def build_model(arch: str, config: Any, fuse_steps: bool = False):
    """A freshly initialised model from a config dataclass or a plain dict of its fields, with
    the fast paths (fast/accelerated.py)."""
    if isinstance(config, dict):
        config = make_config(arch, config)
    return model_class(arch)(config, fuse_steps=fuse_steps)
