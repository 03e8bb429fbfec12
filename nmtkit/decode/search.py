"""Batched beam search over the `Seq2Seq` interface (and ensembles); greedy search is beam
search of width 1. All K hypotheses of all B sentences live in one (B*K)-row tensor on the
device. A step: one `step()` per model, the exact top-2K of each sentence's K*V candidates
(`sentence_topk`), and index_selects that reorder the states and histories. Hypotheses that
emit EOS are set aside on the device; a sentence is done with K finished hypotheses (as in
fairseq) or at its length limit, and done sentences leave the tensors. One host read per step.
Shapes: B sentences, K beam, N = B*K rows, V target vocabulary (or shortlist), S source length
(as the model's attention sees it: it may include an EOS the model appends), T steps.
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
from nmtkit.models.fast.quantize import is_quantized, shortlist_rows
from nmtkit.text.vocab import BOS_ID, EOS_ID

# vocabulary columns per group in `sentence_topk` (columns c, c + V/16, c + 2V/16, ...); the
# decoding shortlist pads its length to a multiple of it (nmtkit.decode.shortlist)
TOPK_GROUP = 16


def sentence_topk(lp: Tensor, scores: Tensor, nb: int, K: int, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The k best of each sentence's K*V candidates lp[r, v] + scores[r].

    lp: (N, V) log-probabilities, N = nb*K rows (K consecutive rows per sentence); scores: (N,).
    Returns (values (nb, k) best first, beam (nb, k) row within the sentence, token (nb, k)).
    Exact (ties aside) without a sort over all N*V candidates: the columns are split into V/g
    groups of g = TOPK_GROUP (group c holds columns c, c + V/g, ...); a sentence's k best
    candidates lie in its k best groups by (group max + row score), as at most k groups have a
    max that high, so a top-k over the (nb, K*V/g) group maxima and one over the (nb, k*g)
    candidates of those groups give the answer.
    """
    N, V = lp.shape
    g = TOPK_GROUP
    device = lp.device
    if V % g or V // g < k:  # small or odd vocabularies: per row, then per sentence
        k1 = min(k, V)
        row_s, row_tok = lp.topk(k1, dim=1)  # (N, k1)
        cand = (row_s + scores.unsqueeze(1)).view(nb, K * k1)
        top_s, top_i = cand.topk(k, dim=1)
        top_beam = torch.div(top_i, k1, rounding_mode="floor")
        return top_s, top_beam, row_tok.view(nb, K * k1).gather(1, top_i)
    nc = V // g
    gmax = lp.view(N, g, nc).amax(dim=1)  # (N, nc): max of group c over columns c + nc*j
    gi = (gmax + scores.unsqueeze(1)).view(nb, K * nc).topk(k, dim=1).indices  # (nb, k)
    beam = torch.div(gi, nc, rounding_mode="floor")
    rows = beam + (torch.arange(nb, device=device) * K).unsqueeze(1)  # (nb, k) rows of N
    cols = (gi - beam * nc).unsqueeze(2) + nc * torch.arange(g, device=device)  # (nb, k, g)
    cand = lp[rows.unsqueeze(2), cols] + scores[rows].unsqueeze(2)  # (nb, k, g)
    top_s, j = cand.view(nb, k * g).topk(k, dim=1)
    top_beam = beam.gather(1, torch.div(j, g, rounding_mode="floor"))
    return top_s, top_beam, cols.view(nb, k * g).gather(1, j)


def _shortlist_rows(model: Seq2Seq, vocab: Tensor) -> tuple[Tensor, Tensor | None]:
    """The output projection's rows for the shortlist `vocab` (in the autocast dtype under
    autocast, so that no step casts them again)."""
    proj = model.output_projection()
    if proj is None:
        raise ValueError(f"{type(model).__name__} has no single output projection for a shortlist")
    if is_quantized(proj):
        return shortlist_rows(proj, vocab)
    w = proj.weight.index_select(0, vocab)
    b = proj.bias.index_select(0, vocab) if proj.bias is not None else None
    dev = w.device.type
    if torch.is_autocast_enabled(dev):
        dt = torch.get_autocast_dtype(dev)
        w, b = w.to(dt), (b.to(dt) if b is not None else None)
    return w, b


def greedy_search(
    models_or_model: Seq2Seq | Sequence[Seq2Seq],
    src: Tensor,
    src_lens: Tensor,
    max_len: int | Tensor = 100,
    lenpen: float = 1.0,
    need_attention: bool = False,
    ban_unk: bool = False,
) -> list[Hypothesis | None]:
    """`beam_search` of width 1; max_len: an int or a (B,) tensor of the most target tokens before
    EOS. One Hypothesis per sentence, in input order; None where the scores were not finite."""
    lim = torch.full((src.size(0),), max_len, dtype=torch.long) if isinstance(max_len, int) else max_len
    hyps = beam_search(models_or_model, src, src_lens, beam=1, nbest=1, lenpen=lenpen,
                       need_attention=need_attention, max_len=lim, ban_unk=ban_unk)
    return [h[0] if h else None for h in hyps]


@torch.inference_mode()
def beam_search(
    models_or_model: Seq2Seq | Sequence[Seq2Seq],
    src: Tensor,
    src_lens: Tensor,
    beam: int = 12,
    lenpen: float = 1.0,
    max_len_a: float = 2.0,
    max_len_b: float = 10.0,
    nbest: int = 1,
    need_attention: bool = False,
    max_len: Tensor | None = None,
    vocab: Tensor | None = None,
    ban_unk: bool = False,
) -> list[list[Hypothesis]]:
    """Each sentence's `nbest` best hypotheses, best first, in input order; none for a sentence
    whose every candidate scored nan or -inf. src: (B, S) ids on the models' device, src_lens:
    (B,); one model or an ensemble (sharing vocabularies). `max_len` (B,) overrides the a*len+b
    limits. `vocab` (L,): a sorted shortlist of target ids starting with the specials 0..3
    (nmtkit.decode.shortlist): only those are scored, the softmax is over them."""
    if beam < 1:
        raise ValueError("beam must be >= 1")
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest must be between 1 and the beam size ({beam})")
    lim = max_lengths(src_lens.cpu(), max_len_a, max_len_b) if max_len is None else max_len.cpu().long()
    search = _BeamSearch(as_models(models_or_model), src, src_lens, beam, lim, lenpen, need_attention, vocab,
                         ban_unk)
    for t in range(int(lim.max()) + 1):
        if not search.step(t):
            break
    return search.results(nbest)


class _BeamSearch:
    """One batched beam search. Sentences live in slots (`active[slot]` is the sentence id); each
    slot has K consecutive rows (N = nb*K) in `scores`, `tokens`, `prev` and the
    decoder states. A done slot stays (scores -inf, `alive` False) until `_compact` drops it."""

    def __init__(self, models: list[Seq2Seq], src: Tensor, src_lens: Tensor, K: int, lim: Tensor,
                 lenpen: float, need_attention: bool, vocab: Tensor | None = None, ban_unk: bool = False):
        self.models, self.K, self.lenpen, self.need_attention = models, K, lenpen, need_attention
        self.ban_unk = ban_unk
        self.device = device = src.device
        self.vocab, self.outs = None, None
        if vocab is not None:  # columns of the log-probs are positions in the shortlist
            if not torch.equal(vocab[: EOS_ID + 1].cpu(), torch.arange(EOS_ID + 1)):
                raise ValueError("a shortlist must start with the special ids 0..3")
            self.vocab = vocab.to(device)
            self.outs = [_shortlist_rows(m, self.vocab) for m in models]
        B = src.size(0)
        self.encs = [m.encode_for_steps(src, src_lens) for m in models]  # (B, ...) until after the first step
        self.states = [m.init_state(e) for m, e in zip(models, self.encs)]
        self.lens_host = src_lens.cpu().numpy()
        # `grouped_encoder` models (RNNsearch) read one encoder row per sentence for its K
        # hypotheses: K copies would be memory traffic dominating a large batch's step
        self.grouped = K > 1 and all(m.grouped_encoder for m in models)
        self.active = list(range(B))
        self.alive = [True] * B
        self.dead_dev: Tensor | None = None  # (nb,) bool on the device, True at done slots
        self.active_lim = lim.numpy().copy()  # (nb,) host
        self.n_finished = [0] * B
        # finished hypotheses on the device until `results`, one entry per step t where some
        # ended: (sentence ids, scores, tokens (m, t), (t, their rows at step t) or None)
        self.pending: list[tuple[list[int], list[float], Tensor, tuple[int, Tensor] | None]] = []
        self.prev = torch.full((B,), BOS_ID, dtype=torch.long, device=device)
        # only the first hypothesis of each sentence is live at the start
        scores = torch.full((B, K), float("-inf"), device=device)
        scores[:, 0] = 0.0
        self.scores = scores.view(-1)
        self.tokens = torch.zeros(B * K, int(lim.max()) + 1, dtype=torch.long, device=device)
        # with need_attention, each step's attention (`attention_buffer`) and each continuing row's row
        # at the step before: a hypothesis's history is traced back at the end (`_trace`), not
        # reordered at every step (t * N * S copied a step)
        self.attn_buf: Tensor | None = None
        self.parents: list[Tensor] = []

    def step(self, t: int) -> bool:
        """Extend every live sentence by one token; False once every sentence is done."""
        K, nb = self.K, len(self.active)
        lp, attn = self._log_probs(t)  # (N, V), (N, S)
        if self.need_attention:
            self.attn_buf = buf = attention_buffer(self.attn_buf, t, attn)
            buf[t, : attn.size(0), : attn.size(1)] = attn
        k2 = min(2 * K, K * lp.size(1))
        top_s, top_beam, top_tok = sentence_topk(lp, self.scores, nb, K, k2)  # (nb, k2), best first
        top_row = top_beam + (torch.arange(nb, device=self.device) * K).unsqueeze(1)  # rows of N
        is_eos = top_tok.eq(EOS_ID)
        n_fin = self._finish(t, top_s, top_row, is_eos)
        # the K best candidates that do not end in EOS continue
        order = is_eos.long() * k2 + torch.arange(k2, device=self.device)
        pos = order.topk(K, dim=1, largest=False).indices  # (nb, K), sorted by rank
        new_s = top_s.gather(1, pos).masked_fill(is_eos.gather(1, pos), float("-inf"))  # too few non-EOS
        new = (new_s, top_row.gather(1, pos), top_tok.gather(1, pos))
        kept = self._retire(t, n_fin, new)
        if kept is None:
            return False
        self._advance(t, *kept)
        return True

    def _log_probs(self, t: int) -> tuple[Tensor, Tensor]:
        """Every model's step, combined: (log_probs (N, V) fp32 with PAD/BOS masked and EOS
        forced at the length limit, attention (N, S))."""
        lp, self.states, attn = step_all(self.models, self.prev, self.states, self.encs, self.outs)
        K = self.K
        if t == 0 and K > 1:  # the first step ran once per sentence: give each K rows
            rep = torch.arange(len(self.active), device=self.device).repeat_interleave(K)
            lp, attn = lp.index_select(0, rep), attn.index_select(0, rep)
            if not self.grouped:  # grouped models read each sentence's encoder rows K times
                self.encs = [e.index_select(rep) for e in self.encs]
            self.states = [m.reorder(st, rep) for m, st in zip(self.models, self.states)]
        mask_tokens(lp, self.ban_unk, ((self.active_lim <= t) & np.asarray(self.alive)).repeat(K))
        return lp, attn

    def _finish(self, t: int, top_s: Tensor, top_row: Tensor, is_eos: Tensor) -> list[int]:
        """Set aside the finite hypotheses ending in EOS among each sentence's K best candidates,
        up to K per sentence; returns the finished count of each slot. The step's one host read."""
        K = self.K
        fin = is_eos[:, :K] & torch.isfinite(top_s[:, :K])
        ended = torch.where(fin, top_s[:, :K].float(), float("nan")).cpu().numpy()  # (nb, K)
        flat, sents, scores = [], [], []
        for slot, rank in np.argwhere(~np.isnan(ended)):
            sent = self.active[slot]
            if not self.alive[slot] or self.n_finished[sent] >= K:
                continue
            self.n_finished[sent] += 1
            flat.append(slot * top_row.size(1) + rank)  # top_row: (nb, 2K)
            sents.append(sent)
            scores.append(float(ended[slot, rank]))
        if flat:  # copied on the device, read when the search ends
            sel = torch.tensor(flat, dtype=torch.long).to(self.device, non_blocking=True)
            rows = top_row.reshape(-1).index_select(0, sel)
            att = (t, rows) if self.need_attention else None
            self.pending.append((sents, scores, self.tokens.index_select(0, rows)[:, :t], att))
        return [self.n_finished[s] for s in self.active]

    def _retire(self, t: int, n_fin: list[int], new: tuple[Tensor, Tensor, Tensor]
                ) -> tuple[Tensor, Tensor, Tensor] | None:
        """Sentences with K finished hypotheses or at their length limit stop searching. Returns
        `new` = (scores, rows, tokens) (nb, K) of the kept slots, or None when all are done."""
        alive, lim = self.alive, self.active_lim
        newly_done = [i for i in range(len(alive)) if alive[i] and (n_fin[i] >= self.K or t >= lim[i])]
        if newly_done:
            for i in newly_done:
                alive[i] = False
            if not any(alive):
                return None
            self.dead_dev = torch.tensor([not a for a in alive], device=self.device)
            # compacted once a quarter of the sentences are done (copying the encoder outputs
            # costs about a step's memory traffic); grouped models' at once (one row a sentence)
            if self.grouped or 4 * alive.count(False) >= len(alive):
                new = self._compact(new)
        return new

    def _compact(self, new: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """Drop the done slots from the encoder outputs, the slot lists and `new`'s rows (the
        states and histories follow in `_advance`)."""
        K, device = self.K, self.device
        keep_slots = [i for i in range(len(self.alive)) if self.alive[i]]
        ks_dev = torch.tensor(keep_slots, dtype=torch.long).to(device, non_blocking=True)
        keep_rows = (ks_dev.unsqueeze(1) * K + torch.arange(K, device=device)).view(-1)
        width = int(self.lens_host[[self.active[i] for i in keep_slots]].max())
        rows = ks_dev if self.grouped else keep_rows
        # past `width` every kept row is padding: attending over it stops costing
        self.encs = [e.narrow(e.positions(width)).index_select(rows) for e in self.encs]
        self.active = [self.active[i] for i in keep_slots]
        self.active_lim = self.active_lim[keep_slots]
        self.alive = [True] * len(keep_slots)
        self.dead_dev = None
        return tuple(x[ks_dev] for x in new)  # type: ignore[return-value]

    def _advance(self, t: int, new_s: Tensor, new_row: Tensor, new_tok: Tensor) -> None:
        """Reorder the decoder states and histories to the continuing rows and append their tokens."""
        if self.dead_dev is not None:
            new_s = new_s.masked_fill(self.dead_dev.unsqueeze(1), float("-inf"))
        rows = new_row.view(-1)
        self.states = [m.reorder(s, rows) for m, s in zip(self.models, self.states)]
        self.tokens = self.tokens.index_select(0, rows)
        self.prev = new_tok.view(-1) if self.vocab is None else self.vocab[new_tok.view(-1)]
        self.tokens[:, t] = self.prev
        if self.need_attention:
            self.parents.append(rows)
        self.scores = new_s.view(-1)

    def _trace(self, t: int, rows: Tensor) -> Tensor:
        """The attention (n, t+1, S) fp32 of the hypotheses in `rows` at step t, through their
        ancestors' rows; zero past a compacted step's narrower attention."""
        assert self.attn_buf is not None
        out = self.attn_buf.new_empty(rows.numel(), t + 1, self.attn_buf.size(2))
        for s in range(t, -1, -1):
            out[:, s] = self.attn_buf[s].index_select(0, rows)
            if s:
                rows = self.parents[s - 1].index_select(0, rows)
        return out

    def results(self, nbest: int) -> list[list[Hypothesis]]:
        done: list[list[Hypothesis]] = [[] for _ in self.n_finished]
        enc = self.encs[0]  # the models of an ensemble attend over the same positions
        for sents, scores, toks, att in self.pending:
            atts = self._trace(*att).cpu() if att is not None else [None] * len(sents)
            for sent, lp_sum, tok, a in zip(sents, scores, toks.cpu().tolist(), atts):
                done[sent].append(finished(tok, lp_sum, self.lenpen, a, enc, int(self.lens_host[sent])))
        return [sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest] for hyps in done]
