"""select-data's checks for inputs that leave its ranking meaningless. Each returns one-line
warnings naming the files (the caller logs them and lists them in the summary).

- `lm_warnings`: an in-domain side too small for the n-gram order, or with no word left in the
  LM vocabulary after `--min-count`.
- `same_text_warnings`: the in-domain text and the pool are the same text on a side; refused
  (InputError) when that leaves every score of the method without meaning.
- `flat_score_warnings`: every pool pair scored the same, whatever the cause (the same text
  in another line order, a pool of one repeated pair, a uniform in-domain LM).
- `tokinfo_warnings`: with --input-format tok, text tokenised with other settings than this
  command's is refused (ConfigError), as preprocess refuses it; text without a record is a warning.
- `check_selectable`: a pool without a pair that has text on both sides is refused.

Only the sides a method's score uses are checked: both for bilingual, the source side for
monolingual and in-domain. numpy only.
"""
from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from nmtkit.errors import InputError
from nmtkit.select.config import SelectConfig
from nmtkit.select.corpus import Corpus
from nmtkit.select.lmvocab import LM_SPECIALS, LMVocab
from nmtkit.select.ngram import NgramLM
from nmtkit.select.scoring import Scorer
from nmtkit.text.io import read_blocks
from nmtkit.text.pipeline import TextPipeline
from nmtkit.text.tokenize import TOKINFO_SUFFIX, check_tokinfo


def scored_sides(method: str) -> tuple[str, ...]:
    """The sides ("src", "tgt") whose cross-entropies `method`'s score uses."""
    return ("src", "tgt") if method == "bilingual" else ("src",)


def too_small(name: str, tokens: int, lm: NgramLM) -> str | None:
    """A warning when the in-domain text `name` (`tokens` tokens, `lm` estimated on it) is too
    small for the order of `lm`: fewer tokens than the order, or no n-gram of the order seen twice.

    Why that threshold: Kneser-Ney learns an order from its n-grams seen more than once. When
    none is (count-of-counts n2 = n3 = n4 = 0), the discount estimate is D1 = 1 - 2Y n2/n1 = 1, so
    every n-gram of the order keeps no probability of its own and its context backs off with
    weight 1: the order adds nothing. On a text of a handful of tokens the continuation counts
    below are all 1 too and the model is the uniform distribution over its vocabulary, which
    gives every sentence the same per-token cross-entropy. Fewer tokens than the order is
    flagged even when a short sentence repeats (`a` twice at order 3), as no sentence is then
    long enough to show a word in context.
    """
    order = lm.order
    top = lm.orders[-1].counts if lm.orders else lm.uni_counts  # raw counts at the highest order
    if tokens >= order and top.size and int(top.max()) >= 2:
        return None
    why = f"fewer than --order {order}" if tokens < order else f"no {order}-gram in it occurs twice"
    return (f"the in-domain text {name} has only {tokens} tokens, {why}: too little for an order-{order} "
            f"language model, so the ranking is unreliable (use more in-domain text or a lower --order)")


def no_vocabulary(name: str, vocab: LMVocab, min_count: int) -> str | None:
    """A warning when no word of the in-domain text `name` made it into the LM vocabulary: every
    token is then `<unk>` and both LMs see nothing but sentence lengths."""
    if len(vocab) > len(LM_SPECIALS):
        return None
    return (f"no word of the in-domain text {name} occurs at least --min-count {min_count} times: every token "
            f"is <unk> to the language models, which then rank pairs by their length alone")


def lm_warnings(cfg: SelectConfig, ind: Corpus, sizes: dict[str, int], scorer: Scorer) -> list[str]:
    """The in-domain warnings of the sides `cfg.method` scores. `sizes`: the in-domain text's
    token counts ("src_tokens", "tgt_tokens"); `scorer`: its LMs and vocabularies."""
    out = []
    for side in scored_sides(cfg.method):
        name = ind.name(side)
        vocab, lm = (scorer.src_vocab, scorer.in_src) if side == "src" else (scorer.tgt_vocab, scorer.in_tgt)
        msg = no_vocabulary(name, vocab, cfg.min_count) or too_small(name, sizes[f"{side}_tokens"], lm)
        if msg:
            out.append(msg)
    return out


def _digest(paths: Sequence[str]) -> str:
    """sha256 of the (gunzipped) text of `paths` read in order, each ended by a newline."""
    h = hashlib.sha256()
    for path in paths:
        last = b"\n"
        for block in read_blocks(path):
            h.update(block)
            last = block[-1:]
        if last != b"\n":
            h.update(b"\n")
    return h.hexdigest()


def same_text(ind: Corpus, pool: Corpus, side: str) -> bool:
    """Whether the in-domain text and the pool are the same text on `side` ("src" or "tgt"): as
    many lines and bytes, then the same sha256. The files are read again only when the sizes
    agree, which different texts practically never do."""
    nbytes = [(c.src_bytes if side == "src" else c.tgt_bytes) for c in (ind, pool)]
    return ind.total == pool.total and nbytes[0] == nbytes[1] and _digest(ind.paths(side)) == _digest(pool.paths(side))


def same_text_warnings(ind: Corpus, pool: Corpus, method: str) -> list[str]:
    """Refuse (InputError) an in-domain text that is the pool itself on every side `method`
    compares with H_out; warn when it is on one of bilingual's two sides.

    H_out's LM is estimated on a pool sample with as many source tokens as the in-domain text:
    when the source sides are the same text, that is the whole pool, i.e. the in-domain text,
    H_in and H_out are one model on each such side and every difference is 0, so the "ranking"
    is the pool's order. A target side alone may get a random part of the pool, which is still
    the in-domain text compared with part of itself. in-domain scores H_in alone: no check.
    """
    if method == "in-domain":
        return []
    sides = scored_sides(method)
    same = [s for s in sides if same_text(ind, pool, s)]
    if not same:
        return []
    pairs = ", ".join(f"{ind.name(s)} = {pool.name(s)}" for s in same)
    if len(same) == len(sides):
        raise InputError(f"the in-domain text and the pool are the same text ({pairs}): H_out would be "
                         f"estimated on the in-domain text itself, every cross-entropy difference would be 0 and "
                         f"the selection the pool's first pairs; give another --pool, or --method in-domain")
    return [f"the in-domain text and the pool are the same text on one side ({pairs}): that side's H_out is "
            f"estimated on the in-domain text itself (or a random part of it), so its cross-entropy difference "
            f"ranks nothing and the bilingual score is in effect the other side's alone"]


def flat_score_warnings(scores: np.ndarray, pool: Corpus, method: str) -> list[str]:
    """A warning when every pool pair that can be selected (finite score) has the same score:
    ties go by line number, so the selection is then just the pool's first pairs."""
    ranked = scores[np.isfinite(scores)]
    if ranked.size < 2 or ranked.min() != ranked.max():
        return []
    names = ", ".join(pool.name(s) for s in scored_sides(method))
    return [f"every pair of the pool ({names}) has the same score, {ranked[0]:.6f}: nothing ranks one above "
            f"another and the selection is just the pool's first pairs"]


def tokinfo_warnings(cfg: SelectConfig, corpora: Sequence[Corpus], pipeline: TextPipeline) -> list[str]:
    """--input-format tok: each scored side's files checked against the `.tokinfo.json` that
    `nmtkit tokenize` wrote beside them (ConfigError naming the file and the flags that differ);
    a warning for each file without one. Lowercasing is not compared: --lowercase only
    lowercases the LMs' tokens, whatever case the text has."""
    if cfg.input_format != "tok":
        return []
    langs = {"src": cfg.src_lang, "tgt": cfg.tgt_lang}
    return [f"{path}: no {TOKINFO_SUFFIX} beside it, so its tokeniser settings cannot be checked; they must be "
            "this command's" for corpus in corpora for side in scored_sides(cfg.method) for path in corpus.paths(side)
            if not check_tokinfo(path, langs[side], pipeline.with_(lowercase=True), protect=False,
                                 why="so that the in-domain text and the pool are tokenised alike")]


def check_selectable(empty: np.ndarray, pool: Corpus) -> None:
    """`empty` (n_pool,): the pairs with an empty side, which are never selected. InputError
    when that is every pair: the outputs would be empty files and a score of inf a line."""
    if empty.all():
        raise InputError(f"none of the pool's {len(empty)} pairs has text on both sides: nothing to select",
                         pool.src_paths[0])
