"""`Translator`: loaded checkpoint(s) + the recorded text pipeline; raw lines -> Results
(prepare, batch by length, beam search or sampling, UNK replacement, BPE join, detokenisation).

It is nmtkit's Python API (`nmtkit.load` builds one) and the one path from raw lines to
translations behind `nmtkit translate`, `nmtkit serve` and the tests:

    model = nmtkit.load("run/checkpoint_best.pt", device="cpu", beam=5)
    model.translate(["Hello, world!"])               # -> ["Bonjour, le monde !"]
    [r] = model.generate(["Hello, world!"], nbest=3, alignments=True)
    r.text, r.nbest[1].text, r.nbest[0].alignment()  # 1-best, 2nd best, [(src i, tgt j), ...]
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from nmtkit.devices import resolve_device
from nmtkit.errors import ConfigError
from nmtkit.outputs import check_output_dir
from nmtkit.text.vocab import UNK
from nmtkit.translate.alignment import hard_pairs, read_unk_dict, replace_unks
from nmtkit.translate.config import DEFAULT_MAX_SRC_LEN, TranslateConfig
from nmtkit.translate.writers import plot_attention, plot_name

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Translation:
    """One hypothesis of a line.

    text: the output string (in the translator's output format); tokens: the model's target
    tokens (subwords, after UNK replacement); score: log_prob / (len(tokens)+1)^lenpen, the
    ranking score; log_prob: the model's log-probability, EOS included; src_tokens: the model's
    source tokens; attention: (len(tokens)+1, S') weights (a torch tensor; rows: target tokens
    then EOS, columns: source tokens, then the model's source EOS), None unless asked for.
    """

    text: str
    tokens: list[str]
    score: float
    log_prob: float
    src_tokens: list[str]
    attention: Any = field(default=None, repr=False)

    def alignment(self) -> list[tuple[int, int]]:
        """[(source i, target j)]: each target token's most attended source token (model
        tokens, from 0, EOS excluded), as `--alignments hard` writes it. Needs the attention
        (`generate(..., alignments=True)`)."""
        if self.attention is None:
            raise ValueError("no attention kept: ask for it with generate(..., alignments=True)")
        return hard_pairs(self.attention, len(self.src_tokens), len(self.tokens))


@dataclass
class Result:
    """One input line's translation(s).

    index: the line's number (from 1); src_tokens: the model's source tokens (subwords), as
    strings (before UNK mapping). hyps: the n-best hypotheses (`nmtkit.decode.search.Hypothesis`;
    empty for an empty line); tgt_tokens: their target tokens (after UNK replacement); texts:
    their output strings in the requested output format. `text`, `score` and `nbest` give the
    same as plain values and `Translation`s.
    """

    index: int
    src_tokens: list[str]
    hyps: list[Any] = field(default_factory=list)
    tgt_tokens: list[list[str]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The best translation ("" for an empty line)."""
        return self.texts[0] if self.texts else ""

    @property
    def score(self) -> float:
        """The best translation's score (0.0 for an empty line)."""
        return self.hyps[0].score if self.hyps else 0.0

    @property
    def nbest(self) -> list[Translation]:
        """The hypotheses, best first (none for an empty line)."""
        return [Translation(text, toks, h.score, h.log_prob, self.src_tokens, h.attention)
                for text, toks, h in zip(self.texts, self.tgt_tokens, self.hyps)]


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
        paths = [checkpoints] if isinstance(checkpoints, (str, os.PathLike)) else list(checkpoints)
        valid = sorted(f.name for f in fields(TranslateConfig) if f.name not in ("models", "ensemble"))
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
        import torch

        from nmtkit.checkpoint import load_bundle
        from nmtkit.models.fusion import resolve_fuse
        from nmtkit.models.precision import FP16_ON_CPU, autocast, resolve_precision
        from nmtkit.models.quantize import INT8_ON_CUDA, quantize_for_decoding

        self.config = config
        self.warn = warn or log.warning
        self.device = resolve_device(config.device)
        int8 = config.precision == "int8"
        if int8 and self.device.type != "cpu":
            raise ConfigError(INT8_ON_CUDA)
        self.bundle = bundle = load_bundle(config.models, self.device, fuse_steps=resolve_fuse(config.fuse, self.device))
        self.models, self.src_vocab, self.tgt_vocab, self.pipeline = (
            [quantize_for_decoding(m) if int8 else m for m in bundle.models], bundle.src_vocab, bundle.tgt_vocab,
            bundle.pipeline)
        # a wider beam than the target vocabulary finds nothing more and costs memory and time:
        # every search is capped at max_beam (n-best lists too)
        self.max_beam = n_tgt = len(self.tgt_vocab.itos)
        if config.beam > n_tgt:
            self.warn(f"--beam {config.beam} is above the target vocabulary's {n_tgt} entries: searching with "
                      f"a beam of {n_tgt}, which finds the same translations")
        # Jean et al. (2015)'s candidate list: with the lexicon the trainer stores (older
        # checkpoints have none), each batch scores only its shortlist of target words
        # (sampling draws from the whole vocabulary: a shortlist would change its distribution)
        use_shortlist = config.shortlist == "auto" and not config.sampling
        self.lexicon = bundle.lexicon if use_shortlist else None
        if config.max_src_len is not None:
            self.max_src_len = config.max_src_len
        else:
            trained = bundle.trained_max_len
            self.max_src_len = max(DEFAULT_MAX_SRC_LEN, 4 * trained) if trained else DEFAULT_MAX_SRC_LEN
        self.unk_dict = read_unk_dict(config.unk_dict) if config.unk_dict else None
        if config.plot_attention:
            check_output_dir(config.plot_attention, "--plot-attention folder")
        self.plotted = 0
        self.warned_budget = False
        self.need_attention = bool(config.replace_unk or config.alignments or config.plot_attention)
        if config.threads:
            torch.set_num_threads(config.threads)
        # auto: bf16 on GPUs and on CPUs with native BF16, as in training (models.precision)
        self.precision = precision = resolve_precision(self.device.type, config.precision)
        if precision == "fp16" and self.device.type != "cuda":
            log.warning(FP16_ON_CPU)
        # autocast keeps the fp32 weights and runs matrix products in 16 bits; log-softmax and
        # the beam scores stay in fp32 (Seq2Seq.step returns fp32 log-probabilities)
        # (int8: float32 activations into the int8 layers, and float32 everywhere else)
        self.autocast = autocast(self.device.type, "fp32" if int8 else precision)
        self.source_name = "<stdin>"

    # -- per line
    def prepare(self, line: str, lineno: int) -> list[str]:
        """The model's source tokens for one input line (truncated to --max-src-len, warned)."""
        if not line.strip():
            return []
        toks = self.pipeline.encode_from(line, "src", self.config.input_format)
        if len(toks) > self.max_src_len:
            self.warn(
                f"{self.source_name}:{lineno}: {len(toks)} source tokens, translating only the first "
                f"{self.max_src_len} (--max-src-len)"
            )
            toks = toks[: self.max_src_len]
        return list(toks)

    def decode_batch(self, src_token_lists: Sequence[list[str]], beam: int | None = None, nbest: int | None = None,
                     need_attention: bool | None = None, keys: Sequence[int] | None = None) -> list[list[Any]]:
        """Beam search (or, with config.sampling, one sample each) over non-empty token lists of
        similar lengths -> n-best Hypotheses each.

        beam, nbest, need_attention: per-call values (the server's per-request options); None
        takes the config's (and the translator's need for attention). keys: each sentence's
        line number, which seeds its sample (`nmtkit.decode.sampling`; default 1, 2, ...)."""
        import torch

        from nmtkit.data.batching import pad_rows

        ids = [self.src_vocab.encode(t) for t in src_token_lists]
        lens = torch.tensor([len(x) for x in ids], dtype=torch.long)
        src = torch.from_numpy(pad_rows(ids))
        need_attention = self.need_attention if need_attention is None else need_attention
        with torch.inference_mode(), self.autocast:
            if self.config.sampling:
                results = self._sample(src, lens, need_attention, keys or range(1, len(ids) + 1))
            else:
                results = self._beam_search(src, lens, beam, nbest, need_attention)
        if need_attention:
            # attention columns: the batch's padded width plus any positions the model adds (its
            # source EOS); keep each sentence's own columns only
            width = max(h.attention.size(1) for hyps in results for h in hyps)
            extra = width - src.size(1)
            for n, hyps in zip(lens.tolist(), results):
                for h in hyps:
                    h.attention = h.attention[:, : n + extra]
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

    def _sample(self, src: Any, lens: Any, need_attention: bool, keys: Sequence[int]):
        from nmtkit.decode.sampling import sample, sampling_uniforms
        from nmtkit.decode.search import max_lengths

        c = self.config
        steps = int(max_lengths(lens, c.max_len_a, c.max_len_b).max()) + 1
        uniforms = sampling_uniforms(c.sampling_seed, list(keys), steps)
        return sample(self.models, src.to(self.device), lens.to(self.device), uniforms, topk=c.sampling_topk,
                      temperature=c.temperature, max_len_a=c.max_len_a, max_len_b=c.max_len_b, lenpen=c.lenpen,
                      need_attention=need_attention, ban_unk=c.ban_unk)

    def finish(self, res: Result, lineno: int) -> Result:
        """Tokens and output strings for a decoded line (UNK replacement, BPE join, detok)."""
        itos = self.tgt_vocab.itos
        for hyp in res.hyps:
            toks = [itos[i] for i in hyp.tokens]
            if self.config.replace_unk and hyp.attention is not None:
                toks = replace_unks(toks, res.src_tokens, hyp.attention, UNK, self.unk_dict)
            res.tgt_tokens.append(toks)
            res.texts.append(self.pipeline.decode_to(toks, "tgt", self.config.output_format))
        if self.config.plot_attention and res.hyps and self.plotted < self.config.plot_limit:
            path = Path(self.config.plot_attention) / plot_name(lineno)
            plot_attention(path, res.hyps[0].attention, res.src_tokens, res.tgt_tokens[0])
            self.plotted += 1
        return res

    def translate_buffer(self, lines: Sequence[tuple[int, str]], beam: int | None = None, nbest: int | None = None,
                         need_attention: bool | None = None) -> list[Result]:
        """[(line number, text)] -> Results in the same order: prepare, batch by length, decode,
        finish. The one path from raw lines to hypotheses, under `generate` and `translate` and
        the buffers of `nmtkit translate`; beam, nbest, need_attention as in `decode_batch`.
        A line's number names it in warnings and keys its sample (so a sample does not depend
        on the buffer or batch the line falls in)."""
        results = [Result(index=n, src_tokens=self.prepare(text, n)) for n, text in lines]
        todo = [i for i, r in enumerate(results) if r.src_tokens]
        cap = self.config.max_tokens
        over = [i for i in todo if cap is not None and len(results[i].src_tokens) > cap]
        if over and not self.warned_budget:
            self.warned_budget = True
            self.warn(f"--max-tokens {cap} is below the length of line {results[over[0]].index} "
                      f"({len(results[over[0]].src_tokens)} tokens): such lines are translated one per batch, "
                      "over the budget")
        from nmtkit.data.batching import length_batches

        batches = length_batches([len(results[i].src_tokens) for i in todo], self.config.batch_size,
                                 self.config.max_tokens, longest_first=True)
        for batch in batches:
            idx = [todo[b] for b in batch]
            src = [results[i].src_tokens for i in idx]
            keys = [results[i].index for i in idx]
            for i, hyps in zip(idx, self.decode_batch(src, beam, nbest, need_attention, keys)):
                results[i].hyps = hyps
        return [self.finish(r, n) for r, (n, _) in zip(results, lines)]

    def generate(self, lines: Iterable[str], *, beam: int | None = None, nbest: int | None = None,
                 alignments: bool = False) -> list[Result]:
        """One `Result` per line, in order: the `nbest` best translations (`Result.nbest`, with
        scores, tokens and, with alignments=True, the attention and `Translation.alignment()`).

        beam, nbest: this call's values instead of the loaded ones (nbest <= beam). Lines are
        raw text (or the loaded input_format); an empty line gets an empty Result."""
        beam_ = beam or self.config.beam
        nbest_ = nbest or self.config.nbest
        if beam is not None and beam < 1:
            raise ConfigError(f"beam must be >= 1, got {beam}")
        if not 1 <= nbest_ <= beam_:
            raise ConfigError(f"nbest must be between 1 and the beam ({beam_}), got {nbest_}")
        if self.config.sampling and nbest_ != 1:
            raise ConfigError("a sampling translator draws one translation per line: nbest must be 1")
        if isinstance(lines, str):
            raise TypeError("generate() takes a list of lines; translate() also takes one string")
        need_attention = self.need_attention or alignments
        return self.translate_buffer(list(enumerate(lines, 1)), beam_, nbest_, need_attention)

    def translate(self, lines: str | Iterable[str], *, beam: int | None = None) -> str | list[str]:
        """The best translation of each line (a list for a list, a string for a string)."""
        if isinstance(lines, str):
            return self.generate([lines], beam=beam)[0].text
        return [r.text for r in self.generate(lines, beam=beam)]
