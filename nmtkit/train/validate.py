"""Validation during training: dev loss / perplexity and dev BLEU on a sample.

Dev loss is the mean negative log-likelihood per target token (EOS included) over the whole
dev split, without label smoothing. Dev BLEU decodes the first `n_samples` dev sentences
greedily (beam 1) or with beam search (`nmtkit.decode.search`), turns the ids back into text
with the data directory's pipeline (BPE joined, detokenised) and scores them with sacrebleu
against the raw dev references when the manifest says where they are, else against the
binarised references turned back into text the same way.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable, Sequence

import numpy as np
import torch

from nmtkit.data.binarized import ParallelData, collate, length_batches
from nmtkit.models.precision import autocast
from nmtkit.text.vocab import Vocab
from nmtkit.train import distributed as ddp

log = logging.getLogger(__name__)

# the most tokens either side of a dev pair may have to be validated, as translate's --max-src-len default
# bounds what it decodes: a longer pair's cost grows with the square of its length, and preprocess does
# not clean the valid split
VALID_MAX_TOKENS = 250


class ValidationStopped(Exception):
    """A stop signal arrived during a validation, which was left unfinished."""


def _check_stop(stop: Callable[[], bool] | None) -> None:
    if stop is not None and stop():
        raise ValidationStopped


def within_bound(data: ParallelData, n: int | None = None) -> np.ndarray:
    """(min(n, len),) bool: which of the first `n` (all) dev pairs have both sides within
    VALID_MAX_TOKENS, the pairs validation scores."""
    return (data.src.lengths[:n] <= VALID_MAX_TOKENS) & (data.tgt.lengths[:n] <= VALID_MAX_TOKENS)


def validated(data: ParallelData, n: int | None = None) -> np.ndarray:
    """Indices of the first `n` (all) dev pairs that are decoded and scored: `within_bound`, with a
    non-empty source (an empty one cannot be encoded)."""
    return np.flatnonzero(within_bound(data, n) & (data.src.lengths[:n] > 0))


def warn_unvalidated(data: ParallelData) -> None:
    """One warning, before training, naming how many dev pairs validation leaves out for their length."""
    long = int((~within_bound(data)).sum())
    if long:
        log.warning("%d dev pairs have a side over %d tokens: validation leaves them out (dev loss and BLEU are "
                    "on the other %d)", long, VALID_MAX_TOKENS, len(data) - long)


def _to_device(arrays: Sequence[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    return [torch.from_numpy(a).to(device, non_blocking=True) for a in arrays]


@torch.inference_mode()  # as decoding: compiled step bodies then share their graphs
def dev_loss(
    model: Any, data: ParallelData, batch_size: int, device: torch.device, precision: str = "fp32",
    chunk_tokens: int = 4096, stop: Callable[[], bool] | None = None,
) -> tuple[float, int]:
    """(mean NLL per target token, number of target tokens) over the whole split; `stop()` true
    between two batches raises ValidationStopped."""
    was_training = model.training
    model.eval()
    arrays = (np.asarray(data.src.ids), np.asarray(data.src.offsets), np.asarray(data.tgt.ids),
              np.asarray(data.tgt.offsets))
    ok = validated(data)
    total = torch.zeros((), dtype=torch.float64, device=device)
    n_tokens = 0
    try:
        for batch in length_batches(data.src.lengths, batch_size, indices=ok):
            _check_stop(stop)
            src, src_lens, tgt_in, tgt_out = _to_device(collate(*arrays, batch), device)
            with autocast(device.type, precision):
                _, nll_sum, n = model.loss(src, src_lens, tgt_in, tgt_out, 0.0, chunk_tokens)
            total += nll_sum.double()
            n_tokens += int(n)
    finally:
        model.train(was_training)
    return (float(total) / max(1, n_tokens)), n_tokens


@torch.no_grad()
def dev_translations(
    model: Any, data: ParallelData, n_samples: int, beam: int, batch_size: int, device: torch.device,
    precision: str = "fp32", stop: Callable[[], bool] | None = None,
) -> list[list[int]]:
    """Token ids of the translations of the first `n_samples` dev sentences (in order); none for
    a sentence the model gives no finite score (warned); `stop` as in `dev_loss`."""
    from nmtkit.decode.search import beam_search, greedy_search

    was_training = model.training
    model.eval()
    n = min(n_samples, len(data))
    out: list[list[int]] = [[] for _ in range(n)]
    arrays = (np.asarray(data.src.ids), np.asarray(data.src.offsets), np.asarray(data.tgt.ids),
              np.asarray(data.tgt.offsets))
    ok = validated(data, n)
    failed = 0
    try:
        for batch in length_batches(data.src.lengths, batch_size, indices=ok):
            _check_stop(stop)
            src, src_lens, _, _ = collate(*arrays, batch)
            src_t, lens_t = _to_device((src, src_lens), device)
            with autocast(device.type, precision):
                if beam == 1:
                    best = greedy_search(model, src_t, lens_t, max_len=lens_t * 2 + 10)
                else:
                    best = [nb[0] if nb else None for nb in beam_search(model, src_t, lens_t, beam=beam)]
            for k, hyp in zip(batch, best):
                out[int(k)] = list(hyp.tokens) if hyp is not None else []
                failed += hyp is None
    finally:
        model.train(was_training)
    if failed:
        log.warning("dev BLEU: %d of %d dev sentences got no translation, the model's scores being nan or infinite: "
                    "it may have diverged", failed, len(ok))
    return out


def dev_bleu(
    model: Any,
    data: ParallelData,
    tgt_vocab: Vocab,
    pipeline: dict[str, Any],
    n_samples: int,
    beam: int,
    batch_size: int,
    device: torch.device,
    raw_refs: list[str] | None = None,
    precision: str = "fp32",
    stop: Callable[[], bool] | None = None,
) -> tuple[float, list[str], list[str]]:
    """(BLEU, hypotheses, references) on the first `n_samples` dev sentences, detokenised."""
    import sacrebleu

    from nmtkit.text.pipeline import TextPipeline

    # a beam wider than the vocabulary finds what one as wide does (translate caps it so too), at any cost
    beam = min(beam, len(tgt_vocab))
    ids = dev_translations(model, data, n_samples, beam, batch_size, device, precision, stop)
    pipe = TextPipeline.from_dict(pipeline)  # the data directory's, which `read_manifest` has checked
    kept = np.flatnonzero(within_bound(data, len(ids))).tolist()  # an empty source scores as an empty translation
    hyps = [pipe.decode(tgt_vocab.decode(ids[k]), "tgt") for k in kept]
    if raw_refs is not None:
        refs = [raw_refs[k] for k in kept]
    else:
        refs = [pipe.decode(tgt_vocab.decode(data.tgt[k].tolist()), "tgt") for k in kept]
    bleu = sacrebleu.corpus_bleu(hyps, [refs]).score if hyps else float("nan")
    return float(bleu), hyps, refs


def check_dev_bleu(model: Any, data: ParallelData, tgt_vocab: Vocab, pipeline: dict[str, Any], beam: int,
                   device: torch.device, raw_refs: list[str] | None = None, precision: str = "fp32") -> None:
    """Run dev BLEU once on the first dev sentence (decoded by the model, turned into text by the
    pipeline, scored by sacrebleu), so that a module it needs and this machine lacks is a
    ConfigError before training rather than a crash at the first validation."""
    from nmtkit.errors import ConfigError

    try:
        dev_bleu(model, data, tgt_vocab, pipeline, 1, beam, 1, device, raw_refs, precision)
    except ImportError as err:
        raise ConfigError(f"dev BLEU needs the module '{err.name}', which does not import here ({err}): "
                          "install it, or train with --valid-bleu-samples 0") from None


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 700.0))


def dev_scores(ctx: Any, stop: Callable[[], bool] | None = None) -> tuple[float, float]:
    """(dev loss, dev BLEU) of a `nmtkit.train.context.TrainContext`'s model, computed on rank 0
    and broadcast to every rank; BLEU is nan where --valid-bleu-samples is 0. `stop` (one process
    only: the ranks of a job agree on stopping at updates) as in `dev_loss`."""
    cfg = ctx.cfg
    loss, bleu = float("nan"), float("nan")
    if ctx.dist.is_main:
        loss, _ = dev_loss(ctx.model, ctx.valid_data, cfg.valid_batch_size, ctx.device, ctx.precision,
                           cfg.loss_chunk_tokens, stop)
        if ctx.bleu_enabled and math.isfinite(loss):  # a model whose loss overflows has no translation to score
            bleu, _, _ = dev_bleu(ctx.model, ctx.valid_data, ctx.data.tgt_vocab, ctx.data.pipeline,
                                  cfg.valid_bleu_samples, cfg.valid_beam, cfg.valid_batch_size, ctx.device,
                                  ctx.raw_refs, ctx.precision, stop)
    loss, bleu = ddp.broadcast_floats([loss, bleu], ctx.dist, ctx.device)
    return loss, bleu
