"""Validation during training: dev loss (mean NLL per target token, EOS included, without label
smoothing) over the dev split, and sacrebleu's BLEU of the first dev sentences, decoded and
turned into text by the data directory's pipeline, against the raw dev references where the
manifest says where they are, else the binarised ones turned into text the same way.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from nmtkit.data.binarized import ParallelData, collate, length_batches
from nmtkit.errors import ConfigError
from nmtkit.models.precision import autocast
from nmtkit.text.pipeline import TextPipeline
from nmtkit.train import distributed as ddp
from nmtkit.train.data import VALID_MAX_TOKENS, validated, within_bound

log = logging.getLogger(__name__)


class ValidationStopped(Exception):
    """A stop signal arrived during a validation, which was left unfinished."""


def warn_unvalidated(data: ParallelData) -> None:
    """Warn how many dev pairs validation leaves out for their length."""
    long = int((~within_bound(data)).sum())
    if long:
        log.warning("%d dev pairs have a side over %d tokens: validation leaves them out (dev loss and BLEU are "
                    "on the other %d)", long, VALID_MAX_TOKENS, len(data) - long)


def _to_device(arrays: Sequence[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    return [torch.from_numpy(a).to(device, non_blocking=True) for a in arrays]


def _dev_batches(model: Any, data: ParallelData, indices: np.ndarray, batch_size: int,
                 stop: Callable[[], bool] | None) -> Iterator[tuple[np.ndarray, tuple[np.ndarray, ...]]]:
    """The minibatches of the dev pairs `indices`, each with its `collate` arrays, `model` in eval mode
    meanwhile; `stop()` true between them raises ValidationStopped."""
    was_training = model.training
    model.eval()
    arrays = (np.asarray(data.src.ids), np.asarray(data.src.offsets), np.asarray(data.tgt.ids),
              np.asarray(data.tgt.offsets))
    try:
        for batch in length_batches(data.src.lengths, batch_size, indices=indices):
            if stop is not None and stop():
                raise ValidationStopped
            yield batch, collate(*arrays, batch)
    finally:
        model.train(was_training)


@torch.inference_mode()  # as decoding: compiled step bodies then share their graphs
def dev_loss(
    model: Any, data: ParallelData, batch_size: int, device: torch.device, precision: str = "fp32",
    chunk_tokens: int = 4096, stop: Callable[[], bool] | None = None,
) -> tuple[float, int]:
    """(mean NLL per target token, target tokens); `stop()` true between batches raises ValidationStopped."""
    total = torch.zeros((), dtype=torch.float64, device=device)
    n_tokens = 0
    for _, arrays in _dev_batches(model, data, validated(data), batch_size, stop):
        src, src_lens, tgt_in, tgt_out = _to_device(arrays, device)
        with autocast(device.type, precision):
            _, nll_sum, n = model.loss(src, src_lens, tgt_in, tgt_out, 0.0, chunk_tokens)
        total += nll_sum.double()
        n_tokens += int(n)
    return (float(total) / max(1, n_tokens)), n_tokens


@torch.no_grad()
def dev_bleu(ctx: Any, n_samples: int, batch_size: int, stop: Callable[[], bool] | None = None) -> float:
    """BLEU of a `TrainContext`'s model on the first `n_samples` dev sentences, detokenised (a
    sentence the model gives no finite score translates as nothing)."""
    import sacrebleu

    from nmtkit.decode.search import beam_search, greedy_search

    model, data, device, tgt_vocab = ctx.model, ctx.valid_data, ctx.device, ctx.data.tgt_vocab
    # capped at the vocabulary's size, as translate caps it
    beam = min(ctx.cfg.valid_beam, len(tgt_vocab))
    n = min(n_samples, len(data))
    ids: list[list[int]] = [[] for _ in range(n)]
    ok = validated(data, n)
    failed = 0
    for batch, arrays in _dev_batches(model, data, ok, batch_size, stop):
        src_t, lens_t = _to_device(arrays[:2], device)
        with autocast(device.type, ctx.precision):
            if beam == 1:
                best = greedy_search(model, src_t, lens_t, max_len=lens_t * 2 + 10)
            else:
                best = [nb[0] if nb else None for nb in beam_search(model, src_t, lens_t, beam=beam)]
        for k, hyp in zip(batch, best):
            ids[int(k)] = list(hyp.tokens) if hyp is not None else []
            failed += hyp is None
    if failed:
        log.warning("dev BLEU: %d of %d dev sentences got no translation, the model's scores being nan or infinite: "
                    "it may have diverged", failed, len(ok))
    pipe = TextPipeline.from_dict(ctx.data.pipeline)  # the data directory's, which `read_manifest` has checked
    kept = np.flatnonzero(within_bound(data, len(ids))).tolist()  # an empty source scores as an empty translation
    hyps = [pipe.decode(tgt_vocab.decode(ids[k]), "tgt") for k in kept]
    if ctx.raw_refs is not None:
        refs = [ctx.raw_refs[k] for k in kept]
    else:
        refs = [pipe.decode(tgt_vocab.decode(data.tgt[k].tolist()), "tgt") for k in kept]
    return float(sacrebleu.corpus_bleu(hyps, [refs]).score if hyps else float("nan"))


def check_dev_bleu(ctx: Any) -> None:
    """Run dev BLEU once on the first dev sentence, so that a module it needs and this machine
    lacks is a ConfigError before training rather than a crash at the first validation."""
    try:
        dev_bleu(ctx, 1, 1)
    except ImportError as err:
        raise ConfigError(f"dev BLEU needs the module '{err.name}', which does not import here ({err}): "
                          "install it, or train with --valid-bleu-samples 0") from None


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 700.0))


def dev_scores(ctx: Any, stop: Callable[[], bool] | None = None) -> tuple[float, float]:
    """(dev loss, dev BLEU) of a `TrainContext`'s model, computed on rank 0 and broadcast; BLEU is
    nan where --valid-bleu-samples is 0. `stop` (one process only) as in `dev_loss`."""
    cfg = ctx.cfg
    loss, bleu = float("nan"), float("nan")
    if ctx.dist.is_main:
        loss, _ = dev_loss(ctx.model, ctx.valid_data, cfg.valid_batch_size, ctx.device, ctx.precision,
                           cfg.loss_chunk_tokens, stop)
        if ctx.bleu_enabled and math.isfinite(loss):  # a model whose loss overflows has no translation to score
            bleu = dev_bleu(ctx, cfg.valid_bleu_samples, cfg.valid_batch_size, stop)
    loss, bleu = ddp.broadcast_floats([loss, bleu], ctx.dist, ctx.device)
    return loss, bleu
