"""Cleaning of a parallel training corpus, after Moses' `clean-corpus-n.perl`.

A pair is dropped, for the first reason that applies, in this order:
- "duplicate": the same (source, target) raw pair was already seen (only with dedup on);
- "empty": a side has no tokens;
- "too_long": a side has more than `max_len` tokens;
- "ratio": one side is more than `max_ratio` times longer than the other (in tokens).
Lengths are counted in Moses tokens, i.e. after tokenisation and before BPE, exactly as
clean-corpus-n counts words in its (tokenised) input.
"""
from __future__ import annotations

import hashlib

DROP_REASONS = ("duplicate", "empty", "too_long", "ratio")


def drop_reason(src_len: int, tgt_len: int, max_len: int, max_ratio: float) -> str | None:
    """Why clean-corpus-n would drop a pair with these token counts, or None to keep it."""
    if src_len == 0 or tgt_len == 0:
        return "empty"
    if src_len > max_len or tgt_len > max_len:
        return "too_long"
    if src_len / tgt_len > max_ratio or tgt_len / src_len > max_ratio:
        return "ratio"
    return None


class PairDeduper:
    """Remembers 64-bit hashes of the pairs seen so far (about 70 bytes per distinct pair).

    This is the one part of preprocessing whose memory grows with the corpus; it is off
    unless asked for.
    """

    def __init__(self) -> None:
        self._seen: set[int] = set()

    def seen_before(self, src: str, tgt: str) -> bool:
        """True when this exact pair (surrounding whitespace ignored) was seen already."""
        key = int.from_bytes(
            hashlib.blake2b(f"{src.strip()}\x00{tgt.strip()}".encode("utf-8"), digest_size=8).digest(), "little"
        )
        if key in self._seen:
            return True
        self._seen.add(key)
        return False
