"""Cleaning rules (clean-corpus-n), deduplication, and the UTF-8 line reader's errors."""
from __future__ import annotations

import pytest

from nmtkit.errors import InputError
from nmtkit.text.clean import PairDeduper, drop_reason
from nmtkit.text.io import check_parallel, count_lines_and_hash, read_lines


@pytest.mark.parametrize("src_len,tgt_len,reason", [
    (5, 6, None),
    (0, 3, "empty"),
    (3, 0, "empty"),
    (50, 50, None),          # max_len is inclusive, like clean-corpus-n
    (51, 10, "too_long"),
    (10, 51, "too_long"),
    (1, 9, None),            # ratio 9 is allowed ...
    (1, 10, "ratio"),        # ... above it is not, either way
    (10, 1, "ratio"),
])
def test_drop_reason_follows_clean_corpus_n(src_len, tgt_len, reason):
    assert drop_reason(src_len, tgt_len, max_len=50, max_ratio=9.0) == reason


def test_deduper_flags_only_repeats_of_the_same_pair():
    d = PairDeduper()
    assert not d.seen_before("a b", "x y")
    assert not d.seen_before("a b", "x z")
    assert d.seen_before("a b", "x y")
    assert d.seen_before(" a b ", "x y\n")  # surrounding whitespace ignored


def test_read_lines_strips_line_endings_but_not_inner_carriage_returns(tmp_path):
    p = tmp_path / "f.txt"
    p.write_bytes(b"one\r\ntwo\rstill two\n\nlast")
    assert list(read_lines(p)) == ["one", "two\rstill two", "", "last"]
    assert count_lines_and_hash(p)[0] == 4


def test_invalid_utf8_names_file_and_line(tmp_path):
    p = tmp_path / "bad.fr"
    p.write_bytes(b"bonjour\nca va\nd\xe9j\xe0 vu\nfin\n")
    with pytest.raises(InputError) as err:
        list(read_lines(p))
    assert str(err.value).startswith(f"{p}:3: invalid UTF-8")


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        list(read_lines(tmp_path / "nope.en"))


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    a, b = tmp_path / "x.en", tmp_path / "x.fr"
    a.write_text("1\n2\n3\n")
    b.write_text("1\n2\n")
    with pytest.raises(InputError) as err:
        check_parallel(a, b)
    msg = str(err.value)
    assert str(a) in msg and str(b) in msg and "3 lines" in msg and "2 lines" in msg


def test_checksum_is_sha256_of_the_bytes(tmp_path):
    import hashlib

    p = tmp_path / "x"
    p.write_bytes(b"abc\n")
    assert count_lines_and_hash(p) == (1, hashlib.sha256(b"abc\n").hexdigest())
