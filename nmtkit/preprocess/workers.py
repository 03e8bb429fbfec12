"""The worker side of `nmtkit preprocess`: chunks of pairs tokenised and cleaned (pass 1 of the
train split) or encoded into ids (pass 2, valid, test) in `parallel_map` workers, whose state is
built once per process by `prepare_state` (read back with `text.parallel.worker_state`); and the
chunks the main process reads."""
from __future__ import annotations

import itertools
from collections import Counter
from typing import Any, Iterator

import numpy as np

from nmtkit.errors import InputError
from nmtkit.text.clean import PairDeduper, drop_reason
from nmtkit.text.io import decode_lines, read_lines
from nmtkit.text.parallel import worker_state
from nmtkit.text.pipeline import TextPipeline
from nmtkit.text.truecase import add_weights, new_casing, truecase_weights
from nmtkit.text.vocab import UNK_ID, token_ids


def prepare_state(state: dict[str, Any]) -> dict[str, Any]:
    """A worker's state from the plain settings `state`: the pipeline (BPE tables built lazily
    once per process), and with vocabularies their token -> id maps."""
    out = dict(state)
    out["pipeline"] = TextPipeline.from_dict(state["pipeline"])
    if state.get("vocab") is not None:
        out["stoi"] = {side: token_ids(itos) for side, itos in state["vocab"].items()}
        # word -> its ids after casing, BPE and vocabulary: built by the main process from the
        # training counts (a fork inherits it for free) and extended here with unseen words.
        out["word_ids"] = state.get("word_ids") or {"src": {}, "tgt": {}}
    return out


def word_ids(p: TextPipeline, stoi: dict[str, int], word: str, side: str) -> tuple[int, ...]:
    """A word's ids after casing, BPE and the vocabulary (each acts word by word)."""
    return tuple(stoi.get(t, UNK_ID) for t in p.apply_bpe(p.case([word], side), side))


def tokenize_clean_chunk(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Pass 1 of the train split: tokenise, clean, count words and casing evidence."""
    state = worker_state()
    p: TextPipeline = state["pipeline"]
    fmt = state["input_format"]
    max_len, max_ratio = state["max_len"], state["max_ratio"]
    want_casing = state["truecase"]
    out = {"src": [], "tgt": []}
    counts = {"src": Counter(), "tgt": Counter()}
    casing = {"src": new_casing(), "tgt": new_casing()} if want_casing else None
    drops: Counter = Counter()
    for s, t in pairs:
        st, tt = p.tokenize_from(s, "src", fmt), p.tokenize_from(t, "tgt", fmt)
        reason = drop_reason(len(st), len(tt), max_len, max_ratio)
        if reason is not None:
            drops[reason] += 1
            continue
        for side, toks in (("src", st), ("tgt", tt)):
            out[side].append(" ".join(toks))
            counts[side].update(toks)
            if casing is not None:
                add_weights(casing[side], truecase_weights(toks))
    return {"n_in": len(pairs), "kept": len(out["src"]), "src": "\n".join(out["src"]),
            "tgt": "\n".join(out["tgt"]), "drops": drops, "counts": counts,
            "casing": {k: dict(v) for k, v in casing.items()} if casing else None}


def encode_chunk(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Raw (or tokenised) pairs -> per side: the ids concatenated, each sentence's length in ids
    (`lens`) and in words (`word_lens`: tokens before BPE, the unit of --max-len), and the
    word and UNK totals.

    Casing, BPE and the vocabulary act word by word, so each distinct word is mapped to its
    ids once (`word_ids`, pre-filled from the training words) and then looked up.
    """
    state = worker_state()
    p: TextPipeline = state["pipeline"]
    fmt = state["input_format"]
    res: dict[str, Any] = {"n_in": len(pairs)}
    for k, side in enumerate(("src", "tgt")):
        stoi = state["stoi"][side]
        known: dict[str, tuple[int, ...]] = state["word_ids"][side]
        ids: list[int] = []
        lens = np.empty(len(pairs), dtype=np.int64)
        word_lens = np.empty(len(pairs), dtype=np.int32)
        for j, pair in enumerate(pairs):
            line = pair[k]
            toks = p.tokenize_from(line, side, fmt)
            word_lens[j] = len(toks)
            n0 = len(ids)
            for w in toks:
                wid = known.get(w)
                if wid is None:
                    wid = known[w] = word_ids(p, stoi, w, side)
                ids.extend(wid)
            lens[j] = len(ids) - n0
        arr = np.asarray(ids, dtype=np.int32)
        res[side] = {"ids": arr, "lens": lens, "word_lens": word_lens, "words": int(word_lens.sum()),
                     "unk": int(np.count_nonzero(arr == UNK_ID))}
    return res


def encode_ranges(task: tuple[str, str, list[tuple[int, int, int, int]]]) -> dict[str, Any]:
    """`encode_chunk` over consecutive byte ranges (src start, end, tgt start, end) of the
    tokenised training files that pass 1 wrote (valid UTF-8, one pair per line)."""
    src, tgt, ranges = task
    with open(src, "rb") as fs, open(tgt, "rb") as ft:
        fs.seek(ranges[0][0])
        ft.seek(ranges[0][2])
        s_lines = decode_lines(fs.read(ranges[-1][1] - ranges[0][0]), src, file_start=ranges[0][0] == 0)
        t_lines = decode_lines(ft.read(ranges[-1][3] - ranges[0][2]), tgt, file_start=ranges[0][2] == 0)
    if len(s_lines) != len(t_lines):  # pragma: no cover - pass 1 writes pairs
        raise AssertionError(f"tokenised training files out of step: {len(s_lines)} vs {len(t_lines)} lines")
    return encode_chunk(list(zip(s_lines, t_lines)))


def pair_chunks(src: str, tgt: str, size: int, read: list[int],
                 dedup: PairDeduper | None = None, drops: Counter | None = None) -> Iterator[list[tuple[str, str]]]:
    """Chunks of (src line, tgt line); `read[0]` counts lines read (for progress)."""
    chunk: list[tuple[str, str]] = []
    for lineno, (s, t) in enumerate(itertools.zip_longest(read_lines(src), read_lines(tgt)), 1):
        if s is None or t is None:  # the file changed since it was counted
            raise InputError(f"parallel files differ in length: {src} and {tgt} part at line {lineno}")
        read[0] = lineno
        if dedup is not None and dedup.seen_before(s, t):
            drops["duplicate"] += 1  # type: ignore[index]
            continue
        chunk.append((s, t))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
