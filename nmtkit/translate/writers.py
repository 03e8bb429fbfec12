"""The outputs of `nmtkit translate`: translations (1-best lines or Moses n-best), alignments
(one line per output line) and attention plots (the paper's Figure 3)."""
from __future__ import annotations

from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Sequence

from nmtkit.outputs import save_figure
from nmtkit.translate.alignment import hard_alignment, soft_alignment
from nmtkit.translate.config import TranslateConfig

if TYPE_CHECKING:
    from nmtkit.translate.translator import Result


def nbest_line(index: int, text: str, log_prob: float, length: int, score: float) -> str:
    """Moses n-best format: `i ||| hyp ||| LogProb= lp Length= n ||| score`."""
    return f"{index} ||| {text} ||| LogProb= {log_prob:.4f} Length= {length} ||| {score:.4f}"


def plot_name(lineno: int) -> str:
    """The file name of input line `lineno`'s attention plot in the --plot-attention folder."""
    return f"{lineno:06d}.png"


def is_plot_name(name: str) -> bool:
    """Whether `name` is one `plot_name` gives (a file --plot-attention may overwrite)."""
    return len(name) >= 10 and name.endswith(".png") and name[:-4].isdigit()


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


class Writers:
    """The output stream(s): translations (1-best or n-best), optional alignments file."""

    def __init__(self, out: IO[str], align: IO[str] | None, config: TranslateConfig, flush_each: bool):
        self.out, self.align, self.config, self.flush_each = out, align, config, flush_each
        self.sent = 0  # sentence counter for n-best ids (0-based, as Moses)

    def write(self, r: Result) -> None:
        c = self.config
        if c.nbest == 1:
            self.out.write(r.text + "\n")
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
