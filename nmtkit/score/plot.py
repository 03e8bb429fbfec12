"""BLEU by source length as a chart (paper Figure 2): matplotlib, written as a PNG."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from nmtkit.io.files import save_figure
from nmtkit.score.subsets import LengthBucket


def plot_by_length(rows: Sequence[LengthBucket], names: Sequence[str], path: str | Path,
                   title: str = "BLEU by source sentence length") -> None:
    """Draw BLEU against source-length bucket, one line per system (paper Figure 2), to a PNG.

    Solid lines: sacrebleu BLEU. When the rows carry paper-style BLEU, each system also gets a
    dashed line of the same colour for it.

    Written to a temporary name and renamed, so a failed run leaves no partial file.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    path = Path(path)
    paper = any(r.paper_bleu for r in rows)
    x = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    try:
        markers = "os^vDx*+"
        for k, name in enumerate(names):
            ys = [r.bleu.get(name) for r in rows]
            ys = [float("nan") if y is None else y for y in ys]
            (line,) = ax.plot(x, ys, marker=markers[k % len(markers)], label=name)
            if paper:
                ps = [r.paper_bleu.get(name) for r in rows]
                ps = [float("nan") if y is None else y for y in ps]
                ax.plot(x, ps, marker=markers[k % len(markers)], linestyle="--", color=line.get_color(),
                        label=f"{name} (paper-style BLEU)")
        ax.set_xticks(x)
        ax.set_xticklabels([r.label for r in rows])
        ax.set_xlabel("source sentence length (words)")
        ax.set_ylabel("BLEU (solid: sacrebleu, dashed: paper-style)" if paper else "BLEU (sacrebleu)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        save_figure(fig, path, format="png")
    finally:
        plt.close(fig)

