"""`nmtkit preprocess` as a plain function: raw parallel text -> a binarised data directory.

Follows the classic Moses + subword-nmt recipe used for RNNsearch-style systems (Bahdanau et
al. 2015 trained on tokenised text, sentences up to 50 words, 30k-word vocabularies;
Sennrich et al. 2016 replaced the word vocabularies with BPE):

  train split:  pass 1 (parallel)  normalise + tokenise, clean (clean-corpus-n), count words
                                   and truecasing evidence -> work/train.tok.{src,tgt}
                learn              truecaser, BPE codes, vocabularies, all from the counts
                                   (casing and BPE act word by word, so the counts of the
                                   final tokens follow from the word counts without a pass)
                pass 2 (parallel)  case + BPE + vocabulary ids -> train.{lang}.ids/offsets.npy
  valid, test:  one pass (parallel) raw -> ids, no cleaning.

Memory stays bounded: lines stream through `parallel_map` in chunks (order kept), the
word/subword counts grow with the number of distinct types only, ids are appended to raw
files and turned into .npy arrays block by block. Only `dedup=True` keeps one 64-bit hash
per distinct training pair. Everything is written under `DEST.tmp-HOST-PID-XXXX` (nmtkit.outputs), which replaces
DEST only when complete (with `force`), so a failure never leaves a data directory that
looks complete; the next run removes such a directory left by a killed run. No torch here.
"""
from __future__ import annotations

import itertools
import json
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from nmtkit import __version__
from nmtkit.data.binarized import SplitWriter
from nmtkit.errors import ConfigError, InputError, OutputError, OutputExistsError
from nmtkit.outputs import clean_stale_temp_dirs, make_temp_dir
from nmtkit.text.bpe import SEPARATOR, count_merges, learn_codes, subword_vocab
from nmtkit.text.clean import DROP_REASONS, PairDeduper, drop_reason
from nmtkit.text.io import check_parallel, decode_lines, read_lines, resolve_input
from nmtkit.text.parallel import parallel_map
from nmtkit.text.pipeline import TextPipeline
from nmtkit.text.tokenize import TOKINFO_SUFFIX, check_tokinfo
from nmtkit.text.truecase import add_weights, best_forms, new_casing, truecase_weights
from nmtkit.text.vocab import UNK_ID, Vocab

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1


DEFAULT_WORD_VOCAB = 30000  # the paper's vocabulary size, used without --bpe

ProgressFn = Callable[[str, int, "int | None"], None]
"""progress(stage, done, total): called with done=0 when a stage starts, then as it advances."""


@dataclass(frozen=True)
class PreprocessConfig:
    """Every option of `nmtkit preprocess` (1:1 with the CLI), recorded in manifest["settings"]."""

    src_lang: str
    tgt_lang: str
    train: str
    valid: str
    dest: str
    test: tuple[str, ...] = ()
    force: bool = False
    input_format: str = "raw"  # "raw" or "tok" (already Moses-tokenised, e.g. by nmtkit.text.tokenize)
    normalize_punct: bool = True
    aggressive_dash_splits: bool = False
    lowercase: bool = False
    truecase: bool = False
    max_len: int = 50
    max_ratio: float = 9.0
    dedup: bool = False
    bpe: int | None = None
    bpe_separate: bool = False
    bpe_vocab_threshold: int | None = None
    bpe_min_frequency: int = 2
    src_vocab_size: int | None = None
    tgt_vocab_size: int | None = None
    vocab_min_count: int = 1
    workers: int = 1
    chunk_size: int = 500

    def validate(self) -> None:
        """Raise ConfigError for inconsistent or out-of-range settings."""
        if not self.src_lang or not self.tgt_lang:
            raise ConfigError("--src-lang and --tgt-lang are required")
        if self.src_lang == self.tgt_lang:
            raise ConfigError(f"--src-lang and --tgt-lang must differ (both are '{self.src_lang}')")
        if self.input_format not in ("raw", "tok"):
            raise ConfigError(f"--input-format must be 'raw' or 'tok', not '{self.input_format}'")
        if self.lowercase and self.truecase:
            raise ConfigError("--lowercase and --truecase exclude each other")
        if self.max_len < 1:
            raise ConfigError(f"--max-len must be at least 1 (got {self.max_len})")
        if not self.max_ratio >= 1.0:
            raise ConfigError(f"--max-ratio must be at least 1 (got {self.max_ratio})")
        if self.bpe is not None and self.bpe < 1:
            raise ConfigError(f"--bpe must be a positive number of merges (got {self.bpe})")
        if self.bpe is None and (self.bpe_separate or self.bpe_vocab_threshold is not None):
            raise ConfigError("--bpe-separate and --bpe-vocab-threshold need --bpe MERGES")
        if self.bpe_vocab_threshold is not None and self.bpe_vocab_threshold < 1:
            raise ConfigError(f"--bpe-vocab-threshold must be at least 1 (got {self.bpe_vocab_threshold})")
        for name in ("src_vocab_size", "tgt_vocab_size"):
            v = getattr(self, name)
            if v is not None and v < 5:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 5 (4 special symbols + 1)")
        if self.bpe_min_frequency < 1 or self.vocab_min_count < 1:
            raise ConfigError("--bpe-min-frequency and --vocab-min-count must be at least 1")
        if self.workers < 1 or self.chunk_size < 1:
            raise ConfigError("--workers and the chunk size must be at least 1")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field (manifest["settings"])."""
        d = asdict(self)
        d["test"] = list(self.test)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PreprocessConfig":
        """Inverse of `to_dict`; unknown keys are a ConfigError listing the valid ones."""
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(d) - set(valid))
        if unknown:
            raise ConfigError(f"unknown preprocess settings {unknown}; valid: {valid}")
        d = dict(d)
        if "test" in d:
            d["test"] = tuple(d["test"])
        return cls(**d)

    def vocab_size(self, side: str) -> int | None:
        """Effective cap: the given size, else 30000 for words and no cap for BPE."""
        v = self.src_vocab_size if side == "src" else self.tgt_vocab_size
        if v is None and self.bpe is None:
            return DEFAULT_WORD_VOCAB
        return v

    def splits(self) -> list[tuple[str, str]]:
        """(split name, file prefix): train, valid, then test, test1, test2, ..."""
        out = [("train", self.train), ("valid", self.valid)]
        out += [("test" if i == 0 else f"test{i}", p) for i, p in enumerate(self.test)]
        return out

    def files(self, prefix: str) -> tuple[str, str]:
        """PREFIX.lang for both languages, or PREFIX.lang.gz where only that exists (as select-data)."""
        return _input_file(prefix, self.src_lang), _input_file(prefix, self.tgt_lang)


def _input_file(prefix: str, lang: str) -> str:
    try:
        return resolve_input(prefix, lang)
    except InputError:
        return f"{prefix}.{lang}"  # reported as "file not found" by the input checks


# ---- worker side (state built once per process by `_init_worker`) --------------------------
_STATE: dict[str, Any] = {}


def _init_worker(state: dict[str, Any]) -> None:
    """Per-process state: the pipeline (BPE tables built lazily once) and vocabularies."""
    if multiprocessing.current_process().name != "MainProcess":
        # Ctrl-C is handled once, by the main process (which then stops the pool), so the
        # workers do not each print a KeyboardInterrupt traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    _STATE.clear()
    _STATE.update(state)
    _STATE["pipeline"] = TextPipeline.from_dict(state["pipeline"])
    if state.get("vocab") is not None:
        _STATE["stoi"] = {side: {t: i for i, t in enumerate(itos)} for side, itos in state["vocab"].items()}
        # word -> its ids after casing, BPE and vocabulary: built by the main process from the
        # training counts (a fork inherits it for free) and extended here with unseen words.
        _STATE["word_ids"] = state.get("word_ids") or {"src": {}, "tgt": {}}


def _tokenize_clean_chunk(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Pass 1 of the train split: tokenise, clean, count words and casing evidence."""
    p: TextPipeline = _STATE["pipeline"]
    fmt = _STATE["input_format"]
    max_len, max_ratio = _STATE["max_len"], _STATE["max_ratio"]
    want_casing = _STATE["truecase"]
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


def _encode_chunk(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Raw (or tokenised) pairs -> id arrays, with word/token/UNK counts per side.

    Casing, BPE and the vocabulary act word by word, so each distinct word is mapped to its
    ids once (`_STATE["word_ids"]`, pre-filled from the training words) and then looked up.
    """
    p: TextPipeline = _STATE["pipeline"]
    fmt = _STATE["input_format"]
    res: dict[str, Any] = {"n_in": len(pairs)}
    for k, side in enumerate(("src", "tgt")):
        stoi = _STATE["stoi"][side]
        known: dict[str, tuple[int, ...]] = _STATE["word_ids"][side]
        ids: list[int] = []
        lens = np.empty(len(pairs), dtype=np.int64)
        words = 0
        for j, pair in enumerate(pairs):
            line = pair[k]
            toks = p.tokenize_from(line, side, fmt)
            words += len(toks)
            n0 = len(ids)
            for w in toks:
                wid = known.get(w)
                if wid is None:
                    wid = known[w] = tuple(stoi.get(t, UNK_ID) for t in p.apply_bpe(p.case([w], side), side))
                ids.extend(wid)
            lens[j] = len(ids) - n0
        arr = np.asarray(ids, dtype=np.int32)
        res[side] = {"ids": arr, "lens": lens, "words": words, "unk": int(np.count_nonzero(arr == UNK_ID))}
    return res


def _encode_ranges(task: tuple[str, str, list[tuple[int, int, int, int]]]) -> dict[str, Any]:
    """`_encode_chunk` over consecutive byte ranges (src start, end, tgt start, end) of the
    tokenised training files that pass 1 wrote (valid UTF-8, one pair per line)."""
    src, tgt, ranges = task
    with open(src, "rb") as fs, open(tgt, "rb") as ft:
        fs.seek(ranges[0][0])
        ft.seek(ranges[0][2])
        s_lines = decode_lines(fs.read(ranges[-1][1] - ranges[0][0]), src)
        t_lines = decode_lines(ft.read(ranges[-1][3] - ranges[0][2]), tgt)
    if len(s_lines) != len(t_lines):  # pragma: no cover - pass 1 writes pairs
        raise AssertionError(f"tokenised training files out of step: {len(s_lines)} vs {len(t_lines)} lines")
    return _encode_chunk(list(zip(s_lines, t_lines)))


# ---- main-process helpers -------------------------------------------------------------------
def _pair_chunks(src: str, tgt: str, size: int, read: list[int],
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


def _check_dest(dest: Path, force: bool) -> None:
    if dest.exists():
        if not dest.is_dir():
            raise OutputExistsError("exists and is not a directory; choose another --dest", str(dest))
        if any(dest.iterdir()) and not force:
            raise OutputExistsError("already exists and is not empty; use --force to replace it", str(dest))


def _install(tmp: Path, dest: Path, force: bool) -> None:
    """Move the finished temp directory to `dest`, replacing an old one only now."""
    _check_dest(dest, force)
    if dest.exists():
        old = Path(tempfile.mkdtemp(prefix=dest.name + ".old-", dir=dest.parent))
        os.rmdir(old)
        os.rename(dest, old)
        os.rename(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, dest)


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


def _word_ids(p: TextPipeline, word_counts: dict[str, Counter], vocabs: dict[str, Vocab]) -> dict[str, dict]:
    """{side: {training word: its ids after casing, BPE and the vocabulary}}, so that encoding
    is one lookup per word; the words were already segmented once for the vocabulary (the
    pipeline's BPE cache), and forked workers inherit this map without copying it."""
    out: dict[str, dict] = {}
    for side in ("src", "tgt"):
        stoi = vocabs[side].stoi
        out[side] = {w: tuple(stoi.get(t, UNK_ID) for t in p.apply_bpe(p.case([w], side), side))
                     for w in word_counts[side]}
    return out


def _warm_up(p: TextPipeline, config: PreprocessConfig) -> None:
    """Build sacremoses' tokenisers (and their regexes) once here, before workers fork, instead
    of in every worker of every stage (about half a second each)."""
    if config.input_format == "raw":
        for side in ("src", "tgt"):
            p.tokenize("Warm-up: it's 3.5 \"quoted\" (e.g. U.S.A.) -- l'homme « dit » !", side)
    if config.truecase:
        truecase_weights(["Warm", "up", "."])


def _check_tokenized(config: PreprocessConfig, src: str, tgt: str) -> None:
    """--input-format tok: the files must have been tokenised with this command's settings,
    which the manifest records and translate replays on raw text (see nmtkit.text.tokenize)."""
    p = TextPipeline(config.src_lang, config.tgt_lang, normalize_punct=config.normalize_punct,
                     aggressive_dash_splits=config.aggressive_dash_splits, lowercase=config.lowercase)
    for path, lang in ((src, config.src_lang), (tgt, config.tgt_lang)):
        if not check_tokinfo(path, lang, p):
            log.warning("%s: no %s beside it, so its tokeniser settings cannot be checked; they must be this "
                        "command's (translate replays them)", path, TOKINFO_SUFFIX)


# ---- the command ------------------------------------------------------------------------------
def preprocess(config: PreprocessConfig, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Run the whole preprocessing; returns the manifest (also written to DEST/manifest.json).

    Raises NmtkitError subclasses for user mistakes; on any failure nothing is left at DEST
    (an existing DEST is untouched) and the temp directory is removed.
    """
    config.validate()
    report: ProgressFn = progress or (lambda stage, done, total: None)
    dest = Path(config.dest)
    _check_dest(dest, config.force)

    # Check every input first: existence, equal line counts, checksums (cheap, one pass of bytes).
    inputs: dict[str, str] = {}
    line_counts: dict[str, int] = {}
    splits = config.splits()
    report("check inputs", 0, len(splits))
    for k, (name, prefix) in enumerate(splits, 1):
        src, tgt = config.files(prefix)
        n, h_src, h_tgt = check_parallel(src, tgt)
        if n == 0:
            raise InputError(f"the {name} split is empty", src)
        if config.input_format == "tok":
            _check_tokenized(config, src, tgt)
        inputs[src], inputs[tgt] = h_src, h_tgt
        line_counts[name] = n
        report("check inputs", k, len(splits))

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        for stale in clean_stale_temp_dirs(dest, log.warning):
            log.warning("removed %s, left by an interrupted run", stale)
        tmp = make_temp_dir(dest)
    except OSError as err:
        raise OutputError(f"cannot create the data directory here: {err.strerror}", str(dest)) from None
    try:
        work = tmp / "work"
        work.mkdir()
        manifest = _run(config, report, tmp, work, line_counts)
        manifest["inputs"] = inputs
        shutil.rmtree(work)
        with open(tmp / "manifest.json", "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, ensure_ascii=False)
            f.write("\n")
        _install(tmp, dest, config.force)
    except OSError as err:  # disk full, permissions...: a user-facing error, not a traceback
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(f"cannot write the data directory: {err.strerror or err}",
                          err.filename or str(dest)) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        _STATE.clear()  # with workers=1 the worker state lived in this process
    return manifest


def _run(config: PreprocessConfig, report: ProgressFn, out: Path, work: Path,
         line_counts: dict[str, int]) -> dict[str, Any]:
    timings: dict[str, float] = {}  # wall seconds per stage
    cpu: dict[str, float] = {}  # CPU seconds of this (main) process per stage
    langs = {"src": config.src_lang, "tgt": config.tgt_lang}
    base = TextPipeline(config.src_lang, config.tgt_lang, normalize_punct=config.normalize_punct,
                        aggressive_dash_splits=config.aggressive_dash_splits, lowercase=config.lowercase)
    train_src, train_tgt = config.files(config.train)
    _warm_up(base, config)

    # Pass 1 over train: tokenise + clean + count.
    t0, c0 = time.perf_counter(), time.process_time()
    stage = "tokenise + clean train"
    n_train = line_counts["train"]
    report(stage, 0, n_train)
    drops: Counter = Counter({r: 0 for r in DROP_REASONS})
    word_counts = {"src": Counter(), "tgt": Counter()}
    casing = {"src": new_casing(), "tgt": new_casing()} if config.truecase else None
    read = [0]
    kept = 0
    state = {"pipeline": base.to_dict(), "input_format": config.input_format, "max_len": config.max_len,
             "max_ratio": config.max_ratio, "truecase": config.truecase}
    tok_paths = {side: work / f"train.tok.{side}" for side in ("src", "tgt")}
    # Byte ranges of the tokenised files, one per chunk written, so that pass 2's workers read
    # their own lines instead of the main process reading and pickling them.
    tok_ranges: list[tuple[int, int, int, int]] = []
    pos = [0, 0]
    with open(tok_paths["src"], "wb") as fs, open(tok_paths["tgt"], "wb") as ft:
        chunks = _pair_chunks(train_src, train_tgt, config.chunk_size, read,
                              PairDeduper() if config.dedup else None, drops)
        for res in parallel_map(_tokenize_clean_chunk, chunks, config.workers, chunk_size=1,
                                initializer=_init_worker, initargs=(state,)):
            if res["kept"]:
                bs, bt = (res["src"] + "\n").encode("utf-8"), (res["tgt"] + "\n").encode("utf-8")
                fs.write(bs)
                ft.write(bt)
                tok_ranges.append((pos[0], pos[0] + len(bs), pos[1], pos[1] + len(bt)))
                pos[0] += len(bs)
                pos[1] += len(bt)
            kept += res["kept"]
            drops.update(res["drops"])
            for side in ("src", "tgt"):
                word_counts[side].update(res["counts"][side])
                if casing is not None:
                    for lower, forms in res["casing"][side].items():
                        casing[side][lower].update(forms)
            report(stage, read[0], n_train)
    timings[stage] = time.perf_counter() - t0
    cpu[stage] = time.process_time() - c0
    if kept == 0:
        summary = ", ".join(f"{r}: {n}" for r, n in drops.items() if n)
        raise InputError(f"no training pairs left after cleaning ({summary}); check --max-len/--max-ratio "
                         f"or the input", train_src)

    # Learn: truecaser, BPE, vocabularies (from counts; no pass over the data).
    t0, c0 = time.perf_counter(), time.process_time()
    pipeline = base
    if casing is not None:
        pipeline = pipeline.with_(truecase={side: best_forms(casing[side]) for side in ("src", "tgt")})
    cased = {side: _cased_counts(pipeline, word_counts[side], side) for side in ("src", "tgt")}
    bpe_info: dict[str, Any] = {}
    if config.bpe is not None:
        stage = "learn BPE"
        report(stage, 0, None)
        if config.bpe_separate:
            codes = {side: learn_codes(cased[side], config.bpe, config.bpe_min_frequency) for side in ("src", "tgt")}
        else:
            joint = learn_codes(cased["src"] + cased["tgt"], config.bpe, config.bpe_min_frequency)
            codes = {"src": joint, "tgt": joint}
        vocab_filter = None
        if config.bpe_vocab_threshold is not None:
            vocab_filter = {side: subword_vocab(codes[side], cased[side], config.bpe_vocab_threshold)
                            for side in ("src", "tgt")}
        pipeline = pipeline.with_(bpe={"joint": not config.bpe_separate, "codes": codes, "vocab": vocab_filter,
                                       "vocab_threshold": config.bpe_vocab_threshold, "merges": config.bpe,
                                       "separator": SEPARATOR})
        if config.bpe_separate:
            for side in ("src", "tgt"):
                (out / f"bpe.codes.{langs[side]}").write_text(codes[side], encoding="utf-8")
            bpe_info["codes_files"] = {side: f"bpe.codes.{langs[side]}" for side in ("src", "tgt")}
        else:
            (out / "bpe.codes").write_text(codes["src"], encoding="utf-8")
            bpe_info["codes_files"] = {"src": "bpe.codes", "tgt": "bpe.codes"}
        bpe_info["merges_learned"] = {side: count_merges(codes[side]) for side in ("src", "tgt")}
        report(stage, 1, 1)
    vocabs = {}
    for side in ("src", "tgt"):
        vocabs[side] = Vocab.build(_token_counts(pipeline, cased[side], side), max_size=config.vocab_size(side),
                                   min_count=config.vocab_min_count)
        vocabs[side].save(out / f"vocab.{langs[side]}.txt")
    timings["learn"] = time.perf_counter() - t0
    cpu["learn"] = time.process_time() - c0

    # Pass 2 over train (from the tokenised, cleaned temp files) and one pass over the others.
    state = {"pipeline": pipeline.to_dict(), "vocab": {s: v.itos for s, v in vocabs.items()},
             "word_ids": _word_ids(pipeline, word_counts, vocabs)}
    split_stats: dict[str, Any] = {}
    for name, prefix in config.splits():
        t0, c0 = time.perf_counter(), time.process_time()
        if name == "train":
            src, tgt, fmt, total = str(tok_paths["src"]), str(tok_paths["tgt"]), "tok", kept
        else:
            (src, tgt), fmt, total = config.files(prefix), config.input_format, line_counts[name]
        stage = f"encode + binarise {name}"
        report(stage, 0, total)
        writers = {side: SplitWriter(out, work, name, langs[side]) for side in ("src", "tgt")}
        words = {"src": 0, "tgt": 0}
        unk = {"src": 0, "tgt": 0}
        done = 0
        if name == "train":  # workers read their own byte ranges of the files pass 1 wrote
            group = max(1, 4 * config.chunk_size // max(1, kept // max(1, len(tok_ranges))))
            func, tasks = _encode_ranges, ((src, tgt, tok_ranges[i:i + group])
                                           for i in range(0, len(tok_ranges), group))
        else:
            func, tasks = _encode_chunk, _pair_chunks(src, tgt, config.chunk_size, [0])
        for res in parallel_map(func, tasks, config.workers, chunk_size=1,
                                initializer=_init_worker, initargs=({**state, "input_format": fmt},)):
            for side in ("src", "tgt"):
                r = res[side]
                writers[side].add(r["ids"], r["lens"])
                words[side] += r["words"]
                unk[side] += r["unk"]
            done += res["n_in"]
            report(stage, done, total)
        for w in writers.values():
            w.close()
        n_tok = {side: writers[side].n_tokens for side in ("src", "tgt")}
        split_stats[name] = {
            "prefix": prefix,
            "lines_in": line_counts[name],
            "lines": writers["src"].n_lines,
            "src_tokens": n_tok["src"],
            "tgt_tokens": n_tok["tgt"],
            "src_words": words["src"],
            "tgt_words": words["tgt"],
            "unk_tokens": dict(unk),
            "unk_rate": {side: (unk[side] / n_tok[side] if n_tok[side] else 0.0) for side in ("src", "tgt")},
            "dropped": {r: drops[r] for r in DROP_REASONS} if name == "train" else {},
        }
        timings[stage] = time.perf_counter() - t0
        cpu[stage] = time.process_time() - c0

    settings = config.to_dict()
    return {
        "format_version": MANIFEST_VERSION,
        "nmtkit_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "src_lang": config.src_lang,
        "tgt_lang": config.tgt_lang,
        "pipeline": pipeline.to_dict(),
        "vocab": {"src": f"vocab.{config.src_lang}.txt", "tgt": f"vocab.{config.tgt_lang}.txt",
                  "src_size": len(vocabs["src"]), "tgt_size": len(vocabs["tgt"]),
                  "size_cap": {side: config.vocab_size(side) for side in ("src", "tgt")}},
        "bpe": bpe_info or None,
        "splits": split_stats,
        "settings": settings,
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "main_cpu_s": {k: round(v, 3) for k, v in cpu.items()},
    }
