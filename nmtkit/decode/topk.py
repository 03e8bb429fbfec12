"""The exact top-k of each sentence's K*V beam-search candidates, without a sort-like pass
over all of them (`sentence_topk`)."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["TOPK_GROUP", "sentence_topk"]

# vocabulary columns per group in `sentence_topk` (columns c, c + V/16, c + 2V/16, ...); the
# decoding shortlist pads its length to a multiple of it (nmtkit.decode.shortlist)
TOPK_GROUP = 16


def sentence_topk(lp: Tensor, scores: Tensor, nb: int, K: int, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The k best of each sentence's K*V candidates lp[r, v] + scores[r].

    lp: (N, V) log-probabilities, N = nb*K rows (K consecutive rows per sentence); scores: (N,).
    Returns (values (nb, k) best first, beam (nb, k) row within the sentence, token (nb, k)).

    Exact top-k (only the order of exactly equal candidates may differ from a plain top-k),
    without a sort-like pass over all N*V candidates: the columns are split into V/g groups of
    g = TOPK_GROUP (group c holds columns c, c + V/g, ...; a strided max is a vectorised pass);
    the k best groups of a sentence by (group max + row score) contain its k best candidates
    (each of those lies in a group whose max is at least the k-th best value, and at most k
    groups can have a max that high), so a top-k over (nb, K*V/g) group maxima and one over
    the (nb, k*g) candidates of the chosen groups give the answer.
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
