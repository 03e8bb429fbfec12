"""Several processes, one model: torchrun + DistributedDataParallel.

`torchrun --nproc_per_node N -m nmtkit train ...` starts N processes; `init()` joins them into a
process group (NCCL on CUDA, gloo on CPU). Every rank computes the same epoch plan and trains on
its own minibatches of each update. Only rank 0 validates and writes files; what it decides (dev
score, stop) is broadcast.
"""
from __future__ import annotations

import hashlib
import logging
import os
import signal
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from nmtkit import signals
from nmtkit.errors import ConfigError, TrainingError
from nmtkit.progress import note

# How long a rank waits in a collective before the job is declared hung: rank 0 validates alone while
# the others wait, and NCCL's default of 10 minutes is shorter than a validation can take.
PROCESS_GROUP_TIMEOUT = timedelta(hours=2)


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1  # processes on this machine (they share its CPU cores)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_info() -> DistInfo:
    """The process's place in a torchrun job (a single process when WORLD_SIZE is unset or 1)."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if world > 1 else 1
    except ValueError:
        raise ConfigError("WORLD_SIZE, RANK, LOCAL_RANK and LOCAL_WORLD_SIZE must be integers (set by torchrun)") \
            from None
    if world < 1:  # -1 trained nothing, forever, deaf to signals; 0 divided by zero
        raise ConfigError(f"WORLD_SIZE={world}: it counts the job's processes, at least 1 (set by torchrun)")
    if not 0 <= rank < world:  # RANK=1 alone got no minibatches (an AssertionError)
        raise ConfigError(f"RANK={rank} outside WORLD_SIZE={world} (set both, or start with torchrun)")
    return DistInfo(rank, local, world, local_world)


def init(info: DistInfo, device: torch.device) -> None:
    """Join the process group (no-op for a single process). Under torchrun the process first asks
    for SIGTERM when torchrun itself dies, so that the ranks save checkpoint_last.pt and exit rather
    than train on, orphaned in sessions of their own, holding the run's lock."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        signals.die_with_parent(signal.SIGTERM, os.getppid())
    if not info.enabled or dist.is_initialized():
        return
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            raise ConfigError(f"WORLD_SIZE={info.world_size} but {var} is not set (start with torchrun)")
    backend = "nccl" if device.type == "cuda" else "gloo"
    note(logging.getLogger(__name__), f"rank {info.rank} waits for the job's {info.world_size - 1} other process(es) "
         f"to join at {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} (for up to {PROCESS_GROUP_TIMEOUT})")
    # SIGTERM and SIGINT end the process at once while it joins (in C++, where Python's handlers do
    # not run): nothing is written yet.
    with signals.handled_by(signal.SIG_DFL):
        dist.init_process_group(backend=backend, rank=info.rank, world_size=info.world_size,
                                timeout=PROCESS_GROUP_TIMEOUT)


def shutdown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_floats(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """Rank 0's values on every rank (one small collective)."""
    if not info.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.broadcast(t, src=0)
    return t.tolist()


def rank0_choice(value: str, choices: tuple[str, ...], info: DistInfo, device: torch.device) -> str:
    """Rank 0's `value` (one of `choices`) on every rank (a timed `--precision auto`)."""
    (index,) = broadcast_floats([float(choices.index(value))], info, device)
    return choices[int(index)]


def all_max(value: float, info: DistInfo, device: torch.device) -> float:
    """The largest of the ranks' values, on every rank (one small collective)."""
    if not info.enabled:
        return value
    t = torch.tensor([float(value)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def any_flag(flag: bool, info: DistInfo, device: torch.device) -> bool:
    """True on every rank when any rank's flag is set."""
    return all_max(float(flag), info, device) > 0


def check_same(values: dict[str, object], info: DistInfo, device: torch.device) -> None:
    """A ConfigError on every rank where a rank's `values` (its options, model, data) are not rank
    0's: such a process hangs in collectives that do not match, or trains on its own epoch plan."""
    if not info.enabled:
        return
    mine = [float(int.from_bytes(hashlib.blake2b(repr(v).encode(), digest_size=6).digest(), "big"))
            for v in values.values()]  # 48 bits: exact in a float64
    differ = [name for name, a, b in zip(values, mine, broadcast_floats(mine, info, device)) if a != b]
    if any_flag(bool(differ), info, device):
        who = f"rank {info.rank}'s {differ[0]} ({values[differ[0]]}) is not rank 0's" if differ else \
            "another process of the job has other options or data"
        raise ConfigError(f"{who}: start every process of the job with the same options and data")


# what gloo and NCCL say when a peer is gone (gloo raises a plain RuntimeError)
_LOST_PEER = ("Connection reset by peer", "Connection closed by peer", "gloo/transport", "NCCL error",
              "ProcessGroupNCCL", "ProcessGroupGloo")


def lost_process_error(err: BaseException, update: int, saved_update: int | None) -> TrainingError | None:
    """One line for a collective that failed because another process of the job stopped, in place
    of the backend's traceback; None for any other error. `saved_update`: checkpoint_last.pt's."""
    if not isinstance(err, RuntimeError):
        return None
    text = str(err)
    if not (isinstance(err, dist.DistError) or any(mark in text for mark in _LOST_PEER)):
        return None
    detail = text.splitlines()[0] if text else type(err).__name__
    if detail.startswith("[") and "] " in detail:  # gloo's "[/path/pair.cc:537] Read error ..."
        detail = detail.split("] ", 1)[1]
    detail = detail.split(". This is typically", 1)[0]
    then = (f"the run continues from checkpoint_last.pt (update {saved_update}) with --resume"
            if saved_update is not None else "the run had saved no checkpoint: start it again")
    return TrainingError(f"a collective of the job failed after update {update} ({detail}): another process stopped "
                         f"or lost its connection; {then}")


class LossModule(nn.Module):
    """Makes `model.loss` the forward of a module, so DistributedDataParallel syncs its gradients."""

    def __init__(self, model: nn.Module, label_smoothing: float, chunk_tokens: int):
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing
        self.chunk_tokens = chunk_tokens

    def forward(self, src, src_lens, tgt_in, tgt_out, n_tokens=None):  # noqa: D401 - see Seq2Seq.loss
        return self.model.loss(src, src_lens, tgt_in, tgt_out, self.label_smoothing, self.chunk_tokens,
                               n_tokens=n_tokens)
