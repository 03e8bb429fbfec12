"""`nmtkit select-data` says so when its ranking would be meaningless: an in-domain text too small
for the n-gram order or with no word in the LM vocabulary, the same text as the pool, or a pool
whose pairs all score the same."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.test_select import (
    ANIMALS_EN,
    ANIMALS_FR,
    MONEY_EN,
    MONEY_FR,
    _assert_clean_failure,
    _base,
    _scores,
    _sentence,
    _write,
    select,
)


@pytest.fixture
def corpus(tmp_path):
    """In-domain: 60 animal captions. Pool: 40 pairs, one in four an animal caption, the rest finance."""
    rng = np.random.default_rng(0)
    _write(tmp_path / "in", [_sentence(rng, ANIMALS_EN, ANIMALS_FR) for _ in range(60)])
    _write(tmp_path / "pool", [_sentence(rng, *(ANIMALS_EN, ANIMALS_FR) if i % 4 == 1 else (MONEY_EN, MONEY_FR))
                               for i in range(40)])
    return tmp_path


def _warnings(err: str) -> list[str]:
    """The warning lines of stderr, without their `nmtkit: warning: ` prefix."""
    prefix = "nmtkit: warning: "
    return [line[len(prefix):] for line in err.splitlines() if line.startswith(prefix)]


def _run(d: Path, *extra: str, prefix: str = "sel") -> list[str]:
    """select-data --lines 10 on d/in and d/pool: it must succeed; -> its warnings, checked to be
    one line each and listed in the summary too."""
    code, _, err = select(_base(d, prefix) + ["--lines", "10", *extra], quiet=False)
    assert code == 0, err
    warnings = _warnings(err)
    assert json.loads((d / f"{prefix}.summary.json").read_text())["warnings"] == warnings
    return warnings


def test_a_sound_selection_warns_about_nothing(corpus):
    assert _run(corpus) == []
    assert _run(corpus, "--method", "monolingual", prefix="mono") == []


def test_in_domain_text_shorter_than_the_order_is_named_with_its_token_count(corpus):
    _write(corpus / "in", [("Cat sits.", "Chat dort.")])
    in_en, in_fr = corpus / "in.en", corpus / "in.fr"
    assert _run(corpus) == [
        f"the in-domain text {side} has only 3 tokens, fewer than --order 4: too little for an order-4 language "
        "model, so the ranking is unreliable (use more in-domain text or a lower --order)" for side in (in_en, in_fr)]
    # a repeated sentence shorter than the order shows no word in context, though "<s> the </s>" occurs twice
    _write(corpus / "in", [("the", "le")] * 2)  # words of the pool (none of its tokens is "Cat")
    warnings = _run(corpus, "--order", "3", prefix="o3")
    assert len(warnings) == 2 and "has only 2 tokens, fewer than --order 3" in warnings[0]
    assert _run(corpus, "--order", "2", prefix="o2") == []


def test_in_domain_text_where_no_ngram_of_the_order_repeats_is_named(corpus):
    pairs = [("The cat sits on a mat.", "Le chat est sur un tapis."), ("A big dog runs in the garden.",
             "Un grand chien court dans le jardin."), ("Small brown birds sleep.", "Petits oiseaux bruns dorment.")]
    _write(corpus / "in", pairs)
    warnings = _run(corpus)
    assert [w.split(" has ")[0] for w in warnings] == [f"the in-domain text {corpus / 'in.en'}",
                                                        f"the in-domain text {corpus / 'in.fr'}"]
    assert "has only 20 tokens, no 4-gram in it occurs twice: too little for an order-4" in warnings[0]
    assert _run(corpus, "--order", "2", prefix="o2") == []  # ". </s>" ends every sentence


def test_only_the_sides_the_method_scores_are_checked(corpus):
    rng = np.random.default_rng(1)
    pairs = [(_sentence(rng, ANIMALS_EN, ANIMALS_FR)[0], f"Mot{i}.") for i in range(30)]  # no 4-gram twice
    _write(corpus / "in", pairs)
    assert _run(corpus, "--method", "monolingual", prefix="mono") == []
    assert _run(corpus, "--method", "in-domain", prefix="ind") == []
    warnings = _run(corpus)
    assert len(warnings) == 1 and warnings[0].startswith(f"the in-domain text {corpus / 'in.fr'} has only 60 tokens")


def test_several_in_domain_prefixes_are_named_together(corpus):
    _write(corpus / "in2", [("Dog runs.", "Chien court.")])
    _write(corpus / "in", [("Cat sits.", "Chat dort.")])
    code, _, err = select(["--in-domain", str(corpus / "in"), "--in-domain", str(corpus / "in2"), "--pool",
                           str(corpus / "pool"), "--output-prefix", str(corpus / "sel"), "--lines", "5",
                           "--workers", "1"], quiet=False)
    assert code == 0, err
    assert _warnings(err)[0].startswith(f"the in-domain text {corpus / 'in.en'} + {corpus / 'in2.en'} has only 6 "
                                        "tokens, no 4-gram in it occurs twice")


def test_a_min_count_that_leaves_no_in_domain_word_is_named(corpus):
    assert _run(corpus, "--method", "in-domain", "--min-count", "1000") == [
        f"no word of the in-domain text {corpus / 'in.en'} occurs at least --min-count 1000 times: every token is "
        "<unk> to the language models, which then rank pairs by their length alone"]


def test_an_in_domain_text_that_shares_no_word_with_the_pool_is_named(corpus):
    """Every pool token was <unk> to both LMs, which ranked the pairs by length alone (the shortest
    first), silently: now a warning per scored side names the pool."""
    rng = np.random.default_rng(2)
    words = [f"Zz{i}" for i in range(4)]  # 4-grams repeat: not "too little" text
    _write(corpus / "in", [(" ".join(rng.choice(words, size=6)), " ".join(rng.choice(words, size=5)))
                           for _ in range(60)])
    assert _run(corpus) == [f"no token of the pool {corpus / 'pool'}.{lang} is a word of the in-domain text: every one "
                            "is <unk> to the language models, which then rank pairs by their length alone"
                            for lang in ("en", "fr")]
    assert len(_run(corpus, "--method", "in-domain", "--order", "1", "--workers", "2", prefix="ind")) == 1
    _write(corpus / "in", [("Zz0 Zz1 Zz2 cat", "Zz0 Zz1 chat")] * 30)  # one shared word is enough
    assert _run(corpus, prefix="one") == []


def _same(d: Path, *extra: str) -> tuple[int, str]:
    """select-data with d/in as both the in-domain text and the pool -> (exit code, stderr)."""
    code, _, err = select(["--in-domain", str(d / "in"), "--pool", str(d / "in"), "--output-prefix", str(d / "sel"),
                           "--lines", "10", "--workers", "1", *extra], quiet=False)
    return code, err


def test_the_same_file_as_in_domain_text_and_pool_is_refused(corpus):
    """H_out would be estimated on the in-domain text itself: every score 0, the pool's first pairs."""
    code, err = _same(corpus)
    _assert_clean_failure(code, err, corpus, f"the in-domain text and the pool are the same text ({corpus / 'in.en'} = "
                          f"{corpus / 'in.en'}, {corpus / 'in.fr'} = {corpus / 'in.fr'}): H_out would be estimated on "
                          "the in-domain text itself, every cross-entropy difference would be 0 and the selection the "
                          "pool's first pairs; give another --pool, or --method in-domain")
    code, err = _same(corpus, "--method", "monolingual")
    _assert_clean_failure(code, err, corpus, f"same text ({corpus / 'in.en'} = {corpus / 'in.en'}): H_out")


def test_the_same_text_under_other_names_is_refused_gzipped_too(corpus):
    for lang in ("en", "fr"):
        with gzip.open(corpus / f"pool.{lang}.gz", "wb") as fh:
            fh.write((corpus / f"in.{lang}").read_bytes())
        (corpus / f"pool.{lang}").unlink()
    code, _, err = select(_base(corpus) + ["--lines", "10"])
    _assert_clean_failure(code, err, corpus, f"({corpus / 'in.en'} = {corpus / 'pool.en.gz'}, {corpus / 'in.fr'} = "
                          f"{corpus / 'pool.fr.gz'})")


def test_the_same_text_without_its_last_newline_is_refused(corpus):
    """The in-domain text's copy without its final newline was one byte shorter, which the size check
    took for another text: not refused, every score 0 and a warning only. The digest ends every
    file with a newline, so the sizes now allow for that byte."""
    for lang in ("en", "fr"):
        (corpus / f"pool.{lang}").write_bytes((corpus / f"in.{lang}").read_bytes().removesuffix(b"\n"))
    code, _, err = select(_base(corpus) + ["--lines", "10"])
    _assert_clean_failure(code, err, corpus, f"({corpus / 'in.en'} = {corpus / 'pool.en'}, {corpus / 'in.fr'} = "
                          f"{corpus / 'pool.fr'})")


def test_in_domain_method_may_rank_the_in_domain_text_itself(corpus):
    code, err = _same(corpus, "--method", "in-domain")
    assert code == 0 and _warnings(err) == [], err


def test_one_side_the_same_as_the_pool_is_warned_and_its_differences_are_0(corpus):
    shutil.copy(corpus / "in.en", corpus / "pool.en")
    rng = np.random.default_rng(2)
    _write(corpus / "other", [_sentence(rng, MONEY_EN, MONEY_FR) for _ in range(60)])
    shutil.copy(corpus / "other.fr", corpus / "pool.fr")
    assert _run(corpus) == [
        f"the in-domain text and the pool are the same text on one side ({corpus / 'in.en'} = {corpus / 'pool.en'}): "
        "that side's H_out is estimated on the in-domain text itself (or a random part of it), so its cross-entropy "
        "difference ranks nothing and the bilingual score is in effect the other side's alone"]
    s = _scores(corpus / "sel.scores.tsv")
    np.testing.assert_array_equal(s["h_in_src"], s["h_out_src"])
    code, _, err = select(_base(corpus, "mono") + ["--lines", "10", "--method", "monolingual"])
    assert code == 1 and f"same text ({corpus / 'in.en'} = {corpus / 'pool.en'}): H_out would" in err
    assert not list(corpus.glob("mono.*"))
    # the same target side: warned for bilingual; monolingual scores the source side alone
    shutil.copy(corpus / "other.en", corpus / "pool.en")
    shutil.copy(corpus / "in.fr", corpus / "pool.fr")
    warnings = _run(corpus, "--force")
    assert len(warnings) == 1 and f"one side ({corpus / 'in.fr'} = {corpus / 'pool.fr'})" in warnings[0]
    assert _run(corpus, "--method", "monolingual", prefix="mono") == []


def test_the_same_text_in_another_line_order_is_warned_as_every_score_equal(corpus):
    """Not the same bytes, so not refused; but the same sentences make the same LMs: every score 0."""
    for lang in ("en", "fr"):
        lines = (corpus / f"in.{lang}").read_text().splitlines(keepends=True)
        (corpus / f"pool.{lang}").write_text("".join(lines[::-1]))
    assert _run(corpus) == [f"every pair of the pool ({corpus / 'pool.en'}, {corpus / 'pool.fr'}) has the same score, "
                            "0.000000: nothing ranks one above another and the selection is just the pool's first pairs"]
    assert (corpus / "sel.en").read_text().splitlines() == (corpus / "pool.en").read_text().splitlines()[:10]


def test_a_pool_of_one_repeated_pair_is_warned_once(corpus):
    _write(corpus / "pool", [("The cat sits on a mat.", "Le chat est sur un tapis.")] * 100 + [("", "")])
    warnings = _run(corpus, "--method", "monolingual")
    assert warnings[0] == "1 of the pool's 101 pairs have an empty side: they are never selected"
    assert len(warnings) == 2 and warnings[1].startswith(f"every pair of the pool ({corpus / 'pool.en'}) has the same "
                                                         "score, ")


def test_a_pool_under_half_the_in_domain_text_is_warned_as_maybe_swapped(corpus):
    """--in-domain POOL --pool IN (the slip of a tired user) ranked in silence: H_out was estimated
    on the whole small pool, a fraction of H_in's text, where Moore & Lewis sample as much as the
    in-domain text; now a warning asks whether the two were swapped (not for --method in-domain)."""
    rng = np.random.default_rng(3)
    _write(corpus / "in", [_sentence(rng, ANIMALS_EN, ANIMALS_FR) for _ in range(200)])
    warnings = _run(corpus)
    assert len(warnings) == 1 and warnings[0].startswith(f"the pool {corpus / 'pool.en'} has only "), warnings
    assert "under half the in-domain text's" in warnings[0] and "--in-domain and --pool the wrong way" in warnings[0]
    assert _run(corpus, "--method", "in-domain", prefix="ind") == []


def test_a_pool_without_a_pair_with_text_on_both_sides_is_refused_and_writes_nothing(corpus):
    """It exited 0 with empty outputs and a score of inf on every line (silent with -q)."""
    _write(corpus / "pool", [("", "")] * 3 + [("a cat", ""), ("", "un chat")])
    code, _, err = select(_base(corpus) + ["--lines", "2"], quiet=True)
    _assert_clean_failure(code, err, corpus, "pool.en: none of the pool's 5 pairs has text on both sides")


def _tokenize(d: Path, name: str, *flags: str) -> None:
    for lang in ("en", "fr"):
        code, _, err = run_cli(["tokenize", "--lang", lang, "-i", f"{d / name}.{lang}", "-o", f"{d / 'tok' / name}.{lang}",
                                "--workers", "1", *flags])
        assert code == 0, err


def test_tokenised_input_is_checked_against_its_tokeniser_record_as_preprocess_checks_it(corpus):
    """--input-format tok took text tokenised with other settings, and raw text, without a word,
    while the summary recorded this command's flags as the text's."""
    (corpus / "tok").mkdir()
    # select-data has no --protect: the files' protected patterns must agree among themselves
    _tokenize(corpus, "in", "--aggressive-dash-splits", "--no-normalize-punct", "--protect", "printf")
    _tokenize(corpus, "pool", "--aggressive-dash-splits", "--no-normalize-punct", "--protect", "printf")
    tok = ["--in-domain", str(corpus / "tok" / "in"), "--pool", str(corpus / "tok" / "pool"), "--input-format", "tok",
           "--output-prefix", str(corpus / "sel"), "--workers", "1", "--lines", "10"]
    code, _, err = select(tok + ["--no-normalize-punct"])
    _assert_clean_failure(code, err, corpus, "tok/in.en", "aggressive_dash_splits=True there, False here "
                          "(tokenize's --aggressive-dash-splits)")
    code, _, err = select(tok + ["--aggressive-dash-splits"])
    _assert_clean_failure(code, err, corpus, "tok/in.en", "normalize_punct=False there, True here "
                          "(tokenize's --no-normalize-punct)", "so that the in-domain text and the pool are tokenised alike")
    code, _, err = select(tok + ["--aggressive-dash-splits", "--no-normalize-punct", "--lowercase", "--output-prefix",
                                 str(corpus / "lc")], quiet=False)
    assert code == 0 and _warnings(err) == [], err  # --lowercase lowercases the LMs' tokens, whatever the records say
    code, _, err = select(tok + ["--aggressive-dash-splits", "--no-normalize-punct"], quiet=False)
    assert code == 0 and _warnings(err) == [], err
    for lang in ("en", "fr"):  # the pool's records beside the selection, which preprocess then checks
        record = (corpus / "tok" / f"pool.{lang}.tokinfo.json").read_text()
        assert (corpus / f"sel.{lang}.tokinfo.json").read_text() == record
    code, _, err = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--input-format", "tok", "--train",
                            str(corpus / "tok" / "pool"), "--valid", str(corpus / "sel"), "--dest", str(corpus / "d"),
                            "--workers", "1", "--aggressive-dash-splits", "--no-normalize-punct", "--protect", "printf"])
    assert code == 0 and "warning" not in err, err
    # the same prefix again from raw text: the records beside it would describe text they do not
    for f in corpus.glob("sel.*"):
        if not f.name.endswith(".tokinfo.json"):
            f.unlink()
    raw = _base(corpus) + ["--lines", "10"]
    code, _, err = select(raw)
    assert code != 0 and "sel.en.tokinfo.json: output exists (use --force" in err, err
    assert select(raw + ["--force"])[0] == 0 and not list(corpus.glob("sel.*.tokinfo.json"))
    for f in corpus.glob("sel.*"):
        f.unlink()
    (corpus / "tok" / "pool.en.tokinfo.json").write_text("{")
    code, _, err = select(tok + ["--aggressive-dash-splits", "--no-normalize-punct"])
    _assert_clean_failure(code, err, corpus, "pool.en.tokinfo.json", "unreadable tokeniser record")
    (corpus / "tok" / "pool.en.tokinfo.json").unlink()
    (corpus / "tok" / "in.fr.tokinfo.json").unlink()
    code, _, err = select(tok + ["--aggressive-dash-splits", "--no-normalize-punct", "--method", "monolingual"],
                          quiet=False)
    assert code == 0, err
    assert _warnings(err) == [f"{corpus / 'tok' / 'pool.en'}: no .tokinfo.json beside it, so its tokeniser settings "
                              "cannot be checked; they must be this command's"]  # the target side is not scored
    summary = json.loads((corpus / "sel.summary.json").read_text())
    assert summary["settings"]["normalize_punct"] is False and summary["warnings"] == _warnings(err)
    assert not (corpus / "sel.en.tokinfo.json").exists()  # the pool's source side had no record
    assert (corpus / "sel.fr.tokinfo.json").read_text() == (corpus / "tok" / "pool.fr.tokinfo.json").read_text()


def test_a_gzipped_tokenised_pool_is_checked_against_the_record_tokenize_wrote_before_gzip(corpus):
    """Its record was looked for as pool.en.gz.tokinfo.json only: gzipping nmtkit tokenize's
    output left it unchecked (a warning) and not passed on."""
    (corpus / "tok").mkdir()
    _tokenize(corpus, "in")
    _tokenize(corpus, "pool")
    for lang in ("en", "fr"):
        plain = corpus / "tok" / f"pool.{lang}"
        with open(plain, "rb") as f, gzip.open(f"{plain}.gz", "wb") as g:
            g.write(f.read())
        plain.unlink()
    code, _, err = select(["--in-domain", str(corpus / "tok" / "in"), "--pool", str(corpus / "tok" / "pool"),
                           "--input-format", "tok", "--output-prefix", str(corpus / "sel"), "--workers", "1",
                           "--lines", "10"], quiet=False)
    assert code == 0 and _warnings(err) == [], err
    assert (corpus / "sel.en.tokinfo.json").read_text() == (corpus / "tok" / "pool.en.tokinfo.json").read_text()
