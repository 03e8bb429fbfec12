"""Cleaning rules (clean-corpus-n), deduplication, and the UTF-8 line reader's errors."""
from __future__ import annotations

import pytest

from nmtkit.errors import InputError
from nmtkit.text.io import check_parallel, count_lines_and_hash, read_lines
from nmtkit.text.moses import PairDeduper, drop_reason


@pytest.mark.parametrize("src_len,tgt_len,reason", [
    (5, 6, None),
    (0, 3, "empty"),
    (3, 0, "empty"),
    (50, 50, None),          # max_len is inclusive, like clean-corpus-n
    (51, 10, "too_long"),
    (10, 51, "too_long"),
    (1, 9, None),            # ratio 9 is allowed ...
    (9, 1, None),
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


BYTES = "a\r\nb\u2028c\u0085d\n\nlast".encode()
LINES = ["a", "b\u2028c\u0085d", "", "last"]  # split on \n only, one \r dropped: `wc -l` + 1 for "last"


def test_every_line_reader_splits_on_newline_only_and_agrees(tmp_path, monkeypatch):
    import io
    import sys

    from nmtkit.text.io import decode_line, decode_lines, read_all_lines, stream_lines

    p = tmp_path / "x.txt"
    p.write_bytes(BYTES)
    assert list(read_lines(p)) == LINES
    assert read_all_lines(p) == LINES
    assert decode_lines(BYTES, p) == LINES
    assert list(stream_lines(io.BytesIO(BYTES), "x")) == LINES
    assert [decode_line(raw, p, 1) for raw in BYTES.split(b"\n")] == LINES
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BYTES)))
    assert read_all_lines("-") == LINES
    p.write_bytes(b"")
    assert read_all_lines(p) == [] and list(read_lines(p)) == [] and decode_lines(b"", p) == []


def test_every_line_reader_drops_a_byte_order_mark_at_the_start_of_a_file_only(tmp_path, monkeypatch):
    import gzip
    import io
    import sys

    from nmtkit.text.io import decode_lines, read_all_lines, stream_lines

    data = "\ufeffle chat\n\ufeffinside\nfin\n".encode("utf-8")
    want = ["le chat", "\ufeffinside", "fin"]  # a U+FEFF inside the text is the text's
    p, gz = tmp_path / "bom.txt", tmp_path / "bom.txt.gz"
    p.write_bytes(data)
    gz.write_bytes(gzip.compress(data))
    assert list(read_lines(p)) == list(read_lines(gz)) == read_all_lines(p) == want
    assert decode_lines(data, p) == list(stream_lines(io.BytesIO(data), "x")) == want
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert read_all_lines("-") == want
    # a block from the middle of a file keeps what it starts with
    assert decode_lines(data, p, first=7) == ["\ufeffle chat", "\ufeffinside", "fin"]
    assert decode_lines(data, p, file_start=False)[0] == "\ufeffle chat"


def test_every_line_reader_names_the_line_of_invalid_utf8(tmp_path):
    import io

    from nmtkit.text.io import decode_lines, read_all_lines, stream_lines

    data = b"ok\nfine\nbad \xff here\n"
    p = tmp_path / "bad.txt"
    p.write_bytes(data)
    for call in (lambda: list(read_lines(p)), lambda: read_all_lines(p), lambda: decode_lines(data, p),
                 lambda: list(stream_lines(io.BytesIO(data), str(p)))):
        with pytest.raises(InputError) as err:
            call()
        assert str(err.value).startswith(f"{p}:3: invalid UTF-8") and "byte 5 of the line" in str(err.value)


def test_raw_references_split_on_newline_not_u2028(tmp_path):
    import hashlib
    import json

    from nmtkit.train.data import DataDir
    from tests.conftest import make_data_dir

    data = make_data_dir(tmp_path / "data", n_train=8, n_valid=3)
    refs = ["le chat\u2028assis", "un chien", "la maison"]
    (tmp_path / "dev.fr").write_text("\n".join(refs) + "\n", encoding="utf-8")
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["splits"]["valid"]["prefix"] = str(tmp_path / "dev")
    manifest["inputs"] = {str(tmp_path / "dev.fr"): hashlib.sha256((tmp_path / "dev.fr").read_bytes()).hexdigest()}
    (data / "manifest.json").write_text(json.dumps(manifest))
    assert DataDir.open(data).raw_references("valid") == refs


def test_every_line_count_check_names_both_inputs_and_counts(tmp_path):
    from nmtkit.score import check_same_length
    from nmtkit.select.scoring import Corpus

    (tmp_path / "c.en").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "c.fr").write_text("a\nb\n", encoding="utf-8")
    src, tgt = tmp_path / "c.en", tmp_path / "c.fr"
    for call in (lambda: check_parallel(src, tgt), lambda: Corpus.open([str(tmp_path / "c")], "en", "fr"),
                 lambda: check_same_length(str(src), ["a", "b", "c"], [(str(tgt), ["a", "b"])])):
        with pytest.raises(InputError) as err:
            call()
        msg = str(err.value)
        assert msg.startswith("line counts differ: ") and f"{src} has 3 lines" in msg and f"{tgt} has 2 lines" in msg


def test_raw_references_are_the_file_preprocess_read_not_one_edited_since(tmp_path, monkeypatch, caplog):
    """The dev file at the absolute path preprocess recorded, when its sha256 is the recorded one:
    an edited file of the same length, or a file of that name found otherwise (a relative
    prefix), would become the BLEU reference (and so choose the best checkpoint). An edited or
    deleted one is said: the binarised references silently gave another BLEU (7 of Tatoeba's
    first 50 dev lines differ: no-break spaces, <unk>), also in a run resumed after it went."""
    import hashlib
    import json

    from nmtkit.train.data import DataDir
    from tests.conftest import make_data_dir

    data = make_data_dir(tmp_path / "data", n_train=8, n_valid=3)
    ours = tmp_path / "ours"
    ours.mkdir()
    refs = ["le chat", "un chien", "la maison"]
    text = "\n".join(refs) + "\n"
    (ours / "dev.fr").write_text(text, encoding="utf-8")
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["splits"]["valid"]["prefix"] = str(ours / "dev")
    manifest["inputs"] = {str(ours / "dev.en"): "0" * 64, str(ours / "dev.fr"): hashlib.sha256(text.encode()).hexdigest()}
    (data / "manifest.json").write_text(json.dumps(manifest))
    import nmtkit.text.io

    opened = []
    monkeypatch.setattr(nmtkit.text.io, "open_input", lambda p, real=nmtkit.text.io.open_input: opened.append(p)
                        or real(p))
    data_dir = DataDir.open(data)
    opened.clear()
    assert data_dir.raw_references("valid") == refs
    assert opened == [str(ours / "dev.fr")]  # read once, for its hash and its lines
    assert not caplog.records
    (ours / "dev.fr").write_text("une\nautre\nchose\n", encoding="utf-8")
    assert DataDir.open(data).raw_references("valid") is None  # the binarised references, not another text
    (ours / "dev.fr").unlink()
    assert DataDir.open(data).raw_references("valid") is None
    assert [r.getMessage() for r in caplog.records] == [f"dev BLEU scores against the binarised dev text: {ours / 'dev'}"
                                                        ".fr, the raw text preprocess read, is gone or changed (the "
                                                        "BLEU is not that of a run that read it)"] * 2
    caplog.clear()
    manifest["splits"]["valid"]["prefix"] = "dev"  # relative: no file preprocess recorded
    (data / "manifest.json").write_text(json.dumps(manifest))
    (ours / "dev.fr").write_text(text, encoding="utf-8")
    monkeypatch.chdir(ours)
    assert DataDir.open(data).raw_references("valid") is None
    assert not caplog.records  # no raw text recorded (an older manifest): nothing gone


def test_a_nul_byte_is_named_by_its_line_or_by_its_byte_counted_from_1(tmp_path):
    """A NUL byte in a file's first block is named by its line, beyond it by its byte (cmp's count)."""
    from nmtkit.text.io import count_lines

    p = tmp_path / "nul.en"
    p.write_bytes(b"a cat\nthe\0dog\n")  # the NUL is the 10th byte
    with pytest.raises(InputError, match=r"nul\.en:2: holds binary data \(a NUL byte at byte 10\)"):
        count_lines(p)
    with pytest.raises(InputError, match=r"nul\.en: holds binary data \(a NUL byte at byte 10\)"):
        count_lines(p, block_size=4)
