"""`Translator`: loaded checkpoint(s) + the recorded text pipeline; raw lines -> Results
(prepare, batch by length, beam search, UNK replacement, BPE join, detokenisation)."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from nmtkit.devices import resolve_device
from nmtkit.errors import CheckpointError
from nmtkit.outputs import check_output_dir
from nmtkit.text.vocab import UNK
from nmtkit.translate.alignment import read_unk_dict, replace_unks
from nmtkit.translate.config import DEFAULT_MAX_SRC_LEN, TranslateConfig
from nmtkit.translate.writers import plot_attention

log = logging.getLogger(__name__)


@dataclass
class Result:
    """One input line's translation(s).

    src_tokens: the model's source tokens (subwords), as strings (before UNK mapping).
    hyps: the n-best hypotheses (empty for an empty line); tgt_tokens: their target tokens
    (after UNK replacement); texts: their output strings in the requested output format.
    """

    index: int
    src_tokens: list[str]
    hyps: list[Any] = field(default_factory=list)
    tgt_tokens: list[list[str]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)


def _pipeline_from_dict(d: Any, path: str):
    from nmtkit.text.pipeline import TextPipeline

    if not isinstance(d, dict):
        raise CheckpointError("checkpoint has no text pipeline", path)
    try:
        return TextPipeline.from_dict(d)
    except Exception as err:  # noqa: BLE001 - a foreign/old pipeline dict
        raise CheckpointError(f"cannot rebuild the text pipeline: {err}", path) from None


class Translator:
    """Loaded checkpoint(s) + pipeline; translates lists of lines or a stream of lines."""

    def __init__(self, config: TranslateConfig, warn: Callable[[str], None] | None = None):
        import torch

        from nmtkit.checkpoint import load_model, trained_max_len
        from nmtkit.decode.ensemble import check_compatible
        from nmtkit.models.fusion import resolve_fuse
        from nmtkit.models.precision import FP16_ON_CPU, autocast, resolve_precision
        from nmtkit.text.vocab import Vocab

        config.validate()
        self.config = config
        self.warn = warn or log.warning
        self.device = resolve_device(config.device)
        fuse = resolve_fuse(config.fuse, self.device)
        self.models, ckpts = [], []
        for path in config.models:
            model, ckpt = load_model(path, self.device, fuse_steps=fuse)
            self.models.append(model)
            ckpts.append(ckpt)
        first = ckpts[0]
        check_compatible(list(config.models), ckpts)
        try:
            self.src_vocab = Vocab(list(first["src_vocab"]))
            self.tgt_vocab = Vocab(list(first["tgt_vocab"]))
        except (KeyError, ValueError, TypeError) as err:
            raise CheckpointError(f"checkpoint has no usable vocabularies ({err})", config.models[0]) from None
        self.pipeline = _pipeline_from_dict(first.get("pipeline"), config.models[0])
        self.arch = first.get("arch")
        # Jean et al. (2015)'s candidate list: with the lexicon the trainer stores (older
        # checkpoints have none), each batch scores only its shortlist of target words
        lexicon = first.get("lexicon")
        self.lexicon = lexicon if config.shortlist == "auto" and isinstance(lexicon, torch.Tensor) else None
        src_lang, tgt_lang = first.get("src_lang"), first.get("tgt_lang")
        self.langs = (src_lang, tgt_lang)
        if config.max_src_len is not None:
            self.max_src_len = config.max_src_len
        else:
            trained = trained_max_len(first)
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
        self.autocast = autocast(self.device.type, precision)
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
                     need_attention: bool | None = None) -> list[list[Any]]:
        """Beam search over non-empty token lists of similar lengths -> n-best Hypotheses each.

        beam, nbest, need_attention: per-call values (the server's per-request options); None
        takes the config's (and the translator's need for attention)."""
        import torch

        from nmtkit.data.batching import pad_rows
        from nmtkit.decode.search import beam_search
        from nmtkit.decode.shortlist import shortlist_ids

        ids = [self.src_vocab.encode(t) for t in src_token_lists]
        lens = torch.tensor([len(x) for x in ids], dtype=torch.long)
        src = torch.from_numpy(pad_rows(ids))
        c = self.config
        need_attention = self.need_attention if need_attention is None else need_attention
        vocab = None
        if self.lexicon is not None:
            vocab = shortlist_ids(self.lexicon, src, len(self.tgt_vocab.itos))
            vocab = vocab if len(vocab) < len(self.tgt_vocab.itos) else None  # beam_search moves it
        with torch.inference_mode(), self.autocast:
            results = beam_search(
                self.models, src.to(self.device), lens.to(self.device), beam=beam or c.beam, lenpen=c.lenpen,
                max_len_a=c.max_len_a, max_len_b=c.max_len_b, nbest=nbest or c.nbest,
                need_attention=need_attention, vocab=vocab, ban_unk=c.ban_unk,
            )
        if need_attention:
            # attention columns: the batch's padded width plus any positions the model adds (its
            # source EOS); keep each sentence's own columns only
            width = max(h.attention.size(1) for hyps in results for h in hyps)
            extra = width - src.size(1)
            for n, hyps in zip(lens.tolist(), results):
                for h in hyps:
                    h.attention = h.attention[:, : n + extra]
        return results

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
            path = Path(self.config.plot_attention) / f"{lineno:06d}.png"
            plot_attention(path, res.hyps[0].attention, res.src_tokens, res.tgt_tokens[0])
            self.plotted += 1
        return res

    def translate_buffer(self, lines: Sequence[tuple[int, str]], beam: int | None = None, nbest: int | None = None,
                         need_attention: bool | None = None) -> list[Result]:
        """[(line number, text)] -> Results in the same order: prepare, batch by length, decode,
        finish. The one path from raw lines to hypotheses, for `nmtkit translate` and `nmtkit
        serve` alike; beam, nbest, need_attention as in `decode_batch`."""
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
            for i, hyps in zip(idx, self.decode_batch(src, beam, nbest, need_attention)):
                results[i].hyps = hyps
        return [self.finish(r, n) for r, (n, _) in zip(results, lines)]

    def translate_lines(self, lines: Iterable[str]) -> list[str]:
        """Convenience: the 1-best output strings of a list of lines."""
        out = []
        for r in self.translate_buffer(list(enumerate(lines, 1))):
            out.append(r.texts[0] if r.texts else "")
        return out
