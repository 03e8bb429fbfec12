"""Cross-entropy-difference selection (Axelrod, He & Gao 2011; Moore & Lewis 2010): `run`.

Per pool pair (s, t): bilingual [H_in(s) - H_out(s)] + [H_in(t) - H_out(t)], monolingual
H_in(s) - H_out(s), in-domain H_in(s); H is the per-token cross-entropy in bits, `</s>` counted.
H_in's LM is estimated on the in-domain text, H_out's on a seeded random pool sample with about as
many source tokens; both LMs of a language share the in-domain words seen at least `min_count`
times. Pairs are ranked lowest first, ties by line number, and taken until the budget is met; the
selection is written in pool order, each line byte for byte as in the pool.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import time
from dataclasses import asdict, replace
from typing import Any, Sequence

import numpy as np

from nmtkit.errors import ConfigError, InputError, OutputExistsError
from nmtkit.io.checks import Output, check_outputs_vs_inputs
from nmtkit.io.files import StagedFiles, writes_in_place
from nmtkit.progress import Progress, no_progress
from nmtkit.select.config import SelectConfig
from nmtkit.select.ngram import LM_SPECIALS, LM_UNK_ID, LMVocab, NgramLM
from nmtkit.select.scoring import Corpus, IdPairs, Scorer, TextOpts, score_pool, tokenize_ids, write_scores
from nmtkit.text.io import decode_line, input_candidates, read_blocks, resolve_input, warn_both_exist
from nmtkit.text.pipeline import TextPipeline
from nmtkit.text.tokenize import TOKINFO_SUFFIX, check_tokinfo, read_tokinfo, tokenised_as_raw

log = logging.getLogger(__name__)


def method_scores(method: str, h: np.ndarray) -> np.ndarray:
    """(N,) selection score from (N, >=4) cross-entropies [in_src, out_src, in_tgt, out_tgt]."""
    h = h.astype(np.float64)
    if method == "bilingual":
        return (h[:, 0] - h[:, 1]) + (h[:, 2] - h[:, 3])
    if method == "monolingual":
        return h[:, 0] - h[:, 1]
    if method == "in-domain":
        return h[:, 0].copy()
    raise ConfigError(f"unknown method {method!r}")


def select_indices(scores: np.ndarray, src_tokens: np.ndarray, lines: int | None = None,
                   words: int | None = None, fraction: float | None = None) -> tuple[np.ndarray, bool]:
    """Rows to keep, in pool order, and whether the budget exceeded what the pool offers. A row
    scored +inf is never kept; `words` keeps the smallest prefix of the ranking that reaches it;
    `fraction` is of all the pool's rows."""
    order = np.argsort(scores, kind="stable")[: int(np.isfinite(scores).sum())]
    if lines is not None:
        k = lines
    elif words is not None:
        cum = np.cumsum(src_tokens[order].astype(np.int64))  # past the total, k = n + 1
        k = int(np.searchsorted(cum, words, side="left")) + (1 if words > 0 else 0)
    else:
        assert fraction is not None
        k = int(round(fraction * scores.size))
    return np.sort(order[:k]), k > order.size


# ---- checks of inputs that leave the ranking meaningless: each returns one-line warnings naming
# the files, or refuses the input; only the sides a method's score uses are checked


def scored_sides(method: str) -> tuple[str, ...]:
    """The sides ("src", "tgt") whose cross-entropies `method`'s score uses."""
    return ("src", "tgt") if method == "bilingual" else ("src",)


def lm_warnings(cfg: SelectConfig, ind: Corpus, sizes: dict[str, int], scorer: Scorer) -> list[str]:
    """The in-domain text's warning on `scorer.side` when `cfg.method` scores it: no word in the LM
    vocabulary; or fewer tokens than the order, or no n-gram of the order seen twice (then
    n2 = 0 and its discounts are the fallback ones). `sizes`: its `IdPairs.sizes()`."""
    side, lm = scorer.side, scorer.lm_in
    if side not in scored_sides(cfg.method):
        return []
    name, tokens, order = ind.name(side), sizes[f"{side}_tokens"], lm.order
    if len(scorer.vocab) == len(LM_SPECIALS):
        return [f"no word of the in-domain text {name} occurs at least --min-count {cfg.min_count} times: every "
                f"token is <unk> to the language models, which then rank pairs by their length alone"]
    top = lm.orders[-1].max_count if lm.orders else int(lm.uni_counts.max(initial=0))
    if tokens >= order and top >= 2:
        return []
    why = f"fewer than --order {order}" if tokens < order else f"no {order}-gram in it occurs twice"
    return [f"the in-domain text {name} has only {tokens} tokens, {why}: too little for an order-{order} "
            f"language model, so the ranking is unreliable (use more in-domain text or a lower --order)"]


def no_shared_word(cfg: SelectConfig, pool: Corpus, scorer: Scorer, known: int) -> list[str]:
    """A warning when `cfg.method` scores `scorer.side` and none of the pool's tokens on it is an
    in-domain word (`known` is); not when the vocabulary has none."""
    if known or scorer.side not in scored_sides(cfg.method) or len(scorer.vocab) == len(LM_SPECIALS):
        return []
    return [f"no token of the pool {pool.name(scorer.side)} is a word of the in-domain text: every one is <unk> "
            f"to the language models, which then rank pairs by their length alone"]


def small_pool_warnings(cfg: SelectConfig, pool: Corpus, ind: dict[str, int], sample: dict[str, int]) -> list[str]:
    """A warning when H_out's sample of the pool (`sample`, all of a small pool) has under half the
    in-domain text's source tokens (`ind`): Moore & Lewis sample as much; swapped --in-domain, --pool?"""
    if cfg.method == "in-domain" or 2 * sample["src_tokens"] >= ind["src_tokens"]:
        return []
    return [f"the pool {pool.name('src')} has only {sample['src_tokens']} source tokens for H_out, under half the "
            f"in-domain text's {ind['src_tokens']} (a pool is usually far larger): the cross-entropy differences "
            "compare two unequal language models; are --in-domain and --pool the wrong way round?"]


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
    """Whether the in-domain text and the pool are the same text on `side`: sizes, then sha256."""
    nbytes = [(c.src_bytes if side == "src" else c.tgt_bytes) for c in (ind, pool)]
    slack = len(ind.paths(side)) + len(pool.paths(side))
    return (ind.total == pool.total and abs(nbytes[0] - nbytes[1]) <= slack
            and _digest(ind.paths(side)) == _digest(pool.paths(side)))


def same_text_warnings(ind: Corpus, pool: Corpus, method: str) -> list[str]:
    """Refuse (InputError) an in-domain text that is the pool itself on every side `method`
    compares with H_out; warn when it is on one of bilingual's two sides. H_out's sample of a pool
    that is the in-domain text is that text (or a random part of it), so the difference ranks nothing."""
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
    """A warning when every pool pair that can be selected (finite score) has the same score."""
    ranked = scores[np.isfinite(scores)]
    if ranked.size < 2 or ranked.min() != ranked.max():
        return []
    names = ", ".join(pool.name(s) for s in scored_sides(method))
    return [f"every pair of the pool ({names}) has the same score, {ranked[0]:.6f}: nothing ranks one above "
            f"another and the selection is just the pool's first pairs"]


def tokinfo_warnings(cfg: SelectConfig, corpora: Sequence[Corpus], pipeline: TextPipeline) -> list[str]:
    """--input-format tok: each scored side's files checked against their tokeniser record
    (lowercasing aside: --lowercase acts on the LMs' tokens whatever the text's case), a warning for
    each file without one. --input-format raw: a warning for each file that has one."""
    if cfg.input_format != "tok":
        return [msg for corpus in corpora for side in ("src", "tgt") for path in corpus.paths(side)
                if (msg := tokenised_as_raw(path))]
    langs = {"src": cfg.src_lang, "tgt": cfg.tgt_lang}
    out = [f"{path}: no {TOKINFO_SUFFIX} beside it, so its tokeniser settings cannot be checked; they must be "
           "this command's" for corpus in corpora for side in scored_sides(cfg.method) for path in corpus.paths(side)
           if not check_tokinfo(path, langs[side], replace(pipeline, lowercase=True), protect=False,
                                fix="give the tokeniser and this command the same flags, so that the in-domain "
                                "text and the pool are tokenised alike")]
    for side in scored_sides(cfg.method):  # select-data has no --protect: the files must agree among themselves
        recorded = [(path, info.get("protected_patterns") or []) for corpus in corpora for path in corpus.paths(side)
                    if (info := read_tokinfo(path)) is not None]
        for path, patterns in recorded[1:]:
            if patterns != recorded[0][1]:
                raise ConfigError(f"tokenised with {len(patterns)} protected patterns, {recorded[0][0]} with "
                                  f"{len(recorded[0][1])} other ones ({TOKINFO_SUFFIX}): tokenise the in-domain text "
                                  "and the pool with the same --protect", path)
    return out


# ---------------------------------------------------------------------- the command
def _type_id(types: dict[str, int], tokens: list[str]) -> list[int]:
    """Each token's number in `types`, a new token getting the next one."""
    return [types.setdefault(t, len(types)) for t in tokens]


def _vocab_and_ids(types: dict[str, int], ids: np.ndarray, min_count: int) -> tuple[LMVocab, np.ndarray]:
    """One side of the in-domain text held as type numbers -> its LM vocabulary and LM ids."""
    counts = np.bincount(ids, minlength=len(types)).tolist()  # types are numbered in insertion order
    vocab = LMVocab.from_counts(dict(zip(types, counts)), min_count)
    remap = np.array([vocab.flat_stoi.get(w, LM_UNK_ID) for w in types], dtype=np.int32)
    return vocab, remap[ids]


def _in_domain(opts: TextOpts, ind: Corpus, cfg: SelectConfig) -> tuple[IdPairs, tuple[LMVocab, LMVocab]]:
    """The in-domain text as LM ids, and the two LM vocabularies; neither side may be without tokens."""
    types: tuple[dict[str, int], dict[str, int]] = ({}, {})
    typed = tokenize_ids(opts, ind.pairs(), cfg.workers, [functools.partial(_type_id, t) for t in types])
    sizes = typed.sizes()
    if sizes["src_tokens"] == 0 or sizes["tgt_tokens"] == 0:
        side = ind.src_paths[0] if sizes["src_tokens"] == 0 else ind.tgt_paths[0]
        raise InputError("the in-domain text has no tokens", side)
    (src_vocab, src_ids), (tgt_vocab, tgt_ids) = (_vocab_and_ids(types[k], typed.ids[k], cfg.min_count)
                                                  for k in (0, 1))
    return IdPairs((src_ids, tgt_ids), typed.lens), (src_vocab, tgt_vocab)


def _out_sample(opts: TextOpts, ind: Corpus, pool: Corpus, src_tokens_in: int, cfg: SelectConfig,
                vocabs: tuple[LMVocab, LMVocab], progress: Progress) -> IdPairs:
    """Out-of-domain sample, as LM ids: twice the in-domain bytes' worth of random pool lines (seeded)
    is drawn and tokenised, then taken in a random order until the in-domain token count is reached."""
    n_pool = pool.total
    rng = np.random.default_rng(cfg.seed)
    want = min(n_pool, int(math.ceil(2.0 * ind.src_bytes / max(pool.src_bytes / n_pool, 1.0))) + 16)
    picked = np.sort(rng.choice(n_pool, size=want, replace=False))
    sample_lines: list[tuple[str, str]] = []
    j = 0
    for i, (a, b) in enumerate(pool.raw_pairs()):
        if picked[j] == i:  # only picked lines are decoded; the scoring pass checks them all
            part, line = pool.locate(i)
            sample_lines.append((decode_line(a, pool.src_paths[part], line), decode_line(b, pool.tgt_paths[part], line)))
            j += 1
            if j == picked.size:
                break
        if i % 100_000 == 0:
            progress("sample", i, n_pool)
    progress("sample", n_pool, n_pool)  # the pass stops at the last sampled line
    sample = tokenize_ids(opts, sample_lines, cfg.workers, [v.encode for v in vocabs])
    del sample_lines
    perm = rng.permutation(len(sample.lens[0]))
    before = np.cumsum(sample.lens[0][perm], dtype=np.int64) - sample.lens[0][perm]  # source tokens taken before
    return sample.take(perm[:int(np.searchsorted(before, src_tokens_in, side="left"))])


def _score_pool(cfg: SelectConfig, opts: TextOpts, corpora: tuple[Corpus, Corpus], ids: tuple[IdPairs, IdPairs],
                ind_sizes: dict[str, int], vocabs: tuple[LMVocab, LMVocab], tmp: dict[str, str], progress: Progress,
                timings: dict[str, float], warnings: list[str]) -> tuple[np.ndarray, np.ndarray, dict[str, dict[str, Any]]]:
    """The pool's cross-entropies h (n, 4) float32 (H_in(src), H_out(src), H_in(tgt), H_out(tgt)),
    tokens lens (n, 2) int32 and each LM's summary, a side at a time (two of the four LMs held)."""
    (ind, pool), n_pool = corpora, corpora[1].total
    h = np.empty((n_pool, 4), dtype=np.float32)
    lens = np.empty((n_pool, 2), dtype=np.int32)
    lms: dict[str, dict[str, Any]] = {}
    timings["lm_estimate_s"] = timings["score_s"] = 0.0
    warnings += _warn(small_pool_warnings(cfg, pool, ind_sizes, ids[1].sizes()))
    for s, side in enumerate(("src", "tgt")):
        t = time.perf_counter()
        V = len(vocabs[s])
        scorer = Scorer(opts, side, vocabs[s], lm_in=NgramLM.estimate(ids[0].batch(s), V, cfg.order),
                        lm_out=NgramLM.estimate(ids[1].batch(s), V, cfg.order))
        timings["lm_estimate_s"] += time.perf_counter() - t
        warnings += _warn(lm_warnings(cfg, ind, ind_sizes, scorer))
        lms[f"in_{side}"], lms[f"out_{side}"] = _lm_summary(scorer.lm_in), _lm_summary(scorer.lm_out)
        if cfg.write_arpa:
            write_arpa(tmp, scorer)
        t = time.perf_counter()
        known = score_pool(scorer, pool, cfg.workers, progress, h[:, 2 * s:2 * s + 2], lens[:, s])
        warnings += _warn(no_shared_word(cfg, pool, scorer, known))
        timings["score_s"] += time.perf_counter() - t
        del scorer
    return h, lens, lms


def _lm_summary(lm: NgramLM) -> dict[str, Any]:
    return {"order": lm.order, "ngrams": lm.sizes(),
            "discounts": [list(lm.uni_discounts)] + [list(o.discounts) for o in lm.orders]}


def _budget_warnings(cfg: SelectConfig, over: bool, n_pool: int, lens: np.ndarray, empty: np.ndarray) -> list[str]:
    """`empty` (n_pool,) bool: the pairs with an empty side."""
    msgs = []
    n_empty = int(empty.sum())
    if n_empty:
        msgs.append(f"{n_empty} of the pool's {n_pool} pairs have an empty side: they are never selected")
    if over:
        budget = (f"--lines {cfg.lines}" if cfg.lines is not None else f"--words {cfg.words}" if cfg.words is not None
                  else f"--fraction {cfg.fraction}: {round(cfg.fraction * n_pool)} pairs")
        msgs.append(f"the budget ({budget}) exceeds the pool's {n_pool - n_empty} non-empty pairs "
                    f"({int(lens[~empty, 0].sum())} source tokens): selecting all of them")
    return _warn(msgs)


def _warn(msgs: list[str]) -> list[str]:
    """Log each warning and return them all, for the summary."""
    for msg in msgs:
        log.warning(msg)
    return msgs


def run(cfg: SelectConfig, progress: Progress | None = None) -> dict:
    """Run the whole selection and write the outputs; -> the summary."""
    if not isinstance(cfg, SelectConfig):
        raise TypeError(f"nmtkit.select.run takes a SelectConfig, not {type(cfg).__name__}")
    progress = progress or no_progress
    t0 = time.perf_counter()
    warn_both_exist([*cfg.in_domain, *cfg.pool], (cfg.src_lang, cfg.tgt_lang))
    records = pool_records(cfg)
    outputs, stale = output_paths(cfg, records)
    check_outputs(cfg, outputs, stale)
    opts = TextOpts(cfg.pipeline(), cfg.input_format)
    ind, pool = (Corpus.open(prefixes, cfg.src_lang, cfg.tgt_lang) for prefixes in (cfg.in_domain, cfg.pool))
    for corpus, what in ((ind, "the in-domain text"), (pool, "the pool")):
        if corpus.total == 0:
            raise InputError(f"{what} is empty", corpus.src_paths[0])
    warnings = _warn(tokinfo_warnings(cfg, (ind, pool), opts.pipeline) + same_text_warnings(ind, pool, cfg.method))
    n_pool = pool.total
    if cfg.fraction is not None and round(cfg.fraction * n_pool) == 0:
        raise ConfigError(f"--fraction {cfg.fraction} of the pool's {n_pool} pairs selects none")
    timings: dict[str, float] = {}
    t = time.perf_counter()
    ind_ids, vocabs = _in_domain(opts, ind, cfg)
    ind_sizes = ind_ids.sizes()
    timings["in_domain_tokenize_s"] = time.perf_counter() - t
    t = time.perf_counter()
    out_sample = _out_sample(opts, ind, pool, ind_sizes["src_tokens"], cfg, vocabs, progress)
    timings["out_sample_s"] = time.perf_counter() - t
    sample_sizes = out_sample.sizes()
    with StagedFiles(outputs, stale) as files:
        h, lens, lms = _score_pool(cfg, opts, (ind, pool), (ind_ids, out_sample), ind_sizes, vocabs, files.tmp,
                                   progress, timings, warnings)
        del ind_ids, out_sample
        scores = method_scores(cfg.method, h)
        empty = (lens == 0).any(axis=1)
        scores[empty] = np.inf  # an empty line scores as a short, likely sentence: never a pair to train on
        if empty.all():  # the outputs would be empty files and a score of inf a line
            raise InputError(f"none of the pool's {n_pool} pairs has text on both sides: nothing to select",
                             pool.src_paths[0])
        keep, over = select_indices(scores, lens[:, 0], cfg.lines, cfg.words, cfg.fraction)
        warnings += _budget_warnings(cfg, over, n_pool, lens, empty)
        warnings += _warn(flat_score_warnings(scores, pool, cfg.method))
        mask = np.zeros(n_pool, dtype=bool)
        mask[keep] = True
        t = time.perf_counter()
        write_selection(files.tmp["src"], files.tmp["tgt"], pool, mask, progress)
        write_records(files.tmp, records)
        write_scores(files.tmp["scores"], scores, h, lens, mask, cfg.workers)
        progress("write", n_pool, n_pool)
        timings["write_s"] = time.perf_counter() - t
        timings["total_s"] = time.perf_counter() - t0

        summary = _summary(cfg, ind, pool, vocabs, lms, outputs, warnings, timings, scores, lens, keep, mask,
                           sizes=(ind_sizes, sample_sizes))
        with open(files.tmp["summary"], "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=2)
            fh.write("\n")
        files.commit()
    return summary


def _summary(cfg: SelectConfig, ind: Corpus, pool: Corpus, vocabs: tuple[LMVocab, LMVocab],
             lms: dict[str, dict[str, Any]], outputs: dict[str, str], warnings: list[str],
             timings: dict[str, float], scores: np.ndarray, lens: np.ndarray, keep: np.ndarray, mask: np.ndarray,
             sizes: tuple[dict[str, int], dict[str, int]]) -> dict:
    """PREFIX.summary.json; `sizes`: the in-domain text's and the out-of-domain sample's."""
    (src_vocab, tgt_vocab), n_pool = vocabs, pool.total
    part_sel = [int(part.sum()) for part in np.split(mask, np.cumsum(pool.lines)[:-1])]
    sel_scores = scores[mask]
    return {
        "method": cfg.method,
        "settings": asdict(cfg),
        "cross_entropy": "per-token bits, -log2 p(sentence) / (tokens + 1): </s> counts as a token",
        "words_budget_counts": "source-side tokens (after tokenisation)",
        "in_domain": {"files": ind.src_paths + ind.tgt_paths, **sizes[0]},
        "out_domain_sample": {**sizes[1], "seed": cfg.seed},
        "vocab": {"src": len(src_vocab), "tgt": len(tgt_vocab), "min_count": cfg.min_count},
        "lm": {name: lms[name] for name in ("in_src", "out_src", "in_tgt", "out_tgt")},
        "pool": {"parts": [{"src": s, "tgt": t_, "pairs": n, "selected": k}
                           for s, t_, n, k in zip(pool.src_paths, pool.tgt_paths, pool.lines, part_sel)],
                 "pairs": n_pool, "src_tokens": int(lens[:, 0].sum()), "tgt_tokens": int(lens[:, 1].sum())},
        "selected": {"pairs": int(keep.size), "src_tokens": int(lens[keep, 0].sum()),
                     "tgt_tokens": int(lens[keep, 1].sum()),
                     "max_score": float(sel_scores.max()) if keep.size else None,
                     "mean_score": float(sel_scores.mean()) if keep.size else None},
        "outputs": outputs,
        "warnings": warnings,
        "timings": {k: round(v, 3) for k, v in timings.items()},
    }


# ---- what select-data writes (`StagedFiles`: all appear, or none)


def pool_records(cfg: SelectConfig) -> dict[str, dict[str, Any]]:
    """--input-format tok: each side's tokeniser record, where every pool file of the side has it."""
    if cfg.input_format != "tok":
        return {}
    records = {}
    for side, lang in (("src", cfg.src_lang), ("tgt", cfg.tgt_lang)):
        found = [read_tokinfo(resolve_input(prefix, lang)) for prefix in cfg.pool]
        if found[0] is not None and all(r == found[0] for r in found):
            records[side] = found[0]
    return records


def write_records(tmp: dict[str, str], records: dict[str, dict[str, Any]]) -> None:
    """Each side's tokeniser record beside its selection, as `nmtkit tokenize` writes it."""
    for side, record in records.items():
        with open(tmp[f"{side}_tokinfo"], "w", encoding="utf-8") as fh:
            fh.write(json.dumps(record, indent=1) + "\n")


def output_paths(cfg: SelectConfig, records: dict[str, dict[str, Any]]) -> tuple[dict[str, str], list[str]]:
    """Each output's path by its key, and the stale files: the tokeniser records of a side that gets
    none this time, and without --write-arpa the LMs, that an earlier run wrote (outputs too,
    removed when the others are written)."""
    d, langs = cfg.output_prefix, (("src", cfg.src_lang), ("tgt", cfg.tgt_lang))
    out = {"src": f"{d}.{cfg.src_lang}", "tgt": f"{d}.{cfg.tgt_lang}", "scores": f"{d}.scores.tsv",
           "summary": f"{d}.summary.json"}
    optional = {f"{side}_tokinfo": (side in records, f"{d}.{lang}{TOKINFO_SUFFIX}") for side, lang in langs}
    optional.update({f"arpa_{which}_{side}": (cfg.write_arpa, f"{d}.{which}.{lang}.arpa") for which in ("in", "out")
                     for side, lang in langs})
    out.update({key: path for key, (wanted, path) in optional.items() if wanted})
    stale = [path for wanted, path in optional.values()
             if not wanted and os.path.lexists(path) and not os.path.isdir(path)]  # a folder is not one
    return out, stale


def check_outputs(cfg: SelectConfig, outputs: dict[str, str], stale: Sequence[str] = ()) -> None:
    """Refuse, before hours of scoring, outputs that would overwrite an input or an existing
    file (without --force; a `stale` record counts as one) or that could not be written."""
    out_dir = os.path.dirname(os.path.abspath(cfg.output_prefix))
    if not os.path.isdir(out_dir):
        raise InputError("the folder of --output-prefix does not exist", out_dir)
    check_outputs_vs_inputs(
        inputs=[(f"--{opt}", path) for opt, prefixes in (("in-domain", cfg.in_domain), ("pool", cfg.pool))
                for prefix in prefixes for lang in (cfg.src_lang, cfg.tgt_lang)
                for path in input_candidates(prefix, lang)],
        files=[Output("--output-prefix", p, "select-data output", True) for p in outputs.values()])
    existing = [p for p in outputs.values() if os.path.exists(p) and not writes_in_place(p)] + list(stale)
    if existing and not cfg.force:
        raise OutputExistsError("output exists (use --force to overwrite)", existing[0])


def write_arpa(tmp: dict[str, str], s: Scorer) -> None:
    """One side's two language models, in ARPA format."""
    for which, lm in (("in", s.lm_in), ("out", s.lm_out)):
        with open(tmp[f"arpa_{which}_{s.side}"], "w", encoding="utf-8") as fh:
            lm.write_arpa(fh, s.vocab.itos)


def write_selection(src_path: str, tgt_path: str, pool: Corpus, mask: np.ndarray, progress: Progress) -> None:
    """The selected pairs, in pool order, bytes as read (a missing last newline added)."""
    n_pool = pool.total
    progress("write", 0, n_pool)
    with open(src_path, "wb") as fs, open(tgt_path, "wb") as ft:
        for i, (a, b) in enumerate(pool.raw_pairs()):
            if mask[i]:
                fs.write(a if a.endswith(b"\n") else a + b"\n")
                ft.write(b if b.endswith(b"\n") else b + b"\n")
            if i % 200_000 == 0:
                progress("write", i, n_pool)
