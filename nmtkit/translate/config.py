"""The options of `nmtkit translate`, `nmtkit serve` and the Python API, each declared once.

`DecodeConfig` is what a `Translator` loads with (`nmtkit.load`'s arguments), `SearchConfig` how
each call searches (`Translator.translate`'s), `TranslateConfig` both plus the files and outputs
of `nmtkit translate`. Each field declares its option (`nmtkit.options.option`), from which the
click options are generated; `__post_init__` validates a config once, when it is built.
Importing this module imports neither click nor torch.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from nmtkit.devices import DECODE_PRECISIONS, DEVICE_HELP, FUSE, MAX_THREADS, MAX_WORKERS, check_device_name
from nmtkit.errors import ConfigError
from nmtkit.options import check_fields, off_default, option, refuse_without
from nmtkit.text.pipeline import INPUT_FORMATS

DEFAULT_MAX_SRC_LEN = 250
# padded source tokens per batch on the CPU when --max-tokens is not given: a batch's encoder
# outputs, kept for all its steps, set a run's peak memory
CPU_MAX_TOKENS = 1536


def batch_token_cap(max_tokens: int | None, device_type: str) -> int | None:
    """--max-tokens, or its default on `device_type`: CPU_MAX_TOKENS on the CPU, no cap on GPUs."""
    return CPU_MAX_TOKENS if max_tokens is None and device_type == "cpu" else max_tokens


DEFAULT_SEED = 1  # the sampling seed when none is given (fairseq's default seed too)
# bounds of the length options: past them the search's token history, preallocated for
# a * S + b steps of every beam, exhausts memory, and length^lenpen overflows a float
MAX_LEN_A = 10
MAX_LEN_B = 10_000
MAX_LENPEN = 10


@dataclass(frozen=True)
class DecodeConfig:
    """What a `Translator` is loaded with: checkpoints, hardware, batching, text formats."""

    models: tuple[str, ...] = option(
        (), names=("--model", "-m"), multiple=True, required=True, metavar="CHECKPOINT", path="file",
        help="Checkpoint to translate with (e.g. RUN/checkpoint_best.pt). Give several with --ensemble.")
    ensemble: bool = option(False, help="Average several -m models (same vocabularies and preprocessing): log of "
                                        "their mean probability, as fairseq does (Nematus sums log-probabilities).")
    batch_size: int = option(64, min=1, metavar="N", help="Most sentences decoded in one batched beam search (serve: gathered "
                                             "from all waiting requests).")
    max_tokens: int | None = option(
        None, min=1, metavar="N", shown_default=f"{CPU_MAX_TOKENS} on the CPU, none on GPUs",
        help="Also cap a batch at this many padded source tokens (before beam expansion): on the CPU this bounds "
             "the memory of batches of long sentences.")
    max_src_len: int | None = option(
        None, min=1, shown_default=f"4 x the training length limit when recorded, at least {DEFAULT_MAX_SRC_LEN}",
        help="Longer inputs (in model tokens) are truncated with a warning naming the line.")
    device: str = option("auto", metavar="auto|cpu|cuda|cuda:N", help=DEVICE_HELP)
    precision: str = option(
        "auto", choices=DECODE_PRECISIONS,
        help="int8 (CPU only): the projections and the output layer run as int8 products, each input row on its own "
             "scale (docs/int8.md). auto = int8 on CPUs with int8 dot products (VNNI, AMX: there the "
             "fastest and leanest, at fp32's BLEU); else bf16 autocast on GPUs and on CPUs where bf16 products "
             "are faster (native BF16, timed once), fp32 on other CPUs. fp16 is meant for GPUs (it runs on a CPU, "
             "slowly).")
    fuse: str = option(
        "auto", choices=FUSE,
        help="on: compile the decoding step into a few fused kernels (torch.compile). On an H200 that decoded "
             "newstest2014 at beam 12 in 4.4 s against 8.0 s unfused, after ~60 s of compiling on a fresh machine "
             "(later runs reuse inductor's cache): worth it for long inputs or a long-lived serve. auto: off.")
    threads: int | None = option(None, min=1, max=MAX_THREADS, metavar="N", shown_default="torch's default",
                                 help="torch CPU threads.")
    workers: int | None = option(
        None, min=1, max=MAX_WORKERS, metavar="N", shown_default="auto: one per thread, at most 4, on the CPU",
        help="Decode N batches at once in N processes (this one and N-1 forked from it after the model loads, "
             "sharing its weights), each on its share of --threads (Marian's --cpu-threads, CTranslate2's "
             "inter_threads): on a CPU, several small batched products gain more from processes than from "
             "threads. The translations are the same as --workers 1's at the same threads per batch. CPU and "
             "Linux only (elsewhere 1); auto is 1 in a process that runs other Python threads.")
    input_format: str = option(
        "raw", choices=INPUT_FORMATS,
        help="raw: apply the recorded normalisation, tokenisation and BPE; tok: input is already tokenised (BPE "
             "still applied; a FILE.tokinfo.json beside it is checked against the recorded settings); bpe: input is "
             "the model's tokens.")
    output_format: str = option("raw", choices=INPUT_FORMATS,
                                help="raw: join BPE and detokenise; tok: join BPE only; bpe: the model's tokens.")
    unk_dict: str | None = option(
        None, metavar="FILE", path="file",
        help="With --replace-unk: a 'source<TAB>target' dictionary the source word goes through (the word as the "
             "model reads it: tokenised, lowercased or truecased as the checkpoint records, BPE joined).")

    def __post_init__(self) -> None:
        check_fields(self)
        self.validate()

    def validate(self) -> None:
        """The rules between fields (each field's own range was checked by `check_fields`)."""
        check_device_name(self.device)
        if not self.models:
            raise ConfigError("no model given (-m CHECKPOINT)")
        if len(self.models) > 1 and not self.ensemble:
            raise ConfigError(f"{len(self.models)} -m checkpoints given: add --ensemble to average them")

    def decode_config(self) -> DecodeConfig:
        """This config's `DecodeConfig` fields, as one."""
        return _project(self, DecodeConfig)


@dataclass(frozen=True)
class SearchConfig:
    """How one call searches: beam search (or sampling), length limits and normalisation, <unk>."""

    beam: int = option(12, min=1, names=("--beam", "-k"), help="Beam width (1 = greedy).")
    nbest: int = option(
        1, min=1, help="Write the N best translations of each sentence in Moses n-best format: "
                       "'i ||| translation ||| LogProb= lp Length= n ||| score' (i counts sentences from 0, lp is "
                       "the raw log-probability, n the token count with EOS, score = lp / n^lenpen; with a "
                       "--shortlist, lp is normalised over the batch's shortlist, not the whole vocabulary "
                       "--score-reference scores over).")
    lenpen: float = option(
        1.0, min=-MAX_LENPEN, max=MAX_LENPEN,
        help="Length normalisation alpha: hypotheses are ranked by log p / length^alpha (length counts EOS); "
             f"1 = per-word average, 0 = raw log-probability; between -{MAX_LENPEN} and {MAX_LENPEN}.")
    max_len_a: float = option(2.0, min=0, max=MAX_LEN_A,
                              help="Target length limit: at most a * source_length + b tokens, at least 1 "
                                   f"(a <= {MAX_LEN_A}, b <= {MAX_LEN_B:,}).")
    max_len_b: float = option(10.0, min=0, max=MAX_LEN_B, help="See --max-len-a.")
    shortlist: str = option(
        "auto", choices=("auto", "off"),
        help="auto: where the checkpoint holds a lexicon (nmtkit train stores one), score only a shortlist of "
             "target words per batch, the 1,000 most frequent and the 20 likeliest translations of each source "
             "word (Jean et al. 2015; nmtkit.decode.shortlist): beam 5 in about 0.7x the time on a CPU, at 0.5 BLEU less "
             "on the peer benchmark's 10-minute model (docs/experiments.md); off: the whole vocabulary, as the "
             "paper searches. A batch's shortlist (and bf16 rounding) depends on the sentences batched together, "
             "so a line may translate differently alone: with --shortlist off and --precision int8 or fp32, other "
             "lines (in serve, other requests) change only float32 rounding, a score's last digits (int8's up to "
             "~0.03).")
    ban_unk: bool = option(
        False, help="Never emit the unknown word: its probability is 0 at every step (the decoding of the paper's "
                    "no-UNK column, Bahdanau et al. 2015, Table 1).")
    replace_unk: bool = option(
        False, help="Replace each <unk> in the output by the source word it attends to most (Luong et al. 2015; "
                    "Jean et al. 2015); with BPE, the whole word of that subword.")
    sampling: bool = option(
        False, help="Draw one translation per line from the model's distribution instead of beam search "
                    "(back-translation, Edunov et al. 2018). Reproducible: a line's sample depends on --seed, its "
                    "line number and the model, not on --workers; another batch (--batch-size, the lines around it) "
                    "changes only float32 rounding, which moves a draw landing within it of a boundary (a few lines "
                    "in 100). --beam is not used.")
    sampling_topk: int = option(0, min=0, metavar="K", message="must be >= 0 (0: the whole vocabulary)",
                                help="With --sampling: draw among the K most likely words at each step (0: all "
                                     "words).")
    temperature: float = option(
        1.0, min=0, min_open=True, metavar="T", message="must be > 0 (for greedy decoding use --beam 1)",
        help="With --sampling: sample from p^(1/T); T must be > 0 (T < 1 sharper, T > 1 flatter; for greedy "
             "decoding use --beam 1).")
    seed: int | None = option(None, min=0, max=2**63 - 1, message="must be between 0 and 2^63-1",
                              shown_default=str(DEFAULT_SEED), help="With --sampling: the seed.")

    def __post_init__(self) -> None:
        check_fields(self)
        self.validate()

    @property
    def sampling_seed(self) -> int:
        return DEFAULT_SEED if self.seed is None else self.seed

    def validate(self) -> None:
        if self.max_len_a == 0 and self.max_len_b < 1:  # it was raised to one token without a word
            raise ConfigError(f"--max-len-a 0 with --max-len-b {self.max_len_b:g} allows no target token: give "
                              "--max-len-b 1 or more")
        if self.ban_unk and self.replace_unk:
            raise ConfigError("--ban-unk and --replace-unk exclude each other (a banned <unk> is never replaced)")
        if self.nbest > self.beam:
            raise ConfigError(f"--nbest must be between 1 and --beam ({self.beam}), got {self.nbest}")
        if not self.sampling:
            refuse_without(off_default(self, ("sampling_topk", "temperature", "seed")), "--sampling")
        elif self.nbest != 1:
            raise ConfigError("--sampling draws one translation per line: --nbest must be 1")

    def search_config(self) -> SearchConfig:
        """This config's `SearchConfig` fields, as one."""
        return _project(self, SearchConfig)


@dataclass(frozen=True)
class TranslateConfig(SearchConfig, DecodeConfig):
    """Every option of `nmtkit translate` (see its --help): how to load, how to search, and the
    files and outputs."""

    buffer_size: int = option(
        2000, min=1, help="Lines read, sorted by length and translated together before being written in order.")
    alignments: str | None = option(
        None, choices=("hard", "soft"),
        help="Write alignments to --alignments-file, one line per output line: hard = Pharaoh 'i-j' pairs (source "
             "i, target j, model tokens counted from 0); soft = JSON lines {\"src\": [...], \"tgt\": [...], "
             "\"attention\": [[...]]} (rows = target tokens + </s>).")
    plot_attention: str | None = option(
        None, metavar="DIR", path="directory",
        help="Draw each sentence's attention (the paper's Figure 3) as DIR/NNNNNN.png (line number).")
    plot_limit: int = option(100, min=1, help="Plot at most this many sentences.")
    score_reference: str | None = option(
        None, metavar="FILE", path="file",
        help="Score the translations in FILE ('-': stdin, with -i FILE), one per input line, instead of searching "
             "(forced decoding): write each pair's log-probability log p(y | x), the target's EOS included, one per "
             "line, as OpenNMT-py's -tgt and marian-scorer do (fairseq's --score-reference prints the mean per "
             "token, in base 2). The translations are read in --input-format, as the sources are.")
    # the files of `nmtkit.translate.run` (no option metadata: the command declares -i, -o,
    # --alignments-file, --force and --interactive itself); None or "-" is a standard stream
    input_path: str | None = None
    output_path: str | None = None
    alignments_file: str | None = None
    force: bool = False  # overwrite existing outputs
    interactive: bool = False  # answer each line at once: a buffer of one line, whatever buffer_size says

    def validate(self) -> None:  # the inherited __post_init__ checks the fields, then this
        DecodeConfig.validate(self)
        SearchConfig.validate(self)
        if self.unk_dict and not self.replace_unk:
            raise ConfigError("--unk-dict needs --replace-unk")
        if not self.plot_attention:  # --plot-limit would change nothing
            refuse_without(off_default(self, ("plot_limit",)), "--plot-attention")
        if self.score_reference is not None:
            # the options of a search or of its output, each off its default (--beam 5, --lenpen 3: ignored once)
            given = off_default(self, ("sampling", "nbest", "replace_unk", "alignments", "plot_attention", "ban_unk",
                                       "output_format", "beam", "lenpen", "max_len_a", "max_len_b"))
            if given:
                read_as = (" (it reads the translations as --input-format reads the sources)"
                           if "--output-format" in given else "")
                raise ConfigError(f"--score-reference scores given translations: {' and '.join(given)} "
                                  f"would change nothing{read_as}")
        if self.sampling and off_default(self, ("lenpen",)):  # the API's and serve's scores use it; this writes none
            raise ConfigError("--sampling writes each line's drawn translation, not its score: --lenpen would change "
                              "nothing")


def _project(config: object, cls: type) -> object:
    """`config`'s fields of `cls`, as a `cls`, not validated again: they were when `config` was."""
    part = object.__new__(cls)
    for f in fields(cls):
        object.__setattr__(part, f.name, getattr(config, f.name))
    return part
