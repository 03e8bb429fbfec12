"""`TranslateConfig`: every option of `nmtkit translate`, checked in one place."""
from __future__ import annotations

import math
from dataclasses import dataclass

from nmtkit.devices import FUSE, PRECISIONS
from nmtkit.errors import ConfigError

FORMATS = ("raw", "tok", "bpe")
DEFAULT_MAX_SRC_LEN = 250
DEFAULT_SEED = 1  # the sampling seed when none is given (fairseq's default seed too)


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
    ban_unk: bool = False  # never emit the unknown word (the paper's no-UNK decoding)
    unk_dict: str | None = None
    alignments: str | None = None  # None | "hard" | "soft"
    plot_attention: str | None = None
    plot_limit: int = 100
    max_src_len: int | None = None  # None: from the checkpoint, else DEFAULT_MAX_SRC_LEN
    device: str = "auto"
    precision: str = "auto"  # auto | fp32 | bf16 | fp16 (meant for CUDA; slow on the CPU) | int8 (CPU only)
    threads: int | None = None  # torch CPU threads (None: torch's default)
    fuse: str = "auto"  # compile the decoding step (models/fusion.py): auto | on | off; auto = on CUDA
    ensemble: bool = False  # several models are averaged only when asked (--ensemble)
    shortlist: str = "auto"  # auto: score a shortlist where the checkpoint has a lexicon; off: always all words
    sampling: bool = False  # draw one translation per line (nmtkit.decode.sampling) instead of beam search
    sampling_topk: int = 0  # sample among the k most likely words at each step (0: all)
    temperature: float = 1.0  # sampling temperature, > 0
    seed: int | None = None  # sampling seed (None: DEFAULT_SEED)

    @property
    def sampling_seed(self) -> int:
        return DEFAULT_SEED if self.seed is None else self.seed

    def validate(self) -> None:
        if not self.models:
            raise ConfigError("no model given (-m CHECKPOINT)")
        if self.ban_unk and self.replace_unk:
            raise ConfigError("--ban-unk and --replace-unk exclude each other (a banned <unk> is never replaced)")
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
        if self.precision not in PRECISIONS:
            raise ConfigError(f"--precision is one of {', '.join(PRECISIONS)}, got '{self.precision}'")
        if self.shortlist not in ("auto", "off"):
            raise ConfigError(f"--shortlist is auto or off, got '{self.shortlist}'")
        if self.fuse not in FUSE:
            raise ConfigError(f"--fuse is auto, on or off, got '{self.fuse}'")
        if self.threads is not None and self.threads < 1:
            raise ConfigError("--threads must be >= 1")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"--device is auto, cpu or cuda[:N], got '{self.device}'")
        if self.max_src_len is not None and self.max_src_len < 1:
            raise ConfigError("--max-src-len must be >= 1")
        if self.unk_dict and not self.replace_unk:
            raise ConfigError("--unk-dict needs --replace-unk")
        if not math.isfinite(self.lenpen):
            raise ConfigError(f"--lenpen must be a finite number, got {self.lenpen}")
        for option, value in (("--max-len-a", self.max_len_a), ("--max-len-b", self.max_len_b)):
            if not (math.isfinite(value) and value >= 0):  # a negative limit makes every output empty
                raise ConfigError(f"{option} must be a finite number >= 0, got {value}")
        if self.plot_limit < 0:
            raise ConfigError(f"--plot-limit must be >= 0, got {self.plot_limit}")
        self._validate_sampling()

    def _validate_sampling(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ConfigError(f"--temperature must be > 0 (for greedy decoding use --beam 1), got {self.temperature}")
        if self.sampling_topk < 0:
            raise ConfigError(f"--sampling-topk must be >= 0 (0: the whole vocabulary), got {self.sampling_topk}")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise ConfigError(f"--seed must be between 0 and 2^63-1, got {self.seed}")
        if not self.sampling:
            given = [name for name, on in (("--sampling-topk", self.sampling_topk != 0),
                                           ("--temperature", self.temperature != 1.0),
                                           ("--seed", self.seed is not None)) if on]
            if given:
                raise ConfigError(f"{' and '.join(given)} need --sampling")
        elif self.nbest != 1:
            raise ConfigError("--sampling draws one translation per line: --nbest must be 1")
