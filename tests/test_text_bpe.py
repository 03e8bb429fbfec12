"""BPE through subword-nmt: learning from counts, applying, joining, vocabulary threshold."""
from __future__ import annotations

from collections import Counter

import pytest

from nmtkit.text.bpe import Bpe, count_merges, join_bpe, learn_codes, subword_vocab

WORDS = Counter({"low": 5, "lower": 2, "newest": 6, "widest": 3, "new": 4, "wide": 1})


@pytest.mark.parametrize("pieces,words", [
    (["lo@@", "wer"], ["lower"]),
    (["the", "lo@@", "w@@", "est", "one"], ["the", "lowest", "one"]),
    (["a", "b"], ["a", "b"]),
    ([], []),
    (["dangling@@"], ["dangling"]),
    (["x@@", "y@@"], ["xy"]),
    (["well", "@-@", "known"], ["well", "@-@", "known"]),  # Moses' aggressive dash is not a BPE separator
])
def test_join_bpe_glues_pieces_ending_with_the_separator(pieces, words):
    assert join_bpe(pieces) == words


def test_join_bpe_strips_a_separator_of_any_length():
    assert join_bpe(["lo~", "w~", "er"], "~") == join_bpe(["lo<sep>", "wer"], "<sep>") == ["lower"]


def test_learned_codes_are_subword_nmt_text_and_respect_the_merge_budget():
    codes = learn_codes(WORDS, 5, min_frequency=1)
    assert codes.startswith("#version: 0.2\n")
    assert count_merges(codes) == 5
    lines = codes.splitlines()[1:]
    assert all(len(line.split(" ")) == 2 for line in lines)


def test_learning_stops_when_no_pair_is_frequent_enough():
    codes = learn_codes(Counter({"ab": 1, "cd": 1}), 100, min_frequency=2)
    assert count_merges(codes) == 0


def test_apply_then_join_is_the_identity_on_words_seen_and_unseen():
    bpe = Bpe(learn_codes(WORDS, 10, min_frequency=1))
    for words in (["lowest", "newer", "wider"], ["low", "new"], ["zebra"]):
        pieces = bpe.apply(words)
        assert join_bpe(pieces) == words
    assert len(bpe.apply(["lowest"])) > 1  # an unseen word is segmented


def test_frequent_words_stay_whole_with_enough_merges():
    bpe = Bpe(learn_codes(WORDS, 50, min_frequency=1))
    assert bpe.apply(["newest", "low"]) == ["newest", "low"]


def test_vocabulary_threshold_splits_rare_subwords_like_subword_nmt():
    counts = Counter({"newest": 10, "widest": 1, "new": 10, "est": 5})
    codes = learn_codes(counts, 30, min_frequency=1)
    assert Bpe(codes).apply(["widest"]) == ["widest"]  # learned as a whole word
    vocab = subword_vocab(codes, counts, threshold=2)
    assert "widest" not in vocab and "newest" in vocab
    pieces = Bpe(codes, vocab=vocab).apply(["widest"])
    assert len(pieces) > 1 and join_bpe(pieces) == ["widest"]
    assert all(p in vocab or len(p.rstrip("@")) == 1 for p in pieces)


def test_codes_without_merges_split_words_into_characters_as_subword_nmt_would():
    """A corpus where no pair repeats learns no merges; subword-nmt cannot load such codes (it
    exits), so `Bpe` splits every word into its characters, as subword-nmt does with a merge that
    never applies."""
    import io

    from subword_nmt.apply_bpe import BPE

    codes = learn_codes(Counter({"ab": 1, "cd": 1}), 100, min_frequency=2)
    assert count_merges(codes) == 0 == count_merges("#version:\r2\n")  # a "\r" ends no line for subword-nmt
    assert Bpe("#version:\r2\n").apply(["ab"]) == ["a@@", "b"]
    words = ["abc", "a", "déjà", "x-y"]
    never = BPE(io.StringIO(codes + "\ue000 \ue001\n"))  # one merge of characters none of the words has
    assert Bpe(codes).apply(words) == never.segment_tokens(words) == ["a@@", "b@@", "c", "a", "d@@", "é@@", "j@@",
                                                                      "à", "x@@", "-@@", "y"]


@pytest.mark.parametrize("codes", [
    "#version: 0.2\na b\nab c\n", "a b\n", " a b \r\nc d\n", "#version: 0.2\na b\nc\n", "a b\nc d e\n",
    "a b\n\nc d\n", "#version: x\na b\n", "a\tb\n", "#version: 0.2\na  b\n", "#version:0.2\na b\n",
    "#version: 2\na b\n", "#version: 0.1.0\na b\n", "#version: .2\na b\n",
])
def test_check_codes_refuses_exactly_the_codes_subword_nmt_cannot_load(codes, capsys):
    """check_codes says why, with the line; subword-nmt would print it and exit the process."""
    import io

    from subword_nmt.apply_bpe import BPE

    from nmtkit.text.bpe import check_codes

    try:
        BPE(io.StringIO(codes)).segment_tokens(["ab"])
        loads = True
    except (SystemExit, ValueError, NotImplementedError):
        loads = False
    capsys.readouterr()
    if loads:
        check_codes(codes)
    else:
        with pytest.raises(ValueError, match=r"line \d+ is not"):
            check_codes(codes)
