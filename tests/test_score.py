"""`nmtkit score`: equal to sacrebleu, paper-style multi-bleu, No-UNK subset, by-length, plots, bootstrap.

Expected values come from direct sacrebleu calls (its functional API, a different path from the
metric classes nmtkit uses), from a small independent multi-bleu.perl reimplementation below,
or from n-gram counts worked out by hand.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import sacrebleu
from click.testing import CliRunner

from nmtkit import score as S
from nmtkit.cli import cli, main
from nmtkit.data.manifest import new_manifest
from nmtkit.errors import ConfigError, InputError
from nmtkit.text.moses import tokenize as moses_tokenize
from nmtkit.text.pipeline import TextPipeline

REF = [
    "Le chat est assis sur le tapis.",
    "Il fait beau aujourd'hui à Paris.",
    "Nous avons mangé des pommes et des poires hier soir.",
    "La réunion commence à neuf heures précises.",
    "Je ne sais pas où il habite maintenant.",
    "Le train de Lyon arrive en retard, comme d'habitude.",
    "Elle lit un livre très intéressant sur l'histoire de France.",
    "Les enfants jouent dans le jardin depuis ce matin.",
]
HYP = [
    "Le chat est assis sur un tapis.",
    "Il fait beau à Paris aujourd'hui.",
    "Nous avons mangé des pommes et poires hier.",
    "La réunion commence à neuf heures.",
    "Je ne sais pas où il vit maintenant.",
    "Le train de Lyon est en retard, comme d'habitude.",
    "Elle lit un livre intéressant sur l'histoire de la France.",
    "Les enfants jouent au jardin depuis ce matin.",
]
REF2 = [
    "Le chat est assis sur un tapis.",
    "Aujourd'hui il fait beau à Paris.",
    "Hier soir nous avons mangé des pommes et des poires.",
    "La réunion commence à 9 heures.",
    "Je ne sais pas où il vit maintenant.",
    "Le train de Lyon est en retard, comme toujours.",
    "Elle lit un livre passionnant sur l'histoire de France.",
    "Les enfants jouent au jardin depuis ce matin.",
]


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def files(tmp_path):
    return {
        "hyp": write(tmp_path / "hyp.fr", HYP),
        "ref": write(tmp_path / "ref.fr", REF),
        "ref2": write(tmp_path / "ref2.fr", REF2),
    }


def run_json(args: list[str]) -> dict:
    res = CliRunner().invoke(cli, ["score", *args, "--json"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return json.loads(res.stdout)


def run_main(args: list[str], capsys) -> tuple[int, str, str]:
    """The real entry point (error handling included), in-process."""
    with pytest.raises(SystemExit) as exc:
        main(["score", *args])
        raise SystemExit(0)
    out, err = capsys.readouterr()
    return exc.value.code or 0, out, err


def by_metric(scores: list[dict]) -> dict[str, dict]:
    return {s["metric"]: s for s in scores}


# ---------------------------------------------------------------------------------------------
# Plain scores equal sacrebleu


def test_bleu_chrf_ter_equal_direct_sacrebleu_calls(files):
    got = by_metric(run_json(["--hyp", files["hyp"], "--ref", files["ref"]])["systems"][0]["scores"])
    assert got["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(HYP, [REF]).score, abs=1e-4)
    assert got["chrf"]["score"] == pytest.approx(sacrebleu.corpus_chrf(HYP, [REF]).score, abs=1e-4)
    assert got["ter"]["score"] == pytest.approx(sacrebleu.corpus_ter(HYP, [REF]).score, abs=1e-4)
    assert got["bleu"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    assert "nc:6" in got["chrf"]["signature"] and "tok:tercom" in got["ter"]["signature"]
    assert 0 < got["bleu"]["score"] < 100


def test_multiple_references_tokenize_and_lowercase_pass_through_to_sacrebleu(files, tmp_path):
    upper = write(tmp_path / "upper.fr", [h.upper() for h in HYP])
    got = by_metric(run_json(["--hyp", upper, "--ref", files["ref"], "--ref", files["ref2"],
                              "--tokenize", "intl", "--lowercase", "--metrics", "bleu,chrf"])["systems"][0]["scores"])
    assert set(got) == {"bleu", "chrf"}
    upper_hyps = [h.upper() for h in HYP]
    want = sacrebleu.corpus_bleu(upper_hyps, [REF, REF2], tokenize="intl", lowercase=True)
    assert got["bleu"]["score"] == pytest.approx(want.score, abs=1e-4)
    assert "nrefs:2" in got["bleu"]["signature"] and "case:lc" in got["bleu"]["signature"]
    assert "tok:intl" in got["bleu"]["signature"]
    assert got["chrf"]["score"] == pytest.approx(
        sacrebleu.corpus_chrf([h.lower() for h in HYP], [[r.lower() for r in REF], [r.lower() for r in REF2]]).score,
        abs=1e-4)


def test_text_output_prints_each_metric_with_its_signature(files):
    res = CliRunner().invoke(cli, ["score", "--hyp", files["hyp"], "--ref", files["ref"]])
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 3
    want = sacrebleu.corpus_bleu(HYP, [REF]).score
    assert lines[0].startswith(f"BLEU (sacrebleu on detokenised text, tok 13a) = {want:.2f}") and "version:" in lines[0]
    assert lines[1].startswith("chrF2 = ") and lines[2].startswith("TER = ")


def test_hypothesis_from_stdin(files):
    res = CliRunner().invoke(cli, ["score", "--hyp", "-", "--ref", files["ref"], "--metrics", "bleu", "--json"],
                             input="".join(h + "\n" for h in HYP))
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)["systems"][0]["scores"][0]["score"]
    assert got == pytest.approx(sacrebleu.corpus_bleu(HYP, [REF]).score, abs=1e-4)


def test_several_systems_are_each_scored_under_their_labels(files, tmp_path):
    other = write(tmp_path / "other.fr", REF2)
    out = run_json(["--hyp", files["hyp"], "--hyp", other, "--label", "A", "--label", "B",
                    "--ref", files["ref"], "--metrics", "bleu"])
    assert [s["name"] for s in out["systems"]] == ["A", "B"]
    assert out["systems"][1]["scores"][0]["score"] == pytest.approx(
        sacrebleu.corpus_bleu(REF2, [REF]).score, abs=1e-4)


@pytest.mark.slow
def test_real_newstest_scores_equal_sacrebleu(shared_data, tmp_path):
    ref_path = shared_data / "wmt14-newstest" / "newstest2014-fren.fr"
    ref = ref_path.read_text(encoding="utf-8").splitlines()
    hyp = [" ".join(w for i, w in enumerate(line.split()) if i % 5 != 3) for line in ref]
    hyp_path = write(tmp_path / "hyp.fr", hyp)
    got = by_metric(run_json(["--hyp", hyp_path, "--ref", str(ref_path)])["systems"][0]["scores"])
    assert got["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(hyp, [ref]).score, abs=1e-4)
    assert got["chrf"]["score"] == pytest.approx(sacrebleu.corpus_chrf(hyp, [ref]).score, abs=1e-4)
    assert got["ter"]["score"] == pytest.approx(sacrebleu.corpus_ter(hyp, [ref]).score, abs=1e-4)


# ---------------------------------------------------------------------------------------------
# Bad input


def test_line_count_mismatch_names_both_files_and_counts(files, tmp_path, capsys):
    short = write(tmp_path / "short.fr", HYP[:-1])
    code, out, err = run_main(["--hyp", short, "--ref", files["ref"]], capsys)
    assert code != 0 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert short in err and files["ref"] in err and f"{len(HYP) - 1} lines" in err and f"has {len(REF)}" in err
    # the second reference, and a second hypothesis, are checked too
    code, _, err = run_main(["--hyp", files["hyp"], "--ref", files["ref"], "--ref", short], capsys)
    assert code != 0 and short in err
    code, _, err = run_main(["--hyp", files["hyp"], "--hyp", short, "--ref", files["ref"]], capsys)
    assert code != 0 and short in err


def test_source_line_count_mismatch_is_an_error(files, tmp_path, capsys):
    src = write(tmp_path / "src.en", ["one", "two"])
    code, _, err = run_main(["--hyp", files["hyp"], "--ref", files["ref"], "--src", src, "--by-length"], capsys)
    assert code != 0 and src in err and "2" in err


def test_invalid_utf8_gives_file_and_line(files, tmp_path, capsys):
    bad = tmp_path / "bad.fr"
    bad.write_bytes(("\n".join(HYP[:3]) + "\n").encode() + b"caf\xe9\n" + ("\n".join(HYP[4:]) + "\n").encode())
    code, out, err = run_main(["--hyp", str(bad), "--ref", files["ref"]], capsys)
    assert code != 0 and out == "" and "Traceback" not in err
    assert f"{bad}:4:" in err and "UTF-8" in err


def test_missing_file_is_a_clear_error(files, tmp_path, capsys):
    missing = str(tmp_path / "nope.fr")
    code, _, err = run_main(["--hyp", files["hyp"], "--ref", missing], capsys)
    assert code != 0 and f"{missing}: file not found" in err and "Traceback" not in err


@pytest.mark.parametrize("args, needle", [
    (["--no-unk"], "--src"),
    (["--by-length"], "--src"),
    (["--significance"], "two --hyp"),
    (["--label", "A", "--label", "B"], "--label"),
    (["--plot", "x.pdf", "--src", "SRC"], ".png"),
])
def test_inconsistent_options_are_config_errors(files, args, needle, capsys):
    args = [files["hyp"] if a == "SRC" else a for a in args]
    code, out, err = run_main(["--hyp", files["hyp"], "--ref", files["ref"], *args], capsys)
    assert code == ConfigError.exit_code and out == "" and needle in err


def test_unknown_metric_is_rejected(files):
    res = CliRunner().invoke(cli, ["score", "--hyp", files["hyp"], "--ref", files["ref"], "--metrics", "bleu,meteor"])
    assert res.exit_code != 0 and "meteor" in res.output


def test_a_u2028_inside_a_line_does_not_split_it_for_score(tmp_path):
    ref = write(tmp_path / "r.fr", ["a b\u2028c d", "e f"])
    hyp = write(tmp_path / "h.fr", ["a b\u2028c d", "e f"])
    assert run_json(["--hyp", hyp, "--ref", ref, "--metrics", "bleu"])["lines"] == 2


# ---------------------------------------------------------------------------------------------
# Paper-style BLEU (multi-bleu.perl on Moses tokens)


def multi_bleu_reference(hyps: list[str], refs: list[list[str]]) -> float:
    """An independent transcription of Moses' multi-bleu.perl (whitespace tokens, case-sensitive)."""
    correct, total = [0] * 5, [0] * 5
    hyp_len = ref_len = 0
    for i, hyp in enumerate(hyps):
        words = hyp.split()
        hyp_len += len(words)
        closest = None
        max_ref: Counter = Counter()
        for r in refs:
            rw = r[i].split()
            if closest is None or abs(len(words) - len(rw)) < abs(len(words) - closest) or (
                    abs(len(words) - len(rw)) == abs(len(words) - closest) and len(rw) < closest):
                closest = len(rw)
            grams = Counter(tuple(rw[k:k + n]) for n in range(1, 5) for k in range(len(rw) - n + 1))
            for g, c in grams.items():
                max_ref[g] = max(max_ref[g], c)
        ref_len += closest
        grams = Counter(tuple(words[k:k + n]) for n in range(1, 5) for k in range(len(words) - n + 1))
        for g, c in grams.items():
            total[len(g)] += c
            correct[len(g)] += min(c, max_ref.get(g, 0))
    if any(correct[n] == 0 for n in range(1, 5)):
        return 0.0
    bp = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(sum(math.log(correct[n] / total[n]) for n in range(1, 5)) / 4)


def test_paper_bleu_matches_hand_computed_ngram_precisions(tmp_path):
    hyps = ["the cat sat on the mat", "a b c d e"]
    refs = ["the cat is on the mat", "a b c d f g"]
    # sentence 1: 1-grams 5/6, 2-grams 3/5 (the cat, on the, the mat), 3-grams 1/4, 4-grams 0/3
    # sentence 2: 1-grams 4/5, 2-grams 3/4, 3-grams 2/3, 4-grams 1/2; c = 11, r = 12
    expected = 100 * math.exp(1 - 12 / 11) * (9 / 11 * 6 / 9 * 3 / 7 * 1 / 5) ** 0.25
    got = S.paper_bleu(hyps, [refs], "en")
    assert got.score == pytest.approx(expected, abs=1e-6)
    assert got.details["counts"] == [9, 6, 3, 1] and got.details["totals"] == [11, 9, 7, 5]
    assert (got.details["hyp_len"], got.details["ref_len"]) == (11, 12)
    out = run_json(["--hyp", write(tmp_path / "h.en", hyps), "--ref", write(tmp_path / "r.en", refs),
                    "--paper-bleu", "--metrics", "bleu"])
    scores = by_metric(out["systems"][0]["scores"])
    assert scores["paper_bleu"]["score"] == pytest.approx(expected, abs=1e-4)
    assert "multi-bleu" in scores["paper_bleu"]["label"] and "sacrebleu" in scores["bleu"]["label"]
    # a missing 4-gram match gives 0 (no smoothing, as multi-bleu), unlike sacrebleu's default
    assert S.paper_bleu(hyps[:1], [refs[:1]], "en").score == 0.0
    assert sacrebleu.corpus_bleu(hyps[:1], [refs[:1]]).score > 0


def test_paper_bleu_equals_independent_multibleu_on_moses_tokens_with_two_refs():
    hyps_tok = [" ".join(moses_tokenize(h, "fr")) for h in HYP]
    refs_tok = [[" ".join(moses_tokenize(r, "fr")) for r in refs] for refs in (REF, REF2)]
    assert "aujourd' hui" in refs_tok[0][1] or "aujourd'hui" in refs_tok[0][1]  # Moses, not 13a
    got = S.paper_bleu(HYP, [REF, REF2], "fr").score
    assert got == pytest.approx(multi_bleu_reference(hyps_tok, refs_tok), abs=1e-6)
    assert got != pytest.approx(sacrebleu.corpus_bleu(HYP, [REF, REF2]).score, abs=1e-3)


def test_paper_bleu_is_case_sensitive_and_tokenises_punctuation():
    # Moses splits the comma and the final "!", so the raw hypothesis matches a tokenised reference
    assert S.paper_bleu(["Hello, world! How are you?"], [["Hello , world ! How are you ?"]], "en").score == pytest.approx(100.0)
    assert S.paper_bleu(["hello , world ! how are you ?"], [["Hello , world ! How are you ?"]], "en").score < 100.0


# ---------------------------------------------------------------------------------------------
# No UNK subset

SRC_VOCAB = ["the", "cat", "sat", "on", "mat", "."]
TGT_VOCAB = ["le", "chat", "dort", "sur", "tapis", "."]
NU_SRC = ["the cat sat.", "the dog sat.", "the cat sat on the mat.", "The cat.", "the cat <unk>", "the mat."]
NU_REF = ["le chat dort.", "le chat dort.", "le chien dort sur le tapis.", "le chat.", "le chat", "le tapis."]
NU_HYP = ["le chat dort .", "le chat dort.", "le chat dort sur le tapis.", "chat.", "le chat", "le tapis dort."]
NU_KEPT = [0, 5]  # 1: "dog" OOV; 2: "chien" OOV in the reference; 3: "The" (case kept); 4: literal <unk>


def write_vocab(path: Path, tokens: list[str]) -> str:
    from nmtkit.text.vocab import SPECIALS

    path.write_text("".join(f"{t}\t1\n" for t in list(SPECIALS) + tokens), encoding="utf-8")
    return path.name


def test_no_unk_subset_keeps_only_fully_covered_sentences():
    kept = S.no_unk_indices(NU_SRC, [NU_REF], lambda s: moses_tokenize(s, "en"), lambda s: moses_tokenize(s, "fr"),
                            SRC_VOCAB, TGT_VOCAB)
    assert kept == NU_KEPT
    # a second reference with an OOV word drops its sentence too
    ref2 = list(NU_REF)
    ref2[5] = "le tapis rouge."
    kept2 = S.no_unk_indices(NU_SRC, [NU_REF, ref2], lambda s: moses_tokenize(s, "en"),
                             lambda s: moses_tokenize(s, "fr"), SRC_VOCAB, TGT_VOCAB)
    assert kept2 == [0]


@pytest.fixture
def no_unk_files(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    manifest = new_manifest("en", "fr", {"src": write_vocab(data / "vocab.en.txt", SRC_VOCAB),
                                         "tgt": write_vocab(data / "vocab.fr.txt", TGT_VOCAB)},
                            pipeline=TextPipeline("en", "fr").to_dict())
    (data / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return {"data": str(data), "src": write(tmp_path / "src.en", NU_SRC), "ref": write(tmp_path / "ref.fr", NU_REF),
            "hyp": write(tmp_path / "hyp.fr", NU_HYP)}


def test_no_unk_cli_with_data_dir_scores_the_subset_like_sacrebleu(no_unk_files):
    f = no_unk_files
    out = run_json(["--hyp", f["hyp"], "--ref", f["ref"], "--src", f["src"], "--no-unk", "--data", f["data"],
                    "--paper-bleu"])
    nu = out["no_unk"]
    assert (nu["kept"], nu["total"], nu["bpe"]) == (len(NU_KEPT), len(NU_SRC), False)
    scores = by_metric(nu["systems"][0]["scores"])
    sub_h, sub_r = [NU_HYP[i] for i in NU_KEPT], [NU_REF[i] for i in NU_KEPT]
    assert scores["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(sub_h, [sub_r]).score, abs=1e-4)
    assert scores["paper_bleu"]["score"] == pytest.approx(S.paper_bleu(sub_h, [sub_r], "fr").score, abs=1e-4)
    full = by_metric(out["systems"][0]["scores"])["bleu"]["score"]
    assert full != pytest.approx(scores["bleu"]["score"], abs=1e-3)


def test_no_unk_cli_with_checkpoint_reads_its_vocabularies(no_unk_files, tmp_path):
    from nmtkit.checkpoint import save_checkpoint
    from nmtkit.text.vocab import SPECIALS

    ckpt = tmp_path / "model.pt"
    save_checkpoint({"arch": "rnnsearch", "pipeline": TextPipeline("en", "fr").to_dict(), "src_lang": "en",
                     "tgt_lang": "fr", "src_vocab": list(SPECIALS) + SRC_VOCAB,
                     "tgt_vocab": list(SPECIALS) + TGT_VOCAB}, ckpt)
    f = no_unk_files
    res = CliRunner().invoke(cli, ["score", "--hyp", f["hyp"], "--ref", f["ref"], "--src", f["src"], "--no-unk",
                                   "-m", str(ckpt), "--metrics", "bleu"])
    assert res.exit_code == 0, res.output
    assert f"No UNK subset: {len(NU_KEPT)} of {len(NU_SRC)} sentences" in res.stdout
    sub = sacrebleu.corpus_bleu([NU_HYP[i] for i in NU_KEPT], [[NU_REF[i] for i in NU_KEPT]]).score
    assert f"No UNK BLEU (sacrebleu on detokenised text, tok 13a) = {sub:.2f}" in res.stdout


def test_no_unk_with_bpe_model_explains_the_subset(no_unk_files, tmp_path, capsys):
    codes = "#version: 0.2\nc a\nca t</w>\n"
    pipe = TextPipeline("en", "fr", bpe={"joint": True, "codes": {"src": codes, "tgt": codes}, "vocab": None,
                                         "vocab_threshold": None, "merges": 2, "separator": "@@"})
    data = Path(no_unk_files["data"])
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["pipeline"] = pipe.to_dict()
    (data / "manifest.json").write_text(json.dumps(manifest))
    write_vocab(data / "vocab.en.txt", ["cat", "ca@@", "t@@", "s", "a", "."])
    write_vocab(data / "vocab.fr.txt", ["cat", "."])
    src = write(tmp_path / "bsrc.en", ["cats.", "a cat.", "a dog."])   # ca@@ t@@ s . | a cat . | a d@@ o@@ g .
    ref = write(tmp_path / "bref.fr", ["cat.", "cat.", "cat."])  # cat .
    hyp = write(tmp_path / "bhyp.fr", ["cat.", "cat.", "dog."])
    code, out, err = run_main(["--hyp", hyp, "--ref", ref, "--src", src, "--no-unk", "--data", str(data),
                               "--metrics", "bleu", "--json"], capsys)
    assert code == 0, err
    nu = json.loads(out)["no_unk"]
    assert nu["bpe"] is True and nu["kept"] == 2 and "BPE" in nu["definition"]
    assert "BPE" in err and "<unk>" in err


def test_no_unk_needs_exactly_one_of_model_and_data(no_unk_files, capsys):
    f = no_unk_files
    code, _, err = run_main(["--hyp", f["hyp"], "--ref", f["ref"], "--src", f["src"], "--no-unk"], capsys)
    assert code == ConfigError.exit_code and "-m CHECKPOINT or --data DIR" in err
    code, _, err = run_main(["--hyp", f["hyp"], "--ref", f["ref"], "--src", f["src"], "--no-unk",
                             "--data", f["src"]], capsys)
    assert code == InputError.exit_code and "manifest.json" in err


# ---------------------------------------------------------------------------------------------
# BLEU by source length (Figure 2) and plots


def test_bucket_boundaries_follow_the_labels():
    labels = S.bucket_labels(10, 60)
    assert labels == ["0-10", "11-20", "21-30", "31-40", "41-50", "51-60", ">60"]
    assert [S.bucket_of(n, 10, 60) for n in (0, 1, 10, 11, 20, 21, 59, 60, 61, 200)] == [0, 0, 0, 1, 1, 2, 5, 5, 6, 6]
    assert S.bucket_labels(10, 55)[-2:] == ["51-55", ">55"] and S.bucket_of(55, 10, 55) == 5


BL_SRC = ["one", "one two three", "one two three four five six", "one two", "one two three four",
          "one, two", "a b c d e f g h"]  # Moses lengths 1, 3, 6, 2, 4, 3, 8


def test_by_length_buckets_and_bleu_equal_sacrebleu_on_each_subset(tmp_path):
    rows = S.bleu_by_length([("A", HYP[:7]), ("B", REF2[:7])], [REF[:7]],
                            [len(moses_tokenize(s, "en")) for s in BL_SRC], width=2, max_length=4)
    assert [r.label for r in rows] == ["0-2", "3-4", ">4"]
    assert [r.indices for r in rows] == [[0, 3], [1, 4, 5], [2, 6]]
    for r in rows:
        for name, hyps in (("A", HYP), ("B", REF2)):
            want = sacrebleu.corpus_bleu([hyps[i] for i in r.indices], [[REF[i] for i in r.indices]]).score
            assert r.bleu[name] == pytest.approx(want, abs=1e-9)


def test_by_length_cli_prints_an_aligned_table_and_json(tmp_path, files):
    src = write(tmp_path / "src.en", BL_SRC + ["x"])
    args = ["--hyp", files["hyp"], "--ref", files["ref"], "--src", src, "--by-length", "--bucket-width", "2",
            "--max-length", "4", "--metrics", "bleu"]
    res = CliRunner().invoke(cli, ["score", *args])
    assert res.exit_code == 0, res.output
    table = res.stdout[res.stdout.index("src length"):].strip().splitlines()
    assert table[0].split() == ["src", "length", "sentences", "BLEU", "hyp.fr"]
    assert [line.split()[:2] for line in table[1:]] == [["0-2", "3"], ["3-4", "3"], [">4", "2"]]
    assert len({len(line) for line in table}) == 1  # aligned columns
    rows = run_json(args)["by_length"]["rows"]
    want = sacrebleu.corpus_bleu([HYP[i] for i in (0, 3, 7)], [[REF[i] for i in (0, 3, 7)]]).score
    assert rows[0]["sentences"] == 3 and rows[0]["bleu"]["hyp.fr"] == pytest.approx(want, abs=1e-9)


def test_empty_bucket_is_listed_without_a_score():
    rows = S.bleu_by_length([("A", ["a b c d e"])], [["a b c d e"]], [25], width=10, max_length=60)
    assert [len(r.indices) for r in rows] == [0, 0, 1, 0, 0, 0, 0]
    assert rows[0].bleu["A"] is None and rows[2].bleu["A"] == pytest.approx(100.0)
    assert "-" in S.format_length_table(rows, ["A"]).splitlines()[1].split()


def test_plot_is_a_png_with_one_line_per_system(tmp_path, files):
    src = write(tmp_path / "src.en", BL_SRC + ["x"])
    other = write(tmp_path / "encdec.fr", REF2)
    png = tmp_path / "fig2.png"
    out = run_json(["--hyp", files["hyp"], "--hyp", other, "--label", "RNNsearch", "--label", "RNNencdec",
                    "--ref", files["ref"], "--src", src, "--plot", str(png), "--bucket-width", "2",
                    "--max-length", "4", "--metrics", "bleu", "--paper-bleu"])
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    assert out["by_length"]["plot"] == str(png)
    assert set(out["by_length"]["rows"][0]["bleu"]) == {"RNNsearch", "RNNencdec"}
    assert set(out["by_length"]["rows"][0]["paper_bleu"]) == {"RNNsearch", "RNNencdec"}
    assert not list(tmp_path.glob("*.tmp"))


# ---------------------------------------------------------------------------------------------
# Paired bootstrap resampling


def test_paired_bootstrap_gives_p_values_in_unit_interval_and_is_seeded():
    worse = [" ".join(h.split()[: max(1, len(h.split()) // 2)]) for h in HYP]
    systems = [("base", HYP * 4), ("worse", worse * 4)]
    sigs, rows = S.paired_bootstrap(systems, [REF * 4], ["bleu", "chrf"], n_samples=200, seed=7)
    assert {r.metric for r in rows} == {"BLEU", "chrF2"} and "bs:200" in sigs["BLEU"] and "seed:7" in sigs["BLEU"]
    base = [r for r in rows if r.system == "base"]
    other = [r for r in rows if r.system == "worse"]
    assert all(r.p_value is None for r in base)
    assert all(0.0 <= r.p_value <= 1.0 for r in other)
    assert all(r.p_value < 0.05 for r in other)  # halving every sentence is a real difference
    _, again = S.paired_bootstrap(systems, [REF * 4], ["bleu", "chrf"], n_samples=200, seed=7)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in rows]
    # one changed sentence out of 32 is not significant
    close = HYP * 4
    close = close[:-1] + ["Les enfants jouent dans un jardin depuis ce matin."]
    _, rows2 = S.paired_bootstrap([("base", HYP * 4), ("close", close)], [REF * 4], ["bleu"], 200, 7)
    assert rows2[1].p_value > 0.05


def test_significance_cli_prints_p_values_and_json(files, tmp_path):
    other = write(tmp_path / "other.fr", REF2)
    args = ["--hyp", files["hyp"], "--hyp", other, "--ref", files["ref"], "--significance",
            "--bootstrap-samples", "100", "--metrics", "bleu"]
    res = CliRunner().invoke(cli, ["score", *args])
    assert res.exit_code == 0, res.output
    assert "Paired bootstrap resampling: 100 samples, seed 12345" in res.stdout and "(baseline)" in res.stdout
    sig = run_json(args)["significance"]
    assert sig["baseline"] == "hyp.fr" and len(sig["rows"]) == 2
    assert 0.0 <= sig["rows"][1]["p_value"] <= 1.0


# ---------------------------------------------------------------------------------------------
# Start-up cost


def test_score_does_not_import_torch(files, tmp_path):
    src = write(tmp_path / "src.en", BL_SRC + ["x"])
    code = (
        "import sys\n"
        "from nmtkit.cli import cli\n"
        f"args = ['score', '--hyp', {files['hyp']!r}, '--hyp', {files['ref2']!r}, '--ref', {files['ref']!r},\n"
        f"        '--src', {src!r}, '--paper-bleu', '--by-length', '--plot', {str(tmp_path / 'p.png')!r},\n"
        "        '--significance', '--bootstrap-samples', '20', '--json']\n"
        "try:\n    cli.main(args, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch imported by nmtkit score'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["systems"][0]["name"] == "hyp.fr"


# ---------------------------------------------------------------------------------------------
# Integration with a real `nmtkit preprocess` data directory, and more bad input


def test_no_unk_with_a_data_dir_written_by_nmtkit_preprocess(tmp_path):
    train_en = ["the cat sat.", "the mat is red.", "a dog sat on the mat."]
    train_fr = ["le chat dort.", "le tapis est rouge.", "un chien dort sur le tapis."]
    for prefix in ("train", "valid"):
        write(tmp_path / f"{prefix}.en", train_en)
        write(tmp_path / f"{prefix}.fr", train_fr)
    res = CliRunner().invoke(cli, ["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train",
                                   str(tmp_path / "train"), "--valid", str(tmp_path / "valid"),
                                   "--dest", str(tmp_path / "data"), "--workers", "1", "-q"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    src = write(tmp_path / "test.en", ["the dog is red.", "the bird sat.", "a cat sat on the mat.", "The cat sat."])
    ref = write(tmp_path / "test.fr", ["le chien est rouge.", "l'oiseau dort.", "un chat dort sur un tapis.",
                                       "le chat dort."])
    hyp = write(tmp_path / "hyp.fr", ["le chien est rouge.", "le oiseau dort.", "un chat dort sur le tapis.",
                                      "le chat dort."])
    # 0: "chien" and "dog" are both known; 1: bird/l'oiseau unknown; 2: fine; 3: "The" unseen (case kept)
    out = run_json(["--hyp", hyp, "--ref", ref, "--src", src, "--no-unk", "--data", str(tmp_path / "data"),
                    "--metrics", "bleu"])
    assert (out["no_unk"]["kept"], out["no_unk"]["bpe"]) == (2, False)
    kept_h = ["le chien est rouge.", "un chat dort sur le tapis."]
    kept_r = ["le chien est rouge.", "un chat dort sur un tapis."]
    assert out["no_unk"]["systems"][0]["scores"][0]["score"] == pytest.approx(
        sacrebleu.corpus_bleu(kept_h, [kept_r]).score, abs=1e-4)


def test_unreadable_checkpoint_and_empty_input_are_clear_errors(files, tmp_path, capsys):
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"not a checkpoint")
    code, out, err = run_main(["--hyp", files["hyp"], "--ref", files["ref"], "--src", files["ref"], "--no-unk",
                               "-m", str(bad)], capsys)
    assert code != 0 and out == "" and str(bad) in err and "checkpoint" in err and "Traceback" not in err
    empty = write(tmp_path / "empty.fr", [])
    code, out, err = run_main(["--hyp", empty, "--ref", empty], capsys)
    assert code != 0 and "empty" in err and out == ""


def test_the_same_file_twice_needs_labels(files, capsys):
    code, _, err = run_main(["--hyp", files["hyp"], "--hyp", files["hyp"], "--ref", files["ref"]], capsys)
    assert code == ConfigError.exit_code and "--label" in err
    out = run_json(["--hyp", files["hyp"], "--hyp", files["hyp"], "--label", "x", "--label", "y",
                    "--ref", files["ref"], "--metrics", "bleu"])
    assert [s["name"] for s in out["systems"]] == ["x", "y"]


# Expected figures below come from the Moses scripts themselves (moses-smt/mosesdecoder master:
# scripts/tokenizer/tokenizer.perl and scripts/generic/multi-bleu.perl, perl 5), run as
#   perl tokenizer.perl -l fr -no-escape -q < FILE > FILE.tok
#   perl multi-bleu.perl REF.tok < HYP.tok
# The raw lines are Tatoeba dev.fr lines 85, 122, 550, 1318 and 1350 (shared/data/tatoeba-eng-fra).
MOSES_FR = [
    ("Mon groupe se produira cette semaine à la brasserie «Chez Ginette». Venez nous voir nombreux.",
     "Mon groupe se produira cette semaine à la brasserie « Chez Ginette » . Venez nous voir nombreux ."),
    ("Mon ami s’est souvenu où aller.", "Mon ami s ’ est souvenu où aller ."),  # no punctuation normalisation
    ("Je travaille chez McDonald's.", "Je travaille chez McDonald' s ."),  # a line's last word: "s." split
    ("La fabrication du fromage est un art.", "La fabrication du fromage est un art ."),  # "art." is a prefix
    ("« As-tu mangé ? » « Oui. »", "« As-tu mangé ? » « Oui . »"),
]


def test_paper_bleu_tokenises_exactly_as_tokenizer_perl():
    got = S.moses_tokenize_lines([raw for raw, _ in MOSES_FR], "fr")
    assert got == [tok for _, tok in MOSES_FR]


def test_paper_bleu_equals_the_moses_scripts_on_tatoeba_dev(shared_data, tmp_path):
    ref = shared_data / "tatoeba-eng-fra" / "dev.fr"
    lines = ref.read_text(encoding="utf-8").split("\n")[:-1]
    # a fixed, degraded "system": every 4th line is the next line, every 3rd word dropped
    hyp = []
    for i, line in enumerate(lines):
        words = (lines[(i + 1) % len(lines)] if i % 4 == 0 else line).split(" ")
        hyp.append(" ".join(w for k, w in enumerate(words) if k % 3 != 2))
    (tmp_path / "hyp.fr").write_text("\n".join(hyp) + "\n", encoding="utf-8")
    # multi-bleu.perl: BLEU = 12.09, 82.6/53.5/14.9/1.7 (BP=0.665, ratio=0.710, hyp_len=11429, ref_len=16089)
    out = run_json(["--hyp", str(tmp_path / "hyp.fr"), "--ref", str(ref), "--paper-bleu", "--metrics", "bleu",
                    "-j", "1"])
    paper = by_metric(out["systems"][0]["scores"])["paper_bleu"]
    assert (paper["hyp_len"], paper["ref_len"]) == (11429, 16089)
    assert round(paper["score"], 2) == 12.09
    assert [round(p, 1) for p in paper["precisions"]] == [82.6, 53.5, 14.9, 1.7]


@pytest.mark.parametrize("damage", [
    lambda d: (d / "manifest.json").write_text("{not json"),
    lambda d: (d / "manifest.json").write_text('{"src_lang": "en", "vocab": {}}'),
    lambda d: (d / "manifest.json").unlink(),
    lambda d: (d / "vocab.fr.txt").unlink(),
], ids=["invalid-json", "lacks-tgt-lang", "no-manifest", "no-vocab-file"])
def test_score_and_train_read_a_data_dir_through_one_manifest_reader(tmp_path, damage):
    """score's --data and train's DataDir.open accept and refuse the same data directories, alike."""
    from nmtkit.train.data import DataDir
    from tests.train_fixtures import make_data_dir

    data = make_data_dir(tmp_path / "data", n_train=8, n_valid=4)
    model, opened = S.model_text_from_data_dir(data), DataDir.open(data)
    assert model.src_vocab == opened.src_vocab.itos and model.tgt_vocab == opened.tgt_vocab.itos
    damage(data)
    with pytest.raises(InputError) as from_score:
        S.model_text_from_data_dir(data)
    with pytest.raises(InputError) as from_train:
        DataDir.open(data)
    assert str(from_score.value) == str(from_train.value)
