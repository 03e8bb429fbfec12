"""Subsets of the test sentences: the paper's "No UNK" subset (Bahdanau et al. 2015, Table 1) and
source-length buckets (Figure 2), as a table or a matplotlib chart.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from nmtkit.data.manifest import read_manifest
from nmtkit.errors import CheckpointError, ConfigError
from nmtkit.io.files import save_figure, use_agg
from nmtkit.score.metrics import corpus_score, make_metric, multibleu
from nmtkit.text.io import check_counts
from nmtkit.text.pipeline import TextPipeline
from nmtkit.text.vocab import SPECIALS

BPE_NO_UNK_NOTE = (
    "this model uses BPE subwords, so almost every sentence decomposes into known subwords; "
    "the 'No UNK' subset here means: sentences in which no source or reference token maps to "
    "<unk> after the model's preprocessing and BPE (usually nearly all sentences), unlike the "
    "paper's word-level 'No UNK' column"
)


def subset(lines: Sequence[str], indices: Sequence[int]) -> list[str]:
    return [lines[i] for i in indices]


def no_unk_indices(src: Sequence[str], refs: Sequence[Sequence[str]],
                   encode_src: Callable[[str], list[str]], encode_tgt: Callable[[str], list[str]],
                   src_vocab: Iterable[str] | set[str], tgt_vocab: Iterable[str] | set[str]) -> list[int]:
    """Indices of sentences whose source and every reference have no out-of-vocabulary token once
    encoded by the model's pipeline. The special symbols count as unknown: a literal "<unk>" in
    the text is the model's UNK too."""
    src_known = set(src_vocab) - set(SPECIALS)
    tgt_known = set(tgt_vocab) - set(SPECIALS)
    check_counts(("the source", len(src)), [("the references", len(r)) for r in refs])
    return [i for i, line in enumerate(src) if all(t in src_known for t in encode_src(line))
            and all(all(t in tgt_known for t in encode_tgt(r[i])) for r in refs)]


@dataclass
class ModelText:
    """What the "No UNK" subset needs from a model: its two encoders and two vocabularies."""

    encode_src: Callable[[str], list[str]]
    encode_tgt: Callable[[str], list[str]]
    src_vocab: list[str]
    tgt_vocab: list[str]
    is_bpe: bool
    origin: str
    langs: tuple[Any, Any] = (None, None)  # (source, target) language the model was trained on, where recorded


def _pipeline_text(pipe: Any, src_vocab: list[str], tgt_vocab: list[str], origin: str,
                   langs: tuple[Any, Any]) -> ModelText:
    return ModelText(lambda s: pipe.encode(s, "src"), lambda s: pipe.encode(s, "tgt"),
                     list(src_vocab), list(tgt_vocab), bool(pipe.bpe), origin, langs)


def model_text_from_checkpoint(path: str | Path) -> ModelText:
    """Pipeline and vocabularies recorded in a checkpoint (imports torch to read the file)."""
    from nmtkit.checkpoint import load_checkpoint, pipeline_of

    ckpt = load_checkpoint(path)
    try:
        return _pipeline_text(pipeline_of(ckpt, str(path)), ckpt["src_vocab"], ckpt["tgt_vocab"], str(path),
                              (ckpt.get("src_lang"), ckpt.get("tgt_lang")))
    except KeyError as err:
        raise CheckpointError(f"checkpoint lacks field {err}", str(path)) from None


def model_text_from_data_dir(data_dir: str | Path) -> ModelText:
    """Pipeline and vocabularies of a `nmtkit preprocess` data directory (data.manifest; torch-free)."""
    m = read_manifest(data_dir)
    pipe = TextPipeline.from_dict(m.pipeline)  # read_manifest has checked it
    return _pipeline_text(pipe, m.src_vocab.itos, m.tgt_vocab.itos, str(data_dir), (m.src_lang, m.tgt_lang))


MAX_LENGTH_BUCKETS = 1000  # rows of the by-length table (and points of its chart) before the open last one


def check_buckets(width: int, max_length: int) -> None:
    """A ConfigError unless --bucket-width and --max-length are positive and make few enough buckets."""
    if width < 1 or max_length < 1:
        raise ConfigError("--bucket-width and --max-length must be positive")
    n = (max_length + width - 1) // width
    if n > MAX_LENGTH_BUCKETS:
        raise ConfigError(f"--max-length {max_length} in buckets of --bucket-width {width} makes {n:,} buckets, over "
                          f"the {MAX_LENGTH_BUCKETS:,} a table can show: give a wider --bucket-width or a smaller "
                          "--max-length")


def bucket_of(length: int, width: int, max_length: int) -> int:
    """Bucket index of a sentence of `length` words: (0, w] -> 0, (w, 2w] -> 1, ..., > max -> last;
    empty sentences fall in the first."""
    if length > max_length:
        return (max_length + width - 1) // width
    return max(0, (length - 1) // width)


def bucket_labels(width: int, max_length: int) -> list[str]:
    """Labels of the buckets `bucket_of` assigns, e.g. ["1-10", "11-20", ..., "51-60", ">60"]."""
    n = (max_length + width - 1) // width
    labels = [f"{i * width + 1}-{min((i + 1) * width, max_length)}" for i in range(n)]
    labels[0] = "0" + labels[0][1:]  # the first bucket also holds empty sentences
    return labels + [f">{max_length}"]


@dataclass
class LengthBucket:
    """One row of the by-length table: the sentences of one length range and each system's BLEU."""

    label: str
    lo: int
    hi: int | None  # inclusive upper bound; None for the open last bucket
    indices: list[int]
    bleu: dict[str, float | None]  # system name -> sacrebleu BLEU (None when the bucket is empty)
    paper_bleu: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {"bucket": self.label, "min_len": self.lo, "max_len": self.hi, "sentences": len(self.indices),
             "bleu": self.bleu}
        if self.paper_bleu:
            d["paper_bleu"] = self.paper_bleu
        return d


def bleu_by_length(systems: Sequence[tuple[str, Sequence[str]]], refs: Sequence[Sequence[str]],
                   src_lengths: Sequence[int], width: int = 10, max_length: int = 60,
                   tokenize: str | None = None, lowercase: bool = False,
                   paper_tok: tuple[Sequence[Sequence[str]], Sequence[Sequence[str]]] | None = None
                   ) -> list[LengthBucket]:
    """Corpus BLEU of each system on the sentences of each source-length bucket (None for an empty
    one); `paper_tok = (hyps_tok per system, refs_tok)` adds paper-style BLEU."""
    check_buckets(width, max_length)
    check_counts(("the source", len(src_lengths)), [(name, len(hyps)) for name, hyps in systems])
    labels = bucket_labels(width, max_length)
    members: list[list[int]] = [[] for _ in labels]
    for i, n in enumerate(src_lengths):
        members[bucket_of(n, width, max_length)].append(i)
    rows = []
    for b, (label, idx) in enumerate(zip(labels, members)):
        lo = 0 if b == 0 else b * width + 1
        hi = None if b == len(labels) - 1 else min((b + 1) * width, max_length)
        bleu: dict[str, float | None] = {name: None for name, _ in systems}  # None stays for an empty bucket
        pbleu: dict[str, float | None] = dict(bleu) if paper_tok is not None else {}
        for s, (name, hyps) in enumerate(systems if idx else ()):
            metric = make_metric("bleu", tokenize=tokenize, lowercase=lowercase)
            bleu[name] = float(corpus_score(metric, subset(hyps, idx), [subset(r, idx) for r in refs]).score)
            if paper_tok is not None:
                hyps_tok, refs_tok = paper_tok
                pbleu[name] = multibleu(subset(hyps_tok[s], idx), [subset(r, idx) for r in refs_tok]).score
        rows.append(LengthBucket(label, lo, hi, idx, bleu, pbleu))
    return rows


def plot_by_length(rows: Sequence[LengthBucket], names: Sequence[str], path: str | Path) -> None:
    """Draw BLEU against source-length bucket, one solid line per system (paper Figure 2), to a PNG;
    paper-style BLEU, when the rows carry it, as a dashed line of the same colour."""
    use_agg()
    import matplotlib.pyplot as plt

    path = Path(path)
    paper = any(r.paper_bleu for r in rows)
    x = list(range(len(rows)))
    # names as written: matplotlib reads "$...$" as a formula
    with plt.rc_context({"text.parse_math": False}):
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
        try:
            markers = "os^vDx*+"
            for k, name in enumerate(names):
                ys = [float("nan") if r.bleu.get(name) is None else r.bleu[name] for r in rows]
                shown = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")  # matplotlib draws no surrogate
                (line,) = ax.plot(x, ys, marker=markers[k % len(markers)], label=shown)
                if paper:
                    ps = [float("nan") if r.paper_bleu.get(name) is None else r.paper_bleu[name] for r in rows]
                    ax.plot(x, ps, marker=markers[k % len(markers)], linestyle="--", color=line.get_color(),
                            label=f"{shown} (paper-style BLEU)")
            step = -(-len(rows) // 20)  # at most 20 labels, upright past 8: more overlapped into a smear
            ax.set_xticks(x[::step])
            ax.set_xticklabels([r.label for r in rows][::step], rotation=90 if len(rows) > 8 else 0)
            ax.set_xlabel("source sentence length (words)")
            ax.set_ylabel("BLEU (solid: sacrebleu, dashed: paper-style)" if paper else "BLEU (sacrebleu)")
            ax.set_title("BLEU by source sentence length")
            ax.grid(True, alpha=0.3)
            ax.legend(ax.lines, [line.get_label() for line in ax.lines])  # as named: '_x' would be left out
            fig.tight_layout()
            save_figure(fig, path, format="png")
        finally:
            plt.close(fig)
