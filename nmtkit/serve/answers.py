"""What `nmtkit serve` answers for each line: the items of its two translate routes (no aiohttp).

A line longer than the translator's --max-src-len is translated from its first max_src_len source
tokens only (`Translator.prepare`, whose warning goes to the server's stderr); its item says so
with `"truncated": true`, a field present only then, so that the client knows the translation
covers part of its text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nmtkit.translate.results import Result
    from nmtkit.translate.translator import Translator


@dataclass(frozen=True)
class Served:
    """One line's translation as the decoding thread hands it to the routes."""

    result: Result
    truncated: bool = False  # the line had more source tokens than --max-src-len


def mark_truncated(translator: Translator, lines: list[str], results: list[Result]) -> list[Served]:
    """`results` of `lines`, each with whether its line was truncated. Only a line cut to exactly
    max_src_len tokens can have been: it is tokenised again to tell (long lines are rare)."""
    cap = translator.max_src_len
    return [Served(r, len(r.src_tokens) == cap and len(_source_tokens(translator, line)) > cap)
            for line, r in zip(lines, results)]


def _source_tokens(translator: Translator, line: str) -> list[str]:
    return translator.pipeline.encode_from(line, "src", translator.config.input_format)


def translation_json(served: Served, alignments: bool, nbest: int) -> dict[str, Any]:
    """`POST /translate`'s item for one line: top text and score, its alignment when asked, the
    n-best list when asked, and "truncated": true when the line was."""
    from nmtkit.translate import attention_table, hard_alignment

    result = served.result
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
    if served.truncated:
        item["truncated"] = True
    return item


def onmt_json(src: str, served: Served) -> dict[str, Any]:
    """`POST /translator/translate`'s item, OpenNMT-py's fields, and "truncated": true when the
    line was (a field OpenNMT-py's clients, which read the fields they know, pass over)."""
    item: dict[str, Any] = {"src": src, "tgt": served.result.text, "n_best": 1, "pred_score": served.result.score}
    if served.truncated:
        item["truncated"] = True
    return item
