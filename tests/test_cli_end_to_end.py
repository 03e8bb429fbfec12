"""The whole chain through the real command line, as a user's Makefile runs it (fairseq's
test_binaries style): select in-domain pairs from a mixed pool, preprocess them, train a tiny
model for a few updates, translate through a pipe and score. Fast (about 20 s on 2 cores), so it
runs in the default `make test`; the long runs on real corpora are the slow tests."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import sacrebleu

from tests.conftest import run_cli, tiny_train_args

EN = ["the cat sleeps", "a dog runs in the park", "my friend reads a book", "the children play outside",
      "she is writing a letter", "we eat bread and cheese", "it's raining today", "the old man walks slowly"]
FR = ["le chat dort", "un chien court dans le parc", "mon ami lit un livre", "les enfants jouent dehors",
      "elle écrit une lettre", "nous mangeons du pain et du fromage", "il pleut aujourd'hui",
      "le vieil homme marche lentement"]
# the pool's other domain: words the in-domain text never uses
OUT_EN = ["shares of the bank fell sharply", "investors sold bonds on monday", "quarterly profit rose by percent"]
OUT_FR = ["les actions de la banque ont chuté", "les investisseurs ont vendu des obligations lundi",
          "le bénéfice trimestriel a augmenté de pour cent"]
TRAIN_ARGS = [*tiny_train_args(), "--batch-size", "8", "--max-updates", "4", "--valid-every", "2",
              "--valid-bleu-samples", "3", "--quiet"]


def _pairs(n: int, offset: int, en=EN, fr=FR) -> list[tuple[str, str]]:
    """n made-up pairs, capitalised and numbered like real text."""
    return [(f"{en[(k + offset) % len(en)].capitalize()}, number {k + offset}!",
             f"{fr[(k + offset) % len(fr)].capitalize()}, numéro {k + offset} !") for k in range(n)]


def _write(prefix: Path, pairs: list[tuple[str, str]]) -> Path:
    for lang, col in (("en", 0), ("fr", 1)):
        prefix.with_suffix("." + lang).write_text("".join(p[col] + "\n" for p in pairs), encoding="utf-8")
    return prefix


def _nmtkit(*args: str, stdin: str = "") -> str:
    """`python -m nmtkit ARGS` (the real command line) -> its stdout; it must succeed."""
    code, out, err = run_cli(list(args), stdin, process=True, timeout=120)
    assert code == 0, f"nmtkit {args[0]} failed:\n{err}"
    return out


def test_select_preprocess_train_translate_through_a_pipe_and_score(tmp_path):
    t0 = time.perf_counter()
    in_domain = _write(tmp_path / "in", _pairs(16, 300))  # each sentence twice: some 4-grams repeat, as select-data wants
    pool_pairs = [p for k in range(64) for p in (_pairs(1, k)[0], _pairs(1, k, OUT_EN, OUT_FR)[0])]
    pool = _write(tmp_path / "pool", pool_pairs)
    valid, test = _write(tmp_path / "valid", _pairs(6, 100)), _write(tmp_path / "test", _pairs(5, 200))
    selected, data, run = tmp_path / "selected", tmp_path / "data", tmp_path / "run"

    _nmtkit("select-data", "--src-lang", "en", "--tgt-lang", "fr", "--in-domain", str(in_domain), "--pool",
            str(pool), "--output-prefix", str(selected), "--lines", "64", "--workers", "1", "--quiet")
    kept = selected.with_suffix(".en").read_text(encoding="utf-8").splitlines()
    assert len(kept) == 64 and kept == [en for en, _ in pool_pairs if en in set(kept)]  # pool order
    assert set(kept) == {en for en, _ in _pairs(64, 0)}  # exactly the in-domain half of the pool

    _nmtkit("preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(selected), "--valid", str(valid),
            "--test", str(test), "--dest", str(data), "--bpe", "60", "--bpe-min-frequency", "1", "--truecase",
            "--workers", "1", "--quiet")
    splits = json.loads((data / "manifest.json").read_text(encoding="utf-8"))["splits"]
    assert (splits["train"]["lines"], splits["test"]["lines"]) == (64, 5)

    _nmtkit("train", "--data", str(data), "--save-dir", str(run), *TRAIN_ARGS)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert max(r.get("update", 0) for r in records) == 4
    assert (run / "checkpoint_best.pt").is_file() and (run / "checkpoint_last.pt").is_file()

    # raw text in on stdin, raw text out on stdout, line for line (the checkpoint alone is enough)
    src = test.with_suffix(".en").read_text(encoding="utf-8")
    hyp = _nmtkit("translate", "-m", str(run / "checkpoint_best.pt"), "--beam", "3", "--max-len-b", "4",
                  "--batch-size", "2", stdin=src + "\n")
    assert hyp.count("\n") == 6 and hyp.endswith("\n\n")  # the empty line stays empty
    hyp_file = tmp_path / "test.hyp.fr"
    hyp_file.write_text(hyp[:-1], encoding="utf-8")

    # score's figures are sacrebleu's own on the same files: the model's output, and a system
    # with a known middling BLEU (the references with every third word dropped)
    refs = test.with_suffix(".fr").read_text(encoding="utf-8").splitlines()
    gappy = tmp_path / "gappy.fr"
    gappy.write_text("".join(" ".join(w for i, w in enumerate(r.split()) if i % 3 != 2) + "\n" for r in refs),
                     encoding="utf-8")
    report = json.loads(_nmtkit("score", "--hyp", str(hyp_file), "--hyp", str(gappy), "--ref",
                                str(test.with_suffix(".fr")), "--json"))
    for system, path in zip(report["systems"], (hyp_file, gappy), strict=True):
        lines = path.read_text(encoding="utf-8").splitlines()
        got = {s["metric"]: s["score"] for s in system["scores"]}
        assert got["bleu"] == pytest.approx(sacrebleu.corpus_bleu(lines, [refs]).score, abs=1e-4)
        assert got["chrf"] == pytest.approx(sacrebleu.corpus_chrf(lines, [refs]).score, abs=1e-4)
        assert got["ter"] == pytest.approx(sacrebleu.corpus_ter(lines, [refs]).score, abs=1e-4)
        assert 0.0 <= got["bleu"] <= 100.0
    assert 5.0 < {s["metric"]: s["score"] for s in report["systems"][1]["scores"]}["bleu"] < 80.0
    print(f"end to end: {time.perf_counter() - t0:.1f} s")
