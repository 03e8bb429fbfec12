"""`Translator`: loaded checkpoint(s) + the recorded text pipeline; raw lines -> `Result`s or,
with their translations, -> forced-decoding scores; it writes nothing. nmtkit's Python API and
the one path behind `nmtkit translate` and `nmtkit serve`:

    model = nmtkit.load("run/checkpoint_best.pt", device="cpu")
    model.translate(["Hello, world!"], beam=5)       # -> ["Bonjour, le monde !"]
    [r] = model.generate(["Hello, world!"], beam=5, nbest=3, alignments=True)
    model.score(["Hello, world!"], ["Bonjour, le monde !"])   # -> [log p(y | x)]
"""
from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import threading
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from nmtkit.checkpoint import checkpoint_paths
from nmtkit.devices import default_threads, import_torch, resolve_device, threads_restored, use_threads
from nmtkit.errors import ConfigError, InputError
from nmtkit.options import plain
from nmtkit.text.bpe import SEPARATOR, unrecorded_subwords
from nmtkit.text.io import BOM
from nmtkit.text.vocab import EOS_ID, UNK
from nmtkit.translate.alignment import Result, Translation, read_unk_dict, replace_unks
from nmtkit.translate.config import DEFAULT_MAX_SRC_LEN, DecodeConfig, SearchConfig, batch_token_cap
from nmtkit.workers import Workers, can_fork

log = logging.getLogger(__name__)

PREPARE_CHUNK_LINES = 256  # lines a worker tokenises at a time when several do
API_INPUT = "<input>"  # the name of the Python API's lines in warnings and errors


@dataclass(frozen=True)
class TokenScores:
    """A forced decoding of one pair (`Translator.score(per_token=True)`): log p(y | x), the sum of
    token_log_probs, one per target token then the EOS's (len(tokens) + 1 values)."""

    log_prob: float
    tokens: tuple[str, ...]
    token_log_probs: tuple[float, ...]


class Translator:
    """Loaded checkpoint(s) + pipeline (build one with `nmtkit.load`). Public attributes: `config`
    (the `DecodeConfig` it was loaded with), `device`, `precision` (the one chosen), `bundle` (the
    loaded `ModelBundle`), `max_src_len` and `max_tokens` (resolved limits)."""

    @classmethod
    def load(cls, checkpoints: str | os.PathLike | Sequence[str | os.PathLike], *,
             warn: Callable[[str], None] | None = None, **options: Any) -> Translator:
        """A translator over one checkpoint, or an ensemble of several (a list); `options` are
        `DecodeConfig` fields (`nmtkit.load`)."""
        paths = checkpoint_paths(checkpoints)
        if warn is not None and not callable(warn):
            raise TypeError(f"warn must be a function taking one message, not {type(warn).__name__}")
        # a search option is each call's; a call's unknown keyword is Python's TypeError
        valid = sorted(f.name for f in fields(DecodeConfig) if f.name not in ("models", "ensemble"))
        unknown = sorted(set(options) - set(valid))
        if unknown:
            elsewhere = [o for o in unknown if o in _SEARCH_FIELDS]
            hint = f" ({', '.join(elsewhere)}: an option of each call: translate(..., beam=5))" if elsewhere else ""
            raise ConfigError(f"unknown option(s) {', '.join(unknown)} for load{hint}; valid ones: {', '.join(valid)}")
        config = DecodeConfig(models=tuple(str(p) for p in paths), ensemble=len(paths) > 1, **options)
        with threads_restored():  # torch's threads left as the caller set them (so by generate and score)
            return cls(config, warn=warn)

    def __init__(self, config: DecodeConfig, warn: Callable[[str], None] | None = None):
        """Load `config.models` (`self.bundle`) on the device and in the precision `config` says."""
        import_torch()  # before the modules that import it, with interrupts held (see there)
        from nmtkit.checkpoint import load_bundle
        from nmtkit.models.fast.fusion import resolve_fuse
        from nmtkit.models.fast.quantize import INT8_ON_CUDA, quantize_for_decoding
        from nmtkit.models.precision import FP16_ON_CPU, autocast, resolve_decode_precision

        if isinstance(config, SearchConfig):  # a TranslateConfig: its search options would be dropped here
            raise TypeError("a Translator is built from a DecodeConfig (config.decode_config()); search options "
                            "are each call's")
        self.config = config
        self._warn = warn or log.warning
        self.device = resolve_device(config.device)
        if config.precision == "int8" and self.device.type != "cpu":
            raise ConfigError(INT8_ON_CUDA)
        # torch's threads are the process's: set before loading ("auto" may time a product on them) and
        # by each call that finds them changed; put back by the Python API's calls, never by the CLI's
        self._threads = config.threads or default_threads()  # what --workers share
        use_threads(self._threads)
        # chosen before loading: int8 quantises each model in place as it loads (`load_model`'s prepare)
        self.precision = resolve_decode_precision(self.device.type, config.precision)
        self.bundle = load_bundle(config.models, self.device, resolve_fuse(config.fuse, self.device),
                                  prepare=quantize_for_decoding if self.precision == "int8" else None)
        self.max_src_len = config.max_src_len or max(DEFAULT_MAX_SRC_LEN, 4 * (self.bundle.trained_max_len or 0))
        self.max_tokens = batch_token_cap(config.max_tokens, self.device.type)  # None: no cap
        self._unk_dict = read_unk_dict(config.unk_dict) if config.unk_dict else None
        self._warned: set[str] = set()  # warnings given once per translator
        self._batches_decoded = 0
        if self.precision == "fp16" and self.device.type != "cuda":
            log.warning(FP16_ON_CPU)
        # int8: float32 activations into the int8 layers, fp32 elsewhere
        self._autocast = autocast(self.device.type, "fp32" if self.precision == "int8" else self.precision)
        self._warn_unrecorded_bpe()

    @property
    def has_attention(self) -> bool:
        """Whether every model attends (alignments, attention plots and <unk> replacement work)."""
        return all(model.has_attention for model in self.bundle.models)

    def _check_attention(self, *options: tuple[str, Any]) -> None:
        """Refuse the first option on of `options`, (name, value) pairs, for a model without
        attention: its all-zero weights would align every target word to the first source word."""
        given = [name for name, on in options if on]
        for path, model in zip(self.bundle.paths, self.bundle.models):
            if given and not model.has_attention:
                raise ConfigError(f"{given[0]} needs attention, and {path} is a model without it "
                                  f"({type(model).__name__})")

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self._warn(message)

    def _warn_unrecorded_bpe(self) -> None:
        """Warn when the vocabularies hold BPE subwords that the recorded pipeline does not make:
        raw or tokenised input is not split as the model was trained, nor its output joined."""
        c = self.config
        if self.bundle.pipeline.bpe is not None or (c.input_format == "bpe" and c.output_format == "bpe"):
            return
        if n := unrecorded_subwords(self.bundle.tgt_vocab.itos):
            self._warn(f"{c.models[0]}: its target vocabulary has {n:,} subwords ending in "
                       f"'{SEPARATOR}', but its text pipeline applies no BPE (the text was split before nmtkit "
                       "preprocess): give BPE'd input with translate's --input-format bpe, and --output-format bpe "
                       "to join the output yourself (serve reads raw text only)")

    def generate(self, lines: Iterable[str], *, alignments: bool = False, beam: int | None = None,
                 nbest: int | None = None, lenpen: float | None = None, max_len_a: float | None = None,
                 max_len_b: float | None = None, shortlist: str | None = None, ban_unk: bool | None = None,
                 replace_unk: bool | None = None, sampling: bool | None = None, sampling_topk: int | None = None,
                 temperature: float | None = None, seed: int | None = None) -> list[Result]:
        """One frozen `Result` per line, in order, with its `nbest` best translations (and with
        alignments=True their attention). The search options are `SearchConfig`'s, checked as the
        command line checks them; an empty line gets a Result without translations."""
        search = SearchConfig(**{k: v for k, v in locals().items() if k in _SEARCH_FIELDS and v is not None})
        if not isinstance(alignments := plain(alignments), bool):
            raise ConfigError(f"alignments must be True or False, got {alignments!r}")
        self._check_attention(("alignments=True", alignments), ("replace_unk=True", search.replace_unk))
        with threads_restored():
            return self._translate_buffer(list(enumerate(_lines_of(lines), 1)), search, alignments)

    def translate(self, lines: str | Iterable[str], **search: Any) -> str | list[str]:
        """The best translation of each line (a list for a list, a string for a string); `search`
        as in `generate`, whose n-best lists this would discard: nbest above 1 is refused."""
        if type(nbest := plain(search.get("nbest"))) is int and nbest > 1:
            SearchConfig(**{k: v for k, v in search.items() if k in _SEARCH_FIELDS and v is not None})  # its errors first
            raise ConfigError(f"translate() returns each line's best translation only, not nbest={nbest} lists: "
                              "call generate() for those")
        if isinstance(lines, str):
            return self.generate([lines], **search)[0].text
        return [r.text for r in self.generate(lines, **search)]

    def score(self, sources: Iterable[str], targets: Iterable[str], *,
              per_token: bool = False) -> list[float] | list[TokenScores]:
        """Forced decoding: log p(target | source) of each pair (EOS included) over the whole target
        vocabulary, or with per_token=True `TokenScores`; for a translation this model found with
        shortlist="off", its `Translation.log_prob`."""
        if not isinstance(per_token := plain(per_token), bool):
            raise ConfigError(f"per_token must be True or False, got {per_token!r}")
        srcs, tgts = _lines_of(sources, "sources"), _lines_of(targets, "targets")
        if len(srcs) != len(tgts):
            raise InputError(f"{len(srcs)} sources but {len(tgts)} targets: give one target per source")
        with threads_restored():
            scored = self._score_buffer([(n, s, t) for n, (s, t) in enumerate(zip(srcs, tgts), 1)])
        return scored if per_token else [s.log_prob for s in scored]

    def _prepare(self, line: str, lineno: int, source: str,
                 warn: Callable[[str], None] | None = None) -> tuple[list[str], bool]:
        """The model's source tokens for one input line, and whether --max-src-len cut them."""
        if not line.strip():
            return [], False
        toks = self._encode(line, "src", source, lineno)
        if len(toks) <= self.max_src_len:
            return list(toks), False
        (warn or self._warn)(f"{source}:{lineno}: {len(toks)} source tokens, translating only the first "
                             f"{self.max_src_len} (--max-src-len)")
        return list(toks[: self.max_src_len]), True

    def _encode(self, line: str, side: str, name: str, lineno: int) -> list[str]:
        """`side`'s tokens of one line by the recorded pipeline; its InputError names the line."""
        try:
            return self.bundle.pipeline.encode_from(line, side, self.config.input_format)
        except InputError as err:
            if err.path is not None:
                raise
            raise InputError(err.bare_message, name, lineno) from None

    def _encode_translation(self, text: str, name: str, lineno: int) -> list[str]:
        """A translation's target tokens (`_encode`), where a literal "<unk>", as translation
        writes the unknown word, is that word, not text to tokenise or split into BPE pieces."""
        if self.config.input_format == "bpe" or UNK not in text:
            return self._encode(text, "tgt", name, lineno)
        toks: list[str] = []
        for k, part in enumerate(text.split(UNK)):
            toks += ([UNK] if k else []) + (self._encode(part, "tgt", name, lineno) if part.strip() else [])
        return toks

    def _prepare_all(self, lines: Sequence[tuple[int, str]], workers: int,
                     source: str) -> list[tuple[list[str], bool]]:
        """`_prepare` of every line, in order; with several workers, chunk by chunk in the workers
        (their warnings given here, in line order)."""
        size = PREPARE_CHUNK_LINES
        if workers == 1 or self.config.input_format == "bpe" or len(lines) <= size:
            return [self._prepare(text, n, source) for n, text in lines]
        chunks = [lines[k:k + size] for k in range(0, len(lines), size)]

        def prepare_chunk(j: int) -> tuple[list[tuple[list[str], bool]], list[str]]:
            notes: list[str] = []
            return [self._prepare(text, n, source, notes.append) for n, text in chunks[j]], notes

        prepared: list[tuple[list[str], bool]] = []
        for toks, notes in map_batches(prepare_chunk, len(chunks), workers, self._threads):
            prepared += toks
            for note in notes:
                self._warn(note)
        return prepared

    def _batches(self, lengths: Sequence[int], numbers: Sequence[int]) -> list[list[int]]:
        """The batches (positions in `lengths`) of the non-empty lines, by length; `numbers`: the
        lines' numbers."""
        from nmtkit.data.binarized import length_batches

        todo = [i for i, n in enumerate(lengths) if n]
        cap = self.max_tokens
        over = [i for i in todo if cap is not None and lengths[i] > cap]
        if over:
            self._warn_once("budget", f"--max-tokens {cap} is below the length of line {numbers[over[0]]} "
                                      f"({lengths[over[0]]} tokens): such lines are translated one per batch, "
                                      "over the budget")
        return [[todo[b] for b in batch] for batch in length_batches(
            [lengths[i] for i in todo], self.config.batch_size, cap, longest_first=True)]

    def _translate_buffer(self, lines: Sequence[tuple[int, str]], search: SearchConfig, alignments: bool = False,
                          source: str = API_INPUT) -> list[Result]:
        """[(line number, text)] -> Results in the same order: prepare, batch by length, decode,
        finish. A line's number names it in warnings (`source`:N) and keys its sample."""
        search = self._searched(search)
        use_threads(self._threads)
        workers = resolve_workers(self.config.workers, self._threads, self.device.type)
        prepared = self._prepare_all(lines, workers, source)
        for (n, text), (toks, _) in zip(lines, prepared):
            if not toks and text.strip():  # e.g. only zero-width spaces: it looks blank, yet was not
                self._warn(f"{source}:{n}: no source token is left of this line once normalised and tokenised; "
                           "it is written empty")
        self._warn_unknown_sources([toks for toks, _ in prepared], source)
        need_attention = alignments or search.replace_unk
        batches = self._batches([len(toks) for toks, _ in prepared], [n for n, _ in lines])

        def decode(j: int) -> list[Result]:  # a batch, decoded and finished (BPE joined, detokenised)
            idx = batches[j]
            keys = [lines[i][0] for i in idx]
            nbests = self._decode_batch([prepared[i][0] for i in idx], search, need_attention, keys)
            return [self._finish(lines[i][0], *prepared[i], hyps, search) for i, hyps in zip(idx, nbests)]

        results = self._in_line_order(len(lines), batches, decode, workers)
        lost = [r.index for r in results if r is not None and not r.nbest]
        if lost:  # written as an empty line (n-best: LogProb= 0), which must not pass for a translation
            self._warn_once("no hypothesis", f"{source}:{lost[0]}: no translation: every hypothesis scored NaN or "
                            "-inf (the model's scores overflow: weights that diverged, or fp16 past its range; try "
                            "--precision fp32); such lines are written empty (warned once)")
        return [r if r is not None else Result(index=n, src_tokens=(), truncated=prepared[i][1])
                for i, ((n, _), r) in enumerate(zip(lines, results))]

    def _searched(self, s: SearchConfig) -> SearchConfig:
        """The search a call runs, warned here once, not in each worker: a beam past the target vocabulary
        capped at it (as fairseq: past it, memory and time grow fast); with sampling, a beam other than 1
        or the default (not told from none given) said ignored: fairseq's --sampling draws --beam samples."""
        n = len(self.bundle.tgt_vocab.itos)
        if s.sampling and s.beam not in (1, SearchConfig.beam):
            self._warn_once(f"sampling {s.beam}", f"--beam {s.beam} is ignored with --sampling, which draws one "
                                                  "translation per line")
        if s.sampling or s.beam <= n:
            return s
        nbest = f" and --nbest {s.nbest} lists of at most {n}" if s.nbest > n else ""
        self._warn_once(f"beam {s.beam} {s.nbest}", f"--beam {s.beam} is above the target vocabulary's {n} "
                                                    f"entries: searching with a beam of {n}{nbest}")
        return replace(s, beam=n, nbest=min(s.nbest, n))

    def _in_line_order(self, n_lines: int, batches: list[list[int]], run: Callable[[int], list[T]],
                       workers: int) -> list[T | None]:
        """`run(j)` of every batch j, put back in line order; None at a line in no batch."""
        results: list[T | None] = [None] * n_lines
        for idx, done in zip(batches, map_batches(run, len(batches), workers, self._threads)):
            for i, r in zip(idx, done):
                results[i] = r
        return results

    def _decode_batch(self, src_token_lists: Sequence[list[str]], search: SearchConfig, need_attention: bool,
                      keys: Sequence[int]) -> list[list[Any]]:
        """Beam search (or, with search.sampling, one sample each) over non-empty token lists ->
        n-best `Hypothesis` lists. keys: each sentence's line number, which seeds its sample."""
        from nmtkit.decode.sampling import sample
        from nmtkit.decode.search import beam_search
        from nmtkit.decode.shortlist import shortlist_ids

        s, n_tgt = search, len(self.bundle.tgt_vocab.itos)
        with self._batch_tensors(src_token_lists) as (src, lens):
            if s.sampling:  # from the whole vocabulary (a shortlist would change the distribution sampled)
                return sample(self.bundle.models, src.to(self.device), lens.to(self.device), s.sampling_seed,
                              keys, topk=s.sampling_topk, temperature=s.temperature, max_len_a=s.max_len_a,
                              max_len_b=s.max_len_b, lenpen=s.lenpen, need_attention=need_attention,
                              ban_unk=s.ban_unk)
            vocab = None  # a checkpoint the trainer did not make may have no lexicon
            if s.shortlist == "auto" and self.bundle.lexicon is not None:
                vocab = shortlist_ids(self.bundle.lexicon, src, n_tgt)
                vocab = vocab if len(vocab) < n_tgt else None  # beam_search moves it
            return beam_search(
                self.bundle.models, src.to(self.device), lens.to(self.device), beam=s.beam,
                lenpen=s.lenpen, max_len_a=s.max_len_a, max_len_b=s.max_len_b, nbest=s.nbest,
                need_attention=need_attention, vocab=vocab, ban_unk=s.ban_unk,
            )

    @contextlib.contextmanager
    def _batch_tensors(self, src_token_lists: Sequence[list[str]]) -> Iterator[tuple[Any, Any]]:
        """A batch's (padded source ids (B, S), lengths (B,)) on the CPU, decoded in inference mode
        under the translator's autocast; every RELEASE_EVERY_BATCHES batches, free memory given back."""
        import torch

        from nmtkit.data.binarized import pad_rows
        from nmtkit.devices import RELEASE_EVERY_BATCHES, release_free_memory

        ids = [self.bundle.src_vocab.encode(t) for t in src_token_lists]
        with torch.inference_mode(), self._autocast:
            yield torch.from_numpy(pad_rows(ids)), torch.tensor([len(x) for x in ids], dtype=torch.long)
        self._batches_decoded += 1
        if self._batches_decoded % RELEASE_EVERY_BATCHES == 0:
            release_free_memory()

    def _finish(self, index: int, src_tokens: list[str], truncated: bool, hyps: Sequence[Any],
                search: SearchConfig) -> Result:
        """The Result of a decoded line: each hypothesis's tokens and output string."""
        itos, src = self.bundle.tgt_vocab.itos, tuple(src_tokens)
        nbest = []
        for hyp in hyps:
            toks = [itos[i] for i in hyp.tokens]
            if search.replace_unk and hyp.attention is not None:
                toks = replace_unks(toks, src, hyp.attention, self._unk_dict)
            text = self.bundle.pipeline.decode_to(toks, "tgt", self.config.output_format)
            nbest.append(Translation(text, tuple(toks), hyp.score, hyp.log_prob, src, hyp.attention,
                                     hyp.source_eos_attention))
        return Result(index=index, src_tokens=src, nbest=tuple(nbest), truncated=truncated)

    def _score_buffer(self, pairs: Sequence[tuple[int, str, str]], source: str = API_INPUT,
                      reference: str = API_INPUT) -> list[TokenScores]:
        """[(line number, source text, target text)] -> each pair's forced decoding, in order,
        batched as translation is."""
        import torch

        from nmtkit.data.binarized import pad_rows
        from nmtkit.decode.steps import forced_log_probs

        use_threads(self._threads)
        workers = resolve_workers(self.config.workers, self._threads, self.device.type)
        for n, src_text, tgt_text in pairs:
            if not src_text.strip():
                raise InputError("empty source line: there is nothing to score a translation against", source, n)
            if not tgt_text.strip():
                raise InputError("empty translation: give the translation to score", reference, n)
        prepared = self._prepare_all([(n, s) for n, s, _ in pairs], workers, source)
        targets = [self._encode_translation(tgt_text, reference, n) for n, _, tgt_text in pairs]
        for (n, _, _), (src_toks, _), tgt_toks in zip(pairs, prepared, targets):
            for what, name, toks in (("source line", source, src_toks), ("translation", reference, tgt_toks)):
                if not toks:  # text the pipeline removes whole (zero-width spaces, control characters)
                    raise InputError(f"empty {what} to the model: its text pipeline removes every character of "
                                     "it (non-printing ones), leaving nothing to score", name, n)
        self._warn_unknown_targets([n for n, _, _ in pairs], targets, reference)
        batches = self._batches([len(toks) for toks, _ in prepared], [n for n, _, _ in pairs])

        def score(j: int) -> list[TokenScores]:
            idx = batches[j]
            tgt = torch.from_numpy(pad_rows([self.bundle.tgt_vocab.encode(targets[i]) + [EOS_ID] for i in idx]))
            with self._batch_tensors([prepared[i][0] for i in idx]) as (src, lens):
                lps = forced_log_probs(self.bundle.models, src.to(self.device), lens.to(self.device),
                                       tgt.to(self.device)).cpu()
            totals = lps.cumsum(1)  # in fp32, token by token, as beam search adds up its scores
            return [TokenScores(float(total[len(targets[i])]), tuple(targets[i]),
                                tuple(row[: len(targets[i]) + 1].tolist())) for row, total, i in zip(lps, totals, idx)]

        scored = self._in_line_order(len(pairs), batches, score, workers)
        lost = [n for (n, _, _), s in zip(pairs, scored) if s is not None and not math.isfinite(s.log_prob)]
        if lost:
            self._warn_once("score not finite", f"{source}:{lost[0]}: the model scored this pair NaN or -inf (its "
                            "scores overflow: weights that diverged, or fp16 past its range; try --precision fp32)"
                            " (warned once)")
        return scored  # type: ignore[return-value]

    def _warn_unknown_sources(self, sources: Sequence[list[str]], source: str) -> None:
        """Warn once when over half of a buffer's source tokens (at least 20) are unknown to the
        model: another language, or another --input-format."""
        if "unknown sources" in self._warned:
            return
        vocab = self.bundle.src_vocab
        n, unk = sum(map(len, sources)), sum(t not in vocab for toks in sources for t in toks)
        if n >= 20 and 2 * unk > n:
            b = self.bundle
            self._warn_once("unknown sources", f"{source}: {unk} of {n} source tokens are not in the "
                            f"{b.src_lang}-{b.tgt_lang} model's source vocabulary: is the input {b.src_lang} text, "
                            f"given with the right --input-format? (warned once)")

    def _warn_unknown_targets(self, numbers: Sequence[int], targets: Sequence[list[str]], reference: str) -> None:
        """Warn (once per translator) at the first translation holding tokens outside the target
        vocabulary."""
        vocab = self.bundle.tgt_vocab
        for n, toks in zip(numbers, targets):
            unknown = [t for t in toks if t not in vocab]
            if unknown:
                words = ", ".join(repr(t) for t in unknown[:3]) + (", ..." if len(unknown) > 3 else "")
                self._warn_once("unknown targets", f"{reference}:{n}: {len(unknown)} token(s) of the translation not "
                                f"in the model's target vocabulary ({words}): each is scored as <unk>, the probability "
                                "of any unknown word (warned once)")
                return


_SEARCH_FIELDS = frozenset(f.name for f in fields(SearchConfig))


def _lines_of(lines: Any, what: str = "lines") -> list[str]:
    """A call's lines as a list of str, each taken as `nmtkit translate` takes a line of its
    input (a line break or a NUL refused, a leading byte order mark dropped)."""
    if isinstance(lines, str):
        raise TypeError(f"{what} must be a list of lines; " + ("translate() also takes one string" if what == "lines"
                                                                else "score one pair as score([source], [target])"))
    zero_d = getattr(lines, "ndim", None) == 0  # a 0-d numpy array: iterable by type, not in fact
    if isinstance(lines, (bytes, bytearray, dict, set, frozenset)) or not isinstance(lines, Iterable) or zero_d:
        raise TypeError(f"{what} must be a list of str, not {type(lines).__name__}"
                        + (" of 0 dimensions" if zero_d else ""))
    out = list(lines)
    name = "line" if what == "lines" else f"{what} line"
    for n, line in enumerate(out, 1):
        if not isinstance(line, str):
            raise TypeError(f"{name} {n} is {type(line).__name__}, not str" +
                            (": decode it first" if isinstance(line, (bytes, bytearray)) else ""))
        if "\n" in line:
            raise InputError(f"{name} {n} holds a line break: pass one sentence per list item")
        nul = line.find("\0")
        if nul >= 0:
            raise InputError(f"{name} {n} holds binary data (a NUL character at character {nul + 1}); expected text")
        if line.startswith(BOM):
            out[n - 1] = line[1:]
    return out


# -- `--workers`: a buffer's batches decoded by forked processes, each on its share of the threads
# (small products scale poorly over threads, and Python threads serialise their per-step work)
T = TypeVar("T")

# `--workers` auto: at most this many workers (each one holds its batch's activations)
MAX_AUTO_WORKERS = 4

_DIED = ("a decoding worker process died without answering ({how}; out of memory? "
         "--workers 1 decodes in one process)")


def resolve_workers(workers: int | None, threads: int, device_type: str) -> int:
    """--workers: the number given, or for auto (None) one per thread up to MAX_AUTO_WORKERS on
    the CPU while no other Python thread runs (a fork could copy a lock another thread holds)."""
    if device_type != "cpu" or not can_fork():
        return 1
    if workers is not None:
        return workers
    return 1 if threading.active_count() > 1 else max(1, min(threads, MAX_AUTO_WORKERS))


def thread_shares(threads: int, workers: int) -> list[int]:
    """Torch threads of each worker: `threads` split as evenly as possible, at least 1 each."""
    base, extra = divmod(threads, workers)
    return [max(1, base + (i < extra)) for i in range(workers)]


def map_batches(decode: Callable[[int], T], n_jobs: int, workers: int, threads: int) -> list[T]:
    """[decode(0), ..., decode(n_jobs - 1)], in order, decoded by `workers` processes (this one and
    workers-1 forked children) with `threads` torch threads between them."""
    workers = min(workers, n_jobs)
    if workers <= 1:
        return [decode(j) for j in range(n_jobs)]
    import multiprocessing

    import torch

    counter = multiprocessing.get_context("fork").Value("q", 0)  # the next batch to take

    def decode_taken(_: object) -> dict[int, T]:
        out = {}
        while True:
            with counter.get_lock():
                j = counter.value
                counter.value = j + 1
            if j >= n_jobs:
                return out
            out[j] = decode(j)

    before = torch.get_num_threads()
    shares = thread_shares(threads, workers)
    try:
        with Workers(_DIED) as pool:
            children = [pool.start(decode_taken, functools.partial(torch.set_num_threads, share))
                        for share in shares[1:]]
            for child in children:
                child.send(None)
            torch.set_num_threads(shares[0])
            results = decode_taken(None)
            for child in children:
                results.update(child.reply())
    finally:
        torch.set_num_threads(before)
    return [results[j] for j in range(n_jobs)]
