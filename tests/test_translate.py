"""nmtkit.translate: the text pipeline around beam search, UNK replacement, alignments, plots."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
from collections import Counter

import pytest
import torch

import nmtkit
from nmtkit.checkpoint import CHECKPOINT_FORMAT
from nmtkit.errors import CheckpointError, ConfigError, InputError
from nmtkit.translate import (
    TranslateConfig,
    Writers,
    hard_alignment,
    nbest_line,
    read_unk_dict,
    replace_unks,
    soft_alignment,
    subword_words,
)
from tests.conftest import SPECIALS, SRC_WORDS, TGT_WORDS, bound_translator, make_checkpoint, tiny_model

CKPT_SEED = 1  # the `ckpt` fixture's model: one that emits no <unk> on these lines
LINES = [
    "the cat sat on a mat .",
    "",
    "a dog",
    "the big red house is in the park , and the small dog ran .",
    "cat",
    "   ",
    "the dog ran in a park .",
]


def _translator(ckpt, warn=None, **kw):
    kw.setdefault("beam", 3)
    kw.setdefault("max_len_a", 1.0)
    kw.setdefault("max_len_b", 3)
    return bound_translator(ckpt, warn, **kw)


def test_output_order_is_the_input_order_after_length_sorting(ckpt):
    t = _translator(ckpt, batch_size=2)
    together = t.translate(LINES)
    alone = [t.translate([line])[0] for line in LINES]
    assert together == alone
    assert len(set(together)) > 2  # the sentences do get different translations


def test_empty_and_blank_lines_give_empty_outputs(ckpt):
    """Silently, where a line the text pipeline empties (a zero-width space, a soft hyphen) is warned about."""
    warnings: list[str] = []
    out = _translator(ckpt, warn=warnings.append).translate(["", "the cat", "  ", "", "\u200b", "\u00ad\x07"])
    assert out[0] == out[2] == out[3] == out[4] == out[5] == ""
    assert out[1] != ""
    assert [w.split(": ")[0] for w in warnings] == ["<input>:5", "<input>:6"] and "written empty" in warnings[0]


def test_overlong_line_is_truncated_with_a_warning_naming_it(ckpt):
    warnings = []
    t = _translator(ckpt, warn=warnings.append, max_src_len=5)
    long_line = " ".join(["the cat sat on a mat"] * 10)
    out = t.translate(["a dog", long_line, "cat"])
    assert len(out) == 3 and out[1]
    assert len(warnings) == 1 and ":2:" in warnings[0] and "60 source tokens" in warnings[0]
    # the truncated line translates like its first 5 tokens
    assert out[1] == t.translate(["the cat sat on a"])[0]


def test_a_line_as_long_as_max_tokens_fits_its_budget_without_a_warning(ckpt):
    warnings = []
    out = _translator(ckpt, warn=warnings.append, max_tokens=3).translate(["the cat sat", "a dog ran on"])
    assert all(out) and len(warnings) == 1 and "--max-tokens 3 is below the length of line 2 (4 tokens)" in warnings[0]


def test_default_source_limit_comes_from_the_checkpoint(ckpt, tmp_path):
    from nmtkit.train.config import TrainConfig

    assert _translator(ckpt).max_src_len == 250  # max(250, 4 * 50)
    long = make_checkpoint(tmp_path / "long.pt", train_config=TrainConfig(max_len=100, max_updates=1).to_dict())
    assert _translator(str(long)).max_src_len == 400


def test_output_formats_skip_stages(ckpt):
    raw = _translator(ckpt).translate(["the cat ."])[0]
    tok = _translator(ckpt, output_format="tok").translate(["the cat ."])[0]
    assert all(w in TGT_WORDS for w in tok.split())
    from nmtkit.text.moses import detokenize

    assert raw == detokenize(tok.split(), "fr")
    # --input-format bpe: already the model's tokens, no tokenisation ("cat." stays one, unknown token)
    t = _translator(ckpt, input_format="bpe")
    assert t.generate(["the cat."])[0].src_tokens == ("the", "cat.")
    assert _translator(ckpt).generate(["the cat."])[0].src_tokens == ("the", "cat", ".")


def test_input_and_output_formats_with_bpe(tmp_path):
    from nmtkit.text.bpe import learn_codes
    from nmtkit.text.pipeline import TextPipeline

    words = Counter("lower lowest newer newest wider widest low new wide".split() * 3)
    codes = learn_codes(words, 8)
    pipe = TextPipeline(src_lang="en", tgt_lang="fr", bpe={"joint": True, "codes": {"src": codes, "tgt": codes},
                                                           "vocab": None, "vocab_threshold": None, "merges": 8,
                                                           "separator": "@@"})
    src_tokens = pipe.encode("lowest wider", "src")
    assert any(t.endswith("@@") for t in src_tokens)
    tgt = ["lo@@", "w@@", "est", "new"]
    path = make_checkpoint(tmp_path / "bpe.pt", src_words=sorted(set(src_tokens)), tgt_words=tgt, pipeline=pipe)
    t = _translator(str(path), output_format="bpe")
    assert t.generate(["lowest wider"])[0].src_tokens == tuple(src_tokens)
    out = t.translate(["lowest wider"])[0].split()
    assert out and all(tok in tgt for tok in out)
    joined = _translator(str(path), output_format="tok").translate(["lowest wider"])[0]
    assert "@@" not in joined and joined.replace(" ", "") == "".join(out).replace("@@", "")


# ---- UNK replacement -------------------------------------------------------------------------

def test_subword_words_maps_pieces_to_their_words():
    assert subword_words(["lo@@", "wer", "is", "ne@@", "w@@", "er"]) == ([0, 0, 1, 2, 2, 2], ["lower", "is", "newer"])


def test_replace_unks_hand_made_case():
    src = ["the", "Zorg@@", "lings", "arrived", "."]
    tgt = ["les", "<unk>", "sont", "<unk>", "."]
    att = [  # rows: target tokens (+ EOS), columns: source tokens (a source EOS's weights are apart)
        [0.9, 0.02, 0.02, 0.02, 0.02],
        [0.1, 0.1, 0.6, 0.1, 0.05],  # -> "lings", a piece of "Zorglings"
        [0.1, 0.1, 0.1, 0.6, 0.05],
        [0.05, 0.05, 0.05, 0.05, 0.1],  # most weight went to the source EOS, not a word: "." wins
        [0.0, 0.0, 0.0, 0.0, 1.0],
        [0.0, 0.0, 0.0, 0.0, 0.0],
    ]
    assert replace_unks(tgt, src, att) == ["les", "Zorglings", "sont", ".", "."]
    assert replace_unks(tgt, src, att, unk_dict={"Zorglings": "Zorglingues"}) == ["les", "Zorglingues", "sont", ".", "."]
    assert replace_unks(["a", "b"], src, att) == ["a", "b"]


def test_replace_unk_end_to_end_copies_attended_source_words(tmp_path):
    model = tiny_model(seed=2)
    with torch.no_grad():
        model.W_o.bias[1] = 50.0  # the model says <unk> at every step
    path = make_checkpoint(tmp_path / "unk.pt", model=model)
    dict_path = tmp_path / "dict.tsv"
    dict_path.write_text("cat\tchat\ndog\tchien\n", encoding="utf-8")
    plain = _translator(str(path), output_format="tok").translate(["the cat sat"])[0]
    assert set(plain.split()) == {"<unk>"}
    replaced = _translator(str(path), output_format="tok", replace_unk=True).translate(["the cat sat"])[0]
    assert replaced.split() and set(replaced.split()) <= {"the", "cat", "sat"}
    mapped = _translator(str(path), output_format="tok", replace_unk=True, unk_dict=str(dict_path)).translate(
        ["the cat sat"])[0]
    assert mapped.split() == [{"cat": "chat"}.get(w, w) for w in replaced.split()]


def test_unk_dictionary_keys_are_the_source_words_as_the_model_reads_them_as_the_help_says(tmp_path):
    """A lowercasing model reads 'Cat' as 'cat': the entry 'cat' is the one that applies, 'Cat'
    never does (the help said only 'the source word')."""
    from nmtkit.text.pipeline import TextPipeline
    from tests.conftest import run_cli

    model = tiny_model(seed=2)
    with torch.no_grad():
        model.W_o.bias[1] = 50.0  # the model says <unk> at every step
    path = make_checkpoint(tmp_path / "unk.pt", model=model, pipeline=TextPipeline("en", "fr", lowercase=True))
    dict_path = tmp_path / "dict.tsv"
    dict_path.write_text("Cat\tCHAT\ncat\tchat\nThe\tLE\nthe\tle\nSat\tASSIS\nsat\tassis\n", encoding="utf-8")
    out = _translator(str(path), output_format="tok", replace_unk=True, unk_dict=str(dict_path)).translate(
        ["The Cat sat"])[0]
    assert out.split() and set(out.split()) <= {"le", "chat", "assis"}
    assert "lowercased or truecased as the checkpoint records" in " ".join(run_cli(["translate", "--help"])[1].split())


def test_bad_unk_dictionary_line_is_named(tmp_path):
    """A key with a space (or one around it) was kept, and never matched a source word."""
    p = tmp_path / "d.tsv"
    for text, needle in (("a\tb\nno tab here\n", "d.tsv:2:"), ("a\tb\nNew York\tNew York\n", "d.tsv:2: the source "
                         "'New York' is not one word"), ("a \tb\n", "d.tsv:1: the source 'a ' is not one word")):
        p.write_text(text, encoding="utf-8")
        with pytest.raises(InputError, match=needle):
            read_unk_dict(str(p))


def test_an_unk_dictionarys_first_entry_for_a_word_wins(tmp_path):
    p = tmp_path / "d.tsv"
    p.write_text("cat\tchat\ndog\tchien\ncat\tmatou\n", encoding="utf-8")
    assert read_unk_dict(str(p)) == {"cat": "chat", "dog": "chien"}


def test_an_unk_dictionary_is_read_as_every_text_input_bom_dropped_bad_lines_named(tmp_path):
    """A byte order mark stayed in the first entry's key (which then never matched), a NUL byte
    was taken as text, and invalid UTF-8 was reported without its line."""
    p = tmp_path / "d.tsv"
    p.write_bytes(b"\xef\xbb\xbfw1\tD1\nw2\tD2\n")
    assert read_unk_dict(str(p)) == {"w1": "D1", "w2": "D2"}
    for data, needle in ((b"w1\tD1\nw2\t\x00D2\n", r"d.tsv:2: .*NUL"), (b"w1\tD1\nw2\t\xffD2\n", r"d.tsv:2: invalid UTF-8")):
        p.write_bytes(data)
        with pytest.raises(InputError, match=needle):
            read_unk_dict(str(p))


# ---- alignments, n-best, plots --------------------------------------------------------------

def test_hard_alignment_is_pharaoh_with_one_link_per_target_token():
    att = [[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.4, 0.2], [0.0, 0.0, 0.1]]
    assert hard_alignment(att, n_tgt=3) == "0-0 2-1 1-2"
    assert hard_alignment(att, n_tgt=0) == ""


def test_alignments_from_the_translator_are_well_formed(ckpt):
    t = _translator(ckpt)
    results = t.generate(["the cat sat on a mat .", "", "a dog"], alignments=True)
    for r in results:
        if not r.nbest:
            continue
        best = r.nbest[0]
        line = hard_alignment(best.attention, len(best.tokens))
        assert re.fullmatch(r"\d+-\d+( \d+-\d+)*", line)
        links = [tuple(map(int, p.split("-"))) for p in line.split()]
        assert [j for _, j in links] == list(range(len(best.tokens)))
        assert all(0 <= i < len(r.src_tokens) for i, _ in links)
        soft = json.loads(soft_alignment(best.attention, r.src_tokens, best.tokens, best.source_eos_attention))
        assert soft["src"] == [*r.src_tokens, "</s>"] and soft["tgt"] == [*best.tokens, "</s>"]
        assert len(soft["attention"]) == len(soft["tgt"])
        for row in soft["attention"]:
            assert len(row) == len(soft["src"]) and sum(row) == pytest.approx(1.0, abs=1e-3)


def test_nbest_line_is_moses_format():
    assert nbest_line(3, "le chat", -4.5, 3, -1.5) == "3 ||| le chat ||| LogProb= -4.5000 Length= 3 ||| -1.5000"


def test_nbest_lines_count_eos_in_the_length_that_the_score_divides_by(ckpt):
    """As --nbest's help says: n is the token count with EOS, score = lp / n^lenpen."""
    results = _translator(ckpt).generate(["the cat sat", "a dog ran"], beam=3, nbest=2, lenpen=0.6)
    writers = Writers(io.StringIO(), None, TranslateConfig(models=(ckpt,), beam=3, nbest=2), flush_each=False)
    for r in results:
        writers.write(r)
    lines = writers.out.getvalue().splitlines()
    assert len(lines) == 4
    for line, hyp in zip(lines, [h for r in results for h in r.nbest]):
        fields = line.split(" ||| ")[2].split()
        lp, n = float(fields[1]), int(fields[3])
        assert n == len(hyp.tokens) + 1 and lp == pytest.approx(hyp.log_prob, abs=1e-4)
        assert float(line.split(" ||| ")[3]) == pytest.approx(lp / n**0.6, abs=1e-3)


def test_attention_plot_is_a_png_per_sentence_up_to_the_limit(ckpt, tmp_path):
    d = tmp_path / "plots"
    t = _translator(ckpt)
    results = t.generate(["the cat sat", "", "a dog ran", "the mat"], alignments=True)
    assert not d.exists()  # the translator writes nothing: the writers own every output
    config = TranslateConfig(models=(ckpt,), plot_attention=str(d), plot_limit=2)
    writers = Writers(io.StringIO(), None, config, flush_each=False)
    for r in results:
        writers.write(r)
    files = sorted(p.name for p in d.iterdir())
    assert files == ["000001.png", "000003.png"]
    assert (d / "000001.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"



def test_an_attention_plot_of_a_long_line_stays_a_bounded_image(tmp_path):
    """--plot-attention drew 0.35 inch (35 pixels) per token: a 200-word line (250 tokens, the
    --max-src-len default) took 9.5 s and 1 GB for one 8,935 x 3,895 PNG, a 1,900-token one 6 GB;
    a side is now at most 20 inches (as a 50-token line's), the labels closer together."""
    import numpy as np
    from PIL import Image

    from nmtkit.translate.writers import plot_attention

    attention = np.full((31, 300), 1 / 300)
    plot_attention(tmp_path / "a.png", attention, [f"w{i}" for i in range(300)], [f"v{i}" for i in range(30)])
    width, height = Image.open(tmp_path / "a.png").size
    assert width <= 2150 and height <= 1300

# ---- ensembles and bad checkpoints ---------------------------------------------------------

def test_ensemble_of_the_same_model_twice_translates_like_it(ckpt, tmp_path):
    lines = ["the cat sat on a mat .", "a dog ran", "the big house"]
    copy = shutil.copy(ckpt, tmp_path / "copy.pt")
    assert _translator([ckpt, copy]).translate(lines) == _translator(ckpt).translate(lines)


def test_the_ensemble_help_credits_fairseq_with_the_mean_of_probabilities_not_nematus():
    """Nematus (Theano's gen_sample, TF's BeamSearchSampler) ranks an ensemble's candidates by the
    sum of its models' log-probabilities, a product of experts; fairseq by the log of their mean
    probability, as nmtkit does (test_decode_search). The help said "as Nematus and fairseq do"."""
    from dataclasses import fields

    from nmtkit.options import spec_of
    from nmtkit.translate.config import DecodeConfig

    text = next(spec_of(f).help for f in fields(DecodeConfig) if f.name == "ensemble")
    assert "log of their mean probability, as fairseq does" in text and "Nematus sums" in text


def test_ensemble_with_different_vocabularies_is_refused(ckpt, tmp_path):
    other = make_checkpoint(tmp_path / "other.pt", tgt_words=TGT_WORDS[:-1])
    with pytest.raises(CheckpointError, match="tgt vocabulary differs"):
        _translator([ckpt, str(other)])
    other = make_checkpoint(tmp_path / "src.pt", src_words=SRC_WORDS[:-1])
    with pytest.raises(CheckpointError, match="src vocabulary differs"):
        _translator([ckpt, str(other)])


@pytest.mark.parametrize("langs", [("de", "fr"), ("en", "de")])
def test_ensemble_of_models_for_another_language_pair_is_refused(ckpt, tmp_path, langs):
    other = make_checkpoint(tmp_path / "other.pt", src_lang=langs[0], tgt_lang=langs[1])
    with pytest.raises(CheckpointError, match="language pair differs"):
        _translator([ckpt, str(other)])


def test_an_ensemble_with_a_model_of_the_other_direction_names_the_two_language_pairs(ckpt, tmp_path):
    """--ensemble of an en-fr and a fr-en model was refused as 'src vocabulary differs (20 vs 20
    tokens...)', which hid the reversed direction behind its swapped vocabularies."""
    from nmtkit.text.pipeline import TextPipeline

    other = make_checkpoint(tmp_path / "fr-en.pt", src_lang="fr", tgt_lang="en", src_words=TGT_WORDS,
                            tgt_words=SRC_WORDS, pipeline=TextPipeline(src_lang="fr", tgt_lang="en"))
    with pytest.raises(CheckpointError, match=r"language pair differs from .*'s \(fr-en vs en-fr\); an ensemble "
                                              "needs models of one translation direction"):
        _translator([ckpt, str(other)])


def test_a_loaded_bundle_holds_the_first_checkpoints_vocabularies_pipeline_and_models(ckpt, tmp_path):
    from nmtkit.checkpoint import ModelBundle, load_bundle
    from nmtkit.text.pipeline import TextPipeline
    from nmtkit.text.vocab import Vocab
    from nmtkit.train.config import TrainConfig

    lexicon = torch.zeros((len(SPECIALS) + len(SRC_WORDS), 2), dtype=torch.int32)  # a row per source word
    other = str(make_checkpoint(tmp_path / "other.pt", seed=2, lexicon=lexicon))
    longer = str(make_checkpoint(tmp_path / "longer.pt", train_config=TrainConfig(max_len=80, max_updates=1).to_dict()))
    assert load_bundle([ckpt, longer]).trained_max_len == 50  # the first member's, like the rest
    bundle = load_bundle([other, ckpt])
    assert isinstance(bundle, ModelBundle) and bundle.paths == (other, ckpt) and len(bundle.models) == 2
    assert isinstance(bundle.src_vocab, Vocab) and bundle.tgt_vocab.itos[-len(TGT_WORDS):] == TGT_WORDS
    assert isinstance(bundle.pipeline, TextPipeline) and (bundle.src_lang, bundle.tgt_lang) == ("en", "fr")
    assert bundle.arch == "rnnsearch" and bundle.trained_max_len == 50 and torch.equal(bundle.lexicon, lexicon)
    assert not any(m.training for m in bundle.models)
    assert load_bundle([ckpt]).lexicon is None  # a checkpoint without a lexicon
    translator = _translator(ckpt)
    assert translator.bundle.paths == (ckpt,) and translator.bundle.src_vocab.itos[-len(SRC_WORDS):] == SRC_WORDS


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads the process's mappings (Linux)")
def test_a_loaded_bundle_leaves_its_checkpoint_file_unmapped(tmp_path):
    """Checkpoints are read memory-mapped; a bundle that kept a tensor of the mapping (its
    lexicon) kept the model's pages resident a second time beside the model."""
    import gc

    from nmtkit.checkpoint import load_bundle

    rows = len(SPECIALS) + len(SRC_WORDS)
    lexicon = torch.arange(2 * rows, dtype=torch.int32).view(rows, 2) % (len(SPECIALS) + len(TGT_WORDS))
    path = str(make_checkpoint(tmp_path / "lex.pt", lexicon=lexicon))
    bundle = load_bundle([path])
    gc.collect()
    assert bundle.lexicon is not None and torch.equal(bundle.lexicon, lexicon)
    with open("/proc/self/maps") as maps:
        assert path not in maps.read()


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads the process's mappings (Linux)")
def test_an_int8_model_quantised_from_the_mapped_file_keeps_nothing_of_the_file(tmp_path):
    """int8 decoding quantises each model while its tensors are the file's mapped ones
    (`load_model(prepare=...)`), then copies what it keeps: the file is unmapped afterwards, so
    overwriting it in place cannot kill a running translator (SIGBUS), and the int8 model
    translates as one quantised after an ordinary load does."""
    import gc

    from nmtkit.checkpoint import load_model
    from nmtkit.models.fast.quantize import quantize_for_decoding

    path = str(make_checkpoint(tmp_path / "m.pt"))
    translator = _translator(path, precision="int8")
    gc.collect()
    with open("/proc/self/maps") as maps:
        assert path not in maps.read()
    mapped, _ = load_model(path, prepare=quantize_for_decoding)
    copied = quantize_for_decoding(load_model(path)[0])
    assert mapped.state_dict().keys() == copied.state_dict().keys()
    for key, value in copied.state_dict().items():
        assert torch.equal(mapped.state_dict()[key], value), key
    before = translator.translate(LINES)
    with open(path, "r+b") as f:  # the file overwritten in place: a mapped tensor would now SIGBUS
        f.truncate(0)
    assert translator.translate(LINES) == before


@pytest.mark.parametrize("field, value, needle", [
    ("pipeline", None, "checkpoint has no text pipeline"),
    ("pipeline", {"no_such_setting": 1}, "unknown text pipeline keys"),
    ("pipeline", {"src_lang": "en", "tgt_lang": "fr", "truecase": {"src": 5, "tgt": 6}},
     "text pipeline setting truecase is"),
    ("tgt_vocab", None, "checkpoint has no usable vocabularies"),
    ("tgt_vocab", ["<pad>", "<unk>", "<s>", "</s>", "le"], "its tgt_vocab has 5 words, but its model was built for"),
    ("src_vocab", ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(996)],
     "its src_vocab has 1,000 words, but its model was built for"),
    ("lexicon", "ids", r"its lexicon does not fit its vocabularies: \(\d+, 3\) torch.int32, ids 0 to 1,000,000"),
    ("lexicon", "vocab size", r"its lexicon does not fit its vocabularies: \(\d+, 3\) torch.int32, ids 0 to \d+, where"),
    ("lexicon", "negative", r"its lexicon does not fit its vocabularies: \(\d+, 3\) torch.int32, ids -1 to 0"),
    ("lexicon", "rows", r"its lexicon does not fit its vocabularies: \(2, 3\) torch.int32"),
    ("lexicon", "floats", r"its lexicon does not fit its vocabularies: \(\d+, 3\) torch.float32"),
    ("lexicon", "text", "its lexicon does not fit its vocabularies: str"),
    ("model_config", [1, 2], "its model_config and model_state are not both mappings"),
    ("model_state", "weights", "its model_config and model_state are not both mappings"),
    ("model_config", "extra key", r"unknown rnnsearch config keys \['bogus'\]"),
    ("arch", "transformer", "unknown architecture 'transformer'"),
    ("format_version", "2", "checkpoint format version '2' is not one this nmtkit reads"),
])
def test_a_damaged_checkpoint_field_is_refused_in_one_error_naming_the_file(ckpt, tmp_path, field, value,
                                                                                   needle):
    from nmtkit.checkpoint import load_checkpoint, save_checkpoint

    good = load_checkpoint(ckpt)
    if field == "lexicon":  # one that would quietly change every shortlist: ids past the vocabulary, rows
        n = len(good["src_vocab"])  # missing, ids as floats, not a tensor
        lex = torch.zeros(n, 3, dtype=torch.int32)
        value = {"ids": lex.index_fill(1, torch.tensor([2]), 10**6), "rows": lex[:2], "floats": lex.float(),
                 "vocab size": lex.index_fill(1, torch.tensor([2]), len(good["tgt_vocab"])),
                 "negative": lex.index_fill(1, torch.tensor([2]), -1), "text": "ids"}[value]
    if value == "extra key":
        value = dict(good["model_config"], bogus=1)
    broken = dict(good, **{field: value})
    p = tmp_path / "broken.pt"
    save_checkpoint(broken, p)
    with pytest.raises(CheckpointError, match=needle) as err:
        _translator(str(p))
    assert str(p) in str(err.value)


@pytest.mark.parametrize("version", [1, 2, 99])
def test_checkpoint_of_another_format_is_refused_with_what_to_rerun(ckpt, tmp_path, version):
    """Format 1 (the word lists stored as lists), 2 (RNNencdec's deep output read s_{i-1}) and a
    future format alike: one line naming the file, the two versions and the command that writes a
    readable checkpoint again."""
    from nmtkit.checkpoint import load_checkpoint

    p = tmp_path / f"v{version}.pt"
    torch.save(dict(load_checkpoint(ckpt), format_version=version), p)
    with pytest.raises(CheckpointError) as err:
        _translator(str(p))
    line = str(err.value)
    assert "\n" not in line and str(p) in line
    assert f"checkpoint format version {version} is not one this nmtkit reads ({CHECKPOINT_FORMAT})" in line
    assert "re-run 'nmtkit train'" in line


def test_a_checkpoint_with_a_text_pipeline_of_another_version_is_refused_with_what_to_rerun(ckpt, tmp_path):
    from nmtkit.checkpoint import load_checkpoint, save_checkpoint

    good = load_checkpoint(ckpt)
    p = tmp_path / "v1-pipeline.pt"
    save_checkpoint(dict(good, pipeline=dict(good["pipeline"], version=1)), p)
    with pytest.raises(CheckpointError) as err:
        _translator(str(p))
    assert str(err.value) == (f"{p}: text pipeline version 1 is not one this nmtkit reads (2); re-run 'nmtkit "
                              "preprocess' and 'nmtkit train' with this nmtkit to write it again")


def test_word_lists_are_one_string_each_on_disk_and_lists_when_loaded(tmp_path):
    """The vocabularies and the truecasing forms unpickle as one opcode each (checkpoint.py),
    and load back as the lists they were; a list that could not split back stays a list."""
    from nmtkit.checkpoint import load_checkpoint
    from nmtkit.text.pipeline import TextPipeline

    forms = {"src": ["Paris", "NATO", "the"], "tgt": ["Paris", ""]}
    pipe = TextPipeline(src_lang="en", tgt_lang="fr", truecase=forms)
    p = make_checkpoint(tmp_path / "m.pt", pipeline=pipe)
    raw = torch.load(p, weights_only=True)
    assert raw["format_version"] == CHECKPOINT_FORMAT == 3
    assert isinstance(raw["src_vocab"], str) and raw["src_vocab"].startswith("<pad>\n<unk>\n")
    assert raw["pipeline"]["truecase"] == {"src": "Paris\nNATO\nthe", "tgt": "Paris\n"}
    back = load_checkpoint(p)
    assert back["src_vocab"][:4] == ["<pad>", "<unk>", "<s>", "</s>"] and len(back["src_vocab"]) > 4
    assert back["pipeline"]["truecase"] == forms
    odd = dict(back, tgt_vocab=["<pad>", "a\nb"], pipeline=dict(back["pipeline"], truecase={"src": [], "tgt": []}))
    from nmtkit.checkpoint import save_checkpoint

    save_checkpoint(odd, tmp_path / "odd.pt")
    again = load_checkpoint(tmp_path / "odd.pt")
    assert again["tgt_vocab"] == ["<pad>", "a\nb"] and again["pipeline"]["truecase"] == {"src": [], "tgt": []}


@pytest.mark.parametrize("keep", ["half", "1000 bytes"])
def test_truncated_checkpoint_is_refused(ckpt, tmp_path, keep):
    data = open(ckpt, "rb").read()
    p = tmp_path / "cut.pt"
    p.write_bytes(data[: len(data) // 2 if keep == "half" else 1000])
    with pytest.raises(CheckpointError, match="truncated or corrupt") as err:
        _translator(str(p))
    # torch's first sentence only (cut at 1,000 bytes, its zip reader adds four on miniz and how files break)
    assert "miniz" not in str(err.value) and len(str(err.value)) < 250, str(err.value)


def test_a_zip_archive_of_another_kind_is_refused_as_such(tmp_path):
    """Marian's model.npz (numpy's zip of arrays) was "truncated or corrupt?: [enforce fail at
    inline_container.cc:180] ", torch's message cut before its one informative part."""
    import numpy as np

    np.savez(tmp_path / "model.npz", encoder_W=np.zeros(3))
    with pytest.raises(CheckpointError, match=r"a zip archive, but not torch's \(a numpy .npz") as err:
        _translator(str(tmp_path / "model.npz"))
    assert "enforce" not in str(err.value) and "corrupt" not in str(err.value)


def test_bad_options_are_config_errors(ckpt):
    with pytest.raises(ConfigError):
        TranslateConfig(models=(ckpt,), beam=2, nbest=3)
    with pytest.raises(ConfigError):
        TranslateConfig(models=(ckpt,), unk_dict="x.tsv")
    with pytest.raises(ConfigError, match="nbest must be between 1 and --beam"):
        _translator(ckpt).translate(["the cat"], beam=2, nbest=3)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_16_bit_autocast_on_the_cpu_translates_like_fp32(ckpt, precision, caplog):
    lines = ["the cat sat", "", "a dog"]
    out = _translator(ckpt, precision=precision).translate(lines)
    assert out[0] and out[1] == "" and out[2]
    # rounding may change a near tie, but not whole outputs of this small model
    ref = _translator(ckpt, precision="fp32").translate(lines)
    assert sum(a == b for a, b in zip(out, ref)) >= 2
    assert ("emulated and slow" in caplog.text) == (precision == "fp16")


@pytest.mark.parametrize("native_int8", [True, False])
@pytest.mark.parametrize("native_bf16", [True, False])
def test_auto_precision_decodes_in_int8_on_vnni_cpus_else_as_training_would(ckpt, monkeypatch, native_bf16,
                                                                            native_int8):
    """translate/serve --precision auto: int8 on CPUs with int8 dot products (there faster and
    leaner than bf16 and fp32 at their BLEU); elsewhere what auto means for training, bf16 on
    CPUs where bf16 pays off and fp32 on other CPUs."""
    import nmtkit.models.precision as prec
    from nmtkit.models.fast.quantize import is_quantized

    monkeypatch.setattr(prec, "cpu_bf16_pays_off", lambda: native_bf16)
    monkeypatch.setattr(prec, "cpu_has_fast_int8", lambda cpuinfo=None: native_int8)
    tr = _translator(ckpt)
    trained = "bf16" if native_bf16 else "fp32"
    assert prec.resolve_precision("cpu", "auto") == trained
    assert tr.precision == ("int8" if native_int8 else trained)
    assert is_quantized(tr.bundle.models[0].W_o) == native_int8
    assert tr.translate(["the cat sat"])[0]
    assert _translator(ckpt, precision="fp32").precision == "fp32"


def test_cpu_flags_name_the_fast_int8_and_bf16_instructions():
    from nmtkit.models.precision import cpu_has_fast_bf16, cpu_has_fast_int8

    sapphire = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16 amx_int8 amx_bf16\n"
    alder = "flags\t\t: fpu avx2 avx_vnni\n"
    haswell = "flags\t\t: fpu avx avx2 fma\n"
    assert (cpu_has_fast_int8(sapphire), cpu_has_fast_bf16(sapphire)) == (True, True)
    assert (cpu_has_fast_int8(alder), cpu_has_fast_bf16(alder)) == (True, False)
    assert (cpu_has_fast_int8(haswell), cpu_has_fast_bf16(haswell)) == (False, False)
    assert not cpu_has_fast_int8("no flags line")


def test_ensemble_with_same_size_but_different_vocabularies_names_the_token(ckpt, tmp_path):
    swapped = list(TGT_WORDS)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    other = make_checkpoint(tmp_path / "swapped.pt", tgt_words=swapped)
    with pytest.raises(CheckpointError, match=r"token 4 is 'chat' vs 'le'"):
        _translator([ckpt, str(other)])


def test_translator_and_writers_do_not_import_each_other():
    """Translation is a pipeline with its outputs at the edge: the translator turns lines into
    Results, the writers write them; neither module imports the other (not even for types)."""
    import ast
    from pathlib import Path

    import nmtkit.translate as pkg

    def imports(name: str) -> set[str]:
        tree = ast.parse((Path(pkg.__file__).parent / f"{name}.py").read_text(encoding="utf-8"))
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        return found

    assert "nmtkit.translate.writers" not in imports("translator")
    assert "nmtkit.translate.translator" not in imports("writers")
    assert "nmtkit.translate.alignment" in imports("translator") & imports("writers")


def test_decoding_gives_free_memory_back_every_few_batches(ckpt, monkeypatch):
    """Each batch's shapes leave freed buffers behind (nmtkit.devices); trimming after every
    batch cost more time than it saved memory, so it runs every RELEASE_EVERY_BATCHES."""
    import nmtkit.devices as devices

    calls = []
    monkeypatch.setattr(devices, "release_free_memory", lambda: calls.append(1) or True)
    lines = [f"the cat sat {'on a mat ' * (i % 3)}." for i in range(2 * devices.RELEASE_EVERY_BATCHES + 3)]
    assert len(_translator(ckpt, batch_size=1).translate(lines)) == len(lines)
    assert len(calls) == 2


def test_cpu_batches_are_capped_in_padded_source_tokens_unless_a_budget_is_given(ckpt, monkeypatch):
    """A batch's encoder outputs grow with sentences x longest sentence, and 64 of the longest
    lines set a run's peak memory: on the CPU a batch holds at most CPU_MAX_TOKENS padded
    source tokens unless --max-tokens says otherwise; GPUs get no default cap."""
    from nmtkit.translate.config import CPU_MAX_TOKENS

    n = 40
    line = " ".join(["the cat sat on a mat ."] * (CPU_MAX_TOKENS // (n * 7) + 1))  # n lines: over the cap
    sizes = []
    for kw, capped in (({}, True), ({"max_tokens": 10 ** 6}, False)):
        t = _translator(ckpt, batch_size=64, max_len_a=0.0, max_len_b=1, **kw)
        monkeypatch.setattr(t.translator, "_decode_batch", lambda src, *a, real=t._decode_batch, **k:
                            sizes.append(len(src)) or real(src, *a, **k))
        sizes.clear()
        t.translate([line] * n)
        width = len(t.translator.generate([line], beam=1, max_len_b=1)[0].src_tokens)
        sizes.pop()  # that line's batch
        assert sum(sizes) == n
        assert (max(sizes) * width <= CPU_MAX_TOKENS) if capped else sizes == [n]
        assert t.max_tokens == (CPU_MAX_TOKENS if capped else 10 ** 6)
    from nmtkit.translate.config import batch_token_cap

    assert batch_token_cap(None, "cuda") is None and batch_token_cap(500, "cuda") == 500


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_checkpoint_with_a_nan_or_infinite_weight_is_refused_naming_the_tensor(ckpt, tmp_path, value):
    """One such weight made every score it touches NaN, and the search returned empty translations
    without a warning."""
    from nmtkit.checkpoint import load_checkpoint, save_checkpoint

    broken = load_checkpoint(ckpt)
    name = next(k for k, t in broken["model_state"].items() if t.dim() == 2)
    weight = broken["model_state"][name].clone()
    weight[0, 0] = value
    broken["model_state"] = dict(broken["model_state"], **{name: weight})
    p = tmp_path / "broken.pt"
    save_checkpoint(broken, p)
    with pytest.raises(CheckpointError, match=rf"broken\.pt: its model has weights that are NaN or infinite \(in {name}\)"):
        _translator(str(p))


def test_an_ensemble_member_built_for_another_vocabulary_size_is_refused_naming_it(ckpt, tmp_path):
    """Members share the first checkpoint's vocabularies; one whose model was built for one more
    target word than they hold (a damaged or hand-made file) is refused, not only the first."""
    from nmtkit.checkpoint import load_checkpoint, save_checkpoint

    bigger = tiny_model(seed=3, src_vocab=len(SPECIALS) + len(SRC_WORDS), tgt_vocab=len(SPECIALS) + len(TGT_WORDS) + 1)
    other = load_checkpoint(ckpt)
    other.update(model_config=dict(other["model_config"], tgt_vocab_size=bigger.config.tgt_vocab_size),
                 model_state=bigger.state_dict())
    p = tmp_path / "member.pt"
    save_checkpoint(other, p)
    with pytest.raises(CheckpointError, match=r"member\.pt: its tgt_vocab has \d+ words, but its model was built for"):
        _translator([ckpt, str(p)])


def test_subwords_in_a_vocabulary_whose_pipeline_applies_no_bpe_are_warned_about_unless_input_and_output_are_bpe(
        ckpt, tmp_path):
    """A model trained on text BPE'd before preprocess: raw input is not split as in training
    and its output is not joined, which the user should hear once, at load."""
    split = make_checkpoint(tmp_path / "split.pt", tgt_words=[f"sub{i}@@" for i in range(25)] + TGT_WORDS)
    for path, formats, warned in [(split, {}, True), (split, dict(input_format="bpe", output_format="bpe"), False),
                                  (split, dict(input_format="bpe"), True), (ckpt, {}, False)]:
        notes: list[str] = []
        _translator(str(path), warn=notes.append, **formats)
        hits = [n for n in notes if "subwords ending in '@@'" in n]
        assert bool(hits) == warned, (path, formats, notes)
        if hits:
            assert hits[0].startswith(f"{path}: its target vocabulary has 25 subwords") and "\n" not in hits[0]
            # serve warned too, naming --input-format, an option it lacks
            assert "translate's --input-format bpe" in hits[0] and "serve reads raw text only" in hits[0]


def test_control_tokens_in_bpe_input_are_unknown_words(ckpt):
    """"</s>" in a line of model tokens used to end the source sentence where it stood."""
    t = _translator(ckpt, input_format="bpe", output_format="bpe")
    assert t.translate(["the </s> cat <pad> sat <s>"]) == t.translate(["the <unk> cat <unk> sat <unk>"])
    assert t.translate(["the </s> cat"]) != t.translate(["the"])


def test_a_line_whose_every_hypothesis_overflows_is_warned_about_not_left_silently_empty(tmp_path):
    """fp16 logits past 65,504 are infinite, every score NaN: no hypothesis ends, and the line was
    written empty (n-best: 'LogProb= 0.0000') with exit status 0 and no word."""
    model = tiny_model(seed=0)
    with torch.no_grad():
        model.W_o.weight.fill_(3e4)  # finite weights (the checkpoint is loaded), logits past fp16's range
        model.W_o.bias.fill_(6e4)
    path = make_checkpoint(tmp_path / "big.pt", model=model)
    warnings: list[str] = []
    t = nmtkit.load(str(path), device="cpu", precision="fp16", warn=warnings.append)
    assert t.translate(["the cat", "", "a dog"], beam=2) == ["", "", ""]
    assert warnings == ["<input>:1: no translation: every hypothesis scored NaN or -inf (the model's scores "
                        "overflow: weights that diverged, or fp16 past its range; try --precision fp32); such "
                        "lines are written empty (warned once)"]
    assert str(t.score(["the cat"], ["le chat"])[0]) == "nan"  # written as 'nan', exit status 0, no word
    assert warnings[1:] == ["<input>:1: the model scored this pair NaN or -inf (its scores overflow: weights that "
                            "diverged, or fp16 past its range; try --precision fp32) (warned once)"]


def test_a_result_says_whether_its_line_was_cut_to_max_src_len(ckpt):
    """What serve's "truncated" reads (it tokenised a line cut to exactly --max-src-len again to tell)."""
    t = nmtkit.load(ckpt, max_src_len=3, warn=lambda msg: None)
    long, exact, empty = t.generate(["the cat sat on a mat", "the cat sat", ""], beam=1, max_len_b=2)
    assert (long.truncated, exact.truncated, empty.truncated) == (True, False, False)
    assert len(long.src_tokens) == len(exact.src_tokens) == 3


def test_a_translator_without_threads_uses_torchs_default_not_the_last_translators(ckpt, monkeypatch):
    """torch's thread count is the process's: a translator loaded after one with threads=1
    took 1 as "torch's default", and its --workers with it."""
    import torch

    import nmtkit.devices
    from nmtkit.translate.config import SearchConfig

    monkeypatch.setattr(nmtkit.devices, "_DEFAULT_THREADS", [2])  # as a 2-core machine notes it
    before = torch.get_num_threads()
    try:
        one = nmtkit.load(ckpt, threads=1, workers=1, warn=lambda m: None)
        other = nmtkit.load(ckpt, workers=1, warn=lambda m: None)
        assert one._threads == 1 and other._threads == 2
        other._translate_buffer([(1, "the cat")], SearchConfig(beam=1))  # as nmtkit translate and serve call it
        assert torch.get_num_threads() == 2
        one._translate_buffer([(1, "the cat")], SearchConfig(beam=1))  # each one's own, set again when changed
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
