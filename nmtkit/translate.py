"""Text in, text out: `nmtkit translate` without the command line.

The checkpoint alone is enough (DESIGN.md): it records the text pipeline (normalisation,
tokenisation, casing, BPE codes) and the vocabularies. A `Translator` applies that pipeline to
raw lines, decodes them with batched beam search (`nmtkit.decode.search`), maps ids back to
tokens, optionally replaces UNKs from the attention (Luong et al. 2015; Jean et al. 2015),
joins BPE and detokenises.

Streaming (`translate_stream`): lines are read into a buffer, sorted by length into batches
(so that padding is small), decoded, put back in input order and written out before the next
buffer is read. With a buffer of one line (interactive use) each line is answered at once.

Token positions in alignments refer to the model's tokens (BPE subwords when the model uses
BPE: what `--input-format bpe` / `--output-format bpe` show), counted from 0, EOS excluded.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Sequence

from nmtkit.devices import resolve_device
from nmtkit.errors import CheckpointError, ConfigError, InputError
from nmtkit.outputs import check_output_dir, save_figure
from nmtkit.text.vocab import UNK

log = logging.getLogger(__name__)

FORMATS = ("raw", "tok", "bpe")
DEFAULT_MAX_SRC_LEN = 250
BPE_SEP = "@@"


@dataclass(frozen=True)
class TranslateConfig:
    """Every option of `nmtkit translate` (see its --help for the meaning of each)."""

    models: tuple[str, ...]
    beam: int = 12
    lenpen: float = 1.0
    max_len_a: float = 2.0
    max_len_b: float = 10.0
    nbest: int = 1
    batch_size: int = 64
    max_tokens: int | None = None
    buffer_size: int = 2000
    input_format: str = "raw"
    output_format: str = "raw"
    replace_unk: bool = False
    unk_dict: str | None = None
    alignments: str | None = None  # None | "hard" | "soft"
    plot_attention: str | None = None
    plot_limit: int = 100
    max_src_len: int | None = None  # None: from the checkpoint, else DEFAULT_MAX_SRC_LEN
    device: str = "auto"
    precision: str = "auto"  # auto | fp32 | bf16 | fp16 (meant for CUDA; slow on the CPU)
    threads: int | None = None  # torch CPU threads (None: torch's default)
    ensemble: bool = False  # several models are averaged only when asked (--ensemble)

    def validate(self) -> None:
        if not self.models:
            raise ConfigError("no model given (-m CHECKPOINT)")
        if len(self.models) > 1 and not self.ensemble:
            raise ConfigError(f"{len(self.models)} -m checkpoints given: add --ensemble to average them")
        if self.beam < 1:
            raise ConfigError(f"--beam must be >= 1, got {self.beam}")
        if not 1 <= self.nbest <= self.beam:
            raise ConfigError(f"--nbest must be between 1 and --beam ({self.beam}), got {self.nbest}")
        if self.batch_size < 1 or self.buffer_size < 1:
            raise ConfigError("--batch-size and --buffer-size must be >= 1")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError("--max-tokens must be >= 1")
        if self.input_format not in FORMATS or self.output_format not in FORMATS:
            raise ConfigError(f"formats are one of {', '.join(FORMATS)}")
        if self.alignments not in (None, "hard", "soft"):
            raise ConfigError("--alignments is 'hard' or 'soft'")
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise ConfigError("--precision is auto, fp32, bf16 or fp16")
        if self.threads is not None and self.threads < 1:
            raise ConfigError("--threads must be >= 1")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"--device is auto, cpu or cuda[:N], got '{self.device}'")
        if self.max_src_len is not None and self.max_src_len < 1:
            raise ConfigError("--max-src-len must be >= 1")
        if self.unk_dict and not self.replace_unk:
            raise ConfigError("--unk-dict needs --replace-unk")


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


# ---- pure helpers (no torch) ------------------------------------------------------------------

def subword_words(tokens: Sequence[str], sep: str = BPE_SEP) -> tuple[list[int], list[str]]:
    """Map subword positions to words: (word index of each token, the words).

    "lo@@ wer is" -> ([0, 0, 1], ["lower", "is"]). Tokens without separators are words.
    """
    index, words, pending = [], [], ""
    for tok in tokens:
        index.append(len(words))
        if tok.endswith(sep):
            pending += tok[: -len(sep)]
        else:
            words.append(pending + tok)
            pending = ""
    if pending:
        words.append(pending)
    return index, words


def replace_unks(
    tgt_tokens: Sequence[str],
    src_tokens: Sequence[str],
    attention: Any,
    unk: str = UNK,
    unk_dict: dict[str, str] | None = None,
) -> list[str]:
    """Replace each `unk` target token by the source word it attends to most.

    attention: (T, S') weights, rows for the target tokens (an extra EOS row is ignored),
    columns for the source tokens (an extra EOS column is ignored). With BPE the best source
    subword is mapped to its whole word. The word goes through `unk_dict` when it has an entry
    (Luong et al. 2015, Jean et al. 2015), and is copied as is otherwise.
    """
    out = list(tgt_tokens)
    if unk not in out or not src_tokens:
        return out
    word_of, words = subword_words(src_tokens)
    n_src = len(src_tokens)
    for j, tok in enumerate(out):
        if tok != unk:
            continue
        row = [float(x) for x in attention[j][:n_src]]
        i = max(range(n_src), key=row.__getitem__)
        word = words[word_of[i]]
        out[j] = unk_dict.get(word, word) if unk_dict else word
    return out


def hard_alignment(attention: Any, n_src: int, n_tgt: int) -> str:
    """Pharaoh format "i-j ..." (source i, target j, from 0): each target token's most attended
    source token, in target order. attention: (>= n_tgt, >= n_src)."""
    pairs = []
    for j in range(n_tgt):
        row = [float(x) for x in attention[j][:n_src]]
        if row:
            pairs.append(f"{max(range(n_src), key=row.__getitem__)}-{j}")
    return " ".join(pairs)


def attention_table(attention: Any, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> dict[str, list]:
    """{"src": [...], "tgt": [...], "attention": [[...], ...]}: the soft alignment of one hypothesis.

    Rows are the target tokens then "</s>", columns the source tokens (then "</s>" when the
    model attends to a source EOS); weights rounded to 4 decimals.
    """
    if attention is None or not len(attention):
        return {"src": list(src_tokens), "tgt": list(tgt_tokens), "attention": []}
    rows = [[round(float(x), 4) for x in r] for r in attention]
    src = list(src_tokens) + ["</s>"] * (len(rows[0]) - len(src_tokens))
    tgt = list(tgt_tokens) + ["</s>"] * (len(rows) - len(tgt_tokens))
    return {"src": src, "tgt": tgt, "attention": rows}


def soft_alignment(attention: Any, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> str:
    """`attention_table` as one JSON line (--alignments soft)."""
    return json.dumps(attention_table(attention, src_tokens, tgt_tokens), ensure_ascii=False)


def nbest_line(index: int, text: str, log_prob: float, length: int, score: float) -> str:
    """Moses n-best format: `i ||| hyp ||| LogProb= lp Length= n ||| score`."""
    return f"{index} ||| {text} ||| LogProb= {log_prob:.4f} Length= {length} ||| {score:.4f}"


def read_unk_dict(path: str) -> dict[str, str]:
    """`src<TAB>tgt` lines (first entry wins)."""
    table: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if not line.strip():
                    continue
                parts = line.split("\t")
                if len(parts) != 2 or not parts[0] or not parts[1]:
                    raise InputError("expected 'source<TAB>target'", path, lineno)
                table.setdefault(parts[0], parts[1])
    except FileNotFoundError:
        raise InputError("unk dictionary not found", path) from None
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", path) from None
    return table


def make_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first.

    A batch holds at most `batch_size` sentences and, with `max_tokens`, at most that many
    padded source tokens (before beam expansion); a single longer sentence gets its own batch.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        width = lengths[cur[0]] if cur else lengths[i]
        if cur and (len(cur) >= batch_size or (max_tokens is not None and (len(cur) + 1) * width > max_tokens)):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def plot_attention(path: str | Path, attention: Any, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> None:
    """The paper's Figure 3: alignment weights in grey scale (0 black, 1 white), source words
    along the top, target words down the side; written as a PNG (atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    att = np.asarray(attention, dtype=float)
    src = list(src_tokens) + ["</s>"] * (att.shape[1] - len(src_tokens))
    tgt = list(tgt_tokens) + ["</s>"] * (att.shape[0] - len(tgt_tokens))
    w = max(3.0, 0.35 * len(src) + 1.5)
    h = max(3.0, 0.35 * len(tgt) + 1.5)
    fig, ax = plt.subplots(figsize=(w, h))
    try:
        ax.imshow(att, cmap="gray", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
        ax.xaxis.tick_top()
        ax.set_xticks(range(len(src)))
        ax.set_xticklabels(src, rotation=90)
        ax.set_yticks(range(len(tgt)))
        ax.set_yticklabels(tgt)
        fig.tight_layout()
        save_figure(fig, path, format="png", dpi=100)
    finally:
        plt.close(fig)


# ---- the translator ---------------------------------------------------------------------------

def _pipeline_from_dict(d: Any, path: str):
    from nmtkit.text.pipeline import TextPipeline

    if not isinstance(d, dict):
        raise CheckpointError("checkpoint has no text pipeline", path)
    try:
        return TextPipeline.from_dict(d)
    except Exception as err:  # noqa: BLE001 - a foreign/old pipeline dict
        raise CheckpointError(f"cannot rebuild the text pipeline: {err}", path) from None


def _max_len_from_ckpt(ckpt: dict) -> int | None:
    """The longest training sentence the run allowed, if recorded (any of a few names)."""
    for section in ("train_config", "pipeline"):
        d = ckpt.get(section) or {}
        if not isinstance(d, dict):
            continue
        for key in ("max_len", "max_src_len", "max_length", "max_tokens_per_sentence"):
            v = d.get(key)
            if isinstance(v, int) and v > 0:
                return v
    return None


class Translator:
    """Loaded checkpoint(s) + pipeline; translates lists of lines or a stream of lines."""

    def __init__(self, config: TranslateConfig, warn: Callable[[str], None] | None = None):
        import torch

        from nmtkit.checkpoint import load_model
        from nmtkit.decode.ensemble import check_compatible
        from nmtkit.models.precision import FP16_ON_CPU, autocast
        from nmtkit.text.vocab import Vocab

        config.validate()
        self.config = config
        self.warn = warn or log.warning
        self.device = resolve_device(config.device)
        self.models, ckpts = [], []
        for path in config.models:
            model, ckpt = load_model(path, self.device)
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
        src_lang, tgt_lang = first.get("src_lang"), first.get("tgt_lang")
        self.langs = (src_lang, tgt_lang)
        if config.max_src_len is not None:
            self.max_src_len = config.max_src_len
        else:
            trained = _max_len_from_ckpt(first)
            self.max_src_len = max(DEFAULT_MAX_SRC_LEN, 4 * trained) if trained else DEFAULT_MAX_SRC_LEN
        self.unk_dict = read_unk_dict(config.unk_dict) if config.unk_dict else None
        if config.plot_attention:
            check_output_dir(config.plot_attention, "--plot-attention folder")
        self.plotted = 0
        self.warned_budget = False
        self.need_attention = bool(config.replace_unk or config.alignments or config.plot_attention)
        if config.threads:
            torch.set_num_threads(config.threads)
        precision = config.precision
        if precision == "auto":
            precision = "bf16" if self.device.type == "cuda" else "fp32"
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

        from nmtkit.decode.search import beam_search
        from nmtkit.text.vocab import PAD_ID

        ids = [self.src_vocab.encode(t) for t in src_token_lists]
        lens = torch.tensor([len(x) for x in ids], dtype=torch.long)
        src = torch.full((len(ids), int(lens.max())), PAD_ID, dtype=torch.long)
        for i, x in enumerate(ids):
            src[i, : len(x)] = torch.tensor(x, dtype=torch.long)
        c = self.config
        need_attention = self.need_attention if need_attention is None else need_attention
        with torch.inference_mode(), self.autocast:
            results = beam_search(
                self.models, src.to(self.device), lens.to(self.device), beam=beam or c.beam, lenpen=c.lenpen,
                max_len_a=c.max_len_a, max_len_b=c.max_len_b, nbest=nbest or c.nbest,
                need_attention=need_attention,
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
        batches = make_batches([len(results[i].src_tokens) for i in todo], self.config.batch_size,
                               self.config.max_tokens)
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


def read_lines(stream: IO[bytes], name: str) -> Iterator[tuple[int, str]]:
    """(line number from 1, text without newline), line by line as they arrive (a terminal or a
    pipe is answered without waiting for more input). Invalid UTF-8 is an InputError."""
    for lineno, raw in enumerate(iter(stream.readline, b""), 1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(f"invalid UTF-8 at byte {err.start}", name, lineno) from None
        yield lineno, text.rstrip("\r\n")


class Writers:
    """The output stream(s): translations (1-best or n-best), optional alignments file."""

    def __init__(self, out: IO[str], align: IO[str] | None, config: TranslateConfig, flush_each: bool):
        self.out, self.align, self.config, self.flush_each = out, align, config, flush_each
        self.sent = 0  # sentence counter for n-best ids (0-based, as Moses)

    def write(self, r: Result) -> None:
        c = self.config
        if c.nbest == 1:
            self.out.write((r.texts[0] if r.texts else "") + "\n")
            self._align(r, 0)
        else:
            if not r.hyps:
                self.out.write(nbest_line(self.sent, "", 0.0, 0, 0.0) + "\n")
                self._align(r, None)
            for k, hyp in enumerate(r.hyps):
                self.out.write(nbest_line(self.sent, r.texts[k], hyp.log_prob, len(hyp.tokens) + 1, hyp.score) + "\n")
                self._align(r, k)
        self.sent += 1
        if self.flush_each:
            self.flush()

    def _align(self, r: Result, k: int | None) -> None:
        if self.align is None:
            return
        has = k is not None and k < len(r.hyps)
        att = r.hyps[k].attention if has else None
        tgt = r.tgt_tokens[k] if has else []
        if self.config.alignments == "hard":
            line = hard_alignment(att, len(r.src_tokens), len(tgt)) if has else ""
        else:
            line = soft_alignment(att, r.src_tokens if has else [], tgt)
        self.align.write(line + "\n")

    def flush(self) -> None:
        self.out.flush()
        if self.align is not None:
            self.align.flush()


def translate_stream(
    translator: Translator, lines: Iterable[tuple[int, str]], writers: Writers, buffer_size: int
) -> int:
    """Translate numbered lines buffer by buffer, writing each buffer in input order; returns
    the number of lines translated."""
    buf: list[tuple[int, str]] = []
    n = 0
    for item in lines:
        buf.append(item)
        if len(buf) >= buffer_size:
            for r in translator.translate_buffer(buf):
                writers.write(r)
            writers.flush()
            n += len(buf)
            buf = []
    if buf:
        for r in translator.translate_buffer(buf):
            writers.write(r)
        writers.flush()
        n += len(buf)
    return n


def check_files(config: TranslateConfig, input_path: str | None, output_path: str | None,
                alignments_file: str | None, force: bool) -> None:
    """The files of `translate_files`, checked before the models load and hours of decoding
    start: the input exists, no output would be overwritten (without `force`), and
    --alignments and --alignments-file come together."""
    from nmtkit.outputs import check_output

    if config.alignments and not alignments_file:
        raise ConfigError("--alignments needs --alignments-file FILE")
    if alignments_file and not config.alignments:
        raise ConfigError("--alignments-file needs --alignments hard|soft")
    if input_path and not Path(input_path).is_file():
        raise InputError("input file not found", input_path)
    if output_path:
        check_output(output_path, force, "-o output")
    if alignments_file:
        check_output(alignments_file, force, "--alignments-file")
    if config.plot_attention:
        check_output_dir(config.plot_attention, "--plot-attention folder")


def translate_files(
    config: TranslateConfig,
    input_path: str | None = None,
    output_path: str | None = None,
    alignments_file: str | None = None,
    force: bool = False,
    warn: Callable[[str], None] | None = None,
) -> int:
    """`nmtkit translate`: lines of `input_path` (stdin when None) -> translations in
    `output_path` (stdout when None) and alignments in `alignments_file`; returns the number
    of lines translated.

    Files are written under a temporary name and renamed when complete (nmtkit.outputs), so
    a failure never leaves a half-written output looking complete. With a buffer of one line
    every answer is flushed at once (interactive use).
    """
    import contextlib
    import sys

    from nmtkit.outputs import OutputFile

    config.validate()
    check_files(config, input_path, output_path, alignments_file, force)
    translator = Translator(config, warn=warn)
    translator.source_name = input_path or "<stdin>"
    with contextlib.ExitStack() as stack:
        out_file = stack.enter_context(OutputFile(output_path)) if output_path else None
        align_file = stack.enter_context(OutputFile(alignments_file)) if alignments_file else None
        writers = Writers(out_file.file if out_file else sys.stdout, align_file.file if align_file else None,
                          config, flush_each=config.buffer_size == 1)
        stream = stack.enter_context(open(input_path, "rb")) if input_path else sys.stdin.buffer
        return translate_stream(translator, read_lines(stream, translator.source_name), writers, config.buffer_size)
