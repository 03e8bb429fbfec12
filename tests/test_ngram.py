"""The numpy Kneser-Ney LM (nmtkit.select.ngram) against hand computation and a naive reference."""
from __future__ import annotations

import io
import math
import shutil
import subprocess
from collections import Counter

import numpy as np
import pytest

from nmtkit.select.ngram import LM_BOS_ID, LM_EOS_ID, LM_UNK_ID, LMVocab, NgramLM, kn_discounts

FIXED = (0.5, 1.0, 1.5)


def _tiny():
    """Corpus "a b" / "a a b": ids <s>=0 </s>=1 <unk>=2 a=3 b=4 (V=5, 4 predictable ids)."""
    vocab = LMVocab.build([["a", "b"], ["a", "a", "b"]])
    assert vocab.itos == ["<s>", "</s>", "<unk>", "a", "b"]
    return vocab, [vocab.encode(["a", "b"]), vocab.encode(["a", "a", "b"])]


def test_bigram_matches_hand_computed_kneser_ney():
    vocab, sents = _tiny()
    lm = NgramLM.estimate(sents, len(vocab), order=2, discounts=[FIXED, FIXED])
    a, b = 3, 4
    # Unigram continuation counts N1+(. w): a <- {<s>, a} = 2, b <- {a} = 1, </s> <- {b} = 1, <unk> 0.
    # Total 4; gamma = (0.5*2 [two words with count 1] + 1.0*1 [one with count 2]) / 4 = 0.5,
    # so every predictable id gets 0.5 / 4 = 0.125 from the uniform level.
    p1 = {a: (2 - 1.0) / 4 + 0.125, b: (1 - 0.5) / 4 + 0.125,
          LM_EOS_ID: (1 - 0.5) / 4 + 0.125, LM_UNK_ID: 0.125}
    assert p1 == {a: 0.375, b: 0.25, LM_EOS_ID: 0.25, LM_UNK_ID: 0.125}
    for w, p in p1.items():
        assert lm.prob([], w) == pytest.approx(p, abs=1e-12)
    # Context a: c(a b) = 2, c(a a) = 1, total 3; gamma(a) = (0.5*1 + 1.0*1) / 3 = 0.5.
    assert lm.prob([a], b) == pytest.approx((2 - 1.0) / 3 + 0.5 * 0.25, abs=1e-12)
    assert lm.prob([a], a) == pytest.approx((1 - 0.5) / 3 + 0.5 * 0.375, abs=1e-12)
    assert lm.prob([a], LM_EOS_ID) == pytest.approx(0.5 * 0.25, abs=1e-12)
    assert lm.prob([a], LM_UNK_ID) == pytest.approx(0.5 * 0.125, abs=1e-12)
    # Context <s>: c(<s> a) = 2; gamma = 1.0*1 / 2.
    assert lm.prob([LM_BOS_ID], a) == pytest.approx((2 - 1.0) / 2 + 0.5 * 0.375, abs=1e-12)
    # Context <unk> never seen: back off with weight 1.
    assert lm.prob([LM_UNK_ID], b) == pytest.approx(0.25, abs=1e-12)


def test_trigram_matches_hand_computed_kneser_ney():
    vocab, sents = _tiny()
    lm = NgramLM.estimate(sents, len(vocab), order=3, discounts=[FIXED, FIXED, FIXED])
    a, b = 3, 4
    # Bigram adjusted counts: (<s> a) starts with <s> -> raw count 2; (a b) <- {<s>, a} = 2;
    # (b </s>) <- {a} = 1; (a a) <- {<s>} = 1. Unigrams as in the bigram case.
    p2_b_a = (2 - 1.0) / 3 + 0.5 * 0.25          # 0.458333
    p2_a_a = (1 - 0.5) / 3 + 0.5 * 0.375         # 0.354167
    p2_eos_b = (1 - 0.5) / 1 + 0.5 * 0.25        # context b: only (b </s>), gamma = 0.5
    # Trigram context (<s> a): (<s> a b) = 1, (<s> a a) = 1 -> total 2, gamma = 0.5*2 / 2 = 0.5.
    assert lm.prob([LM_BOS_ID, a], b) == pytest.approx((1 - 0.5) / 2 + 0.5 * p2_b_a, abs=1e-12)
    assert lm.prob([LM_BOS_ID, a], a) == pytest.approx((1 - 0.5) / 2 + 0.5 * p2_a_a, abs=1e-12)
    assert lm.prob([LM_BOS_ID, a], LM_EOS_ID) == pytest.approx(0.5 * 0.5 * 0.25, abs=1e-12)
    # Context (a b): (a b </s>) = 2 -> gamma = 1.0 / 2.
    assert lm.prob([a, b], LM_EOS_ID) == pytest.approx((2 - 1.0) / 2 + 0.5 * p2_eos_b, abs=1e-12)
    assert lm.prob([a, b], LM_EOS_ID) == pytest.approx(0.8125, abs=1e-12)
    # Unseen trigram context (b a): p3(. | b a) = p2(. | a).
    assert lm.prob([b, a], b) == pytest.approx(p2_b_a, abs=1e-12)
    # A longer context than the order uses only its last two ids.
    assert lm.prob([b, b, LM_BOS_ID, a][-2:], b) == lm.prob([a, a, LM_BOS_ID, a][2:], b)


def test_discounts_follow_chen_goodman_formula():
    counts = np.array([1] * 10 + [2] * 5 + [3] * 3 + [4] * 2 + [9] * 7)
    y = 10 / (10 + 2 * 5)
    d1, d2, d3 = kn_discounts(counts)
    assert d1 == pytest.approx(1 - 2 * y * 5 / 10)
    assert d2 == pytest.approx(2 - 3 * y * 3 / 5)
    assert d3 == pytest.approx(3 - 4 * y * 2 / 3)


def test_discounts_fall_back_all_together_when_one_cannot_be_estimated():
    # As KenLM's --discount_fallback: n2 = 0 (D2 divides by it), n1 = 0, and n3 = 0 (D3+ divides by
    # it), where eq. 26 alone would give D2 = 2 > D3+ and leave an n-gram seen twice no mass of its own.
    for counts in ([1, 1, 1], [5, 7], [1, 1, 2, 5]):
        assert kn_discounts(np.array(counts)) == (0.5, 1.0, 1.5), counts


def _random_corpus(seed=0, n=400, words=12):
    rng = np.random.default_rng(seed)
    # Zipf-ish word choice so the count-of-counts are realistic.
    p = 1.0 / np.arange(1, words + 1)
    p /= p.sum()
    names = [f"w{i}" for i in range(words)]
    return [[names[i] for i in rng.choice(words, size=rng.integers(0, 10), p=p)] for _ in range(n)]


def _contexts(lm: NgramLM, rng, extra=40):
    """Every seen context of every order (rebuilt from the tables) and random unseen ones."""
    V = lm.vocab_size
    ctxs = [[]] + [[w] for w in range(V) if w != LM_EOS_ID]
    grams = [np.arange(V)[:, None]]
    for o in lm.orders:
        grams.append(np.concatenate([grams[-1][o.keys // V], (o.keys % V)[:, None]], axis=1))
    for g in grams[1:lm.order - 1]:
        ctxs += [list(r) for r in g if r[-1] != LM_EOS_ID]
    for _ in range(extra):
        k = int(rng.integers(1, lm.order))
        ctxs.append([int(x) for x in rng.integers(1, V, size=k)])
    return ctxs


@pytest.mark.parametrize("order", [2, 3, 4])
def test_probabilities_sum_to_one_for_every_context(order):
    rng = np.random.default_rng(order)
    corpus = _random_corpus()
    vocab = LMVocab.build(corpus[:300], min_count=3)   # some words become <unk>
    lm = NgramLM.estimate([vocab.encode(s) for s in corpus], len(vocab), order)
    seen_ctx_orders = set()
    for ctx in _contexts(lm, rng):
        dist = lm.context_distribution(ctx)
        assert dist[LM_BOS_ID] == 0.0
        assert np.all(dist[1:] > 0)
        assert np.isclose(dist.sum(), 1.0, rtol=0, atol=1e-9), ctx
        seen_ctx_orders.add(len(ctx))
        for w in (LM_EOS_ID, LM_UNK_ID, len(vocab) - 1):
            assert lm.prob(ctx, w) == pytest.approx(dist[w], abs=1e-12)
    assert seen_ctx_orders == set(range(order))


def _naive_adjusted_counts(sentences: list[list[str]], order: int) -> list[Counter]:
    """Chen & Goodman's adjusted counts by order (index k), with dicts and tuples: raw counts at the top
    order and for n-grams starting with <s>, left-extension counts N1+(. g) below."""
    counts = [Counter() for _ in range(order + 1)]
    for s in sentences:
        toks = ["<s>"] + s + ["</s>"]
        for p in range(1, len(toks)):
            for k in range(1, min(order, p + 1) + 1):
                counts[k][tuple(toks[p - k + 1:p + 1])] += 1
    adj = [Counter() for _ in range(order + 1)]
    adj[order] = Counter(counts[order])
    for k in range(1, order):
        left = Counter(g[1:] for g in counts[k + 1])
        for g, c in counts[k].items():
            adj[k][g] = c if g[0] == "<s>" else left[g]
    return adj


def _chen_goodman(adj: Counter) -> tuple[float, float, float]:
    """(D1, D2, D3+) of eq. 26 from the count-of-counts of one order's adjusted counts."""
    cc = Counter(c for c in adj.values() if c > 0)
    n1, n2, n3, n4 = (cc[i] for i in (1, 2, 3, 4))
    y = n1 / (n1 + 2 * n2)
    return (1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3)


def _naive_kn(sentences: list[list[str]], order: int, predictable: list[str]):
    """Textbook interpolated modified KN with dicts and tuples: an independent reference."""
    adj = _naive_adjusted_counts(sentences, order)
    disc = {k: _chen_goodman(adj[k]) for k in range(1, order + 1)}

    def d_of(k, c):
        return 0.0 if c == 0 else disc[k][min(c, 3) - 1]

    def prob(w, h):
        k = len(h) + 1
        if k == 1:
            total = sum(adj[1].values())
            nn = Counter(min(c, 3) for c in adj[1].values() if c > 0)
            gamma = sum(disc[1][j - 1] * nn[j] for j in (1, 2, 3)) / total
            c = adj[1].get((w,), 0)
            return max(c - d_of(1, c), 0) / total + gamma / len(predictable)
        follow = {g[-1]: c for g, c in adj[k].items() if g[:-1] == tuple(h)}
        if not follow:
            return prob(w, h[1:])
        total = sum(follow.values())
        nn = Counter(min(c, 3) for c in follow.values())
        gamma = sum(disc[k][j - 1] * nn[j] for j in (1, 2, 3)) / total
        c = follow.get(w, 0)
        return max(c - d_of(k, c), 0) / total + gamma * prob(w, h[1:])

    return prob, disc


def test_matches_a_naive_dictionary_implementation():
    corpus = _random_corpus(seed=3, n=300, words=80)  # enough types for n1..n4 > 0 at every order
    vocab = LMVocab.build(corpus)
    lm = NgramLM.estimate([vocab.encode(s) for s in corpus], len(vocab), order=3)
    ref, disc = _naive_kn(corpus, 3, vocab.itos[1:])
    assert lm.uni_discounts == pytest.approx(disc[1])
    assert [o.discounts for o in lm.orders] == [pytest.approx(disc[2]), pytest.approx(disc[3])]
    rng = np.random.default_rng(1)
    for _ in range(60):
        h = ["<s>"] * int(rng.integers(0, 2)) + [vocab.itos[i] for i in rng.integers(3, len(vocab), size=2)]
        h = h[-2:]
        for w in vocab.itos[1:]:
            assert lm.prob(vocab.encode(h) if h[0] != "<s>" else [LM_BOS_ID] + vocab.encode(h[1:]),
                           vocab.stoi[w]) == pytest.approx(ref(w, h), abs=1e-12), (h, w)


def test_batched_scoring_equals_one_ngram_at_a_time():
    corpus = _random_corpus(seed=5)
    vocab = LMVocab.build(corpus[:200], min_count=2)
    lm = NgramLM.estimate([vocab.encode(s) for s in corpus[:200]], len(vocab), order=4)
    test = [vocab.encode(s + ["never-seen"]) for s in corpus[200:260]] + [[]]
    logp, sent = lm.token_logprobs(test)
    ref = []
    for s in test:
        hist = [LM_BOS_ID]
        for w in s + [LM_EOS_ID]:
            ref.append(math.log(lm.prob(hist, w)))
            hist.append(w)
    np.testing.assert_allclose(logp, ref, rtol=0, atol=1e-12)
    assert sent.tolist() == [i for i, s in enumerate(test) for _ in range(len(s) + 1)]
    h = lm.cross_entropies(test)
    expected = [-sum(math.log2(lm.prob([LM_BOS_ID] + s[:j], w))
                     for j, w in enumerate(s + [LM_EOS_ID])) / (len(s) + 1)
                for s in test]
    np.testing.assert_allclose(h, expected, rtol=1e-12)


def test_keys_do_not_collide_with_a_large_vocabulary():
    """Ids need 18 bits; a 4-gram of them would not fit 64 bits if packed side by side."""
    corpus = _random_corpus(seed=7, n=200)
    small = LMVocab.build(corpus)
    V = 200_003
    big_id = {i: (V - 1 - 7919 * i) if i >= 3 else i for i in range(len(small))}  # high ids, distinct
    assert len(set(big_id.values())) == len(big_id) and max(big_id.values()) < V
    sents_small = [small.encode(s) for s in corpus]
    sents_big = [[big_id[i] for i in s] for s in sents_small]
    lm_small = NgramLM.estimate(sents_small, V, order=4)
    lm_big = NgramLM.estimate(sents_big, V, order=4)
    assert lm_small.sizes() == lm_big.sizes()
    a, _ = lm_small.token_logprobs(sents_small[:50])
    b, _ = lm_big.token_logprobs(sents_big[:50])
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def _read_arpa(text: str):
    probs, bows = {}, {}
    section = 0
    for line in text.splitlines():
        if line.startswith("\\") and line.endswith("-grams:"):
            section = int(line[1:line.index("-")])
            continue
        if not line or line.startswith("\\") or section == 0:
            continue
        parts = line.split("\t")
        g = tuple(parts[1].split(" "))
        probs[g] = float(parts[0])
        if len(parts) > 2:
            bows[g] = float(parts[2])
    return probs, bows


def _arpa_logprob(probs, bows, order, hist, w):
    hist = tuple(hist[-(order - 1):])
    if hist + (w,) in probs:
        return probs[hist + (w,)]
    return bows.get(hist, 0.0) + _arpa_logprob(probs, bows, order, hist[1:], w) if hist else probs[(w,)]


def test_arpa_file_reproduces_the_model_by_back_off():
    corpus = _random_corpus(seed=11, n=250)
    vocab = LMVocab.build(corpus[:200], min_count=2)
    lm = NgramLM.estimate([vocab.encode(s) for s in corpus[:200]], len(vocab), order=3)
    fh = io.StringIO()
    lm.write_arpa(fh, vocab.itos)
    probs, bows = _read_arpa(fh.getvalue())
    assert sum(1 for g in probs if len(g) == 3) == lm.orders[-1].keys.size
    for s in corpus[200:]:
        toks = [t if t in vocab.stoi else "<unk>" for t in s] + ["</s>"]
        ids = vocab.encode(s) + [LM_EOS_ID]
        hist, hist_ids = ["<s>"], [LM_BOS_ID]
        for t, i in zip(toks, ids):
            assert _arpa_logprob(probs, bows, 3, hist, t) == pytest.approx(math.log10(lm.prob(hist_ids, i)), abs=2e-6)
            hist.append(t)
            hist_ids.append(i)


def test_kenlm_query_agrees_with_our_arpa(tmp_path):
    kenlm = pytest.importorskip("kenlm", reason="kenlm not installed (pip install kenlm)")
    corpus = _random_corpus(seed=13, n=300)
    vocab = LMVocab.build(corpus[:250], min_count=2)
    lm = NgramLM.estimate([vocab.encode(s) for s in corpus[:250]], len(vocab), order=4)
    path = tmp_path / "lm.arpa"
    with open(path, "w") as fh:
        lm.write_arpa(fh, vocab.itos)
    model = kenlm.Model(str(path))
    test = corpus[250:]
    logp, sent = lm.token_logprobs([vocab.encode(s) for s in test])
    ours = np.bincount(sent, weights=logp, minlength=len(test)) / math.log(10)
    theirs = [model.score(" ".join(s), bos=True, eos=True) for s in test]
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_vocab_min_count_maps_rare_words_to_unk():
    v = LMVocab.build([["x", "y", "x"], ["z", "x", "y"]], min_count=2)
    assert v.itos == ["<s>", "</s>", "<unk>", "x", "y"]
    assert v.encode(["x", "z", "q"]) == [3, LM_UNK_ID, LM_UNK_ID]


def test_estimating_from_no_text_is_an_error():
    with pytest.raises(ValueError):
        NgramLM.estimate([], 5, order=3)


def _real_text(shared_data, lines: int) -> list[list[str]]:
    """The first `lines` sentences of a real tokenised corpus."""
    with open(shared_data / "opennmt-toy-ende" / "src-train.txt", encoding="utf-8") as fh:
        return [fh.readline().split() for _ in range(lines)]


# lmplz -o 4 on those 3000 lines prints these (D1, D2, D3+) for orders 1..4
LMPLZ_DISCOUNTS = [(0.698703, 1.0136, 1.50895), (0.848625, 1.23548, 1.38373), (0.938954, 1.3488, 1.37797),
                   (0.974579, 1.37739, 1.79175)]


def test_discounts_on_real_text_are_chen_goodman_of_the_adjusted_counts(shared_data):
    corpus = _real_text(shared_data, 3000)
    vocab = LMVocab.build(corpus)
    lm = NgramLM.estimate([vocab.encode(s) for s in corpus], len(vocab), order=4)
    adj = _naive_adjusted_counts(corpus, 4)
    ours = [lm.uni_discounts] + [o.discounts for o in lm.orders]
    assert ours == [pytest.approx(_chen_goodman(adj[k]), abs=1e-12) for k in range(1, 5)]
    assert ours == [pytest.approx(d, rel=1e-5) for d in LMPLZ_DISCOUNTS]
    assert lm.sizes() == [len(adj[k]) for k in range(1, 5)]
    for s in corpus[:3]:
        ids = [LM_BOS_ID] + vocab.encode(s)
        for end in range(1, 5):
            assert lm.context_distribution(ids[:end]).sum() == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("lines", [3000, 20])  # 20: two orders take the fallback discounts
def test_arpa_equals_lmplz_on_real_text(shared_data, tmp_path, lines):
    lmplz = shutil.which("lmplz") or pytest.skip("lmplz (KenLM's estimator) not on PATH")
    corpus = _real_text(shared_data, lines)
    (tmp_path / "text").write_text("".join(" ".join(s) + "\n" for s in corpus), encoding="utf-8")
    subprocess.run([lmplz, "-o", "3", "-S", "50M", "-T", str(tmp_path), "--discount_fallback", "--text",
                    str(tmp_path / "text"), "--arpa", str(tmp_path / "lmplz.arpa")], check=True, capture_output=True)
    theirs = _read_arpa((tmp_path / "lmplz.arpa").read_text(encoding="utf-8"))
    vocab = LMVocab.build(corpus)
    fh = io.StringIO()
    NgramLM.estimate([vocab.encode(s) for s in corpus], len(vocab), order=3).write_arpa(fh, vocab.itos)
    ours = _read_arpa(fh.getvalue())
    for table, other in zip(ours, theirs):
        table.pop(("<s>",), None), other.pop(("<s>",), None)  # never predicted: -99 here, 0 in lmplz
        assert table.keys() == other.keys()
        assert max(abs(table[g] - other[g]) for g in table) < 1e-6
