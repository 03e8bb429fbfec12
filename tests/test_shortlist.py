"""Decoding shortlists (Jean et al. 2015): the lexicon, the candidate lists and beam search over them."""
from __future__ import annotations

import copy

import numpy as np
import torch

import nmtkit
from nmtkit.decode.search import beam_search
from nmtkit.decode.shortlist import build_lexicon, shortlist_ids
from tests.conftest import run_cli, tiny_model


def _ragged(sentences):
    ids = np.array([w for s in sentences for w in s], dtype=np.int32)
    off = np.concatenate([[0], np.cumsum([len(s) for s in sentences])]).astype(np.int64)
    return ids, off


def test_lexicon_ranks_each_source_words_translation_first_by_dice():
    """Source word 4+i always comes with target word 10+i, beside frequent filler words: the
    Dice coefficient puts 10+i first for 4+i, not the filler that co-occurs as often."""
    rng = np.random.default_rng(0)
    src, tgt = [], []
    for _ in range(300):
        words = rng.choice(5, size=3, replace=False)
        src.append([4 + int(w) for w in words])
        tgt.append([10 + int(w) for w in words] + [4, 5])  # 4, 5: target words in every sentence
    lex = build_lexicon(*_ragged(src), *_ragged(tgt), src_vocab=12, tgt_vocab=16, k=3)
    assert lex.shape == (12, 3) and lex.dtype == np.int32
    for i in range(5):
        assert lex[4 + i, 0] == 10 + i
    assert (lex[9:] == 0).all()  # never seen: PAD fills the row


def test_lexicon_samples_at_most_max_pairs_sentence_pairs():
    src = [[4, 5]] * 50 + [[6]] * 50
    tgt = [[7]] * 50 + [[8]] * 50
    full = build_lexicon(*_ragged(src), *_ragged(tgt), src_vocab=9, tgt_vocab=9, k=1)
    assert full[4, 0] == 7 and full[6, 0] == 8
    part = build_lexicon(*_ragged(src), *_ragged(tgt), src_vocab=9, tgt_vocab=9, k=1, max_pairs=10, seed=3)
    assert part.shape == (9, 1) and set(part[[4, 6], 0]) <= {0, 7, 8}


def test_a_sample_of_the_pairs_holds_distinct_pairs_each_source_with_its_own_target():
    """Pair i, of varied lengths, holds source word 4+i and target word 4+i alone: a sample of 30
    of the 60 pairs gives 30 source words a lexicon entry, each its own target word."""
    src = [[4 + i] * (1 + i % 3) for i in range(60)]
    tgt = [[4 + i] * (1 + i % 2) for i in range(60)]
    lex = build_lexicon(*_ragged(src), *_ragged(tgt), src_vocab=64, tgt_vocab=64, k=1, max_pairs=30, seed=1)
    seen = np.flatnonzero(lex[:, 0])
    assert len(seen) == 30 and (lex[seen, 0] == seen).all()


def test_shortlist_keeps_specials_frequent_words_and_the_batchs_translations_in_groups_of_16():
    V = 200
    lex = torch.zeros(30, 2, dtype=torch.int32)
    lex[7] = torch.tensor([150, 151])
    lex[8] = torch.tensor([190, 3])
    ids = shortlist_ids(lex, torch.tensor([[7, 8, 0]]), V, frequent=20)
    got = set(ids.tolist())
    assert ids.tolist() == sorted(got) and ids[:4].tolist() == [0, 1, 2, 3]
    assert set(range(20)) | {150, 151, 190} <= got
    assert len(ids) % 16 == 0 and len(ids) < V
    assert len(shortlist_ids(lex, torch.tensor([[7]]), 24, frequent=20)) == 24  # never past the vocabulary
    # all the frequent words, even where they and the translations fill whole groups with no padding
    assert set(range(16)) <= set(shortlist_ids(lex, torch.tensor([[8]]), V, frequent=16).tolist())


def _batch(V_src, B=5, S=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(2, S + 1, (B,), generator=g)
    src = torch.randint(4, V_src, (B, S), generator=g) * (torch.arange(S) < lens.unsqueeze(1))
    return src, lens


def test_beam_search_over_the_whole_vocabulary_as_a_shortlist_finds_the_same_hypotheses():
    model = tiny_model(seed=5, tgt_vocab=64)
    src, lens = _batch(model.config.src_vocab_size)
    plain = beam_search(model, src, lens, beam=4, nbest=2, max_len_a=1.5, max_len_b=3)
    listed = beam_search(model, src, lens, beam=4, nbest=2, max_len_a=1.5, max_len_b=3, vocab=torch.arange(64))
    for p, q in zip(plain, listed):
        assert [h.tokens for h in p] == [h.tokens for h in q]
        assert [h.score for h in p] == [h.score for h in q]


def test_beam_search_with_a_shortlist_emits_only_its_words_and_maps_them_back_to_vocabulary_ids():
    model = tiny_model(seed=6, tgt_vocab=64)
    with torch.no_grad():
        model.W_o.bias[3] -= 4.0  # EOS less likely: hypotheses of a few words
    src, lens = _batch(model.config.src_vocab_size, seed=2)
    vocab = torch.tensor([0, 1, 2, 3] + list(range(40, 52)))  # 16 ids, most of them rare words
    hyps = beam_search(model, src, lens, beam=3, max_len_a=2, max_len_b=4, vocab=vocab)
    toks = {t for h in hyps for t in h[0].tokens}
    assert toks and toks <= set(range(40, 52)) | {1}
    # a shortlisted search is the full search of a model whose vocabulary is the shortlist
    W = model.W_o
    small = copy.deepcopy(model)
    small.W_o = torch.nn.Linear(W.in_features, len(vocab))
    small.W_o.weight.data, small.W_o.bias.data = W.weight.data[vocab].clone(), W.bias.data[vocab].clone()
    small.tgt_embed.weight.data = model.tgt_embed.weight.data[vocab].clone()  # its word j is vocab[j]
    ref = beam_search(small, src, lens, beam=3, max_len_a=2, max_len_b=4)
    assert [[vocab[t].item() for t in h[0].tokens] for h in ref] == [h[0].tokens for h in hyps]
    assert [h[0].score for h in ref] == [h[0].score for h in hyps]


def test_trained_checkpoints_carry_a_lexicon_that_translate_uses_unless_told_off(data_dir, tmp_path, monkeypatch):
    from nmtkit.checkpoint import load_checkpoint
    from tests.conftest import tiny_options, tiny_overrides, train_run

    run = tmp_path / "run"
    train_run(data_dir, run, tiny_options(max_updates=3, valid_every=100), tiny_overrides())
    ckpt = load_checkpoint(run / "checkpoint_best.pt")
    assert ckpt["lexicon"].shape == (len(ckpt["src_vocab"]), 20) and ckpt["lexicon"].dtype == torch.int32
    calls = []
    import nmtkit.decode.shortlist as sl

    real = sl.shortlist_ids
    monkeypatch.setattr(sl, "shortlist_ids", lambda *a, **k: calls.append(1) or real(*a, **k))
    for mode in ("auto", "off"):
        tr = nmtkit.load(run / "checkpoint_best.pt", input_format="tok", output_format="tok")
        assert len(tr.translate(["w4 w5 w6", "w7"], beam=2, shortlist=mode)) == 2
        assert tr.bundle.lexicon is not None
    assert calls == [1]  # one batch, shortlisted under auto only


def test_an_unknown_shortlist_mode_is_refused_on_the_command_line_and_in_the_config(tmp_path):
    import pytest

    from nmtkit.errors import ConfigError
    from nmtkit.translate import TranslateConfig

    with pytest.raises(ConfigError, match="--shortlist must be one of auto, off"):
        TranslateConfig(models=("m.pt",), shortlist="sometimes").validate()
    for cmd in ("translate", "serve"):
        code, _, err = run_cli([cmd, "-m", str(tmp_path / "m.pt"), "--shortlist", "sometimes"])
        assert code == 2 and "'sometimes' is not one of 'auto', 'off'" in err, err


def test_a_shortlists_log_probabilities_are_normalised_over_it_as_the_nbest_help_says(tmp_path):
    """The n-best LogProb of a shortlisted search is over the shortlist (higher than the whole
    vocabulary's, which --score-reference gives); with --shortlist off the two agree."""
    from tests.conftest import make_checkpoint

    lexicon = torch.randint(4, 1204, (22, 20), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    path = make_checkpoint(tmp_path / "lex.pt", seed=3, tgt_words=[f"w{i}" for i in range(1200)], lexicon=lexicon)
    model = nmtkit.load(path, device="cpu", precision="fp32", input_format="bpe", output_format="bpe")
    for mode in ("auto", "off"):
        best = model.generate(["a dog ran"], beam=3, shortlist=mode, max_len_a=0, max_len_b=3)[0].nbest[0]
        [full] = model.score(["a dog ran"], [best.text])
        assert best.log_prob > full + 0.1 if mode == "auto" else abs(best.log_prob - full) < 1e-5
    text = " ".join(run_cli(["translate", "--help"])[1].split())
    assert "with a --shortlist, lp is normalised over the batch's shortlist" in text
