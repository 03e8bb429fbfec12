"""`Translator`: loaded checkpoint(s) + the recorded text pipeline; raw lines -> Results
(prepare, batch by length, beam search or sampling, UNK replacement, BPE join, detokenisation),
a buffer's batches shared by forked worker processes on the CPU (`map_batches`). It writes
nothing: the outputs are `nmtkit.translate.writers`'. It is nmtkit's Python API (`nmtkit.load`)
and the one path from raw lines to translations behind `nmtkit translate` and `nmtkit serve`:

    model = nmtkit.load("run/checkpoint_best.pt", device="cpu", beam=5)
    model.translate(["Hello, world!"])               # -> ["Bonjour, le monde !"]
    [r] = model.generate(["Hello, world!"], nbest=3, alignments=True)
    r.text, r.nbest[1].text, r.nbest[0].alignment()  # 1-best, 2nd best, [(src i, tgt j), ...]
"""
from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from dataclasses import fields
from typing import Any, Callable, Iterable, Sequence, TypeVar

from nmtkit.devices import resolve_device
from nmtkit.errors import ConfigError, InputError
from nmtkit.text.io import BOM
from nmtkit.text.vocab import UNK
from nmtkit.translate.alignment import Result, read_unk_dict, replace_unks
from nmtkit.translate.config import DEFAULT_MAX_SRC_LEN, TranslateConfig, batch_token_cap
from nmtkit.workers import Workers

log = logging.getLogger(__name__)

# lines a worker tokenises at a time when several do (`Translator._prepare_all`)
PREPARE_CHUNK_LINES = 256
# `Translator._warn_unrecorded_bpe`: this many target words ending in "@@" say the text was BPE'd
UNRECORDED_SUBWORDS = 20


class Translator:
    """Loaded checkpoint(s) + pipeline; translates lists of lines or a stream of lines.

    Build one with `nmtkit.load` (or `Translator.load`), or from a `TranslateConfig`.
    """

    @classmethod
    def load(cls, checkpoints: str | os.PathLike | Sequence[str | os.PathLike], *,
             warn: Callable[[str], None] | None = None, **options: Any) -> Translator:
        """A translator over one checkpoint, or an ensemble of several (a list).

        `options` are `nmtkit translate`'s options as `TranslateConfig` fields, e.g. device="cpu",
        beam=5, lenpen=1.0, nbest=3, replace_unk=True, sampling=True, temperature=0.8, seed=7,
        output_format="tok". An unknown or bad option raises ConfigError naming it; a missing
        or broken checkpoint raises CheckpointError.
        """
        from nmtkit.checkpoint import checkpoint_paths

        paths = checkpoint_paths(checkpoints)
        if warn is not None and not callable(warn):
            raise TypeError(f"warn must be a function taking one message, not {type(warn).__name__}")
        valid = sorted(f.name for f in fields(TranslateConfig)
                       if "option" in f.metadata and f.name not in ("models", "ensemble"))
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise ConfigError(f"unknown option(s) {', '.join(unknown)}; valid ones: {', '.join(valid)}")
        config = TranslateConfig(models=tuple(str(p) for p in paths), ensemble=len(paths) > 1, **options)
        translator = cls(config, warn=warn)
        translator.source_name = "<input>"  # warnings name the line as "<input>:N" (N from 1)
        return translator

    def __init__(self, config: TranslateConfig, warn: Callable[[str], None] | None = None):
        """Load `config.models` (a `ModelBundle`, `self.bundle`) for decoding as `config` says
        (a config is validated once, when it is built)."""
        from nmtkit.devices import default_threads, import_torch, use_threads

        import_torch()  # before the modules that import it, with interrupts held (see there)
        from nmtkit.models.fast.quantize import INT8_ON_CUDA
        from nmtkit.models.precision import FP16_ON_CPU, autocast

        self.config = config
        self.warn = warn or log.warning
        self.device = resolve_device(config.device)
        if config.precision == "int8" and self.device.type != "cpu":
            raise ConfigError(INT8_ON_CUDA)
        # torch's threads are the process's: this translator's are set before it loads ("auto" may
        # time a product on them) and again before a call finds them changed (by another
        # translator), never put back after each call (resizing torch's pool costs ~4 ms)
        self.threads = config.threads or default_threads()  # what --workers share
        use_threads(self.threads)
        self.bundle, self.precision = bundle, precision = self._load()
        int8 = precision == "int8"
        # a wider beam than the target vocabulary finds nothing more and costs memory and time:
        # every search is capped at max_beam (n-best lists too)
        self.max_beam = n_tgt = len(self.tgt_vocab.itos)
        if config.beam > n_tgt:
            nbest = f" and --nbest {config.nbest} lists of at most {n_tgt}" if config.nbest > n_tgt else ""
            self.warn(f"--beam {config.beam} is above the target vocabulary's {n_tgt} entries: searching with "
                      f"a beam of {n_tgt}, which finds the same translations{nbest}")
        # Jean et al. (2015)'s candidate list: with the lexicon the trainer stores (a checkpoint
        # made otherwise may have none), each batch scores only its shortlist of target words
        # (sampling draws from the whole vocabulary: a shortlist would change its distribution)
        use_shortlist = config.shortlist == "auto" and not config.sampling
        self.lexicon = bundle.lexicon if use_shortlist else None
        if config.max_src_len is not None:
            self.max_src_len = config.max_src_len
        else:
            trained = bundle.trained_max_len
            self.max_src_len = max(DEFAULT_MAX_SRC_LEN, 4 * trained) if trained else DEFAULT_MAX_SRC_LEN
        self.max_tokens = batch_token_cap(config.max_tokens, self.device.type)  # None: no cap
        self.unk_dict = read_unk_dict(config.unk_dict) if config.unk_dict else None
        self.warned_budget = False
        self.batches_decoded = 0
        asked = [o for o, on in (("--replace-unk", config.replace_unk), ("--alignments", config.alignments),
                                 ("--plot-attention", config.plot_attention)) if on]
        self.need_attention = bool(asked)
        if asked:
            self._check_attention(asked[0])
        if precision == "fp16" and self.device.type != "cuda":
            log.warning(FP16_ON_CPU)
        # autocast keeps the fp32 weights and runs matrix products in 16 bits; log-softmax and
        # the beam scores stay in fp32 (Seq2Seq.step returns fp32 log-probabilities)
        # (int8: float32 activations into the int8 layers, and float32 everywhere else)
        self.autocast = autocast(self.device.type, "fp32" if int8 else precision)
        self.source_name = "<stdin>"
        self._warn_unrecorded_bpe()

    @property
    def has_attention(self) -> bool:
        """Whether every model attends (alignments, attention plots and <unk> replacement work)."""
        return all(model.has_attention for model in self.bundle.models)

    def _check_attention(self, option: str) -> None:
        """Refuse `option` (alignments, attention plots, <unk> replacement) for a model without
        attention: its all-zero weights would align every target word to the first source word."""
        for path, model in zip(self.bundle.paths, self.bundle.models):
            if not model.has_attention:
                raise ConfigError(f"{option} needs attention, and {path} is a model without it "
                                  f"({type(model).__name__})")

    def _warn_unrecorded_bpe(self) -> None:
        """Warn when the vocabularies hold BPE subwords (words ending in "@@") that the recorded
        pipeline does not make: the training text was split before `nmtkit preprocess`, so raw
        or tokenised input is not split as the model was trained, and its output is not joined."""
        from nmtkit.text.bpe import SEPARATOR

        c = self.config
        if self.pipeline.bpe is not None or (c.input_format == "bpe" and c.output_format == "bpe"):
            return
        n = sum(w.endswith(SEPARATOR) for w in self.tgt_vocab.itos)
        if n >= UNRECORDED_SUBWORDS:
            self.warn(f"{self.config.models[0]}: its target vocabulary has {n:,} subwords ending in "
                      f"'{SEPARATOR}', but its text pipeline applies no BPE (the text was split before nmtkit "
                      "preprocess): give BPE'd input with --input-format bpe, and --output-format bpe to join "
                      "the output yourself")

    def _load(self) -> tuple[Any, str]:
        """(the ModelBundle of config.models, the decoding precision). auto: int8 on CPUs with
        int8 dot products, else bf16 where faster (GPUs, some CPUs), else fp32; it is chosen before
        loading, as every architecture has int8 layers. int8 quantises each model as it loads, in
        place, reading the float weights it replaces straight from the checkpoint file
        (`load_model`'s prepare)."""
        from nmtkit.checkpoint import load_bundle
        from nmtkit.models.fast.fusion import resolve_fuse
        from nmtkit.models.fast.quantize import quantize_for_decoding
        from nmtkit.models.precision import resolve_decode_precision

        config, device = self.config, self.device
        precision = resolve_decode_precision(device.type, config.precision)
        bundle = load_bundle(config.models, device, fuse_steps=resolve_fuse(config.fuse, device),
                             prepare=quantize_for_decoding if precision == "int8" else None)
        return bundle, precision

    @property
    def models(self) -> tuple[Any, ...]:
        return self.bundle.models

    @property
    def src_vocab(self) -> Any:
        return self.bundle.src_vocab

    @property
    def tgt_vocab(self) -> Any:
        return self.bundle.tgt_vocab

    @property
    def pipeline(self) -> Any:
        return self.bundle.pipeline

    # -- per line
    def prepare(self, line: str, lineno: int, warn: Callable[[str], None] | None = None) -> list[str]:
        """The model's source tokens for one input line (truncated to --max-src-len, warned
        through `warn`, by default the translator's)."""
        return self._prepare(line, lineno, warn)[0]

    def _prepare(self, line: str, lineno: int, warn: Callable[[str], None] | None = None) -> tuple[list[str], bool]:
        """`prepare`'s tokens, and whether --max-src-len cut them."""
        if not line.strip():
            return [], False
        try:
            toks = self.pipeline.encode_from(line, "src", self.config.input_format)
        except InputError as err:  # a protected pattern past its time limit
            if err.path is not None:
                raise
            raise InputError(err.bare_message, self.source_name, lineno) from None
        if len(toks) <= self.max_src_len:
            return list(toks), False
        (warn or self.warn)(f"{self.source_name}:{lineno}: {len(toks)} source tokens, translating only the first "
                            f"{self.max_src_len} (--max-src-len)")
        return list(toks[: self.max_src_len]), True

    def decode_batch(self, src_token_lists: Sequence[list[str]], beam: int | None = None, nbest: int | None = None,
                     need_attention: bool | None = None, keys: Sequence[int] | None = None) -> list[list[Any]]:
        """Beam search (or, with config.sampling, one sample each) over non-empty token lists of
        similar lengths -> n-best Hypotheses each.

        beam, nbest, need_attention: per-call values (the server's per-request options); None
        takes the config's (and the translator's need for attention). keys: each sentence's
        line number, which seeds its sample (`nmtkit.decode.sampling`; default 1, 2, ...)."""
        import torch

        from nmtkit.data.binarized import pad_rows
        from nmtkit.devices import RELEASE_EVERY_BATCHES, release_free_memory

        ids = [self.src_vocab.encode(t) for t in src_token_lists]
        lens = torch.tensor([len(x) for x in ids], dtype=torch.long)
        src = torch.from_numpy(pad_rows(ids))
        need_attention = self.need_attention if need_attention is None else need_attention
        with torch.inference_mode(), self.autocast:
            if self.config.sampling:
                results = self._sample(src, lens, need_attention, keys)
            else:
                results = self._beam_search(src, lens, beam, nbest, need_attention)
        self.batches_decoded += 1
        if self.batches_decoded % RELEASE_EVERY_BATCHES == 0:
            release_free_memory()  # past batches' buffers, which the next batches' shapes would not reuse
        return results

    def _beam_search(self, src: Any, lens: Any, beam: int | None, nbest: int | None, need_attention: bool):
        from nmtkit.decode.search import beam_search
        from nmtkit.decode.shortlist import shortlist_ids

        c = self.config
        vocab = None
        if self.lexicon is not None:
            vocab = shortlist_ids(self.lexicon, src, len(self.tgt_vocab.itos))
            vocab = vocab if len(vocab) < len(self.tgt_vocab.itos) else None  # beam_search moves it
        return beam_search(
            self.models, src.to(self.device), lens.to(self.device), beam=min(beam or c.beam, self.max_beam),
            lenpen=c.lenpen, max_len_a=c.max_len_a, max_len_b=c.max_len_b, nbest=min(nbest or c.nbest, self.max_beam),
            need_attention=need_attention, vocab=vocab, ban_unk=c.ban_unk,
        )

    def _sample(self, src: Any, lens: Any, need_attention: bool, keys: Sequence[int] | None):
        from nmtkit.decode.sampling import sample

        c = self.config
        return sample(self.models, src.to(self.device), lens.to(self.device), c.sampling_seed, keys, topk=c.sampling_topk,
                      temperature=c.temperature, max_len_a=c.max_len_a, max_len_b=c.max_len_b, lenpen=c.lenpen,
                      need_attention=need_attention, ban_unk=c.ban_unk)

    def finish(self, res: Result) -> Result:
        """Tokens and output strings for a decoded line (UNK replacement, BPE join, detok)."""
        itos = self.tgt_vocab.itos
        for hyp in res.hyps:
            toks = [itos[i] for i in hyp.tokens]
            if self.config.replace_unk and hyp.attention is not None:
                toks = replace_unks(toks, res.src_tokens, hyp.attention, UNK, self.unk_dict)
            res.tgt_tokens.append(toks)
            res.texts.append(self.pipeline.decode_to(toks, "tgt", self.config.output_format))
        return res

    def translate_buffer(self, lines: Sequence[tuple[int, str]], beam: int | None = None, nbest: int | None = None,
                         need_attention: bool | None = None) -> list[Result]:
        """[(line number, text)] -> Results in the same order: prepare, batch by length, decode,
        finish. The one path from raw lines to hypotheses, under `generate` and `translate` and
        the buffers of `nmtkit translate`; beam, nbest, need_attention as in `decode_batch`.
        A line's number names it in warnings and keys its sample (so a sample does not depend
        on the buffer or batch the line falls in). With several `--workers`, forked processes
        share the batches, each decoding and finishing whole ones, and the tokenising of text
        (`map_batches`)."""
        from nmtkit.data.binarized import length_batches
        from nmtkit.devices import use_threads

        use_threads(self.threads)
        workers = resolve_workers(self.config.workers, self.threads, self.device.type)
        results = [Result(index=n, src_tokens=toks, truncated=cut)
                   for (n, _), (toks, cut) in zip(lines, self._prepare_all(lines, workers))]
        todo = [i for i, r in enumerate(results) if r.src_tokens]
        cap = self.max_tokens
        over = [i for i in todo if cap is not None and len(results[i].src_tokens) > cap]
        if over and not self.warned_budget:
            self.warned_budget = True
            self.warn(f"--max-tokens {cap} is below the length of line {results[over[0]].index} "
                      f"({len(results[over[0]].src_tokens)} tokens): such lines are translated one per batch, "
                      "over the budget")
        batches = [[todo[b] for b in batch] for batch in length_batches(
            [len(results[i].src_tokens) for i in todo], self.config.batch_size, self.max_tokens, longest_first=True)]

        def decode(j: int) -> list[Result]:  # a batch, decoded and finished (BPE joined, detokenised)
            idx = batches[j]
            keys = [results[i].index for i in idx]
            for i, hyps in zip(idx, self.decode_batch([results[i].src_tokens for i in idx], beam, nbest,
                                                      need_attention, keys)):
                results[i].hyps = hyps
            return [self.finish(results[i]) for i in idx]

        for idx, done in zip(batches, map_batches(decode, len(batches), workers, self.threads)):
            for i, r in zip(idx, done):
                results[i] = r
        decoded = set(todo)  # finished by `decode`; the empty lines are finished here
        return [r if i in decoded else self.finish(r) for i, r in enumerate(results)]

    def _prepare_all(self, lines: Sequence[tuple[int, str]], workers: int) -> list[tuple[list[str], bool]]:
        """`_prepare` of every line, in order; with several workers and text to tokenise, chunk by
        chunk in the workers (their warnings given here, in line order)."""
        size = PREPARE_CHUNK_LINES
        if workers == 1 or self.config.input_format == "bpe" or len(lines) <= size:
            return [self._prepare(text, n) for n, text in lines]
        chunks = [lines[k:k + size] for k in range(0, len(lines), size)]

        def prepare_chunk(j: int) -> tuple[list[tuple[list[str], bool]], list[str]]:
            notes: list[str] = []
            return [self._prepare(text, n, notes.append) for n, text in chunks[j]], notes

        prepared: list[tuple[list[str], bool]] = []
        for toks, notes in map_batches(prepare_chunk, len(chunks), workers, self.threads):
            prepared += toks
            for note in notes:
                self.warn(note)
        return prepared

    def generate(self, lines: Iterable[str], *, beam: int | None = None, nbest: int | None = None,
                 alignments: bool = False) -> list[Result]:
        """One `Result` per line, in order: the `nbest` best translations (`Result.nbest`, with
        scores, tokens and, with alignments=True, the attention and `Translation.alignment()`).

        beam, nbest: this call's values instead of the loaded ones (nbest <= beam). Lines are
        raw text (or the loaded input_format); an empty line gets an empty Result."""
        for name, value in (("beam", beam), ("nbest", nbest)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{name} must be an integer, got {value!r}")
        if not isinstance(alignments, bool):
            raise ConfigError(f"alignments must be True or False, got {alignments!r}")
        beam_ = self.config.beam if beam is None else beam
        nbest_ = self.config.nbest if nbest is None else nbest
        if beam_ < 1:
            raise ConfigError(f"beam must be >= 1, got {beam}")
        if not 1 <= nbest_ <= beam_:
            raise ConfigError(f"nbest must be between 1 and the beam ({beam_}), got {nbest_}")
        if self.config.sampling and nbest_ != 1:
            raise ConfigError("a sampling translator draws one translation per line: nbest must be 1")
        if alignments:
            self._check_attention("alignments=True")
        numbered = list(enumerate(_lines_of(lines), 1))
        need_attention = self.need_attention or alignments
        return self.translate_buffer(numbered, beam_, nbest_, need_attention)

    def translate(self, lines: str | Iterable[str], *, beam: int | None = None) -> str | list[str]:
        """The best translation of each line (a list for a list, a string for a string)."""
        if isinstance(lines, str):
            return self.generate([lines], beam=beam)[0].text
        return [r.text for r in self.generate(lines, beam=beam)]


def _lines_of(lines: Any) -> list[str]:
    """`generate`'s lines as a list, each a str: anything else is a TypeError naming the line
    (bytes were read as their character codes, None failed deep in tokenisation, and a dict's
    keys were translated; a set's order is arbitrary, so its results could not be matched).
    Each line is taken as `nmtkit translate` takes a line of its input file: a line break or a
    NUL character (binary data) is an InputError naming the line, and a leading byte order mark
    (text read as "utf-8" rather than "utf-8-sig") is dropped, where a text pipeline without
    remove_non_printing would keep it as a word."""
    if isinstance(lines, str):
        raise TypeError("generate() takes a list of lines; translate() also takes one string")
    if isinstance(lines, (bytes, bytearray, dict, set, frozenset)) or not isinstance(lines, Iterable):
        raise TypeError(f"lines must be a list of str, not {type(lines).__name__}")
    out = list(lines)
    for n, line in enumerate(out, 1):
        if not isinstance(line, str):
            raise TypeError(f"line {n} is {type(line).__name__}, not str" +
                            (": decode it first" if isinstance(line, (bytes, bytearray)) else ""))
        if "\n" in line:
            raise InputError(f"line {n} holds a line break: pass one sentence per list item")
        nul = line.find("\0")
        if nul >= 0:
            raise InputError(f"line {n} holds binary data (a NUL character at character {nul}); expected text")
        if line.startswith(BOM):
            out[n - 1] = line[1:]
    return out


# -- `--workers`: a buffer's batches decoded by W processes (this one and W-1 children forked once
# the model is loaded, sharing its weights), each on its share of the threads, as Marian's
# --cpu-threads and CTranslate2's inter_threads do: small products scale poorly over threads, and
# Python threads serialise their per-step work. Each batch decodes as it would in one process.
T = TypeVar("T")

# `--workers` auto: at most this many workers (each one holds its batch's activations)
MAX_AUTO_WORKERS = 4

_DIED = ("a decoding worker process died without answering ({how}; out of memory? "
         "--workers 1 decodes in one process)")


def can_fork() -> bool:
    """Whether worker processes can be forked here: a POSIX system other than macOS (where
    forking a process that has loaded system frameworks is unsafe)."""
    return hasattr(os, "fork") and sys.platform != "darwin"


def resolve_workers(workers: int | None, threads: int, device_type: str) -> int:
    """--workers for a decode: the number given, or for auto (None) one per thread up to
    MAX_AUTO_WORKERS on the CPU, while this process runs no other Python thread (forking a
    process with threads can copy a lock another thread holds; a server decodes on a thread of
    its own and so stays in one process). GPUs and systems without fork: 1."""
    if device_type != "cpu" or not can_fork():
        return 1
    if workers is not None:
        return workers
    if threading.active_count() > 1:
        return 1
    return max(1, min(threads, MAX_AUTO_WORKERS))


def thread_shares(threads: int, workers: int) -> list[int]:
    """Torch threads of each worker: `threads` split as evenly as possible, at least 1 each."""
    base, extra = divmod(threads, workers)
    return [max(1, base + (i < extra)) for i in range(workers)]


def map_batches(decode: Callable[[int], T], n_jobs: int, workers: int, threads: int) -> list[T]:
    """[decode(0), ..., decode(n_jobs - 1)], decoded by `workers` processes (this one and
    workers-1 forked children, nmtkit.workers) with `threads` torch threads between them; in
    order.

    A child's exception is raised here (as a RuntimeError naming it where it cannot be
    pickled), and a child that dies without answering (killed, out of memory) is a
    WorkerError saying so (one line on the command line). If this process fails or is
    interrupted, its children are killed and reaped before the exception goes on."""
    workers = min(workers, n_jobs)
    if workers <= 1:
        return [decode(j) for j in range(n_jobs)]
    import multiprocessing

    import torch

    counter = multiprocessing.get_context("fork").Value("q", 0)  # the next batch to take

    def take() -> int:
        with counter.get_lock():
            j = counter.value
            counter.value = j + 1
        return j

    def decode_taken(_: object) -> dict[int, T]:
        out = {}
        while (j := take()) < n_jobs:
            out[j] = decode(j)
        return out

    before = torch.get_num_threads()
    try:
        with Workers(_DIED) as pool:
            children = [pool.start(decode_taken, functools.partial(torch.set_num_threads, share))
                        for share in thread_shares(threads, workers)[1:]]
            for child in children:
                child.send(None)
            torch.set_num_threads(thread_shares(threads, workers)[0])
            results = decode_taken(None)
            for child in children:
                results.update(child.reply())
    finally:
        torch.set_num_threads(before)
    return [results[j] for j in range(n_jobs)]
