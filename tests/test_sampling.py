"""Sampling (`nmtkit.decode.sampling`, `translate --sampling`): draws follow the model's
distribution, a seed reproduces them whatever the batching, other seeds differ, line order and
empty lines are kept, bad values are refused."""
from __future__ import annotations

import math
import shutil

import pytest

from tests.conftest import make_checkpoint, run_cli, tiny_model

LINES = ["the cat sat on a mat .", "", "a dog ran in the park", "the big red house", "cat", "the cat sat on a mat ."]


def _sampler(ckpt, **kw):
    from tests.conftest import bound_translator

    # fp32: bf16 products may round differently between batch shapes (see nmtkit.decode.sampling)
    return bound_translator(ckpt, device="cpu", precision="fp32", sampling=True, max_len_a=1.0, max_len_b=4.0, **kw)


def _batch(n=6, seed=0):
    import torch

    torch.manual_seed(seed)
    lens = torch.randint(2, 7, (n,))
    src = torch.randint(4, 20, (n, int(lens.max())))
    for i, n_i in enumerate(lens.tolist()):
        src[i, n_i:] = 0
    return src, lens


def test_draws_follow_the_distribution_and_topk_and_temperature_reshape_it():
    import torch

    from nmtkit.decode.sampling import _draw, sampling_uniforms

    p = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    lp = p.log().unsqueeze(0).expand(20000, -1)
    u = sampling_uniforms(7, range(20000), 1)[:, 0]
    freq = torch.bincount(_draw(lp, u, 0, 1.0), minlength=5).double() / 20000
    assert torch.allclose(freq, p.double(), atol=0.02), freq
    assert freq[4] == 0  # a zero-probability token is never drawn
    top2 = torch.bincount(_draw(lp, u, 2, 1.0), minlength=5).double() / 20000
    assert torch.allclose(top2, torch.tensor([0.625, 0.375, 0, 0, 0], dtype=torch.float64), atol=0.02), top2
    # p^(1/T), renormalised: T = 0.5 squares the probabilities
    sharp = p**2 / (p**2).sum()
    freq_t = torch.bincount(_draw(lp, u, 0, 0.5), minlength=5).double() / 20000
    assert torch.allclose(freq_t, sharp.double(), atol=0.02), freq_t


def test_topk_one_short_of_the_vocabulary_still_leaves_out_the_least_likely_token():
    import torch

    from nmtkit.decode.sampling import _draw, sampling_uniforms

    lp = torch.tensor([0.5, 0.3, 0.15, 0.05]).log().unsqueeze(0).expand(2000, -1)
    drawn = _draw(lp, sampling_uniforms(5, range(2000), 1)[:, 0], 3, 1.0)
    assert set(drawn.tolist()) == {0, 1, 2}


def test_a_draw_at_either_end_of_the_unit_interval_never_picks_a_forbidden_token():
    """u = 0 and the largest double below 1 (the ends of numpy's random()), on a distribution
    whose float64 CDF ends just under 1: the first and the last allowed token, never the
    zero-probability ones beside them."""
    import torch

    from nmtkit.decode.sampling import _draw

    lp = torch.tensor([0.0, 0.1, 0.25, 0.0]).log().unsqueeze(0).expand(2, -1)
    u = torch.tensor([0.0, 1 - 2**-53], dtype=torch.float64)
    assert _draw(lp, u, 0, 1.0).tolist() == [1, 2]


def test_topk_1_is_greedy_search():
    from nmtkit.decode.sampling import sample
    from nmtkit.decode.search import greedy_search
    from nmtkit.decode.steps import max_lengths

    model = tiny_model(seed=1)
    src, lens = _batch()
    lim = max_lengths(lens, 1.0, 4.0)
    drawn = sample(model, src, lens, seed=3, topk=1, max_len_a=1.0, max_len_b=4.0)
    greedy = greedy_search(model, src, lens, max_len=lim)
    assert [h[0].tokens for h in drawn] == [g.tokens for g in greedy]
    assert [h[0].log_prob for h in drawn] == pytest.approx([g.log_prob for g in greedy], abs=1e-4)


@pytest.mark.parametrize("temperature", [1e-3, 1e-39, 1e-45, 1e-300])
def test_a_tiny_temperature_is_greedy_search_not_empty_or_other_output(temperature):
    """lp / T overflowed in fp32 (-inf everywhere, then NaN): 1e-45 drew empty translations,
    1e-39 other words than greedy search, with exit 0."""
    from nmtkit.decode.sampling import sample
    from nmtkit.decode.search import greedy_search
    from nmtkit.decode.steps import max_lengths

    model = tiny_model(seed=1)
    src, lens = _batch()
    drawn = sample(model, src, lens, seed=3, temperature=temperature, max_len_a=1.0, max_len_b=4.0)
    greedy = greedy_search(model, src, lens, max_len=max_lengths(lens, 1.0, 4.0))
    assert [h[0].tokens for h in drawn] == [g.tokens for g in greedy]
    assert [h[0].log_prob for h in drawn] == pytest.approx([g.log_prob for g in greedy], abs=1e-4)


def test_reported_log_prob_is_the_models_and_lengths_stay_within_the_limit():
    import torch

    from nmtkit.decode.sampling import sample
    from nmtkit.decode.steps import max_lengths
    from nmtkit.text.vocab import BOS_ID, EOS_ID

    model = tiny_model(seed=2)
    src, lens = _batch(seed=1)
    lim = max_lengths(lens, 1.0, 4.0)
    hyps = sample(model, src, lens, seed=11, keys=range(6), temperature=1.5, max_len_a=1.0, max_len_b=4.0,
                  need_attention=True)
    for b, [h] in enumerate(hyps):
        assert len(h.tokens) <= int(lim[b])
        # attention over the sentence's own source tokens, its source EOS apart
        assert h.attention.shape == (len(h.tokens) + 1, int(lens[b]))
        assert torch.allclose(h.attention.sum(1) + h.source_eos_attention, torch.ones(len(h.tokens) + 1), atol=1e-5)
        tgt_in = torch.tensor([[BOS_ID] + h.tokens])
        with torch.no_grad():
            lp = model(src[b : b + 1, : int(lens[b])], lens[b : b + 1], tgt_in)[0]  # (T, V)
        gold = h.tokens + [EOS_ID]
        expected = float(sum(lp[t, tok] for t, tok in enumerate(gold)))
        assert h.log_prob == pytest.approx(expected, abs=1e-3)
        assert h.score == pytest.approx(h.log_prob / len(gold))



def test_the_attention_kept_for_alignments_is_as_long_as_the_draws_not_the_length_limit(monkeypatch):
    """--sampling --alignments held a (B, a*S+b+1, S) history from the first step: 567 MB on a
    5,000-word line (--max-src-len 100000) that drew 105 tokens."""
    from nmtkit.decode import sampling

    kept, draw_all = [], sampling._draw_all
    monkeypatch.setattr(sampling, "_draw_all", lambda *a: kept.append(draw_all(*a)) or kept[-1])
    src, lens = _batch(seed=1)
    hyps = sampling.sample(tiny_model(seed=2), src, lens, max_len_b=300, need_attention=True)
    _, _, lengths, attn_hist = kept[0]
    assert attn_hist.size(1) == int(lengths.max()) + 1 < 300
    assert [h.attention.size(0) for [h] in hyps] == [n + 1 for n in lengths.tolist()]

def test_same_seed_reproduces_whatever_the_batch_size_and_different_seeds_differ(ckpt):
    first = _sampler(ckpt, seed=3).translate(LINES * 3)
    again = _sampler(ckpt, seed=3, batch_size=1).translate(LINES * 3)
    assert again == first
    other = _sampler(ckpt, seed=4).translate(LINES * 3)
    differ = [a != b for a, b in zip(first, other) if a or b]
    assert sum(differ) >= len(differ) // 2, (first, other)
    # the same sentence on different lines gets its own draws (the line number keys them)
    assert len({first[i] for i in range(0, len(first), len(LINES))}) > 1


def test_sampling_keeps_line_order_and_empty_lines_through_the_cli(ckpt, tmp_path):
    src = tmp_path / "in.en"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    common = ["translate", "-m", ckpt, "--sampling", "--seed", "9", "--max-len-a", "1", "--max-len-b", "4",
              "--precision", "fp32",
              "-i", str(src), "--quiet"]
    whole = run_cli(common, process=True)
    one_by_one = run_cli([*common, "--buffer-size", "1", "--batch-size", "1"], process=True)
    assert whole.code == 0, whole.err
    assert whole.out == one_by_one.out
    out = whole.out.split("\n")[:-1]
    assert len(out) == len(LINES) and out[1] == "" and all(out[i] for i in (0, 2, 3, 4, 5))
    assert out == _sampler(ckpt, seed=9).translate(LINES)


def test_sampling_draws_from_the_whole_vocabulary_even_with_a_lexicon(tmp_path):
    """The shortlist narrows beam search only: a sample's distribution is the model's."""
    import torch

    from tests.conftest import SPECIALS, SRC_WORDS

    lexicon = torch.full((len(SPECIALS) + len(SRC_WORDS), 2), 4, dtype=torch.int32)  # every word -> "le"
    path = make_checkpoint(tmp_path / "lex.pt", seed=5, lexicon=lexicon)
    with_lex = _sampler(str(path), seed=2)
    plain = make_checkpoint(tmp_path / "plain.pt", seed=5)
    assert with_lex.translate(LINES) == _sampler(str(plain), seed=2).translate(LINES)


@pytest.mark.parametrize("kw,needle", [
    (dict(temperature=0.0), "--temperature must be > 0"),
    (dict(temperature=-1.0), "--temperature must be > 0"),
    (dict(temperature=math.nan), "--temperature must be a finite number"),
    (dict(sampling_topk=-1), "--sampling-topk"),
    (dict(seed=-1), "--seed"),
    (dict(nbest=2, beam=2), "--nbest must be 1"),
    (dict(lenpen=0.5), "--sampling writes each line's drawn translation, not its score: --lenpen would change nothing"),
])
def test_bad_sampling_values_are_refused(kw, needle):
    from nmtkit.errors import ConfigError
    from nmtkit.translate import TranslateConfig

    with pytest.raises(ConfigError, match=needle.replace("-", r"\-")):
        TranslateConfig(models=("m.pt",), sampling=True, **kw).validate()


@pytest.mark.parametrize("kw, message", [
    (dict(temperature=0.7), "--temperature needs --sampling"), (dict(sampling_topk=5), "--sampling-topk needs --sampling"),
    (dict(seed=1), "--seed needs --sampling"), (dict(seed=1, temperature=0.7), "--temperature and --seed need --sampling"),
])
def test_sampling_options_without_sampling_are_refused_in_a_grammatical_line(kw, message):
    from nmtkit.errors import ConfigError
    from nmtkit.translate import TranslateConfig

    with pytest.raises(ConfigError, match=f"^{message}$"):
        TranslateConfig(models=("m.pt",), **kw).validate()


def test_sample_refuses_a_nonpositive_temperature():
    from nmtkit.decode.sampling import sample

    model = tiny_model()
    src, lens = _batch()
    with pytest.raises(ValueError, match="temperature"):
        sample(model, src, lens, seed=1, temperature=0.0)


def test_samples_carry_alignments_and_an_ensemble_of_one_model_twice_samples_as_the_model(ckpt, tmp_path):
    single = _sampler(ckpt, seed=6)
    results = single.generate(LINES, alignments=True)
    for r in results:
        for t in r.nbest:
            pairs = t.alignment()
            assert [j for _, j in pairs] == list(range(len(t.tokens)))
            assert all(0 <= i < len(t.src_tokens) for i, _ in pairs)
    twice = _sampler([ckpt, shutil.copy(ckpt, tmp_path / "copy.pt")], seed=6)
    assert twice.translate(LINES) == [r.text for r in results]


def test_ban_unk_keeps_the_unknown_word_out_of_samples(ckpt):
    lines = LINES * 4
    free = _sampler(ckpt, seed=3, output_format="bpe").translate(lines)
    assert any("<unk>" in out.split() for out in free)  # this model does draw it
    banned = _sampler(ckpt, seed=3, output_format="bpe", ban_unk=True).translate(lines)
    assert not any("<unk>" in out.split() for out in banned)
