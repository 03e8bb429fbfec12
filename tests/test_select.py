"""`nmtkit select-data`: selection by cross-entropy difference, outputs, budgets and bad input."""
from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from nmtkit.select.selection import method_scores, select_indices
from nmtkit.text.moses import tokenize
from tests.conftest import CliResult, run_cli

ANIMALS_EN = "the cat dog bird horse sits runs sleeps on a mat in garden with ball small big brown".split()
ANIMALS_FR = "le chat chien oiseau cheval dort court est sur un tapis dans jardin avec balle petit grand brun".split()
MONEY_EN = "the bank market shares rose fell percent investors said on monday profit quarter rates".split()
MONEY_FR = "la banque marché actions ont monté baissé pour cent investisseurs lundi bénéfice trimestre taux".split()


def _sentence(rng, words_en, words_fr):
    n = int(rng.integers(4, 10))
    i = rng.integers(0, len(words_en), size=n)
    j = np.minimum(i, len(words_fr) - 1)
    en = " ".join(words_en[k] for k in i).capitalize() + "."
    fr = " ".join(words_fr[k] for k in j).capitalize() + "."
    return en, fr


def _write(prefix: Path, pairs, gz=False):
    for side, lang in ((0, "en"), (1, "fr")):
        data = "".join(p[side] + "\n" for p in pairs).encode("utf-8")
        if gz:
            with gzip.open(f"{prefix}.{lang}.gz", "wb") as fh:
                fh.write(data)
        else:
            Path(f"{prefix}.{lang}").write_bytes(data)


@pytest.fixture
def corpus(tmp_path):
    """In-domain: animal captions. Pool: 150 finance pairs with 50 animal pairs spread among them."""
    rng = np.random.default_rng(0)
    _write(tmp_path / "in", [_sentence(rng, ANIMALS_EN, ANIMALS_FR) for _ in range(60)])
    pool, is_in = [], []
    for i in range(200):
        animal = i % 4 == 1
        pool.append(_sentence(rng, ANIMALS_EN, ANIMALS_FR) if animal else _sentence(rng, MONEY_EN, MONEY_FR))
        is_in.append(animal)
    _write(tmp_path / "pool", pool)
    return tmp_path, pool, np.array(is_in)


def select(argv, quiet: bool = True) -> CliResult:
    """`nmtkit select-data --src-lang en --tgt-lang fr [--quiet] ARGV` -> (exit code, stdout, stderr)."""
    return run_cli(["select-data", "--src-lang", "en", "--tgt-lang", "fr", *(["--quiet"] if quiet else []), *argv])


def _base(d: Path, prefix="sel"):
    return ["--in-domain", str(d / "in"), "--pool", str(d / "pool"), "--output-prefix", str(d / prefix), "--workers",
            "1"]


def _scores(path) -> dict[str, np.ndarray]:
    rows = [line.split("\t") for line in Path(path).read_text().splitlines()]
    return {name: np.array([float(r[i]) for r in rows[1:]]) for i, name in enumerate(rows[0])}


def _outputs(d: Path, prefix="sel"):
    return sorted(p.name for p in d.iterdir() if p.name.startswith(prefix + "."))


def test_bilingual_selection_finds_the_planted_domain(corpus):
    d, pool, is_in = corpus
    code, _, err = select(_base(d) + ["--lines", "50"])
    assert code == 0, err
    s = _scores(d / "sel.scores.tsv")
    sel = s["selected"].astype(bool)
    assert sel.sum() == 50
    assert (sel & is_in).sum() / 50 >= 0.9
    summary = json.loads((d / "sel.summary.json").read_text())
    assert summary["selected"]["pairs"] == 50 and summary["pool"]["parts"][0]["selected"] == 50
    assert summary["method"] == "bilingual"


def test_selected_lines_are_the_pool_lines_in_pool_order_byte_for_byte(corpus):
    d, pool, _ = corpus
    # a line with trailing spaces and non-ASCII must come back unchanged
    pool = [(p[0] + "  ", p[1] + " é") if i == 1 else p for i, p in enumerate(pool)]
    _write(d / "pool", pool)
    assert select(_base(d) + ["--lines", "30"])[0] == 0
    sel = _scores(d / "sel.scores.tsv")["selected"].astype(bool)
    want_en = "".join(pool[i][0] + "\n" for i in np.flatnonzero(sel))
    want_fr = "".join(pool[i][1] + "\n" for i in np.flatnonzero(sel))
    assert (d / "sel.en").read_text(encoding="utf-8") == want_en
    assert (d / "sel.fr").read_text(encoding="utf-8") == want_fr


def test_scores_tsv_holds_every_pool_line_and_the_bilingual_formula(corpus):
    d, pool, _ = corpus
    assert select(_base(d) + ["--lines", "20"])[0] == 0
    s = _scores(d / "sel.scores.tsv")
    assert s["line"].tolist() == list(range(1, len(pool) + 1))
    expect = (s["h_in_src"] - s["h_out_src"]) + (s["h_in_tgt"] - s["h_out_tgt"])
    np.testing.assert_allclose(s["score"], expect, atol=1e-5)
    # the selected ones are exactly the 20 lowest scores
    assert set(np.flatnonzero(s["selected"])) == set(np.argsort(s["score"], kind="stable")[:20])
    # token counts are Moses tokens of the raw line
    assert s["src_tokens"][0] == len(tokenize(pool[0][0], "en"))


@pytest.mark.parametrize("method,expect", [
    ("monolingual", lambda s: s["h_in_src"] - s["h_out_src"]),
    ("in-domain", lambda s: s["h_in_src"]),
])
def test_other_methods_rank_by_their_own_criterion(corpus, method, expect):
    d, _, _ = corpus
    assert select(_base(d) + ["--lines", "10", "--method", method])[0] == 0
    s = _scores(d / "sel.scores.tsv")
    np.testing.assert_allclose(s["score"], expect(s), atol=1e-5)
    assert json.loads((d / "sel.summary.json").read_text())["method"] == method


def test_two_workers_give_the_same_result_as_one(corpus):
    d, _, _ = corpus
    assert select(_base(d, "one") + ["--lines", "40"])[0] == 0
    argv = _base(d, "two") + ["--lines", "40"]
    argv[argv.index("--workers") + 1] = "2"
    assert select(argv)[0] == 0
    assert (d / "one.scores.tsv").read_bytes() == (d / "two.scores.tsv").read_bytes()
    assert (d / "one.en").read_bytes() == (d / "two.en").read_bytes()


def test_gzipped_inputs_read_like_plain_ones(corpus):
    d, pool, _ = corpus
    gzd = d / "gz"
    gzd.mkdir()
    _write(gzd / "pool", pool, gz=True)
    argv = _base(d, "plain") + ["--lines", "25"]
    assert select(argv)[0] == 0
    argv = ["--in-domain", str(d / "in"), "--pool", str(gzd / "pool"), "--output-prefix", str(d / "gzsel"), "--lines", "25"]
    assert select(argv)[0] == 0
    assert (d / "plain.scores.tsv").read_bytes() == (d / "gzsel.scores.tsv").read_bytes()
    assert (d / "plain.fr").read_bytes() == (d / "gzsel.fr").read_bytes()


def test_several_pool_prefixes_are_concatenated_and_counted_per_part(corpus):
    d, pool, is_in = corpus
    _write(d / "p1", pool[:120])
    _write(d / "p2", pool[120:])
    argv = ["--in-domain", str(d / "in"), "--pool", str(d / "p1"), "--pool", str(d / "p2"),
            "--output-prefix", str(d / "parts"), "--lines", "50"]
    assert select(argv)[0] == 0
    assert select(_base(d) + ["--lines", "50"])[0] == 0
    assert (d / "parts.en").read_bytes() == (d / "sel.en").read_bytes()
    parts = json.loads((d / "parts.summary.json").read_text())["pool"]["parts"]
    sel = _scores(d / "parts.scores.tsv")["selected"].astype(bool)
    assert [p["pairs"] for p in parts] == [120, 80]
    assert [p["selected"] for p in parts] == [int(sel[:120].sum()), int(sel[120:].sum())]


def test_a_pool_parts_byte_order_mark_never_lands_inside_the_selection(corpus):
    """Each part's leading BOM is dropped, as the readers drop it: the selection of BOM-led
    parts is byte for byte that of the same text without them."""
    d, pool, _ = corpus
    for name, part in (("p1", pool[:120]), ("p2", pool[120:])):
        _write(d / name, part)
        for lang in ("en", "fr"):
            path = d / f"{name}.{lang}"
            path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    argv = ["--in-domain", str(d / "in"), "--pool", str(d / "p1"), "--pool", str(d / "p2"),
            "--output-prefix", str(d / "parts"), "--lines", "200"]
    assert select(argv)[0] == 0
    assert select(_base(d) + ["--lines", "200"])[0] == 0
    for lang in ("en", "fr"):
        got = (d / f"parts.{lang}").read_bytes()
        assert b"\xef\xbb\xbf" not in got
        assert got == (d / f"sel.{lang}").read_bytes()


def test_pretokenised_input_scores_like_raw_input(corpus):
    d, pool, _ = corpus
    tok = d / "tok"
    tok.mkdir()
    for name in ("in", "pool"):
        for lang in ("en", "fr"):
            lines = Path(f"{d / name}.{lang}").read_text(encoding="utf-8").splitlines()
            Path(f"{tok / name}.{lang}").write_text("".join(" ".join(tokenize(x, lang)) + "\n" for x in lines))
    assert select(_base(d) + ["--lines", "30"])[0] == 0
    argv = ["--in-domain", str(tok / "in"), "--pool", str(tok / "pool"), "--output-prefix", str(d / "toksel"),
            "--lines", "30", "--input-format", "tok"]
    assert select(argv)[0] == 0
    a, b = _scores(d / "sel.scores.tsv"), _scores(d / "toksel.scores.tsv")
    np.testing.assert_allclose(a["score"], b["score"], atol=1e-6)
    # in tok mode a line is only split on spaces: "Cat." stays one token
    assert b["src_tokens"][0] == len(Path(f"{tok / 'pool'}.en").read_text().splitlines()[0].split())


def test_a_literal_sentence_start_or_end_in_tokenised_text_is_unk_to_the_language_models(corpus):
    """--input-format tok is split on spaces only: a "<s>" or "</s>" in it (strike-through markup in web
    text, say) is a word. They were the LMs' sentence
    start and end ids in the in-domain text and the H_out sample, but <unk> in the scored pool: the
    LMs gave "<s>" a probability mid-sentence, which scoring never asks for, so a context's
    probabilities over what it predicts summed to well under 1, and the ARPA files held n-grams
    that predict <s> or continue after </s>. Now both are <unk> everywhere."""
    d, pool, _ = corpus
    for name in ("in", "pool"):
        for lang in ("en", "fr"):
            lines = Path(f"{d / name}.{lang}").read_text(encoding="utf-8").splitlines()
            words = [tokenize(x, lang) for x in lines]  # "<s>" after a line's first word, "</s>" after its second
            Path(f"{d / name}.{lang}").write_text(
                "".join(" ".join(w[:1] + ["<s>"] + w[1:2] + ["</s>"] + w[2:]) + "\n" for w in words), encoding="utf-8")
    assert "<s>" in Path(f"{d / 'in'}.en").read_text()
    assert select(_base(d) + ["--lines", "5", "--write-arpa", "--order", "3", "--input-format", "tok"])[0] == 0
    for which in ("in", "out"):
        for lang in ("en", "fr"):
            grams = [line.split("\t")[1].split(" ") for line in (d / f"sel.{which}.{lang}.arpa").read_text().splitlines()
                     if line.count("\t") >= 1]
            assert not [g for g in grams if "<s>" in g[1:] or "</s>" in g[:-1]], (which, lang)


@pytest.mark.parametrize("fmt", ["raw", "tok"])
def test_lowercase_makes_case_variants_score_alike(corpus, fmt):
    d, pool, _ = corpus
    pool = [(pool[1][0].upper(), pool[1][1].upper())] + [pool[1]] + pool[2:]
    _write(d / "pool", pool)
    assert select(_base(d, "cased") + ["--lines", "5", "--input-format", fmt])[0] == 0
    assert select(_base(d, "lc") + ["--lines", "5", "--lowercase", "--input-format", fmt])[0] == 0
    cased, lc = _scores(d / "cased.scores.tsv"), _scores(d / "lc.scores.tsv")
    assert cased["h_in_src"][0] > cased["h_in_src"][1] + 1.0   # upper case is <unk> for the in-domain LM
    assert lc["h_in_src"][0] == pytest.approx(lc["h_in_src"][1], abs=1e-6)


def test_decomposed_and_soft_hyphenated_pool_lines_score_as_their_clean_forms_unless_switched_off(corpus):
    import unicodedata

    d, pool, _ = corpus
    src, tgt = pool[1]
    words = src.split()
    messy = " ".join([unicodedata.normalize("NFD", "café"), words[0][:2] + "\u00ad" + words[0][2:], *words[1:]])
    clean = " ".join(["café", *words])
    _write(d / "pool", [(messy, tgt), (clean, tgt)] + pool[2:])
    assert select(_base(d, "on") + ["--lines", "5"])[0] == 0
    assert select(_base(d, "off") + ["--lines", "5", "--no-nfc", "--no-remove-non-printing"])[0] == 0
    on, off = _scores(d / "on.scores.tsv"), _scores(d / "off.scores.tsv")
    assert on["h_in_src"][0] == pytest.approx(on["h_in_src"][1], abs=1e-6)
    assert off["h_in_src"][0] > off["h_in_src"][1] + 0.1  # the split-off accent and half-words are <unk>
    settings = json.loads((d / "off.summary.json").read_text())["settings"]
    assert settings["nfc"] is False and settings["remove_non_printing"] is False


def test_words_budget_counts_source_tokens(corpus):
    d, _, _ = corpus
    assert select(_base(d) + ["--words", "300"])[0] == 0
    s = _scores(d / "sel.scores.tsv")
    ranked = np.argsort(s["score"], kind="stable")
    cum = np.cumsum(s["src_tokens"][ranked])
    k = int(s["selected"].sum())
    assert cum[k - 1] >= 300 > cum[k - 2]  # the smallest prefix of the ranking reaching the budget
    summary = json.loads((d / "sel.summary.json").read_text())
    assert summary["selected"]["src_tokens"] == int(cum[k - 1])


def test_fraction_budget_is_a_share_of_the_pool_pairs(corpus):
    d, pool, _ = corpus
    assert select(_base(d) + ["--fraction", "0.25"])[0] == 0
    assert _scores(d / "sel.scores.tsv")["selected"].sum() == round(0.25 * len(pool))


def test_ties_are_broken_by_pool_line_number():
    scores = np.array([3.0, 1.0, 2.0, 1.0, 1.0, 0.5])
    keep, over = select_indices(scores, np.ones(6, dtype=np.int32), lines=3)
    assert keep.tolist() == [1, 3, 5] and not over
    keep, _ = select_indices(scores, np.ones(6, dtype=np.int32), lines=4)
    assert keep.tolist() == [1, 3, 4, 5]



def test_a_words_budget_met_exactly_stops_at_the_pair_that_meets_it():
    keep, over = select_indices(np.array([1.0, 2.0, 3.0, 4.0]), np.array([2, 3, 4, 5], dtype=np.int32), words=5)
    assert keep.tolist() == [0, 1] and not over


def test_a_fraction_budget_rounds_to_the_nearest_number_of_pairs():
    scores, ones = np.arange(10.0), np.ones(10, dtype=np.int32)
    assert select_indices(scores, ones, fraction=0.29)[0].tolist() == [0, 1, 2]
    assert select_indices(scores, ones, fraction=0.21)[0].tolist() == [0, 1]


def test_a_budget_of_exactly_the_selectable_pairs_is_not_over_the_pool():
    scores, ones = np.array([1.0, np.inf, 2.0]), np.ones(3, dtype=np.int32)
    keep, over = select_indices(scores, ones, lines=2)
    assert keep.tolist() == [0, 2] and not over
    assert select_indices(scores, ones, lines=3)[1]


def test_duplicate_pool_lines_tie_and_the_earlier_ones_win(corpus):
    d, pool, _ = corpus
    pool = pool[:10] + [pool[1]] * 5 + pool[10:]
    _write(d / "pool", pool)
    dup = [1] + list(range(10, 15))
    assert select(_base(d, "all") + ["--lines", "1"])[0] == 0
    s = _scores(d / "all.scores.tsv")
    assert len(set(s["score"][dup].tolist())) == 1
    better = int((s["score"] < s["score"][1]).sum())
    # cut the ranking in the middle of the six equal scores: the three earliest lines win
    assert select(_base(d) + ["--lines", str(better + 3)])[0] == 0
    sel = np.flatnonzero(_scores(d / "sel.scores.tsv")["selected"])
    assert [i for i in sel if i in dup] == dup[:3]



def test_the_out_of_domain_sample_has_the_in_domain_source_token_count_from_a_draw_of_twice_its_bytes(tmp_path):
    """H_out's sample: pool lines drawn (twice the in-domain bytes' worth, plus 16) and taken until the
    in-domain's source tokens are reached; a draw whose lines hold fewer tokens per byte falls short."""
    def sample(in_pairs, pool_pairs):
        _write(tmp_path / "in", in_pairs)
        _write(tmp_path / "pool", pool_pairs)
        assert select(_base(tmp_path) + ["--lines", "1", "--force"])[0] == 0
        return json.loads((tmp_path / "sel.summary.json").read_text())["out_domain_sample"]

    words = [(w, w) for w in ANIMALS_EN + MONEY_EN]
    assert sample(words[:20], words * 10)["src_tokens"] == 20  # one-token lines: 20 of them, not 21
    # 10 lines of 10 one-letter tokens (200 bytes); pool lines of one 11-letter token (12 bytes)
    drawn = sample([(" ".join("abcdefghij"), "x")] * 10, [("elephantine", "x")] * 400)
    assert drawn["pairs"] == math.ceil(2 * 200 / 12) + 16 == drawn["src_tokens"]


def test_method_scores_formulas():
    h = np.array([[5.0, 7.0, 4.0, 3.0]])
    assert method_scores("bilingual", h)[0] == pytest.approx((5 - 7) + (4 - 3))
    assert method_scores("monolingual", h)[0] == pytest.approx(-2.0)
    assert method_scores("in-domain", h)[0] == pytest.approx(5.0)


def test_write_arpa_writes_the_four_models(corpus):
    d, _, _ = corpus
    assert select(_base(d) + ["--lines", "5", "--write-arpa", "--order", "3"])[0] == 0
    for which in ("in", "out"):
        for lang in ("en", "fr"):
            text = (d / f"sel.{which}.{lang}.arpa").read_text()
            assert text.startswith("\\data\\\nngram 1=") and "\\3-grams:" in text and text.endswith("\\end\\\n")


def test_language_models_of_an_earlier_run_are_not_left_beside_a_selection_made_without_them(corpus):
    """A run without --write-arpa over a prefix where one with it had written left the four .arpa
    files, whose models were not this selection's, and wrote over the rest (--force) or over nothing:
    they are now outputs of every run, as the tokeniser records are, refused without --force and
    removed with it."""
    d, _, _ = corpus
    assert select(_base(d) + ["--lines", "5", "--write-arpa"])[0] == 0
    for f in d.glob("sel.*"):
        if not f.name.endswith(".arpa"):
            f.unlink()
    code, _, err = select(_base(d) + ["--lines", "5"])
    assert code != 0 and "sel.in.en.arpa: output exists (use --force" in err, err
    assert select(_base(d) + ["--lines", "5", "--force"])[0] == 0
    assert _outputs(d) == ["sel.en", "sel.fr", "sel.scores.tsv", "sel.summary.json"]




# ---------------------------------------------------------------------- bad input
def _assert_clean_failure(code, err, d, *needles):
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nmtkit: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)
    assert _outputs(d) == [], "nothing may be written on error"
    assert not [p for p in os.listdir(d) if ".tmp-" in p]


def test_mismatched_line_counts_name_both_files_and_counts(corpus):
    d, pool, _ = corpus
    Path(f"{d / 'pool'}.fr").write_text("".join(p[1] + "\n" for p in pool[:-3]))
    code, _, err = select(_base(d) + ["--lines", "5"])
    _assert_clean_failure(code, err, d, "pool.en has 200 lines", "pool.fr has 197")


def test_empty_in_domain_text_is_an_error(corpus):
    d, _, _ = corpus
    for lang in ("en", "fr"):
        Path(f"{d / 'in'}.{lang}").write_text("")
    code, _, err = select(_base(d) + ["--lines", "5"])
    _assert_clean_failure(code, err, d, "in.en", "empty")


def test_blank_in_domain_text_is_an_error(corpus):
    d, _, _ = corpus
    for lang in ("en", "fr"):
        Path(f"{d / 'in'}.{lang}").write_text("\n\n  \n")
    code, _, err = select(_base(d) + ["--lines", "5"])
    _assert_clean_failure(code, err, d, "no tokens")


def test_budget_larger_than_the_pool_selects_all_with_a_warning_that_quiet_silences(corpus):
    d, pool, _ = corpus
    code, _, err = select(_base(d) + ["--lines", "1000"], quiet=False)
    assert code == 0
    assert "nmtkit: warning: " in err and "exceeds the pool" in err
    assert len((d / "sel.en").read_text().splitlines()) == len(pool)
    assert json.loads((d / "sel.summary.json").read_text())["warnings"]
    code, _, err = select(_base(d, "w") + ["--words", "10000000"])
    assert code == 0 and "exceeds the pool" not in err  # --quiet: no warning on stderr...
    assert json.loads((d / "w.summary.json").read_text())["warnings"]  # ...still in the summary
    assert len((d / "w.fr").read_text().splitlines()) == len(pool)


def test_existing_destination_is_refused_unless_forced(corpus):
    d, _, _ = corpus
    (d / "sel.fr").write_text("precious\n")
    code, _, err = select(_base(d) + ["--lines", "5"])
    assert code != 0 and "sel.fr" in err and "--force" in err and "Traceback" not in err
    assert (d / "sel.fr").read_text() == "precious\n"
    assert not (d / "sel.en").exists() and not (d / "sel.scores.tsv").exists()
    code, _, err = select(_base(d) + ["--lines", "5", "--force"])
    assert code == 0, err
    assert len((d / "sel.fr").read_text().splitlines()) == 5


def test_missing_files_are_named(corpus):
    d, _, _ = corpus
    argv = ["--in-domain", str(d / "in"), "--pool", str(d / "nope"), "--output-prefix", str(d / "sel"), "--lines", "5"]
    code, _, err = select(argv)
    _assert_clean_failure(code, err, d, "nope.en", "no such file")


def test_a_folder_where_a_corpus_file_should_be_is_named_as_one(corpus):
    """It said 'no such file' for a path that is there."""
    d, _, _ = corpus
    (d / "dirpool.en").mkdir()
    (d / "dirpool.fr").write_text("Un chat.\n")
    argv = ["--in-domain", str(d / "in"), "--pool", str(d / "dirpool"), "--output-prefix", str(d / "sel"), "--lines", "5"]
    code, _, err = select(argv)
    _assert_clean_failure(code, err, d, "dirpool.en", "is a directory")


def test_invalid_utf8_names_file_and_line_and_writes_nothing(corpus):
    d, pool, _ = corpus
    data = "".join(p[1] + "\n" for p in pool).encode("utf-8").split(b"\n")
    data[150] = b"caf\xe9 au lait"
    Path(f"{d / 'pool'}.fr").write_bytes(b"\n".join(data))
    code, _, err = select(_base(d) + ["--lines", "5"])
    _assert_clean_failure(code, err, d, "pool.fr:151:", "invalid UTF-8")


@pytest.mark.parametrize("extra,needle", [
    ([], "exactly one budget"),
    (["--lines", "5", "--words", "9"], "exactly one budget"),
    (["--fraction", "1.5"], "--fraction"),
    (["--lines", "5", "--min-count", "0"], "--min-count"),
    (["--lines", "5", "--workers", "0"], "--workers"),
    (["--lines", "5", "--workers", "100000"], "--workers must be in [1, 256]"),  # was a fork storm
    (["--lines", "5", "--seed", "-1"], "--seed must be >= 0"),  # was a numpy traceback
    (["--lines", "5", "--order", "99999999"], "--order must be in [1, 10]"),  # ran until killed
    (["--fraction", "0.001"], "--fraction 0.001 of the pool's 200 pairs selects none"),  # selected 0, exit 0
])
def test_bad_options_are_one_line_errors(corpus, extra, needle):
    d, _, _ = corpus
    code, _, err = select(_base(d) + extra)
    _assert_clean_failure(code, err, d, needle)


@pytest.mark.parametrize("prefix, needle", [("", "--output-prefix '' names no file prefix"),
                                            ("out/", "has no file name part")], ids=["empty", "a-folder"])
def test_an_output_prefix_without_a_file_name_is_refused(corpus, prefix, needle):
    """"out/" wrote the hidden files out/.en, out/.fr, out/.scores.tsv and out/.summary.json."""
    d, _, _ = corpus
    (d / "out").mkdir()
    argv = ["--in-domain", str(d / "in"), "--pool", str(d / "pool"), "--output-prefix",
            f"{d / prefix}/" if prefix else "", "--lines", "5"]
    code, _, err = select(argv)
    _assert_clean_failure(code, err, d, needle)
    assert list((d / "out").iterdir()) == []


def test_pairs_with_an_empty_side_are_never_selected_and_are_counted_in_a_warning(corpus):
    """An empty line scores as a short, likely sentence: Axelrod's ranking put them first."""
    d, pool, _ = corpus
    pairs = pool[:50] + [("", ""), ("", "Un chat."), ("A cat.", "")] + pool[50:]
    _write(d / "pool", pairs)
    code, _, err = select(_base(d) + ["--lines", "198"], quiet=False)
    assert code == 0, err
    assert "3 of the pool's 203 pairs have an empty side: they are never selected" in err
    en, fr = ((d / f"sel.{lang}").read_text().split("\n")[:-1] for lang in ("en", "fr"))
    assert len(en) == 198 and "" not in en and "" not in fr
    code, _, err = select(_base(d, "all") + ["--lines", "1000"], quiet=False)
    assert code == 0 and "exceeds the pool's 200 non-empty pairs" in err
    assert len((d / "all.en").read_text().splitlines()) == 200



@pytest.mark.parametrize("budget", [["--fraction", "1"], ["--words", "10000000"]])
def test_a_budget_over_the_non_empty_pairs_is_named_and_counts_their_tokens_alone(corpus, budget):
    """--fraction 1 of a pool with a pair with an empty side was warned as "the budget (--words None)",
    and every budget's warning counted the source tokens of pairs with an empty target, which are
    never selected: now it names the --fraction and counts only the tokens it could select."""
    d, pool, _ = corpus
    _write(d / "pool", pool[:50] + [("A cat sits on the mat.", "")] + pool[50:])
    code, _, err = select(_base(d) + budget, quiet=False)
    assert code == 0, err
    tokens = json.loads((d / "sel.summary.json").read_text())["selected"]["src_tokens"]
    name = "--fraction 1.0: 201 pairs" if budget[0] == "--fraction" else "--words 10000000"
    assert f"the budget ({name}) exceeds the pool's 200 non-empty pairs ({tokens} source tokens)" in err, err


# ---------------------------------------------------------------------- real data
@pytest.mark.slow
def test_selection_recovers_multi30k_planted_in_a_real_pool(shared_data, tmp_path):
    """Pool = Tatoeba + giga-fren + Multi30k train; in-domain = Multi30k val; select 29,000 pairs."""
    parts = [shared_data / "tatoeba-eng-fra" / "train", shared_data / "giga-fren-sample" / "train",
             shared_data / "multi30k-en-fr" / "train"]
    argv = ["--in-domain", str(shared_data / "multi30k-en-fr" / "val"), "--output-prefix", str(tmp_path / "sel"),
            "--lines", "29000", "--workers", "2", "--input-format", "raw"]
    for p in parts:
        argv += ["--pool", str(p)]
    code, _, err = select(argv)
    assert code == 0, err
    summary = json.loads((tmp_path / "sel.summary.json").read_text())
    n_multi = summary["pool"]["parts"][2]["pairs"]
    assert n_multi == 29000
    s = _scores(tmp_path / "sel.scores.tsv")
    is_multi = np.zeros(len(s["line"]), dtype=bool)
    is_multi[-n_multi:] = True
    h = np.stack([s["h_in_src"], s["h_out_src"], s["h_in_tgt"], s["h_out_tgt"]], axis=1)
    precision = {}
    for method in ("bilingual", "monolingual", "in-domain"):
        keep, _ = select_indices(method_scores(method, h), s["src_tokens"], lines=29000)
        precision[method] = is_multi[keep].mean()
    rng = np.random.default_rng(0)
    precision["random"] = is_multi[rng.choice(is_multi.size, 29000, replace=False)].mean()
    print(precision)
    assert summary["pool"]["parts"][2]["selected"] / 29000 == pytest.approx(precision["bilingual"], abs=0.005)
    assert precision["bilingual"] >= 0.9
    assert precision["bilingual"] >= precision["monolingual"] - 0.005
    assert precision["bilingual"] >= precision["in-domain"]
    assert precision["random"] < 0.2


def test_progress_bar_reports_pairs_per_second_on_a_terminal():
    import io

    from rich.console import Console

    from nmtkit.cli.select import _bars

    buf = io.StringIO()
    bar = _bars(Console(file=buf, force_terminal=True, width=120))
    with bar as update:
        for done in (0, 500, 1000):
            update("score", done, 1000)
        update("write", 1000, 1000)
    out = buf.getvalue()
    assert "scoring" in out and "pairs/s" in out and "1000/1000" in out


def test_scoring_progress_counts_the_pools_pairs_not_its_pairs_twice(corpus):
    # both sides are scored: the bar read 400/400 "pairs" at twice the pairs/s for a pool of 200
    from nmtkit.select import SelectConfig, run

    d, pool, _ = corpus
    seen = []
    run(SelectConfig(src_lang="en", tgt_lang="fr", in_domain=(str(d / "in"),), pool=(str(d / "pool"),),
                     output_prefix=str(d / "sel"), lines=30), lambda stage, done, total: seen.append((stage, done, total)))
    score = [(done, total) for stage, done, total in seen if stage == "score"]
    assert score[-1] == (len(pool), len(pool)) and {t for _, t in score} == {len(pool)}


def test_selection_code_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys, nmtkit.select.selection, nmtkit.select.ngram, nmtkit.cli.select\n"
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_crlf_and_a_missing_final_newline_are_read_like_plain_lines(corpus):
    d, pool, _ = corpus
    assert select(_base(d, "lf") + ["--lines", "30"])[0] == 0
    for side, lang in ((0, "en"), (1, "fr")):
        Path(f"{d / 'pool'}.{lang}").write_bytes("\r\n".join(p[side] for p in pool).encode("utf-8"))
    assert select(_base(d, "crlf") + ["--lines", "30"])[0] == 0
    lf, crlf = _scores(d / "lf.scores.tsv"), _scores(d / "crlf.scores.tsv")
    # (the H_out sample may differ: its size is estimated from byte counts)
    for col in ("h_in_src", "h_in_tgt", "src_tokens", "tgt_tokens"):
        np.testing.assert_array_equal(lf[col], crlf[col])
    lines = (d / "crlf.en").read_bytes().split(b"\n")
    assert lines[0].endswith(b"\r") and lines[-1] == b""   # lines as in the pool, each ended by a newline


def test_select_data_holds_two_of_its_four_language_models_at_once(corpus, monkeypatch):
    """The pool is scored a side at a time, so that a side's LMs are freed before the next side's
    are estimated: at the WMT'14 recipe's size each LM holds hundreds of MB."""
    import gc
    import weakref

    from nmtkit.select.ngram import NgramLM

    live: weakref.WeakSet = weakref.WeakSet()
    most = []
    estimate = NgramLM.estimate.__func__

    def counted(cls, *args, **kwargs):
        gc.collect()
        lm = estimate(cls, *args, **kwargs)
        live.add(lm)
        most.append(len(live))
        return lm

    monkeypatch.setattr(NgramLM, "estimate", classmethod(counted))
    d, _, _ = corpus
    code, _, err = select(_base(d) + ["--lines", "20", "--write-arpa"])
    assert code == 0, err
    assert most == [1, 2, 1, 2]
    assert all((d / f"sel.{w}.{lang}.arpa").stat().st_size > 0 for w in ("in", "out") for lang in ("en", "fr"))


def test_the_lean_unique_equals_numpys():
    from nmtkit.select.ngram import _unique

    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 5000):
        keys = rng.integers(0, 60, n).astype(np.int64)
        got = _unique(keys.copy())
        want = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w.reshape(-1))
        assert got[2].dtype == got[3].dtype == np.int32
