"""Vocabularies: token <-> id maps, saved as `vocab.<lang>.txt`: one `token<TAB>count` a line, ids
are line numbers (0-based), the first four lines the special symbols below, in this order."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from nmtkit.errors import InputError
from nmtkit.io.checks import check_found
from nmtkit.text.io import read_lines

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIALS = (PAD, UNK, BOS, EOS)
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
CONTROLS = (PAD, BOS, EOS)  # tokens of structure: their text in the input is an unknown word


def tokens_problem(itos: Sequence[str]) -> tuple[str, int | None] | None:
    """What keeps a token list from being a vocabulary, and the index of the token at fault (or None)."""
    if tuple(itos[:4]) != SPECIALS:
        return f"does not start with the special symbols {', '.join(SPECIALS)}", None
    seen: dict[str, int] = {}
    for i, token in enumerate(itos):
        if token in seen:
            return f"{token!r} is listed twice (first on line {seen[token] + 1})", i
        seen[token] = i
    return None


@dataclass
class Vocab:
    """An ordered list of tokens; `itos[i]` is token i, `stoi` its inverse, the map text is encoded with."""

    itos: list[str]
    counts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if problem := tokens_problem(self.itos):
            raise ValueError(f"not a vocabulary: {problem[0]}")
        # without the control tokens, so that "<s>" in a corpus or an input line is an unknown word
        self.stoi = {tok: i for i, tok in enumerate(self.itos) if tok not in CONTROLS}

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    @classmethod
    def build(cls, counter: Counter, max_size: int | None = None, min_count: int = 1) -> "Vocab":
        """The most frequent tokens (ties broken alphabetically); `max_size` counts the specials too."""
        items = [(t, c) for t, c in counter.items() if c >= min_count and t not in SPECIALS]
        items.sort(key=lambda tc: (-tc[1], tc[0]))
        if max_size is not None:
            items = items[: max(0, max_size - len(SPECIALS))]
        return cls(list(SPECIALS) + [t for t, _ in items], [0] * len(SPECIALS) + [c for _, c in items])

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Token ids, unknown tokens and the text of control tokens mapped to UNK_ID (no BOS/EOS added)."""
        get = self.stoi.get
        return [get(t, UNK_ID) for t in tokens]

    def decode(self, ids: Iterable[int], strip_specials: bool = True) -> list[str]:
        """Tokens for ids, stopping at EOS; PAD/BOS dropped when `strip_specials`."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS_ID and strip_specials:
                break
            if strip_specials and i in (PAD_ID, BOS_ID):
                continue
            out.append(self.itos[i])
        return out

    def save(self, path: str | Path) -> None:
        counts = self.counts or [0] * len(self.itos)
        with open(path, "w", encoding="utf-8") as f:
            for tok, c in zip(self.itos, counts):
                f.write(f"{tok}\t{c}\n")

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        """The vocabulary file at `path`; an InputError naming the file (and line) for anything else."""
        itos, counts = [], []
        check_found(path, "vocabulary file not found")
        for lineno, line in enumerate(read_lines(path), 1):
            parts = line.split("\t")
            if len(parts) != 2 or not (parts[1].isascii() and parts[1].isdigit()):
                raise InputError("expected 'token<TAB>count'", str(path), lineno)
            itos.append(parts[0])
            counts.append(int(parts[1]))
        if problem := tokens_problem(itos):
            message, index = problem
            raise InputError(message if index is not None else f"{message}: not an nmtkit vocabulary, or a damaged one",
                             str(path), None if index is None else index + 1)
        return cls(itos, counts)

    def to_list(self) -> list[str]:
        """Plain list for checkpoints (weights_only-safe)."""
        return list(self.itos)
