"""What translation hands out and what its attention tells: one `Result` per input line with its
n-best hypotheses as `Translation`s, UNK replacement (Luong et al. 2015; Jean et al. 2015), hard
(Pharaoh) and soft (JSON) alignments. Pure Python (no torch, no decoding, no writing).

Token positions refer to the model's tokens (BPE subwords when the model uses BPE), counted
from 0, EOS excluded. The attention is a hypothesis's (`nmtkit.decode.steps.Hypothesis`), its
source EOS's weights apart (`source_eos`), so nothing here cuts columns."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from nmtkit.errors import InputError
from nmtkit.text.bpe import SEPARATOR, join_bpe
from nmtkit.text.io import read_lines
from nmtkit.text.vocab import UNK


def subword_words(tokens: Sequence[str]) -> tuple[list[int], list[str]]:
    """Map subword positions to words: (word index of each token, the words, `join_bpe`'s).
    "lo@@ wer is" -> ([0, 0, 1], ["lower", "is"])."""
    index, n = [], 0
    for tok in tokens:
        index.append(n)
        if not tok.endswith(SEPARATOR):
            n += 1
    return index, join_bpe(list(tokens))


def replace_unks(tgt_tokens: Sequence[str], src_tokens: Sequence[str], attention: Any,
                 unk_dict: dict[str, str] | None = None) -> list[str]:
    """Replace each <unk> target token by the source word it attends to most (with BPE, the whole
    word of the best subword), through `unk_dict` where it has an entry. attention: (T,
    len(src_tokens)), an extra EOS row ignored."""
    out = list(tgt_tokens)
    if UNK not in out or not src_tokens:
        return out
    word_of, words = subword_words(src_tokens)
    for i, j in hard_pairs(attention, len(out)):
        if out[j] == UNK:
            word = words[word_of[i]]
            out[j] = unk_dict.get(word, word) if unk_dict else word
    return out


def hard_pairs(attention: Any, n_tgt: int) -> list[tuple[int, int]]:
    """[(source i, target j)], from 0: each target token's most attended source token, in
    target order. attention: (>= n_tgt, source tokens)."""
    rows = ([float(x) for x in attention[j]] for j in range(n_tgt))
    return [(row.index(max(row)), j) for j, row in enumerate(rows) if row]


def hard_alignment(attention: Any, n_tgt: int) -> str:
    """`hard_pairs` in Pharaoh format: "i-j ..."."""
    return " ".join(f"{i}-{j}" for i, j in hard_pairs(attention, n_tgt))


def attention_matrix(attention: Any, src_tokens: Sequence[str], tgt_tokens: Sequence[str],
                     source_eos: Any = None) -> tuple[list[str], list[str], list[list[float]]]:
    """A hypothesis's whole attention matrix: (column labels, row labels, rows of floats); the
    columns: the source tokens, then "</s>" when `source_eos` (one weight per row) is given."""
    rows = [[float(x) for x in r] for r in attention]
    if source_eos is not None:
        for r, w in zip(rows, source_eos):
            r.append(float(w))
    return list(src_tokens) + (["</s>"] if source_eos is not None else []), list(tgt_tokens) + ["</s>"], rows


def attention_table(attention: Any, src_tokens: Sequence[str], tgt_tokens: Sequence[str],
                    source_eos: Any = None) -> dict[str, list]:
    """{"src": [...], "tgt": [...], "attention": [[...], ...]}: `attention_matrix` as the soft
    alignment of one hypothesis, weights rounded to 4 decimals."""
    if attention is None or not len(attention):
        return {"src": list(src_tokens), "tgt": list(tgt_tokens), "attention": []}
    src, tgt, rows = attention_matrix(attention, src_tokens, tgt_tokens, source_eos)
    return {"src": src, "tgt": tgt, "attention": [[round(x, 4) for x in r] for r in rows]}


def soft_alignment(attention: Any, src_tokens: Sequence[str], tgt_tokens: Sequence[str],
                   source_eos: Any = None) -> str:
    """`attention_table` as one JSON line (--alignments soft)."""
    return json.dumps(attention_table(attention, src_tokens, tgt_tokens, source_eos), ensure_ascii=False)


def read_unk_dict(path: str) -> dict[str, str]:
    """`src<TAB>tgt` lines (first entry wins; src one word), read as every text input is."""
    table: dict[str, str] = {}
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise InputError("expected 'source<TAB>target'", path, lineno)
        if parts[0].split() != [parts[0]]:  # a word as the model reads it: never matched
            raise InputError(f"the source {parts[0]!r} is not one word, so it would never match (a key is one "
                             "source word, as the model reads it)", path, lineno)
        table.setdefault(parts[0], parts[1])
    return table


@dataclass(frozen=True)
class Translation:
    """One translation of a line (immutable). text: the output string; tokens: the model's target
    tokens (after UNK replacement); score: log_prob / (len(tokens)+1)^lenpen; log_prob: the model's
    log-probability, EOS included (normalised over the shortlist, if any); attention and
    source_eos_attention: as `Hypothesis`'s (each attention row and it sum to 1), None unless
    asked for."""

    text: str
    tokens: tuple[str, ...]
    score: float
    log_prob: float
    src_tokens: tuple[str, ...]
    attention: Any = field(default=None, repr=False, compare=False)
    source_eos_attention: Any = field(default=None, repr=False, compare=False)

    def alignment(self) -> list[tuple[int, int]]:
        """[(source i, target j)]: each target token's most attended source token, as
        `--alignments hard` writes it (needs `generate(..., alignments=True)`)."""
        if self.attention is None:
            raise ValueError("no attention kept: ask for it with generate(..., alignments=True)")
        return hard_pairs(self.attention, len(self.tokens))


@dataclass(frozen=True)
class Result:
    """One input line's translations (immutable): its number (from 1), the model's source tokens,
    its translations, best first (none for an empty line), and whether --max-src-len cut it."""

    index: int
    src_tokens: tuple[str, ...]
    nbest: tuple[Translation, ...] = ()
    truncated: bool = False

    @property
    def text(self) -> str:
        """The best translation ("" for an empty line)."""
        return self.nbest[0].text if self.nbest else ""

    @property
    def score(self) -> float:
        """The best translation's score (0.0 for an empty line)."""
        return self.nbest[0].score if self.nbest else 0.0
