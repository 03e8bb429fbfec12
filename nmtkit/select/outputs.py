"""What `nmtkit select-data` writes, each file staged and renamed into place only when all are
complete (`StagedFiles`): PREFIX.{src,tgt} (the selected pairs, lines as in the pool),
PREFIX.scores.tsv, PREFIX.summary.json, with --write-arpa the four LMs, and with
--input-format tok the tokeniser record of each side beside its selection (the pool's, which
`preprocess --input-format tok` checks, as it checks `nmtkit tokenize`'s output).
"""
from __future__ import annotations

import json
import os
from typing import Any, Sequence

import numpy as np

from nmtkit.errors import InputError, OutputExistsError
from nmtkit.io.checks import check_outputs_vs_inputs
from nmtkit.io.files import Staged, check_output, name_error, writes_in_place
from nmtkit.select.config import SelectConfig
from nmtkit.select.corpus import Corpus, Progress
from nmtkit.select.lmvocab import LMVocab
from nmtkit.select.scoring import Scorer
from nmtkit.text.io import input_candidates, resolve_input
from nmtkit.text.parallel import parallel_map, worker_state
from nmtkit.text.tokenize import TOKINFO_SUFFIX, read_tokinfo


def pool_records(cfg: SelectConfig) -> dict[str, dict[str, Any]]:
    """--input-format tok: for each side ("src", "tgt"), the tokeniser record that every pool
    file of that side has: the selected lines, the pool's, were tokenised so. A side whose files
    lack one or disagree is left out (its selection then has no record, as its input had none)."""
    if cfg.input_format != "tok":
        return {}
    records = {}
    for side, lang in (("src", cfg.src_lang), ("tgt", cfg.tgt_lang)):
        found = [read_tokinfo(resolve_input(prefix, lang)) for prefix in cfg.pool]
        if found[0] is not None and all(r == found[0] for r in found):
            records[side] = found[0]
    return records


def write_records(tmp: dict[str, str], records: dict[str, dict[str, Any]]) -> None:
    """Each side's tokeniser record (`pool_records`) beside its selection, as `nmtkit tokenize` writes it."""
    for side, record in records.items():
        with open(tmp[f"{side}_tokinfo"], "w", encoding="utf-8") as fh:
            fh.write(json.dumps(record, indent=1) + "\n")


def output_paths(cfg: SelectConfig, records: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Each output's path by its key; `records`: the sides with a tokeniser record to write."""
    d = cfg.output_prefix
    out = {"src": f"{d}.{cfg.src_lang}", "tgt": f"{d}.{cfg.tgt_lang}", "scores": f"{d}.scores.tsv",
           "summary": f"{d}.summary.json"}
    out.update({f"{side}_tokinfo": path for side, path in _record_paths(cfg).items() if side in records})
    if cfg.write_arpa:
        for which in ("in", "out"):
            for side, lang in (("src", cfg.src_lang), ("tgt", cfg.tgt_lang)):
                out[f"arpa_{which}_{side}"] = f"{d}.{which}.{lang}.arpa"
    return out


def _record_paths(cfg: SelectConfig) -> dict[str, str]:
    """Where each side's tokeniser record goes: beside its selection."""
    return {side: f"{cfg.output_prefix}.{lang}{TOKINFO_SUFFIX}" for side, lang in (("src", cfg.src_lang),
                                                                                   ("tgt", cfg.tgt_lang))}


def stale_records(cfg: SelectConfig, records: dict[str, dict[str, Any]]) -> list[str]:
    """The tokeniser records beside the selection of a side that gets none this time (say, an
    earlier run on tokenised text, replaced by one on raw text): left, they would describe text
    they do not describe, so they are outputs too, removed when the others are written."""
    return [path for side, path in _record_paths(cfg).items() if side not in records and os.path.lexists(path)]


class StagedFiles:
    """One `nmtkit.io.files.Staged` per output: `tmp[k]` is where output k is written now;
    `commit()` makes them all appear and removes the `stale` files, else (an error) they are
    removed and the stale files stay."""

    def __init__(self, paths: dict[str, str], stale: Sequence[str] = ()):
        self.paths, self.stale = paths, list(stale)
        self.staged: dict[str, Staged] = {}
        for k, p in paths.items():
            self.staged[k] = Staged(p)
        self.tmp = {k: st.write_path for k, st in self.staged.items()}

    def __enter__(self) -> "StagedFiles":
        return self

    def commit(self) -> None:
        for st in self.staged.values():
            st.commit()
        self.staged = {}
        for path in self.stale:
            os.unlink(path)

    def __exit__(self, exc_type, exc, tb) -> None:
        for k, st in self.staged.items():
            st.abort()
            if isinstance(exc, OSError):
                name_error(exc, self.paths[k], self.tmp[k])


def check_outputs(cfg: SelectConfig, outputs: dict[str, str], stale: Sequence[str] = ()) -> None:
    """Refuse, before hours of scoring, outputs that would overwrite an input or an existing
    file (without --force; a `stale` record counts as one) or that could not be written."""
    check_outputs_vs_inputs(
        inputs=[(f"--{opt}", path) for opt, prefixes in (("in-domain", cfg.in_domain), ("pool", cfg.pool))
                for prefix in prefixes for lang in (cfg.src_lang, cfg.tgt_lang)
                for path in input_candidates(prefix, lang)],
        files=[("--output-prefix", p) for p in outputs.values()])
    existing = [p for p in outputs.values() if os.path.exists(p) and not writes_in_place(p)] + list(stale)
    if existing and not cfg.force:
        raise OutputExistsError("output exists (use --force to overwrite)", existing[0])
    out_dir = os.path.dirname(os.path.abspath(cfg.output_prefix))
    if not os.path.isdir(out_dir):
        raise InputError("the folder of --output-prefix does not exist", out_dir)
    for p in outputs.values():
        check_output(p, force=True, what="select-data output")


def write_arpa(tmp: dict[str, str], scorer: Scorer, src_vocab: LMVocab, tgt_vocab: LMVocab) -> None:
    """The four language models, in ARPA format (--write-arpa)."""
    for which, side, lm, voc in (("in", "src", scorer.in_src, src_vocab), ("out", "src", scorer.out_src, src_vocab),
                                 ("in", "tgt", scorer.in_tgt, tgt_vocab), ("out", "tgt", scorer.out_tgt, tgt_vocab)):
        with open(tmp[f"arpa_{which}_{side}"], "w", encoding="utf-8") as fh:
            lm.write_arpa(fh, voc.itos)


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


_SCORE_ROWS = 100_000


def _format_rows(lo: int) -> str:
    """TSV text of rows lo .. lo + _SCORE_ROWS of the map's arrays (runs in workers)."""
    scores, h, lens, mask = worker_state()
    hi = min(lo + _SCORE_ROWS, scores.size)
    rows = zip(range(lo + 1, hi + 1), scores[lo:hi].tolist(), *(h[lo:hi, j].tolist() for j in range(4)),
               lens[lo:hi, 0].tolist(), lens[lo:hi, 1].tolist(), mask[lo:hi].tolist())
    return "".join(f"{i}\t{s:.6f}\t{a:.6f}\t{b:.6f}\t{c:.6f}\t{d:.6f}\t{ns}\t{nt}\t{int(m)}\n"
                   for i, s, a, b, c, d, ns, nt, m in rows)


def write_scores(path: str, scores: np.ndarray, h: np.ndarray, lens: np.ndarray, mask: np.ndarray,
                  workers: int = 1) -> None:
    """TSV: line (1-based pool line), score, h_in_src, h_out_src, h_in_tgt, h_out_tgt, src/tgt tokens, selected.

    Formatting (~3 us a row) runs over `workers` processes, which see the arrays by fork.
    """
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("line\tscore\th_in_src\th_out_src\th_in_tgt\th_out_tgt\tsrc_tokens\ttgt_tokens\tselected\n")
        starts = range(0, scores.size, _SCORE_ROWS)
        for text in parallel_map(_format_rows, starts, workers, 1, state=(scores, h, lens, mask)):
            fh.write(text)
