"""Moses normalisation/tokenisation wrappers and the TextPipeline (encode/decode contract)."""
from __future__ import annotations

import json

import pytest

from nmtkit.errors import ConfigError
from nmtkit.text import moses
from nmtkit.text.bpe import learn_codes
from nmtkit.text.pipeline import (
    TextPipeline,
    Truecaser,
    add_weights,
    best_forms,
    detruecase,
    new_casing,
    truecase_weights,
)

ROUND_TRIPS = [
    ("en", "Hello, world!", ["Hello", ",", "world", "!"]),
    ("en", "It's a test.", ["It", "'s", "a", "test", "."]),
    ("en", "I paid $5.50 for 3 apples (and a pear).",
     ["I", "paid", "$", "5.50", "for", "3", "apples", "(", "and", "a", "pear", ")", "."]),
    ("en", "The 1990s weren't bad.", ["The", "1990s", "weren", "'t", "bad", "."]),
    ("en", "A well-known fact: x | y [z].", ["A", "well-known", "fact", ":", "x", "|", "y", "[", "z", "]", "."]),
    ("fr", "Bonjour, l'ami !", ["Bonjour", ",", "l'", "ami", "!"]),
    ("fr", "Qu'est-ce que c'est ?", ["Qu'", "est-ce", "que", "c'", "est", "?"]),
    ("fr", "J'ai 3,5 kg de pommes.", ["J'", "ai", "3,5", "kg", "de", "pommes", "."]),
    ("fr", "Aujourd'hui, c'est lundi : il pleut !",
     ["Aujourd'", "hui", ",", "c'", "est", "lundi", ":", "il", "pleut", "!"]),
]


@pytest.mark.parametrize("lang,text,tokens", ROUND_TRIPS)
def test_tokenise_gives_moses_tokens_and_detokenise_restores_the_text(lang, text, tokens):
    assert moses.tokenize(text, lang) == tokens
    assert moses.detokenize(tokens, lang) == text


@pytest.mark.parametrize("text,expected", [
    ('Tom & Jerry say "hi" <3', ["Tom", "&", "Jerry", "say", '"', "hi", '"', "<", "3"]),
    ("It's <b> & | [x]", ["It", "'s", "<", "b", ">", "&", "|", "[", "x", "]"]),
])
def test_tokenise_never_escapes_special_characters(text, expected):
    toks = moses.tokenize(text, "en")
    assert toks == expected
    assert not any("&amp;" in t or "&quot;" in t or "&apos;" in t or "&#" in t or "&lt;" in t for t in toks)


def test_aggressive_dash_splits_and_lowercase_options():
    assert moses.tokenize("A well-known fact", "en") == ["A", "well-known", "fact"]
    assert moses.tokenize("A well-known fact", "en", aggressive_dash_splits=True) == ["A", "well", "@-@", "known", "fact"]
    assert moses.detokenize(["a", "well", "@-@", "known", "fact"], "en") == "a well-known fact"
    assert moses.tokenize("A Fact", "en", lowercase=True) == ["a", "fact"]


def test_punctuation_normalisation_maps_typographic_quotes():
    assert moses.tokenize("« Oui », dit-il.", "fr") == ['"', "Oui", '"', ",", "dit-il", "."]


def _bpe_pipeline(**kw) -> TextPipeline:
    from collections import Counter

    words = Counter("the lower lowest newer newest wider widest the the low low low".split())
    codes = learn_codes(words, 20, min_frequency=1)
    bpe = {"joint": True, "codes": {"src": codes, "tgt": codes}, "vocab": None, "vocab_threshold": None,
           "merges": 20, "separator": "@@"}
    return TextPipeline("en", "fr", bpe=bpe, **kw)


def test_pipeline_encode_then_decode_restores_raw_text():
    p = _bpe_pipeline()
    for line in ["The lowest, widest newer slower thing!", "It's (newer) & wider."]:
        toks = p.encode(line, "src")
        assert any(t.endswith("@@") for t in toks), toks  # BPE did segment something
        assert p.decode(toks, "src") == line


def test_pipeline_formats_raw_tok_bpe_agree():
    p = _bpe_pipeline()
    line = "The slowest newer widget."
    tok = " ".join(p.tokenize(line, "src"))
    bpe = p.encode(line, "src")
    assert p.encode_from(tok, "src", "tok") == bpe
    assert p.encode_from(" ".join(bpe), "src", "bpe") == bpe
    assert p.decode_to(bpe, "src", "bpe") == " ".join(bpe)
    assert p.decode_to(bpe, "src", "tok") == tok
    with pytest.raises(ValueError):
        p.encode_from(line, "src", "xml")


def test_pipeline_dict_is_json_primitives_with_codes_inlined_and_rebuilds_identically():
    p = _bpe_pipeline(lowercase=True, aggressive_dash_splits=True)
    d = p.to_dict()
    assert isinstance(d["bpe"]["codes"], str) and d["bpe"]["codes"].startswith("#version")
    d2 = json.loads(json.dumps(d))
    q = TextPipeline.from_dict(d2)
    line = "The well-known Newest WIDER thing"
    assert q.encode(line, "src") == p.encode(line, "src")
    assert q.to_dict() == d


def test_pipeline_from_dict_rejects_unknown_keys_listing_valid_ones():
    d = TextPipeline("en", "fr").to_dict()
    d["bpe_codez"] = "x"
    with pytest.raises(ConfigError, match="bpe_codez.*valid keys"):
        TextPipeline.from_dict(d)


def test_a_used_pipeline_pickles_to_workers_and_encodes_the_same():
    """Worker processes get pipelines by pickle; a pipeline that has already encoded holds
    tokeniser closures in its caches, which must not travel."""
    import pickle

    p = TextPipeline("en", "fr", aggressive_dash_splits=True, lowercase=True)
    before = p.encode("A well-known case.", "src")
    q = pickle.loads(pickle.dumps(p))
    assert q.encode("A well-known case.", "src") == before and q.to_dict() == p.to_dict()


def test_lowercase_pipeline_lowercases_tokens():
    p = TextPipeline("en", "fr", lowercase=True)
    assert p.encode("Hello World", "src") == ["hello", "world"]
    assert p.encode_from("Hello World", "src", "tok") == ["hello", "world"]


def test_a_lowercased_pipeline_decodes_without_capitalising_sentence_starts():
    assert TextPipeline("en", "fr", lowercase=True).decode(["hello", "world", "."]) == "hello world."


def test_detruecase_uppercases_only_the_first_letter_of_a_sentence_start_as_detruecase_perl():
    assert detruecase("iPhone sales . USA wins".split()) == ["IPhone", "sales", ".", "USA", "wins"]


def test_truecaser_learns_the_usual_case_and_detruecase_capitalises_sentence_starts():
    casing = new_casing()
    for sent in ["The cat saw Paris .", "I like the cat .", "We visited Paris and the cat ."]:
        add_weights(casing, truecase_weights(sent.split()))
    forms = best_forms(casing)
    assert "Paris" in forms and "the" in forms and "The" not in forms
    tc = Truecaser(forms)
    assert tc("The cat saw PARIS .".split()) == ["the", "cat", "saw", "Paris", "."]
    assert tc(["Unknown"]) == ["Unknown"]
    assert detruecase('the cat . " it " saw'.split()) == ["The", "cat", ".", '"', "It", '"', "saw"]
    p = TextPipeline("en", "fr", truecase={"src": forms, "tgt": forms})
    assert p.encode("The cat saw Paris.", "src") == ["the", "cat", "saw", "Paris", "."]
    assert p.decode(["the", "cat", "saw", "Paris", "."], "src") == "The cat saw Paris."


# A corpus in which "US" outnumbers "us", and what the Moses scripts make of it (train-truecaser.perl,
# then truecase.perl on the same lines and two more): a form seen inside a sentence stays there.
US_CORPUS = ["They told us the news .", "He saw us there .", "The US team won .", "We met the US team .",
             "The US army left .", "Did the US vote ?"]
US_TRUECASED = ["They told us the news .", "He saw us there .", "the US team won .", "We met the US team .",
                "the US army left .", "Did the US vote ?", "US too .", 'He told us . " the US won .']


def test_truecaser_keeps_a_form_seen_inside_sentences_as_truecase_perl_does():
    casing = new_casing()
    for sent in US_CORPUS:
        add_weights(casing, truecase_weights(sent.split()))
    forms = best_forms(casing)
    tc = Truecaser(forms)
    assert [" ".join(tc(s.split())) for s in US_CORPUS + ["Us too .", 'He told us . " The US won .']] == US_TRUECASED
    p = TextPipeline("en", "en", truecase={"src": forms, "tgt": forms})
    assert p.decode(p.encode("He told us the US won.", "src")) == "He told us the US won."
    old = Truecaser(["US", "the"])  # a model of best forms only (older data directories) cases as it did
    assert old("The US told us .".split()) == ["the", "US", "told", "US", "."]


@pytest.mark.parametrize("change, needle", [
    ({"src_lang": 42}, "setting src_lang is 42, not a language code"),
    ({"lowercase": "yes"}, "setting lowercase is 'yes', not true or false"),
    ({"truecase": {"src": 5, "tgt": ["a"]}}, "setting truecase is .*, not a list of words for each side"),
    ({"truecase": "Paris"}, "setting truecase is 'Paris', not a list of words"),
    ({"bpe": {"joint": True, "codes": 5}}, "setting bpe is .*, not BPE codes for each side"),
    ({"bpe": {"joint": True, "codes": "#version: 0.2\na b\nfoo\n"}}, r"BPE codes: line 3 is not two units .*'foo'"),
    ({"bpe": {"joint": False, "codes": {"src": "a b\n", "tgt": "a b c\n"}}}, "BPE codes: line 1 is not two units"),
    ({"bpe": {"joint": True, "codes": "a b\n", "vocab": {"src": "a", "tgt": ["a"]}}}, "setting bpe is"),
    ({"protected_patterns": ["(unclosed"]}, r"protected pattern '\(unclosed' does not compile"),
    # translate's tokeniser refused it with a ValueError traceback at the first line
    ({"protected_patterns": ["x*"]}, r"protected pattern 'x\*' does not compile: it matches the empty string"),
    ({"protected_patterns": "https?://\\S+"}, "setting protected_patterns is .*, not a list of regular expressions"),
    ({"version": "1"}, "version '1' is not a number"),
])
def test_a_damaged_pipeline_setting_is_refused_when_read_naming_the_setting(change, needle):
    """A pipeline read from a file (a checkpoint, a manifest) with a setting of the wrong type or
    unreadable BPE codes fails when it is read, in one line, not at the first line it encodes
    (a traceback, or subword-nmt exiting the process)."""
    d = dict(TextPipeline("en", "fr").to_dict(), **change)
    with pytest.raises(ConfigError, match=needle):
        TextPipeline.from_dict(d)


@pytest.mark.parametrize("argv, needle", [
    (["tokenize", "--lang", "FR"], "--lang 'FR': language codes are lower case: give 'fr'"),
    (["tokenize", "--lang", "../etc"], "--lang '../etc' is not a language code"),
    (["score", "--hyp", "h", "-r", "r", "--paper-bleu", "--tgt-lang", "EN"], "give 'en'"),
    (["preprocess", "--src-lang", "en", "--tgt-lang", "Fr", "--train", "t", "--valid", "v", "--dest", "d"],
     "--tgt-lang 'Fr'"),
    (["select-data", "--src-lang", "en/", "--tgt-lang", "fr", "--in-domain", "a", "--pool", "b", "--output-prefix",
      "o", "--lines", "1"], "--src-lang 'en/' is not a language code"),
])
def test_a_language_code_in_another_case_or_not_a_code_is_refused_by_every_command(argv, needle):
    """sacremoses takes any string: 'FR' tokenised with the generic rules, not French ones, and
    --paper-bleu scored 31.25 instead of 31.34 without a word."""
    from tests.conftest import run_cli

    code, _, err = run_cli(argv, "x\n")
    assert code != 0
    [line] = err.strip().splitlines()
    assert line.startswith("nmtkit: error: ") and needle in line, line


def test_a_language_without_moses_rules_is_tokenised_generically_with_a_warning():
    from tests.conftest import run_cli

    code, out, err = run_cli(["tokenize", "--lang", "xx"], "C'est l'art.\n")
    assert code == 0 and out == "C ' est l ' art .\n"
    assert "--lang xx: sacremoses has no Moses rules for this language" in err and "tokenizer.perl -l xx" in err


def test_non_printing_characters_become_spaces_before_tokenising():
    text = "zero\u200bwidth soft\u00adhyphen \ufeffbom rtl\u202eo tab\tc1\x85end pua\ue000x"
    assert moses.tokenize(text, "en") == ["zero", "width", "softhyphen", "bom", "rtl", "o", "tab", "c1", "end",
                                          "pua", "x"]
    kept = moses.tokenize(text, "en", remove_non_printing=False)
    assert "\u200b" in kept and "\u00ad" in kept  # each a token of its own: a vocabulary entry
    assert moses.tokenize("\u200b\ufeff\u200e", "en") == []  # a line of format characters is an empty line


def _perl_unicode_version() -> str | None:
    import shutil
    import subprocess

    if shutil.which("perl") is None:
        return None
    proc = subprocess.run(["perl", "-MUnicode::UCD", "-e", "print Unicode::UCD::UnicodeVersion()"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def test_the_steps_run_in_the_moses_order_and_a_carriage_return_separates_words():
    """normalize-punctuation.perl before remove-non-printing-char.perl: the soft hyphen still stands
    between the quote and the comma when the English rule that puts a quote after a comma looks (the other
    order moves the quote); and a carriage return inside a line is a space, not deleted ("thecat")."""
    tok = moses.tokenizer_fn("en")
    assert tok('he said "\u00ad, then') == ["he", "said", '"', ",", "then"]
    assert tok("the\rcat") == ["the", "cat"]


def test_non_printing_characters_are_those_remove_non_printing_char_perl_replaces():
    """Every assigned code point up to U+2FFFF (but surrogates and line ends), through the
    script's own substitution in perl, whose Unicode version must be Python's for the categories
    to agree; but the characters that sit inside words, which are deleted, and unassigned code
    points, which are kept (which they are depends on the Unicode version)."""
    import subprocess
    import unicodedata

    if _perl_unicode_version() != unicodedata.unidata_version:
        pytest.skip(f"perl with Unicode {unicodedata.unidata_version} (Python's) is needed as the oracle")
    points = [chr(c) for c in range(0x20, 0x30000) if not 0xD800 <= c < 0xE000]
    text = "".join(c for c in points if unicodedata.category(c) != "Cn" and c not in moses.INSIDE_WORD)
    perl = subprocess.run(["perl", "-CSD", "-ne", r'chomp; s/\p{C}/ /g; print "$_\n"'], input=text + "\n",
                          capture_output=True, text=True, check=True).stdout[:-1]
    ours = moses.space_non_printing(text)
    assert len(ours) == len(perl) and ours == perl
    assert ours.count(" ") > 6_000  # private use among them
    unassigned = "".join(c for c in points if unicodedata.category(c) == "Cn")
    assert len(unassigned) > 40_000 and moses.space_non_printing(unassigned) == unassigned
    assert moses.space_non_printing("".join(moses.INSIDE_WORD)) == ""


def test_protected_spans_keep_their_non_printing_characters():
    patterns = (r"\ue000\d+\ue001",)
    line = "click \ue0001\ue001 now"
    assert moses.tokenize(line, "en", protected_patterns=patterns) == ["click", "\ue0001\ue001", "now"]
    assert moses.tokenize(line, "en") == ["click", "1", "now"]


@pytest.mark.parametrize("version", [1, 3])
def test_a_pipeline_of_another_version_is_refused_with_what_to_rerun(version):
    """Version 1 (before nfc and remove_non_printing) and a future version alike: one line
    naming both versions and the command that writes the pipeline again."""
    d = dict(TextPipeline("en", "fr").to_dict(), version=version)
    with pytest.raises(ConfigError) as err:
        TextPipeline.from_dict(d)
    assert str(err.value) == (f"text pipeline version {version} is not one this nmtkit reads (2); re-run "
                              "'nmtkit preprocess' with this nmtkit to write it again")


def test_every_pipeline_is_written_as_the_current_version_with_its_steps():
    new = TextPipeline("en", "fr")
    assert new.tokenize("a\u200bb cafe\u0301", "src") == ["a", "b", "caf\u00e9"]
    d = new.to_dict()
    assert d["version"] == 2 and d["remove_non_printing"] is True and d["nfc"] is True
    assert TextPipeline.from_dict(json.loads(json.dumps(d))).to_dict() == d
    assert TextPipeline("en", "fr", True, False, True).lowercase  # the older fields keep their positions
    none = TextPipeline("en", "fr", nfc=False, remove_non_printing=False)
    assert none.to_dict()["version"] == 2 and TextPipeline.from_dict(none.to_dict()).to_dict() == none.to_dict()
    assert none.tokenize("a\u200bb", "src") == ["a", "\u200b", "b"]
    assert none.tokenize("cafe\u0301", "src") == ["cafe", "\u0301"]


def test_decomposed_text_tokenises_as_its_composed_form_does():
    import unicodedata

    composed = "Việt Nam : le café , un été à São Paulo , Ångström ."
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    assert moses.tokenize(decomposed, "fr") == moses.tokenize(composed, "fr") == composed.split()
    split = moses.tokenize(decomposed, "fr", nfc=False)  # what tokenizer.perl does: each mark a token
    assert "\u0301" in split and "caf\u00e9" not in split
    assert moses.compose(composed) is composed  # composed text is returned as it is, not copied
