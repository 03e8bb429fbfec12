"""`run`: the phases of `nmtkit preprocess` in order, and the code its worker processes run."""
from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from nmtkit import __version__
from nmtkit.data.binarized import SplitWriter
from nmtkit.data.manifest import new_manifest, owned_files
from nmtkit.errors import ConfigError, InputError, NmtkitError, OutputError, OutputExistsError
from nmtkit.io.checks import check_outputs_vs_inputs, is_inside, real_path
from nmtkit.io.dirs import (
    check_replaceable_dir,
    held_temp_dir,
    make_parents,
    remove_folders,
    swap_in_dir,
)
from nmtkit.preprocess.config import PreprocessConfig
from nmtkit.progress import Progress, no_progress
from nmtkit.text.bpe import (
    SEPARATOR,
    count_merges,
    learn_codes,
    piece_counts,
    subword_vocab,
    unrecorded_subwords,
)
from nmtkit.text.io import check_parallel, decode_lines, input_candidates, read_lines, warn_both_exist
from nmtkit.text.moses import DROP_REASONS, PairDeduper, drop_reason
from nmtkit.text.parallel import parallel_map, worker_state
from nmtkit.text.pipeline import (
    SIDES,
    TextPipeline,
    add_weights,
    best_forms,
    new_casing,
    sentence_starts,
    truecase_weights,
)
from nmtkit.text.tokenize import MOSES_ESCAPES, TOKINFO_SUFFIX, check_tokinfo, tokenised_as_raw
from nmtkit.text.vocab import SPECIALS, UNK_ID, Vocab

log = logging.getLogger("nmtkit.preprocess")


# ---- the worker side: chunks of pairs tokenised and cleaned (pass 1 of train) or encoded into ids

def prepare_state(state: dict[str, Any]) -> dict[str, Any]:
    """A worker's state from the plain settings `state`: the pipeline rebuilt from its dict."""
    return dict(state, pipeline=TextPipeline.from_dict(state["pipeline"]))


START = "\n"  # before a sentence-initial word in the counts of truecased text, which truecase.perl cases apart


def _keys(tokens: list[str], truecase: bool) -> list[str]:
    """The words as counted and looked up: with truecasing, those that start a sentence marked (START)."""
    return [START + t if s else t for t, s in zip(tokens, sentence_starts(tokens))] if truecase else tokens


def _cased(p: TextPipeline, side: str, key: list[str]) -> list[str]:
    """`p.case` of one word of `_keys`: at a sentence start where marked, else inside one."""
    return p.case([key[0].removeprefix(START)], side, start=key[0].startswith(START))


def word_ids(p: TextPipeline, stoi: dict[str, int], word: str, side: str) -> tuple[int, ...]:
    """A word's (`_keys`') ids after casing, BPE and the vocabulary (each acts word by word)."""
    return tuple(stoi.get(t, UNK_ID) for t in p.apply_bpe(_cased(p, side, [word]), side))


def tokenize_clean_chunk(pairs: list[tuple[str, str, int | None, bool]]) -> dict[str, Any]:
    """Pass 1 of the train split: tokenise, clean, count words and casing evidence. A repeat (`pair_chunks`)
    is a duplicate only where cleaning keeps it, as when clean-corpus-n runs before deduplication."""
    state = worker_state()
    p: TextPipeline = state["pipeline"]
    fmt = state["input_format"]
    max_len, max_ratio = state["max_len"], state["max_ratio"]
    out = {"src": [], "tgt": []}
    counts = {"src": Counter(), "tgt": Counter()}
    casing = {"src": new_casing(), "tgt": new_casing()} if state["truecase"] else None
    drops: Counter = Counter()
    for s, t, number, repeat in pairs:
        st, tt = _tokens(p, s, "src", fmt, number), _tokens(p, t, "tgt", fmt, number)
        reason = drop_reason(len(st), len(tt), max_len, max_ratio) or ("duplicate" if repeat else None)
        if reason is not None:
            drops[reason] += 1
            continue
        for side, toks in (("src", st), ("tgt", tt)):
            out[side].append(" ".join(toks))
            counts[side].update(_keys(toks, casing is not None))
            if casing is not None:
                add_weights(casing[side], truecase_weights(toks))
    return {"n_in": len(pairs), "kept": len(out["src"]), "src": "\n".join(out["src"]),
            "tgt": "\n".join(out["tgt"]), "drops": drops, "counts": counts,
            "casing": {k: dict(v) for k, v in casing.items()} if casing else None}


def encode_chunk(pairs: list[tuple[str, str, int | None]]) -> dict[str, Any]:
    """Pairs (`pair_chunks`) -> per side: the ids concatenated, each sentence's length in ids and in
    words (tokens before BPE, the unit of --max-len), and the word and UNK totals."""
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
            toks = _tokens(p, pair[k], side, fmt, pair[2])
            word_lens[j] = len(toks)
            n0 = len(ids)
            for w in _keys(toks, p.truecase is not None):
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
    """`encode_chunk` over consecutive byte ranges (src start, end, tgt start, end) of pass 1's files."""
    src, tgt, ranges = task
    sides = []
    for path, k in ((src, 0), (tgt, 2)):
        with open(path, "rb") as f:
            f.seek(ranges[0][k])
            sides.append(decode_lines(f.read(ranges[-1][k + 1] - ranges[0][k]), path, file_start=ranges[0][k] == 0))
    return encode_chunk([(s, t, None) for s, t in zip(*sides)])


def _tokens(p: TextPipeline, line: str, side: str, fmt: str, number: int | None) -> list[str]:
    """`p.tokenize_from`; an NmtkitError learns the side and line `number`, for `_named`."""
    try:
        return p.tokenize_from(line, side, fmt)
    except NmtkitError as err:
        err.side, err.line_number = side, number
        raise


def _named(err: NmtkitError, paths: dict[str, str]) -> NmtkitError:
    """`err` naming the file and line `_tokens` recorded, where it did."""
    side, number = getattr(err, "side", None), getattr(err, "line_number", None)
    if err.path is not None or side is None or number is None:
        return err
    return InputError(err.bare_message, paths[side], number)


def pair_chunks(src: str, tgt: str, size: int, read: list[int],
                dedup: PairDeduper | None = None) -> Iterator[list[tuple[str, str, int, bool]]]:
    """Chunks of (src line, tgt line, its line number, whether `dedup` saw the pair before); `read[0]`
    counts lines read (for progress)."""
    chunk = []
    for lineno, (s, t) in enumerate(itertools.zip_longest(read_lines(src), read_lines(tgt)), 1):
        if s is None or t is None:  # the file changed since it was counted
            raise InputError(f"parallel files differ in length: {src} and {tgt} part at line {lineno}")
        read[0] = lineno
        chunk.append((s, t, lineno, dedup is not None and dedup.seen_before(s, t)))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _learn_bpe(config: PreprocessConfig, cased: dict[str, Counter], out: Path,
               langs: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pipeline's BPE setting, the manifest's "bpe" record); writes the codes file(s)."""
    if config.bpe_separate:
        codes = {side: learn_codes(cased[side], config.bpe, config.bpe_min_frequency) for side in SIDES}
    else:
        joint = learn_codes(cased["src"] + cased["tgt"], config.bpe, config.bpe_min_frequency)
        codes = {"src": joint, "tgt": joint}
    vocab_filter = None
    if config.bpe_vocab_threshold is not None:
        vocab_filter = {side: subword_vocab(codes[side], cased[side], config.bpe_vocab_threshold) for side in SIDES}
    setting = {"joint": not config.bpe_separate, "codes": codes, "vocab": vocab_filter,
               "vocab_threshold": config.bpe_vocab_threshold, "merges": config.bpe, "separator": SEPARATOR}
    files = {side: f"bpe.codes.{langs[side]}" if config.bpe_separate else "bpe.codes" for side in SIDES}
    for side in SIDES:
        (out / files[side]).write_text(codes[side], encoding="utf-8")
    return setting, {"codes_files": files, "merges_learned": {side: count_merges(codes[side]) for side in SIDES}}


def _learn(config: PreprocessConfig, base: TextPipeline, word_counts: dict[str, Counter],
          casing: dict[str, Any] | None, out: Path, report: Progress) -> tuple[TextPipeline, dict[str, Vocab], dict]:
    """(the full pipeline, the vocabularies, the manifest's "bpe" record); writes their files to `out`."""
    langs = {"src": config.src_lang, "tgt": config.tgt_lang}
    pipeline = base
    if casing is not None:
        pipeline = replace(pipeline, truecase={side: best_forms(casing[side]) for side in SIDES})
    cased = {side: piece_counts(word_counts[side], functools.partial(_cased, pipeline, side)) for side in SIDES}
    bpe_info: dict[str, Any] = {}
    if config.bpe is not None:
        report("learn BPE", 0, None)
        setting, bpe_info = _learn_bpe(config, cased, out, langs)
        pipeline = replace(pipeline, bpe=setting)
        report("learn BPE", 1, 1)
    vocabs = {}
    for side in SIDES:
        counts = piece_counts(cased[side], functools.partial(pipeline.apply_bpe, side=side))
        vocabs[side] = Vocab.build(counts, max_size=config.vocab_size(side), min_count=config.vocab_min_count)
        if len(vocabs[side]) == len(SPECIALS) and counts:  # every token would be <unk>: no data worth training on
            raise ConfigError(f"--vocab-min-count {config.vocab_min_count} is above the count of every "
                              f"{langs[side]} token (the most frequent is seen {max(counts.values()):,} times): "
                              "the vocabulary would hold no word")
        vocabs[side].save(out / f"vocab.{langs[side]}.txt")
    return pipeline, vocabs, bpe_info


def _dest_path(dest: str) -> Path:
    """The folder --dest names, a symlink followed; never the current folder or one holding it."""
    path = Path(dest)
    if path.is_symlink():
        if not path.is_dir():
            raise OutputError("is a symlink that leads to no folder; choose another --dest", dest)
        path = Path(real_path(path))
    if is_inside(real_path(os.getcwd()), real_path(path)):
        raise OutputError("is the current folder or holds it, which preprocess would replace; give the name of "
                          "a folder to create, e.g. --dest data", dest)
    return path


def _check_dest(dest: Path, force: bool) -> None:
    """A non-empty --dest is replaced only with `force`, and only when it holds nothing but the
    files its manifest lists: nothing else is ever deleted. A --dest below a file is refused."""
    above = next((p for p in dest.absolute().parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise OutputError(f"cannot be made: {above} is a file, not a folder", str(dest))
    if dest.exists():
        if not dest.is_dir():
            raise OutputExistsError("exists and is not a directory; choose another --dest", str(dest))
        owned: set[str] = set()
        with contextlib.suppress(OSError, ValueError):
            manifest = json.loads((dest / "manifest.json").read_text(encoding="utf-8"))
            owned = owned_files(manifest) if isinstance(manifest, dict) else set()
        check_replaceable_dir(dest, owned.__contains__, "--dest data directory")  # before advising --force
        if any(dest.iterdir()) and not force:
            raise OutputExistsError("already exists and is not empty; use --force to replace it", str(dest))


def _check_outputs(config: PreprocessConfig) -> None:
    """No input may lie in the --dest that preprocess replaces (or be it)."""
    inputs = [(f"--{name if name in ('train', 'valid') else 'test'}", path) for name, prefix in config.splits()
              for lang in (config.src_lang, config.tgt_lang) for path in input_candidates(prefix, lang)]
    inputs += [("--protect", p) for p in config.protect if os.path.isfile(p)]
    check_outputs_vs_inputs(inputs, replaced_dirs=[("--dest", config.dest)])


def _warm_up(p: TextPipeline, config: PreprocessConfig) -> None:
    """Build sacremoses' tokenisers once, before workers fork, not in every worker of every stage."""
    if config.input_format == "raw":
        for side in SIDES:
            p.tokenize("Warm-up: it's 3.5 \"quoted\" (e.g. U.S.A.) -- l'homme « dit » !", side)
    if config.truecase:
        truecase_weights(["Warm", "up", "."])


def _check_inputs(config: PreprocessConfig, base: TextPipeline,
                  report: Progress) -> tuple[dict[str, str], dict[str, int]]:
    """Every input checked before anything is built: ({file: sha256}, {split: lines})."""
    inputs: dict[str, str] = {}
    line_counts: dict[str, int] = {}
    splits, seen = config.splits(), {}  # splits()[0] is train, [1] valid
    report("check inputs", 0, len(splits))
    for k, (name, prefix) in enumerate(splits, 1):
        src, tgt = config.files(prefix)
        n, h_src, h_tgt = check_parallel(src, tgt)
        if n == 0:
            raise InputError(f"the {name} split is empty", src)
        if name == "valid":  # train validates on its sentences and scores against its references
            for path, side in ((src, "src"), (tgt, "tgt")):
                try:  # a line the tokeniser refuses (--protect) is named as in the encoding pass
                    words = any(_tokens(base, line, side, config.input_format, number)
                                for number, line in enumerate(read_lines(path), 1) if line.strip())
                except NmtkitError as err:  # stops at the first sentence
                    raise _named(err, {side: path}) from None
                if not words:
                    raise InputError(f"the valid split's {n} lines hold no word (blank, or only spaces and "
                                     "invisible characters): train validates on its sentences", path)
        for path, lang in ((src, config.src_lang), (tgt, config.tgt_lang)):
            if config.input_format == "tok" and not check_tokinfo(path, lang, base):  # translate replays the settings
                log.warning("%s: no %s beside it, so its tokeniser settings cannot be checked; they must be this "
                            "command's (translate replays them)", path, TOKINFO_SUFFIX)
            elif config.input_format == "raw" and (tokenised := tokenised_as_raw(path)):
                log.warning(tokenised)
        inputs[os.path.abspath(src)], inputs[os.path.abspath(tgt)] = h_src, h_tgt  # as the prefixes (_encode_split)
        line_counts[name] = n
        first = seen.setdefault((h_src, h_tgt), name)
        if first != name and first in ("train", "valid"):
            log.warning("%s: the %s split is the same text as --%s (%s): its scores measure the %s, not held-out "
                        "text (held-out splits are never compared with %s)", src, name, first, dict(splits)[first],
                        "training data" if first == "train" else "dev data checkpoint_best.pt is chosen on", first)
        report("check inputs", k, len(splits))
    if line_counts["train"] < line_counts["valid"]:  # the dev set is usually far smaller
        log.warning("%s: --train has %d lines, fewer than --valid's %d: are --train and --valid the wrong way round?",
                    config.files(config.train)[0], line_counts["train"], line_counts["valid"])
    return inputs, line_counts


def run(config: PreprocessConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Run the whole preprocessing; returns the manifest. On any failure DEST is as it was."""
    if not isinstance(config, PreprocessConfig):
        raise TypeError(f"preprocess takes a PreprocessConfig, not {type(config).__name__}")
    base = config.base_pipeline()  # a bad --protect fails before anything is read or written
    warn_both_exist([prefix for _, prefix in config.splits()], (config.src_lang, config.tgt_lang))
    report = progress or no_progress
    dest = _dest_path(config.dest)
    _check_outputs(config)
    _check_dest(dest, config.force)

    inputs, line_counts = _check_inputs(config, base, report)
    created: list[Path] = []  # the folders above dest this run made, removed again if it fails
    with contextlib.ExitStack() as held:  # the temp folder, held while this run writes it
        try:
            created = make_parents(dest)
            tmp = held.enter_context(held_temp_dir(dest, log.warning))
        except OSError as err:
            remove_folders(created)
            raise OutputError(f"cannot create the data directory here: {err.strerror}", str(dest)) from None
        try:
            work = tmp / "work"
            work.mkdir()
            manifest = _build(config, base, report, tmp, work, line_counts)
            manifest["inputs"] = inputs
            shutil.rmtree(work)
            manifest["files"] = sorted([str(p.relative_to(tmp)) for p in tmp.rglob("*") if not p.is_dir()]
                                       + ["manifest.json"])
            _write_manifest(tmp / "manifest.json", manifest)
            # the finished directory replaces an old one only now: checked again, under the swap's lock
            old = swap_in_dir(tmp, dest, lambda: _check_dest(dest, config.force))
        except BaseException as err:
            shutil.rmtree(tmp, ignore_errors=True)
            remove_folders(created)
            if isinstance(err, OSError):  # disk full, permissions...: a user-facing error, not a traceback
                raise OutputError(f"cannot write the data directory: {err.strerror or err}",
                                  err.filename or str(dest)) from None
            raise
    if old is not None:
        log.warning("the replaced data directory could not be deleted whole; what is left of it is %s: "
                    "delete it by hand", old)
    return manifest


def _write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """manifest.json as UTF-8, or as ASCII JSON where a file name is not UTF-8 (its escapes read back)."""
    try:
        data = json.dumps(manifest, indent=1, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        data = json.dumps(manifest, indent=1).encode("ascii")
    path.write_bytes(data + b"\n")


@contextlib.contextmanager
def _timed(stage: str, timings: dict[str, float], cpu: dict[str, float]) -> Iterator[None]:
    """Wall and main-process CPU seconds of a stage, into `timings` and `cpu`."""
    t0, c0 = time.perf_counter(), time.process_time()
    yield
    timings[stage] = time.perf_counter() - t0
    cpu[stage] = time.process_time() - c0


@dataclass
class _TrainPass:
    """What pass 1 over train leaves, down to the tokenised files and their chunks' byte ranges."""

    kept: int
    drops: Counter
    word_counts: dict[str, Counter]
    casing: dict[str, Any] | None
    tok_paths: dict[str, Path]
    tok_ranges: list[tuple[int, int, int, int]]


def _tokenize_train(config: PreprocessConfig, report: Progress, base: TextPipeline, n_train: int,
                    work: Path) -> _TrainPass:
    """Pass 1 over train: tokenise + clean + count, in parallel; writes work/train.tok.{src,tgt}."""
    stage = "tokenise + clean train"
    report(stage, 0, n_train)
    res_all = _TrainPass(0, Counter({r: 0 for r in DROP_REASONS}), {"src": Counter(), "tgt": Counter()},
                         {"src": new_casing(), "tgt": new_casing()} if config.truecase else None,
                         {side: work / f"train.tok.{side}" for side in SIDES}, [])
    read = [0]
    state = {"pipeline": base.to_dict(), "input_format": config.input_format, "max_len": config.max_len,
             "max_ratio": config.max_ratio, "truecase": config.truecase}
    train_src, train_tgt = config.files(config.train)
    with open(res_all.tok_paths["src"], "wb") as fs, open(res_all.tok_paths["tgt"], "wb") as ft:
        chunks = pair_chunks(train_src, train_tgt, config.chunk_size, read, PairDeduper() if config.dedup else None)
        try:
            for res in parallel_map(tokenize_clean_chunk, chunks, config.workers, chunk_size=1,
                                    state=state, prepare=prepare_state):
                if res["kept"]:
                    start = (fs.tell(), ft.tell())
                    fs.write((res["src"] + "\n").encode("utf-8"))
                    ft.write((res["tgt"] + "\n").encode("utf-8"))
                    res_all.tok_ranges.append((start[0], fs.tell(), start[1], ft.tell()))
                res_all.kept += res["kept"]
                res_all.drops.update(res["drops"])
                for side in SIDES:
                    res_all.word_counts[side].update(res["counts"][side])
                    if res_all.casing is not None:
                        for lower, forms in res["casing"][side].items():
                            res_all.casing[side][lower].update(forms)
                report(stage, read[0], n_train)
        except NmtkitError as err:
            raise _named(err, {"src": train_src, "tgt": train_tgt}) from None
    return res_all


def _encode_split(config: PreprocessConfig, report: Progress, name: str, prefix: str, state: dict[str, Any],
                  train: _TrainPass, n_lines: int, out: Path, work: Path) -> dict[str, Any]:
    """One split -> its binarised files in `out`; returns its manifest record."""
    langs = {"src": config.src_lang, "tgt": config.tgt_lang}
    if name == "train":
        src, tgt, fmt, total = str(train.tok_paths["src"]), str(train.tok_paths["tgt"]), "tok", train.kept
        ranges = train.tok_ranges
        group = max(1, 4 * config.chunk_size // max(1, train.kept // max(1, len(ranges))))
        func, tasks = encode_ranges, ((src, tgt, ranges[i:i + group]) for i in range(0, len(ranges), group))
    else:
        (src, tgt), fmt, total = config.files(prefix), config.input_format, n_lines
        func, tasks = encode_chunk, pair_chunks(src, tgt, config.chunk_size, [0])
    stage = f"encode + binarise {name}"
    report(stage, 0, total)
    writers = {side: SplitWriter(out, work, name, langs[side]) for side in SIDES}
    words, unk = dict.fromkeys(SIDES, 0), dict.fromkeys(SIDES, 0)
    done = 0
    try:
        for res in parallel_map(func, tasks, config.workers, chunk_size=1,
                                state={**state, "input_format": fmt}, prepare=prepare_state):
            for side in SIDES:
                r = res[side]
                writers[side].add(r["ids"], r["lens"], r["word_lens"])
                words[side] += r["words"]
                unk[side] += r["unk"]
            done += res["n_in"]
            report(stage, done, total)
    except NmtkitError as err:
        raise _named(err, {"src": src, "tgt": tgt}) from None
    for w in writers.values():
        w.close()
    n_tok = {side: writers[side].n_tokens for side in SIDES}
    return {
        "prefix": os.path.abspath(prefix),  # train finds its raw dev references from any folder
        "lines_in": n_lines,
        "lines": writers["src"].n_lines,
        "src_tokens": n_tok["src"],
        "tgt_tokens": n_tok["tgt"],
        "src_words": words["src"],
        "tgt_words": words["tgt"],
        "unk_tokens": dict(unk),
        "unk_rate": {side: (unk[side] / n_tok[side] if n_tok[side] else 0.0) for side in SIDES},
        "dropped": {r: train.drops[r] for r in DROP_REASONS} if name == "train" else {},
    }


def _build(config: PreprocessConfig, base: TextPipeline, report: Progress, out: Path, work: Path,
           line_counts: dict[str, int]) -> dict[str, Any]:
    """Pass 1 over train, learning, every split encoded -> the manifest (without "inputs")."""
    timings: dict[str, float] = {}
    cpu: dict[str, float] = {}
    _warm_up(base, config)
    with _timed("tokenise + clean train", timings, cpu):
        train = _tokenize_train(config, report, base, line_counts["train"], work)
    for side, path in zip(SIDES, config.files(config.train)) if config.input_format == "tok" else ():
        if found := [e for e in MOSES_ESCAPES if e in train.word_counts[side] or START + e in train.word_counts[side]]:
            log.warning("%s: the words %s are tokenizer.perl's XML escapes (written unless -no-escape); "
                        "translate tokenises raw text without them, so its \" ' & would miss these words: unescape "
                        "the text (deescape-special-chars.perl) or tokenise the raw text with 'nmtkit tokenize'",
                        path, " ".join(found))
        if config.bpe and (n := unrecorded_subwords(train.word_counts[side])):
            log.warning("%s: %d distinct words end in '%s', text already split by BPE, which --bpe splits again "
                        "('out@@' -> 'ou@@ t@@'): give the text before BPE, or leave --bpe out", path, n, SEPARATOR)
    if train.kept == 0:
        summary = ", ".join(f"{r}: {n}" for r, n in train.drops.items() if n)
        raise InputError(f"no training pairs left after cleaning ({summary}); check --max-len/--max-ratio "
                         f"or the input", config.files(config.train)[0])
    with _timed("learn", timings, cpu):
        pipeline, vocabs, bpe_info = _learn(config, base, train.word_counts, train.casing, out, report)
    # every training word's ids (segmented already, for the vocabulary), which forked workers inherit
    known = {side: {w: word_ids(pipeline, vocabs[side].stoi, w, side) for w in train.word_counts[side]}
             for side in SIDES}
    state = {"pipeline": pipeline.to_dict(), "stoi": {s: v.stoi for s, v in vocabs.items()}, "word_ids": known}
    split_stats: dict[str, Any] = {}
    for name, prefix in config.splits():
        with _timed(f"encode + binarise {name}", timings, cpu):
            split_stats[name] = _encode_split(config, report, name, prefix, state, train, line_counts[name], out,
                                              work)
    return new_manifest(
        config.src_lang, config.tgt_lang,
        {"src": f"vocab.{config.src_lang}.txt", "tgt": f"vocab.{config.tgt_lang}.txt",
         "src_size": len(vocabs["src"]), "tgt_size": len(vocabs["tgt"]),
         "size_cap": {side: config.vocab_size(side) for side in SIDES}},
        nmtkit_version=__version__,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        pipeline=pipeline.to_dict(),
        bpe=bpe_info or None,
        splits=split_stats,
        settings=config.to_dict(),
        timings_s={k: round(v, 3) for k, v in timings.items()},
        main_cpu_s={k: round(v, 3) for k, v in cpu.items()},
    )
