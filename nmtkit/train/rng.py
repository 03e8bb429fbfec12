"""The random number generators of a run, saved in checkpoints so that a resumed run continues
bit for bit: python, numpy, torch and cuda states, one set per distributed rank."""
from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from nmtkit.train import distributed as ddp


def rng_state() -> dict[str, Any]:
    """Every RNG the run uses, as weights_only-safe primitives and tensors."""
    version, state, gauss = random.getstate()
    np_state = np.random.get_state()
    out: dict[str, Any] = {
        "python": [version, list(state), gauss],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(state: dict[str, Any]) -> None:
    version, values, gauss = state["python"]
    random.setstate((version, tuple(values), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def gather_rng_states(dist_info: ddp.DistInfo) -> list[dict[str, Any]]:
    """Every rank's RNG states (on rank 0), so a resumed DDP run continues exactly; a
    collective: every rank calls it."""
    mine = rng_state()
    if not dist_info.enabled:
        return [mine]
    import torch.distributed as dist

    mine = {k: v for k, v in mine.items() if k != "cuda"}  # cuda state is per device; keep rank 0's
    gathered: list[Any] = [None] * dist_info.world_size
    dist.all_gather_object(gathered, mine)
    return gathered


def restore_rng(saved: dict[str, Any], rank: int, seed: int, update: int) -> None:
    """This rank's saved states; a rank the run did not have when saved derives its own."""
    per_rank = saved.get("ranks") or []
    if rank < len(per_rank):
        set_rng_state(per_rank[rank])
    elif per_rank:  # more ranks than when saved: derive a state for the new ones
        set_rng_state(per_rank[0])
        torch.manual_seed(seed + 7919 * rank + update)
