"""What `nmtkit serve` answers for each line: the items of its two translate routes (no aiohttp).

A line longer than the translator's --max-src-len is translated from its first max_src_len source
tokens only (`Translator.prepare`, whose warning goes to the server's stderr, and `Result.truncated`);
its item says so with `"truncated": true`, a field present only then, so that the client knows
the translation covers part of its text.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nmtkit.translate.results import Result


def translation_json(result: Result, alignments: bool, nbest: int) -> dict[str, Any]:
    """`POST /translate`'s item for one line: top text and score, its alignment when asked, the
    n-best list when asked, and "truncated": true when the line was."""
    from nmtkit.translate import attention_table, hard_alignment

    if not result.hyps:  # an empty line: an empty translation, as `nmtkit translate` writes
        item: dict[str, Any] = {"text": "", "score": 0.0, "alignment": None}
        if alignments:
            item["alignment"] = {"src": [], "tgt": [], "attention": [], "hard": ""}
        if nbest > 1:  # one entry, as `nmtkit translate --nbest` writes for it
            item["nbest"] = [{"text": "", "score": 0.0, "log_prob": 0.0}]
        return item
    top = result.hyps[0]
    item = {"text": result.texts[0], "score": top.score, "alignment": None}
    if alignments:
        table = attention_table(top.attention, result.src_tokens, result.tgt_tokens[0], top.source_eos_attention)
        table["hard"] = hard_alignment(top.attention, len(result.tgt_tokens[0]))
        item["alignment"] = table
    if nbest > 1:
        item["nbest"] = [{"text": text, "score": hyp.score, "log_prob": hyp.log_prob}
                         for text, hyp in zip(result.texts, result.hyps)]
    if result.truncated:
        item["truncated"] = True
    return item


def onmt_json(src: str, result: Result) -> dict[str, Any]:
    """`POST /translator/translate`'s item, OpenNMT-py's fields, and "truncated": true when the
    line was (a field OpenNMT-py's clients, which read the fields they know, pass over)."""
    item: dict[str, Any] = {"src": src, "tgt": result.text, "n_best": 1, "pred_score": result.score}
    if result.truncated:
        item["truncated"] = True
    return item
