"""Ensembles of models that share vocabularies and preprocessing (`nmtkit translate --ensemble`).

Combination rule: the ensemble's distribution is the mean of the members' probabilities,
p(y | ...) = 1/M sum_m p_m(y | ...), i.e. log p = logsumexp_m(log p_m) - log M, as Nematus and
fairseq do (the alternative, a mean of log-probabilities, is a normalised product of experts and
is not used). Beam search (nmtkit.decode.search) calls `average_log_probs` once per step; the
attention it reports for an ensemble is the members' mean attention.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from nmtkit.errors import CheckpointError
from nmtkit.text.pipeline import pipeline_differences


def average_log_probs(log_probs: Sequence[Any]) -> Any:
    """[(N, V)] * M log-probabilities -> (N, V) log of their mean probability (fp32)."""
    import torch

    if len(log_probs) == 1:
        return log_probs[0]
    return torch.logsumexp(torch.stack([lp.float() for lp in log_probs]), dim=0) - math.log(len(log_probs))


def check_compatible(paths: Sequence[str], ckpts: Sequence[dict], needs: str = "an ensemble needs models") -> None:
    """Every checkpoint must have the first one's vocabularies and text pipeline.

    Raises CheckpointError naming the first offending checkpoint and what differs, and what
    `needs` them alike (an ensemble; `nmtkit average` says averaging).
    """
    first_path, first = paths[0], ckpts[0]
    for path, ckpt in zip(paths[1:], ckpts[1:]):
        for side in ("src", "tgt"):
            a, b = first.get(f"{side}_vocab"), ckpt.get(f"{side}_vocab")
            if a != b:
                a, b = a or [], b or []
                detail = f"{len(b)} vs {len(a)} tokens"
                if len(a) == len(b):
                    i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
                    detail = f"token {i} is '{b[i]}' vs '{a[i]}'"
                raise CheckpointError(
                    f"{side} vocabulary differs from {first_path}'s ({detail}); {needs} trained on the same "
                    "vocabularies", path)
        differs = pipeline_differences(first.get("pipeline"), ckpt.get("pipeline"))
        if differs:
            raise CheckpointError(
                f"text pipeline (preprocessing) differs from {first_path}'s ({', '.join(differs)}); {needs} "
                "trained on the same preprocessing", path)
        if (ckpt.get("src_lang"), ckpt.get("tgt_lang")) != (first.get("src_lang"), first.get("tgt_lang")):
            raise CheckpointError(f"language pair differs from {first_path}'s", path)
