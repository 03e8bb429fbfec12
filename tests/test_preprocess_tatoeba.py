"""Slow: `nmtkit preprocess` on the real Tatoeba En-Fr corpus with joint BPE (make test-slow)."""
from __future__ import annotations

import json
import random

import pytest

from nmtkit.data.binarized import ParallelData
from nmtkit.text.pipeline import TextPipeline
from nmtkit.text.vocab import Vocab
from tests.conftest import run_cli


@pytest.mark.slow
def test_tatoeba_train_split_preprocesses_with_bpe(shared_data, tmp_path):
    data = shared_data / "tatoeba-eng-fra"
    dest = tmp_path / "data"
    code, out, err = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(data / "train"),
                              "--valid", str(data / "dev"), "--test", str(data / "test"), "--bpe", "8000",
                              "--max-len", "50", "--dedup", "--dest", str(dest), "--workers", "2"],
                             process=True, timeout=3600)
    assert code == 0, err
    assert out == ""
    m = json.loads((dest / "manifest.json").read_text(encoding="utf-8"))

    # input checksums agree with the corpus' own SHA256SUMS
    sums = dict(reversed(line.split("  ./")) for line in (shared_data / "SHA256SUMS").read_text().splitlines()
                if line.strip())
    for split in ("train", "dev", "test"):
        for lang in ("en", "fr"):
            assert m["inputs"][str(data / f"{split}.{lang}")] == sums[f"tatoeba-eng-fra/{split}.{lang}"]

    train = m["splits"]["train"]
    assert train["lines_in"] == 160128
    assert train["lines"] == 160128 - sum(train["dropped"].values())
    assert train["lines"] > 159000  # short sentences: cleaning drops very few
    assert train["unk_rate"] == {"src": 0.0, "tgt": 0.0}
    for split in ("valid", "test"):
        s = m["splits"][split]
        assert s["lines"] == 2000 and s["dropped"] == {}
        assert s["unk_rate"]["src"] < 0.005 and s["unk_rate"]["tgt"] < 0.005
    assert 3000 < m["vocab"]["src_size"] < 12000 and 3000 < m["vocab"]["tgt_size"] < 12000

    # ids -> tokens equal the recorded pipeline applied to the raw lines; decode gives text back
    p = TextPipeline.from_dict(m["pipeline"])
    ve, vf = Vocab.load(dest / "vocab.en.txt"), Vocab.load(dest / "vocab.fr.txt")
    valid = ParallelData(dest, "valid", "en", "fr")
    raw_en = (data / "dev.en").read_text(encoding="utf-8").splitlines()
    raw_fr = (data / "dev.fr").read_text(encoding="utf-8").splitlines()
    same = 0
    for k in random.Random(0).sample(range(2000), 200):
        toks_en = ve.decode(valid.src[k])
        toks_fr = vf.decode(valid.tgt[k])
        if "<unk>" in toks_en or "<unk>" in toks_fr:
            continue
        assert toks_en == p.encode(raw_en[k], "src")
        assert toks_fr == p.encode(raw_fr[k], "tgt")
        same += p.decode(toks_fr, "tgt") == raw_fr[k]
    assert same > 150  # detokenised output equals the raw text up to punctuation normalisation
