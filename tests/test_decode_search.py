"""Greedy and batched beam search (nmtkit.decode.search) on random tiny RNNsearch models."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from nmtkit.decode.search import beam_search, greedy_search
from nmtkit.decode.steps import max_lengths
from nmtkit.text.vocab import BOS_ID, EOS_ID
from tests.conftest import random_sources, tiny_model


def _sharp(model, scale: float = 8.0):
    """Scale the output layer so that the random model has peaked, varied distributions."""
    with torch.no_grad():
        model.W_o.weight.mul_(scale)
        model.W_o.bias.normal_(0, 2.0)
    return model


@torch.no_grad()
def _reference_greedy(models, src, lens, lim, lenpen):
    """The textbook greedy loop, one sentence at a time and no batching tricks: at each step the
    most probable token of the models' mean distribution (PAD/BOS never, EOS forced at the
    limit). Returns (tokens, log_prob, score, attention (T+1, S_i)) per sentence."""
    from nmtkit.decode.steps import average_log_probs
    from nmtkit.text.vocab import PAD_ID

    out = []
    for i in range(src.size(0)):
        s, n = src[i : i + 1, : lens[i]], lens[i : i + 1]
        encs = [m.encode(s, n) for m in models]
        states = [m.init_state(e) for m, e in zip(models, encs)]
        prev, toks, lp_sum, rows = torch.tensor([BOS_ID]), [], 0.0, []
        for t in range(int(lim[i]) + 1):
            steps = [m.step(prev, st, e) for m, st, e in zip(models, states, encs)]
            states = [st for _, st, _ in steps]
            lp = average_log_probs([x.float() for x, _, _ in steps])[0].clone()
            rows.append(torch.stack([a.float() for _, _, a in steps]).mean(0)[0])
            lp[[PAD_ID, BOS_ID]] = float("-inf")
            if t == int(lim[i]):
                lp[torch.arange(lp.numel()) != EOS_ID] = float("-inf")
            best, tok = lp.max(0)
            lp_sum += float(best)
            if int(tok) == EOS_ID:
                break
            toks.append(int(tok))
            prev = tok.view(1)
        out.append((toks, lp_sum, lp_sum / (len(toks) + 1) ** lenpen, torch.stack(rows)))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lenpen", [0.0, 1.0, 0.6])
def test_beam_one_equals_the_reference_greedy_loop_tokens_scores_and_attention(seed, lenpen):
    model = tiny_model(seed=seed)
    _sharp(model)
    src, lens = random_sources(seed)
    lim = max_lengths(lens, 1.5, 4)
    ref = _reference_greedy([model], src, lens, lim, lenpen)
    beam = beam_search(model, src, lens, beam=1, lenpen=lenpen, max_len_a=1.5, max_len_b=4, need_attention=True)
    greedy = greedy_search(model, src, lens, max_len=lim, lenpen=lenpen, need_attention=True)
    assert len(ref) == len(beam) == len(greedy) == src.size(0)
    for (toks, lp_sum, score, att), (b,), g in zip(ref, beam, greedy):
        assert b.tokens == g.tokens == toks
        assert b.log_prob == pytest.approx(lp_sum, abs=1e-5) and b.score == pytest.approx(score, abs=1e-5)
        # the sentence's own columns only (no batch padding): its tokens, its source EOS apart
        assert torch.allclose(torch.cat([b.attention, b.source_eos_attention.unsqueeze(1)], 1), att, atol=1e-6)
        assert torch.equal(b.attention, g.attention)
        assert torch.equal(b.source_eos_attention, g.source_eos_attention)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("beam", [2, 5, 12])
def test_beam_best_log_prob_is_never_worse_than_greedy(seed, beam):
    model = tiny_model(seed=seed)
    _sharp(model, 4.0)
    src, lens = random_sources(seed + 10)
    greedy = greedy_search(model, src, lens, max_len=max_lengths(lens, 1.5, 4), lenpen=0.0)
    best = beam_search(model, src, lens, beam=beam, lenpen=0.0, max_len_a=1.5, max_len_b=4)
    for g, hyps in zip(greedy, best):
        assert hyps[0].log_prob >= g.log_prob - 1e-5


def _exhaustive_best(model, src, n, max_len, words, lenpen):
    """Score every target sequence up to max_len by teacher forcing; the best (score, tokens)."""
    best = (-math.inf, None)
    for length in range(max_len + 1):
        for toks in itertools.product(words, repeat=length):
            tgt_in = torch.tensor([[BOS_ID, *toks]])
            tgt_out = torch.tensor([[*toks, EOS_ID]])
            with torch.no_grad():
                lp = model(src[None, :n], torch.tensor([n]), tgt_in)
            lp_sum = float(lp[0].gather(1, tgt_out[0, :, None]).sum())
            score = lp_sum / (length + 1) ** lenpen
            if score > best[0]:
                best = (score, list(toks))
    return best


@pytest.mark.parametrize("lenpen", [0.0, 1.0])
def test_a_beam_as_wide_as_the_search_space_finds_the_exact_best(lenpen):
    # target vocabulary: 4 specials + 2 words; UNK and the words can be generated (3 choices)
    model = tiny_model(seed=3, tgt_vocab=6)
    _sharp(model, 3.0)
    src, lens = random_sources(5, B=3)
    max_len = 3
    words = [1, 4, 5]
    res = beam_search(model, src, lens, beam=40, lenpen=lenpen, max_len=torch.full((3,), max_len))
    for i in range(3):
        score, toks = _exhaustive_best(model, src[i], int(lens[i]), max_len, words, lenpen)
        assert res[i][0].tokens == toks
        assert res[i][0].score == pytest.approx(score, abs=1e-4)


@torch.no_grad()
def _reference_beam(model, src, n, lim, K, lenpen):
    """The textbook beam search of fairseq, one sentence and one hypothesis at a time: each step
    ranks every (hypothesis, token) extension; the finite ones ending in EOS among the K best
    finish (up to K in all), the K best others continue; the sentence ends with K finished or at
    its length limit (EOS forced there). Returns the finished (score, tokens) best first."""
    from nmtkit.text.vocab import PAD_ID

    enc = model.encode(src[None, :n], torch.tensor([n]))
    live = [([], 0.0, model.init_state(enc))]  # (tokens, log-prob sum, state)
    done = []
    for t in range(lim + 1):
        cands = []
        for toks, lp_sum, st in live:
            lp, new_st, _ = model.step(torch.tensor([toks[-1] if toks else BOS_ID]), st, enc)
            lp = lp[0].float()
            for v in range(lp.numel()):
                s = lp_sum + float(lp[v])
                if v not in (PAD_ID, BOS_ID) and (v == EOS_ID or t < lim) and math.isfinite(s):
                    cands.append((s, toks, v, new_st))
        cands.sort(key=lambda c: -c[0])
        for s, toks, v, _ in cands[:K]:
            if v == EOS_ID and len(done) < K:
                done.append((s / (len(toks) + 1) ** lenpen, toks))
        live = [(toks + [v], s, st) for s, toks, v, st in cands[: 2 * K] if v != EOS_ID][:K]
        if len(done) >= K or not live:
            break
    return sorted(done, key=lambda d: -d[0])


@pytest.mark.parametrize("tgt_vocab,beam", [(None, 4), (6, 6)])
def test_nbest_lists_equal_the_textbook_beam_search(tgt_vocab, beam):
    """Every finished hypothesis of the batched search, in order, is the textbook loop's: at most K
    finish per sentence, from the K best candidates, never one scored -inf (a beam wider than the
    target vocabulary: 6 > UNK, EOS and 2 words), and K continue from the 2K best."""
    model = tiny_model(seed=12, tgt_vocab=tgt_vocab)
    _sharp(model, 2.0)
    src, lens = random_sources(12, B=5)
    lim = max_lengths(lens, 1.0, 2)
    res = beam_search(model, src, lens, beam=beam, nbest=beam, lenpen=1.0, max_len=lim)
    for i, hyps in enumerate(res):
        ref = _reference_beam(model, src[i], int(lens[i]), int(lim[i]), beam, 1.0)
        assert [h.tokens for h in hyps] == [toks for _, toks in ref]
        assert [h.score for h in hyps] == pytest.approx([s for s, _ in ref], abs=1e-5)

class _Scripted(torch.nn.Module):
    """A decoder whose next-token probabilities are a table of the target prefix (`probs`; any other
    prefix: uniform over UNK, EOS and the words 4, 5), over a tiny model's encoder."""

    grouped_encoder = False

    def __init__(self, probs):
        super().__init__()
        self.encoder_model, self.probs = tiny_model(seed=0, tgt_vocab=6), probs

    def encode_for_steps(self, src, lens):
        return self.encoder_model.encode_for_steps(src, lens)

    def init_state(self, enc):
        return torch.zeros(enc.mask.size(0), 0, dtype=torch.long)  # the prefix so far, BOS first

    def reorder(self, state, rows):
        return state.index_select(0, rows)

    def step(self, prev, state, enc, out=None):
        hist = torch.cat([state, prev[:, None]], 1)
        rows = [self.probs.get(tuple(h[1:].tolist()), {1: 0.25, 3: 0.25, 4: 0.25, 5: 0.25}) for h in hist]
        lp = torch.tensor([[r.get(v, 1e-9) for v in range(6)] for r in rows]).log()
        return lp, hist, torch.full(enc.mask.shape, 1.0 / enc.mask.size(1))


def test_k_hypotheses_continue_however_many_of_the_2k_best_candidates_end():
    """Beam 2: after the first step, [4 EOS] ends first and [5 EOS] third; [4 4] and [5 5] (the 4th
    best) must both continue, and [5 5] ends next. Taking fewer than 2K candidates (here K + 1) lost
    [5 5] and the search ran on with [4 4] alone."""
    model = _Scripted({(): {4: 0.5, 5: 0.4, 3: 0.05, 1: 0.05},
                       (4,): {3: 0.55, 4: 0.42, 5: 0.015, 1: 0.015}, (5,): {3: 0.40, 5: 0.38, 4: 0.11, 1: 0.11},
                       (4, 4): {3: 0.01, 1: 0.33, 4: 0.33, 5: 0.33}, (5, 5): {3: 0.9, 1: 0.033, 4: 0.033, 5: 0.034}})
    src, lens = random_sources(0, B=1)
    (hyps,) = beam_search(model, src, lens, beam=2, nbest=2, lenpen=0.0, max_len=torch.tensor([4]))
    assert [h.tokens for h in hyps] == [[4], [5, 5]]
    assert [h.log_prob for h in hyps] == pytest.approx([math.log(0.5 * 0.55), math.log(0.4 * 0.38 * 0.9)])


def test_nbest_lists_are_sorted_distinct_and_scored_consistently():
    model = tiny_model(seed=4)
    _sharp(model, 3.0)
    src, lens = random_sources(4)
    for lenpen in (0.0, 1.0):
        res = beam_search(model, src, lens, beam=6, nbest=6, lenpen=lenpen, max_len_a=1.0, max_len_b=3)
        for hyps in res:
            assert len(hyps) == 6
            scores = [h.score for h in hyps]
            assert scores == sorted(scores, reverse=True)
            assert len({tuple(h.tokens) for h in hyps}) == len(hyps)
            for h in hyps:
                assert h.score == pytest.approx(h.log_prob / (len(h.tokens) + 1) ** lenpen, rel=1e-6)
                assert EOS_ID not in h.tokens and BOS_ID not in h.tokens and 0 not in h.tokens


def test_log_probs_match_teacher_forcing():
    model = tiny_model(seed=6)
    _sharp(model, 3.0)
    src, lens = random_sources(6, B=4)
    res = beam_search(model, src, lens, beam=4, nbest=2, lenpen=1.0, max_len_a=1.0, max_len_b=3)
    for i, hyps in enumerate(res):
        for h in hyps:
            tgt_in = torch.tensor([[BOS_ID, *h.tokens]])
            tgt_out = torch.tensor([[*h.tokens, EOS_ID]])
            with torch.no_grad():
                lp = model(src[i : i + 1, : lens[i]], lens[i : i + 1], tgt_in)
            assert h.log_prob == pytest.approx(float(lp[0].gather(1, tgt_out[0, :, None]).sum()), abs=1e-4)


def test_batched_search_equals_one_sentence_at_a_time():
    model = tiny_model(seed=7)
    _sharp(model, 3.0)
    src, lens = random_sources(7, B=6)
    batched = beam_search(model, src, lens, beam=5, nbest=3, max_len_a=1.5, max_len_b=3)
    for i in range(src.size(0)):
        (alone,) = beam_search(model, src[i : i + 1, : lens[i]], lens[i : i + 1], beam=5, nbest=3,
                               max_len_a=1.5, max_len_b=3)
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched[i]], abs=1e-5)


def test_a_length_limit_of_zero_tokens_is_one_as_the_help_says():
    """floor(0.5 * 1 + 0) = 0 was raised to one token while --help said 'at most a * len + b'
    (a and b that give 0 for every line are refused: translate's length-limit-of-nothing row)."""
    from nmtkit.translate.config import SearchConfig

    assert max_lengths(torch.tensor([1, 4]), 0.5, 0.0).tolist() == [1, 2]
    assert "at least 1" in SearchConfig.__dataclass_fields__["max_len_a"].metadata["option"].help


def test_the_attention_kept_for_alignments_grows_with_the_steps_not_the_length_limit(monkeypatch):
    """--alignments on a 5,000-word line (--max-src-len 100000, beam 5) allocated and copied at
    every step a (5, 2 * 8421 + 11, 8421) history, 2.8 GB, and ran past 5 minutes for 133 tokens;
    now each step's attention goes into a buffer doubled as the steps need, the histories traced
    back at the end."""
    from nmtkit.decode import search

    widths, step = [], search._BeamSearch.step

    def spy(self, t):
        more = step(self, t)
        widths.append((t, self.attn_buf.size(0)))
        return more

    monkeypatch.setattr(search._BeamSearch, "step", spy)
    src, lens = random_sources(3)
    res = beam_search(_sharp(tiny_model(seed=3)), src, lens, beam=3, nbest=3, max_len_b=300, need_attention=True)
    assert widths and all(w <= 2 * t + 16 for t, w in widths)
    assert all(h.attention.shape[0] == len(h.tokens) + 1 for hyps in res for h in hyps)


@pytest.mark.parametrize("src_eos", [True, False])
def test_length_limit_is_respected_and_attention_comes_back_over_the_source_tokens(src_eos):
    model = tiny_model(seed=8, src_eos=src_eos)
    src, lens = random_sources(8)
    res = beam_search(model, src, lens, beam=3, nbest=3, max_len_a=0.5, max_len_b=1, need_attention=True)
    lim = max_lengths(lens, 0.5, 1)
    for i, hyps in enumerate(res):
        for h in hyps:
            assert len(h.tokens) <= int(lim[i])
            # one row per target token + EOS; one column per source token of this sentence (no
            # batch padding), and the weights on the model's source EOS apart
            assert h.attention.shape == (len(h.tokens) + 1, int(lens[i]))
            total = h.attention.sum(1)
            if src_eos:
                assert h.source_eos_attention.shape == (len(h.tokens) + 1,)
                total = total + h.source_eos_attention
            else:
                assert h.source_eos_attention is None
            # a distribution over the sentence's own positions: the padding got no weight
            assert torch.allclose(total, torch.ones(len(h.tokens) + 1), atol=1e-5)


def test_ensemble_of_the_same_model_twice_equals_the_model():
    model = tiny_model(seed=9)
    _sharp(model, 3.0)
    src, lens = random_sources(9)
    single = beam_search(model, src, lens, beam=4, nbest=2, max_len_a=1.5, max_len_b=3, need_attention=True)
    double = beam_search([model, model], src, lens, beam=4, nbest=2, max_len_a=1.5, max_len_b=3, need_attention=True)
    for a, b in zip(single, double):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)
        for x, y in zip(a, b):  # the ensemble's attention is the mean of its models', not their sum
            assert torch.allclose(x.attention, y.attention, atol=1e-5)


def test_ensemble_averages_probabilities_of_different_models():
    m1 = tiny_model(seed=10)
    m2 = tiny_model(seed=11)
    _sharp(m1, 3.0)
    _sharp(m2, 3.0)
    src, lens = random_sources(10, B=3)
    (h,) = greedy_search([m1, m2], src[:1, : lens[0]], lens[:1], max_len=6)
    tgt_in = torch.tensor([[BOS_ID, *h.tokens]])
    tgt_out = torch.tensor([[*h.tokens, EOS_ID]])
    with torch.no_grad():
        p1 = m1(src[:1, : lens[0]], lens[:1], tgt_in).exp()
        p2 = m2(src[:1, : lens[0]], lens[:1], tgt_in).exp()
    mean = ((p1 + p2) / 2)[0]
    assert h.log_prob == pytest.approx(float(mean.gather(1, tgt_out[0, :, None]).log().sum()), abs=1e-4)
    # and it picked the most probable token of the averaged distribution at every step
    allowed = mean.clone()
    allowed[:, [0, BOS_ID]] = 0
    assert h.tokens == allowed[: len(h.tokens)].argmax(1).tolist()


def test_nbest_larger_than_beam_is_refused():
    model = tiny_model(seed=0)
    src, lens = random_sources(0, B=2)
    with pytest.raises(ValueError):
        beam_search(model, src, lens, beam=2, nbest=3)


def test_sentence_topk_equals_a_plain_topk_over_each_sentences_candidates():
    """The grouped top-k of beam search (group maxima, then the chosen groups' columns) picks
    exactly the k best of each sentence's K*V candidates, -inf rows and forced-EOS rows included."""
    from nmtkit.decode.search import TOPK_GROUP, sentence_topk

    g = torch.Generator().manual_seed(3)
    nb, K, V, k = 5, 4, 40 * TOPK_GROUP, 8
    lp = torch.log_softmax(3 * torch.randn(nb * K, V, generator=g), dim=1)
    scores = 4 * torch.randn(nb * K, generator=g)
    scores[1:K] = float("-inf")  # sentence 0: only its first hypothesis is live (first step)
    lp[K : 2 * K] = float("-inf")  # sentence 1: EOS forced
    lp[K : 2 * K, 3] = -0.5
    scores[2 * K + 1] += 50  # sentence 2: one row holds all its best candidates
    top_s, beam, tok = sentence_topk(lp, scores, nb, K, k)
    ref_s, ref_i = (lp + scores.unsqueeze(1)).view(nb, K * V).topk(k, dim=1)
    assert torch.equal(top_s, ref_s)
    finite = torch.isfinite(ref_s)
    assert torch.equal((beam * V + tok)[finite], ref_i[finite])
    # the fallback for vocabularies that are not a multiple of the group size agrees too
    s2, b2, t2 = sentence_topk(lp[:, : V - 1], scores, nb, K, k)
    r2, i2 = (lp[:, : V - 1] + scores.unsqueeze(1)).view(nb, K * (V - 1)).topk(k, dim=1)
    assert torch.equal(s2, r2)
    f2 = torch.isfinite(r2)
    assert torch.equal((b2 * (V - 1) + t2)[f2], i2[f2])


@pytest.mark.parametrize("readout", ["prev", "new"])
def test_fast_paths_give_the_same_translations_as_the_plain_ones(monkeypatch, readout):
    """Beam search with hypotheses attending over one encoder row per sentence
    (`grouped_encoder`) and the grouped top-k finds the same hypotheses as with K copies of
    the encoder outputs and a plain per-row top-k (a vocabulary large enough for the grouped
    top-k: V / TOPK_GROUP >= 2K)."""
    import nmtkit.decode.search as topk

    model = tiny_model(seed=11, tgt_vocab=40 * topk.TOPK_GROUP, readout=readout)
    _sharp(model, 3.0)
    src, lens = random_sources(11, B=6)
    kw = dict(beam=5, nbest=3, max_len_a=1.5, max_len_b=3, need_attention=True)
    fast = beam_search(model, src, lens, **kw)
    monkeypatch.setattr(topk, "TOPK_GROUP", topk.TOPK_GROUP + 1)  # not a divisor of V
    monkeypatch.setattr(model, "grouped_encoder", False)
    plain = beam_search(model, src, lens, **kw)
    for f, p in zip(fast, plain):
        assert [h.tokens for h in f] == [h.tokens for h in p]
        assert [h.score for h in f] == pytest.approx([h.score for h in p], abs=1e-5)
        for hf, hp in zip(f, p):
            assert torch.allclose(hf.attention, hp.attention, atol=1e-5)


@pytest.mark.parametrize("beam", [1, 4])
def test_a_model_whose_scores_are_not_finite_gives_no_hypothesis_rather_than_a_crash(beam):
    """A model whose weights overflowed scores every candidate nan, so none ends: `greedy_search`
    raised IndexError on the empty list (in training's dev BLEU)."""
    model = tiny_model(seed=0)
    with torch.no_grad():
        model.W_o.bias.fill_(float("nan"))
    src, lens = random_sources(0)
    assert beam_search(model, src, lens, beam=beam) == [[] for _ in range(src.size(0))]
    assert greedy_search(model, src, lens, max_len=5) == [None] * src.size(0)
