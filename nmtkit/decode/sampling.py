"""Batched ancestral sampling over the `Seq2Seq` interface: one translation drawn per sentence,
as for back-translation (Edunov et al. 2018). At step t an unfinished sentence draws from
p(y_t | y_<t, x)^(1/T), renormalised, over the `topk` likeliest tokens when topk > 0. A draw is
an inverse-CDF lookup of one uniform number from sentence `key`'s own generator, seeded with
(seed, key): a sample depends on the seed, its key (the line number) and the model's
probabilities, not on the device's random state; its batch changes those probabilities' float32
rounding only, which moves a draw landing that close to a boundary. A sample's `log_prob` is
under the model (T = 1, whole vocabulary), EOS included.
Shapes: B sentences, n unfinished ones, V target vocabulary, S source length, T steps.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from nmtkit.decode.steps import (
    Hypothesis,
    as_models,
    attention_buffer,
    finished,
    mask_tokens,
    max_lengths,
    step_all,
)
from nmtkit.models.base import Seq2Seq
from nmtkit.text.vocab import BOS_ID, EOS_ID


def sampling_uniforms(seed: int, keys: Sequence[int], steps: int) -> Tensor:
    """(B, steps) float64 uniform numbers in [0, 1): row b from a generator seeded with
    (seed, keys[b]) alone."""
    rows = [np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, key]))).random(steps)
            for key in keys]
    return torch.from_numpy(np.stack(rows)) if rows else torch.zeros(0, steps, dtype=torch.float64)


def _draw(lp: Tensor, u: Tensor, topk: int, temperature: float) -> Tensor:
    """(n,) ids: the inverse CDF of p^(1/T) (over the topk best when topk > 0) at u (n,), one per
    row of lp (n, V) fp32 log-probabilities (-inf where forbidden)."""
    logits = lp
    if temperature != 1.0:  # from each row's best, in float64: a tiny T sends the others to -inf, never the best
        logits = lp.double()
        logits = (logits - logits.amax(dim=1, keepdim=True)) / temperature
    cols = None
    if 0 < topk < logits.size(1):
        logits, cols = logits.topk(topk, dim=1)  # (n, k), best first
    probs = torch.softmax(logits.double(), dim=1)  # float64: the CDF's last entry is 1 to ~1e-16
    cdf = probs.cumsum(dim=1)
    target = u.to(cdf.dtype).unsqueeze(1) * cdf[:, -1:]  # scaled by the total: no draw past the end
    # the first column whose CDF exceeds the target: cdf[i-1] <= target < cdf[i], so its
    # probability is > 0 (a forbidden token, p = 0, is never drawn)
    idx = torch.searchsorted(cdf, target, right=True).clamp_(max=cdf.size(1) - 1)  # (n, 1)
    return (cols.gather(1, idx) if cols is not None else idx).squeeze(1)


@torch.inference_mode()
def sample(
    models_or_model: Seq2Seq | Sequence[Seq2Seq],
    src: Tensor,
    src_lens: Tensor,
    seed: int = 1,
    keys: Sequence[int] | None = None,
    topk: int = 0,
    temperature: float = 1.0,
    max_len_a: float = 2.0,
    max_len_b: float = 10.0,
    lenpen: float = 1.0,
    need_attention: bool = False,
    ban_unk: bool = False,
) -> list[list[Hypothesis]]:
    """Draw one translation per sentence: [[Hypothesis]] in input order (`beam_search`'s n-best
    lists with n = 1). src: (B, S) ids on the models' device, src_lens: (B,); keys: one per
    sentence, its line number (default 1..B); topk: among the k most likely tokens (0: all)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if topk < 0:
        raise ValueError(f"topk must be >= 0, got {topk}")
    keys = list(range(1, src.size(0) + 1)) if keys is None else list(keys)
    if len(keys) != src.size(0):
        raise ValueError(f"one key per sentence: {src.size(0)} sentences, {len(keys)} keys")
    models = as_models(models_or_model)
    lim = max_lengths(src_lens.cpu(), max_len_a, max_len_b)  # (B,) CPU
    uniforms = sampling_uniforms(seed, keys, int(lim.max()) + 1 if keys else 0)
    encs = [m.encode_for_steps(src, src_lens) for m in models]
    tokens, lp_sum, lengths, attn_hist = _draw_all(models, encs, lim, uniforms.to(src.device), topk, temperature,
                                                   need_attention, ban_unk)
    toks_cpu, lp_cpu = tokens.cpu(), lp_sum.cpu()
    att_cpu = attn_hist.cpu() if attn_hist is not None else None
    return [[finished(toks_cpu[b, :n].tolist(), float(lp_cpu[b]), lenpen,
                      att_cpu[b, : n + 1] if att_cpu is not None else None, encs[0], src_len)]
            for b, (n, src_len) in enumerate(zip(lengths.tolist(), src_lens.tolist()))]


def _draw_all(models: list[Seq2Seq], encs: list, lim: Tensor, u: Tensor, topk: int, temperature: float,
              need_attention: bool, ban_unk: bool) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """The sampling loop: (tokens (B, T), log-probabilities (B,) float64, lengths (B,) before EOS
    (CPU), attention (B, steps taken, S) fp32 or None); u: (B, T) uniforms on the device. Finished
    sentences leave the batch."""
    B, T = u.shape
    device = u.device
    states = [m.init_state(e) for m, e in zip(models, encs)]
    active = torch.arange(B)  # (n,) CPU: the sentence of each row
    active_dev = active.to(device)
    prev = torch.full((B,), BOS_ID, dtype=torch.long, device=device)
    tokens = torch.zeros(B, T, dtype=torch.long, device=device)
    lp_sum = torch.zeros(B, dtype=torch.float64, device=device)
    lengths = torch.zeros(B, dtype=torch.long)  # tokens before EOS, set when a sentence ends
    hist: Tensor | None = None  # with need_attention: (steps, B, S), each step's attention at its rows
    for t in range(T):
        lp, states, attn = step_all(models, prev, states, encs)  # (n, V) fp32, (n, S)
        mask_tokens(lp, ban_unk, (lim[active] <= t).numpy())
        tok = _draw(lp, u[active_dev, t], topk, temperature)  # (n,)
        tokens[active_dev, t] = tok
        # the masks leave a drawable token's log-probability as the model gave it
        lp_sum[active_dev] += lp.gather(1, tok.unsqueeze(1)).squeeze(1).double()
        if need_attention:
            hist = attention_buffer(hist, t, attn)
            hist[t, active_dev] = attn
        done = tok.eq(EOS_ID).cpu()  # the step's one host synchronisation
        if bool(done.any()):
            lengths[active[done]] = t
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            keep_dev = keep.to(device)
            active, active_dev = active[keep], active_dev[keep_dev]
            encs = [e.index_select(keep_dev) for e in encs]
            states = [m.reorder(s, keep_dev) for m, s in zip(models, states)]
            tok = tok[keep_dev]
        prev = tok
    return tokens, lp_sum, lengths, None if hist is None else hist[: t + 1].transpose(0, 1)
