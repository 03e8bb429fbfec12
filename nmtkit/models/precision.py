"""Which precision pays off on a device (`--precision auto` of training and of decoding): bf16 on
CUDA when supported; on a CPU, bf16 only when it is native and measurably faster than float32, and
for decoding int8 first where the CPU has int8 dot products (VNNI, AMX). Also TF32 for fp32 on CUDA.
"""
from __future__ import annotations

import timeit
from contextlib import contextmanager, nullcontext
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import torch

# how much faster than float32 a bf16 product must be for `auto` on a CPU: a near tie is not worth
# bf16's rounding and casts
BF16_MIN_SPEEDUP = 1.2

FP16_ON_CPU = ("--precision fp16 on the CPU works but is emulated and slow; it is meant for GPUs "
               "(bf16 is the CPU's 16-bit option)")


def cpu_has_fast_bf16(cpuinfo: str | None = None) -> bool:
    """True when the CPU flags (Linux /proc/cpuinfo, or the text given) include native BF16."""
    return _cpu_has_any_flag(("avx512_bf16", "amx_bf16"), cpuinfo)


@lru_cache(maxsize=None)
def cpu_bf16_speedup() -> float:
    """float32 time / bf16 time of one (256, 512) x (512, 1024) matrix product on this CPU, best of
    5 after a warm-up; measured once per process."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 512, generator=gen), torch.randn(512, 1024, generator=gen)

    def best(x, y) -> float:
        torch.mm(x, y)
        return min(timeit.repeat(lambda: torch.mm(x, y), repeat=5, number=1))

    return best(a, b) / best(a.bfloat16(), b.bfloat16())


def cpu_bf16_pays_off() -> bool:
    """What `--precision auto` means on a CPU: native BF16 that beats float32 by `BF16_MIN_SPEEDUP`."""
    return cpu_has_fast_bf16() and cpu_bf16_speedup() >= BF16_MIN_SPEEDUP


def cpu_has_fast_int8(cpuinfo: str | None = None) -> bool:
    """True when the CPU flags include int8 dot products (VNNI, AMX), where int8 decodes fastest."""
    return _cpu_has_any_flag(("avx512_vnni", "avx_vnni", "amx_int8"), cpuinfo)


def _cpu_has_any_flag(wanted: tuple[str, ...], cpuinfo: str | None) -> bool:
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return False
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[-1].split())
            return any(f in flags for f in wanted)
    return False


def autocast_dtype(device: str, precision: str = "auto"):
    """torch dtype to autocast to, or None for plain float32. precision: "fp32" | "bf16" | "fp16" |
    "auto" (bf16 where it is faster, else float32)."""
    fixed = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
    if precision in fixed:
        return fixed[precision]
    if precision != "auto":
        raise ValueError(f"unknown precision {precision!r}")
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_bf16_pays_off() else None


def resolve_precision(device_type: str, precision: str, kept: str | None = None) -> str:
    """`precision` with "auto" replaced by what it means on `device_type` ("bf16", "fp16", "fp32"),
    or by `kept` (what a resumed run's auto chose) where `device_type` runs it natively."""
    if precision != "auto":
        return precision
    cuda = device_type == "cuda"
    if kept == "fp32" or kept == "fp16" and cuda or kept == "bf16" and (
            torch.cuda.is_bf16_supported() if cuda else cpu_has_fast_bf16()):
        return kept
    return {torch.bfloat16: "bf16", torch.float16: "fp16", None: "fp32"}[autocast_dtype(device_type, "auto")]


def autocast(device_type: str, precision: str):
    """The autocast context for `precision` on `device_type` (a no-op for plain float32)."""
    dtype = autocast_dtype(device_type, precision)
    return torch.autocast(device_type=device_type, dtype=dtype) if dtype is not None else nullcontext()


def set_tf32(device_type: str, precision: str, enabled: bool) -> bool:
    """Let a CUDA fp32 run use TF32, or forbid it; other runs are untouched. Returns whether TF32 is on."""
    if device_type != "cuda" or precision != "fp32":
        return False
    mode = "tf32" if enabled else "ieee"
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch >= 2.9; mixing the APIs is an error
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.fp32_precision = mode
    else:
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled
    return enabled


@contextmanager
def tf32_restored() -> Iterator[None]:
    """Within, a run may set TF32 for the process (`set_tf32`); after, it is as before."""
    flags = (torch.backends.cuda.matmul, torch.backends.cudnn)
    name = "fp32_precision" if hasattr(flags[0], "fp32_precision") else "allow_tf32"
    before = [getattr(f, name) for f in flags]
    try:
        yield
    finally:
        for f, value in zip(flags, before):
            setattr(f, name, value)


def resolve_decode_precision(device_type: str, precision: str) -> str:
    """translate's and serve's --precision with "auto" resolved: "int8" on a CPU with int8 dot
    products, else what auto means in training."""
    if precision == "auto" and device_type == "cpu" and cpu_has_fast_int8():
        return "int8"
    return resolve_precision(device_type, precision)
