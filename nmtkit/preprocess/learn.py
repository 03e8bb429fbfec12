"""The learning phase of `nmtkit preprocess`, from the word counts of pass 1 (no pass over the
data): truecaser, BPE codes (joint or per side), vocabularies; casing and BPE act word by word,
so the counts of the final tokens follow from the word counts."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from nmtkit.errors import ConfigError
from nmtkit.preprocess.config import PreprocessConfig
from nmtkit.text.bpe import SEPARATOR, count_merges, learn_codes, subword_vocab
from nmtkit.text.pipeline import TextPipeline
from nmtkit.text.truecase import best_forms
from nmtkit.text.vocab import SPECIALS, UNK_ID, Vocab

SIDES = ("src", "tgt")


def _cased_counts(p: TextPipeline, counts: Counter, side: str) -> Counter:
    """Word counts after lowercasing/truecasing (both act word by word)."""
    if not p.lowercase and p.truecase is None:
        return counts
    out: Counter = Counter()
    for w, c in counts.items():
        out[p.case([w], side)[0]] += c
    return out


def _token_counts(p: TextPipeline, word_counts: Counter, side: str) -> Counter:
    """Counts of the final (BPE) tokens of a side, from its word counts (BPE acts per word)."""
    if p.bpe is None:
        return word_counts
    out: Counter = Counter()
    for w, c in word_counts.items():
        for piece in p.apply_bpe([w], side):
            out[piece] += c
    return out


def word_ids(p: TextPipeline, word_counts: dict[str, Counter], vocabs: dict[str, Vocab]) -> dict[str, dict]:
    """{side: {training word: its ids after casing, BPE and the vocabulary}}, so that encoding
    is one lookup per word; the words were already segmented once for the vocabulary (the
    pipeline's BPE cache), and forked workers inherit this map without copying it."""
    out: dict[str, dict] = {}
    for side in ("src", "tgt"):
        stoi = vocabs[side].stoi
        out[side] = {w: tuple(stoi.get(t, UNK_ID) for t in p.apply_bpe(p.case([w], side), side))
                     for w in word_counts[side]}
    return out


def _learn_bpe(config: PreprocessConfig, cased: dict[str, Counter], out: Path,
               langs: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pipeline's BPE setting, the manifest's "bpe" record); writes the codes file(s)."""
    if config.bpe_separate:
        codes = {side: learn_codes(cased[side], config.bpe, config.bpe_min_frequency) for side in SIDES}
    else:
        joint = learn_codes(cased["src"] + cased["tgt"], config.bpe, config.bpe_min_frequency)
        codes = {"src": joint, "tgt": joint}
    vocab_filter = None
    if config.bpe_vocab_threshold is not None:
        vocab_filter = {side: subword_vocab(codes[side], cased[side], config.bpe_vocab_threshold) for side in SIDES}
    setting = {"joint": not config.bpe_separate, "codes": codes, "vocab": vocab_filter,
               "vocab_threshold": config.bpe_vocab_threshold, "merges": config.bpe, "separator": SEPARATOR}
    info: dict[str, Any] = {}
    if config.bpe_separate:
        for side in SIDES:
            (out / f"bpe.codes.{langs[side]}").write_text(codes[side], encoding="utf-8")
        info["codes_files"] = {side: f"bpe.codes.{langs[side]}" for side in SIDES}
    else:
        (out / "bpe.codes").write_text(codes["src"], encoding="utf-8")
        info["codes_files"] = {"src": "bpe.codes", "tgt": "bpe.codes"}
    info["merges_learned"] = {side: count_merges(codes[side]) for side in SIDES}
    return setting, info


def learn(config: PreprocessConfig, base: TextPipeline, word_counts: dict[str, Counter],
          casing: dict[str, Any] | None, out: Path, report: Any) -> tuple[TextPipeline, dict[str, Vocab], dict]:
    """(the full pipeline, the vocabularies, the manifest's "bpe" record) learned from the
    training word counts (and casing evidence); writes the codes and vocabulary files to `out`."""
    langs = {"src": config.src_lang, "tgt": config.tgt_lang}
    pipeline = base
    if casing is not None:
        pipeline = pipeline.with_(truecase={side: best_forms(casing[side]) for side in SIDES})
    cased = {side: _cased_counts(pipeline, word_counts[side], side) for side in SIDES}
    bpe_info: dict[str, Any] = {}
    if config.bpe is not None:
        stage = "learn BPE"
        report(stage, 0, None)
        setting, bpe_info = _learn_bpe(config, cased, out, langs)
        pipeline = pipeline.with_(bpe=setting)
        report(stage, 1, 1)
    vocabs = {}
    for side in SIDES:
        counts = _token_counts(pipeline, cased[side], side)
        vocabs[side] = Vocab.build(counts, max_size=config.vocab_size(side), min_count=config.vocab_min_count)
        if len(vocabs[side]) == len(SPECIALS) and counts:  # every token would be <unk>: no data worth training on
            raise ConfigError(f"--vocab-min-count {config.vocab_min_count} is above the count of every "
                              f"{langs[side]} token (the most frequent is seen {max(counts.values()):,} times): "
                              "the vocabulary would hold no word")
        vocabs[side].save(out / f"vocab.{langs[side]}.txt")
    return pipeline, vocabs, bpe_info
