"""The outputs of `nmtkit translate`, all of them: translations (1-best lines or Moses n-best),
alignments (one line per output line) and attention plots (the paper's Figure 3)."""
from __future__ import annotations

from pathlib import Path
from typing import IO, Any, Sequence

from nmtkit.io.files import Staged, check_output_dir, save_figure, use_agg
from nmtkit.translate.alignment import Result, Translation, attention_matrix, hard_alignment, soft_alignment
from nmtkit.translate.config import TranslateConfig


def nbest_line(index: int, text: str, log_prob: float, length: int, score: float) -> str:
    """Moses n-best format: `i ||| hyp ||| LogProb= lp Length= n ||| score`."""
    return f"{index} ||| {text} ||| LogProb= {log_prob:.4f} Length= {length} ||| {score:.4f}"


def is_plot_name(name: str) -> bool:
    """Whether `name` is an attention plot's (NNNNNN.png), a file --plot-attention may overwrite."""
    return len(name) >= 10 and name.endswith(".png") and name[:-4].isdigit()


def plot_attention(path: str | Path, attention: Any, src_tokens: Sequence[str], tgt_tokens: Sequence[str],
                   source_eos: Any = None) -> None:
    """The paper's Figure 3: alignment weights in grey scale (0 black, 1 white), source words
    along the top, target words down the side (`attention_matrix`); written as a PNG (atomically)."""
    use_agg()
    import matplotlib.pyplot as plt
    import numpy as np

    src, tgt, rows = attention_matrix(attention, src_tokens, tgt_tokens, source_eos)
    # tokens as written: matplotlib reads "$...$" as a formula, and fails on one it cannot parse ("$_$")
    with plt.rc_context({"text.parse_math": False}):
        fig, ax = plt.subplots(figsize=tuple(max(3.0, min(0.35 * len(labels), 20.0) + 1.5) for labels in (src, tgt)))
        try:
            ax.imshow(np.asarray(rows, dtype=float), cmap="gray", vmin=0.0, vmax=1.0, aspect="equal",
                      interpolation="nearest")
            ax.xaxis.tick_top()
            ax.set_xticks(range(len(src)), labels=src, rotation=90)
            ax.set_yticks(range(len(tgt)), labels=tgt)
            fig.tight_layout()
            save_figure(fig, path, format="png", dpi=100)
        finally:
            plt.close(fig)


class Writers:
    """Every output of a translation run: translations to `out`, alignments to `align`, and the
    attention plots of the first config.plot_limit translated lines. With `stage_plots` (the
    translations go to a file, which appears whole at the end) the plots are staged in `plots`
    for the caller to commit with it; else drawn at once."""

    def __init__(self, out: IO[str], align: IO[str] | None, config: TranslateConfig, flush_each: bool,
                 stage_plots: bool = False):
        self.out, self.align, self.config, self.flush_each = out, align, config, flush_each
        self.sent = 0  # sentence counter for n-best ids (0-based, as Moses)
        self.plotted = 0
        self.plots: list[Staged] | None = [] if stage_plots else None
        if config.plot_attention:
            check_output_dir(config.plot_attention, "--plot-attention folder")

    def write(self, r: Result) -> None:
        """One input line's outputs: its translation line(s), alignment line(s) and plot."""
        self._plot(r)
        if self.config.nbest == 1:
            self.out.write(r.text + "\n")
            self._align(r, r.nbest[0] if r.nbest else None)
        else:
            if not r.nbest:
                self.out.write(nbest_line(self.sent, "", 0.0, 0, 0.0) + "\n")
                self._align(r, None)
            for hyp in r.nbest:
                self.out.write(nbest_line(self.sent, hyp.text, hyp.log_prob, len(hyp.tokens) + 1, hyp.score) + "\n")
                self._align(r, hyp)
        self.sent += 1
        if self.flush_each:
            self.flush()

    def _align(self, r: Result, hyp: Translation | None) -> None:
        """The alignment line of `hyp`, one of r's translations (None: an empty line's)."""
        if self.align is None:
            return
        if hyp is None:
            line = "" if self.config.alignments == "hard" else soft_alignment(None, [], [])
        elif self.config.alignments == "hard":
            line = hard_alignment(hyp.attention, len(hyp.tokens))
        else:
            line = soft_alignment(hyp.attention, r.src_tokens, hyp.tokens, hyp.source_eos_attention)
        self.align.write(line + "\n")

    def _plot(self, r: Result) -> None:
        """The best translation's attention, as NNNNNN.png (the line number)."""
        c = self.config
        if not c.plot_attention or not r.nbest or self.plotted >= c.plot_limit:
            return
        best, path = r.nbest[0], Path(c.plot_attention) / f"{r.index:06d}.png"
        if self.plots is not None:
            self.plots.append(Staged(path))
            path = Path(self.plots[-1].write_path)
        plot_attention(path, best.attention, r.src_tokens, best.tokens, best.source_eos_attention)
        self.plotted += 1

    def write_score(self, log_prob: float) -> None:
        """One line of `--score-reference`: a pair's log-probability."""
        self.out.write(f"{log_prob:.6f}\n")
        if self.flush_each:
            self.flush()

    def flush(self) -> None:
        self.out.flush()
        if self.align is not None:
            self.align.flush()
