"""`nmtkit train`: options -> TrainConfig (+ model size overrides) -> `nmtkit.train.run`.

Every option defaults to "not given" (None) so that the preset's training defaults (the
paper's procedure for the paper's presets) and, on --resume, the checkpoint's settings apply
unless the user says otherwise. The help text states each effective default.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

import click

from nmtkit.cli.common import progress_enabled, quiet_warnings

TRAIN_FIELDS = (
    "arch", "preset", "max_len", "batch_size", "max_tokens", "sort_pool", "update_freq", "optimizer", "lr", "adadelta_rho",
    "adadelta_eps", "adam_beta1", "adam_beta2", "adam_eps", "weight_decay", "clip_norm", "label_smoothing",
    "normalize_loss", "lr_schedule", "warmup_updates", "lr_decay", "lr_patience", "min_lr", "max_updates",
    "max_epochs", "max_time", "patience", "valid_every", "valid_bleu_samples", "valid_beam", "valid_batch_size",
    "best_metric", "save_every", "keep_every", "log_every", "on_nan", "tensorboard", "seed", "device", "precision", "fuse", "tf32",
    "threads",
)
MODEL_FIELDS = ("emb_dim", "enc_hidden", "dec_hidden", "att_hidden", "maxout", "dropout", "init", "dropout_sites", "readout")

EPILOG = """\b
Examples:
  nmtkit train --data work/data --save-dir runs/rnnsearch50 --preset rnnsearch-50 --patience 10
  nmtkit train --data work/data --save-dir runs/small --preset small --max-time 20m --valid-every 500
  nmtkit train --data work/data --save-dir runs/small --resume          # continue exactly
  torchrun --nproc_per_node 4 -m nmtkit train --data work/data --save-dir runs/big --preset rnnsearch-50 ...
"""


def _choice(*values: str) -> click.Choice:
    return click.Choice(values, case_sensitive=False)


@click.command("train", epilog=EPILOG)
@click.option("--data", "data_dir", required=True, type=click.Path(), metavar="DIR",
              help="Data directory written by 'nmtkit preprocess' (manifest.json, vocabularies, train/valid splits).")
@click.option("--save-dir", required=True, type=click.Path(), metavar="RUN",
              help="Run directory: checkpoint_best.pt, checkpoint_last.pt, metrics.jsonl, curves.png, train.log.")
@click.option("--resume", is_flag=True,
              help="Continue the run in --save-dir exactly from checkpoint_last.pt (model, optimiser, schedule, "
                   "RNG states, position in the data). Only stopping, reporting and hardware options may change.")
@click.option("--force", is_flag=True, help="Start over in a --save-dir that already holds a run (its files are deleted).")
# model
@click.option("--preset", default=None, metavar="NAME",
              help="Model preset: rnnsearch-30, rnnsearch-50, rnnencdec-30, rnnencdec-50 (the paper's sizes and "
                   "training procedure), lstm-attention, small (emb 256, enc 256, dec 512, Adam).")
@click.option("--arch", default=None, type=_choice("rnnsearch", "rnnencdec", "lstm-attention"),
              help="Architecture when no --preset is given (default rnnsearch, the paper's sizes).")
@click.option("--emb-dim", type=int, default=None, metavar="M", help="Word embedding size m (overrides the preset).")
@click.option("--enc-hidden", type=int, default=None, metavar="N", help="Encoder GRU/LSTM units per direction n.")
@click.option("--dec-hidden", type=int, default=None, metavar="N", help="Decoder units n.")
@click.option("--att-hidden", type=int, default=None, metavar="N", help="Alignment model hidden size n'.")
@click.option("--maxout", type=int, default=None, metavar="L", help="Maxout units l of the deep output.")
@click.option("--dropout", type=float, default=None, metavar="P", help="Dropout probability (preset's default).")
@click.option("--init", type=_choice("paper", "default", "uniform", "uniform-emb"), default=None,
              help="Weight initialisation: paper (the appendix: orthogonal recurrent matrices, N(0, 0.01^2) "
                   "elsewhere; the paper presets), default (PyTorch's: N(0, 1) embeddings; lstm-attention), uniform "
                   "(every weight U(-0.1, 0.1), as OpenNMT-py; the small preset: it learns more per update) or "
                   "uniform-emb (PyTorch's, embeddings U(-0.1, 0.1)).")
@click.option("--dropout-sites", default=None, metavar="LIST",
              help="rnnsearch: where --dropout applies, a comma-separated subset of src,tgt,out (source and "
                   "target embeddings, the deep output) [src,tgt,out; the small preset: out].")
@click.option("--readout", type=_choice("prev", "new"), default=None,
              help="rnnsearch: the decoder state in the deep output for y_i: prev, s_{i-1} as the paper's "
                   "appendix (the paper presets), or new, s_i as its section 3.1 (the small preset: it learns "
                   "more per update).")
# data
@click.option("--max-len", type=int, default=None, metavar="N",
              help="Drop training pairs with a side longer than N tokens (preset: 30 or 50; default 50).")
@click.option("--batch-size", type=int, default=None, metavar="N",
              help="Pairs per minibatch and GPU/process (paper presets 80, others 64). With --max-tokens: an "
                   "extra cap. An update sees processes x --update-freq minibatches.")
@click.option("--max-tokens", type=int, default=None, metavar="N",
              help="Batch by a token budget instead: at most N padded tokens (pairs x longest side) per "
                   "minibatch and GPU/process.")
@click.option("--update-freq", type=int, default=None, metavar="N",
              help="Sum the gradients of N minibatches per process into each update (N x the batch at the "
                   "memory of one; the paper's 80 pairs on 2 GPUs: --batch-size 40; on 1 GPU with less "
                   "memory: --batch-size 40 --update-freq 2) [1].")
@click.option("--sort-pool", type=int, default=None, metavar="N",
              help="Pairs read, sorted by length and split into minibatches at a time (paper: 1600 = 20 x 80).")
# optimisation
@click.option("--optimizer", type=_choice("adadelta", "adam", "sgd"), default=None,
              help="Paper presets: adadelta (lr 1.0, rho 0.95, eps 1e-6); others: adam (lr 1e-3).")
@click.option("--lr", type=float, default=None, help="Base learning rate (adadelta 1.0, adam 1e-3).")
@click.option("--adadelta-rho", type=float, default=None, help="Adadelta decay rho [0.95].")
@click.option("--adadelta-eps", type=float, default=None, help="Adadelta epsilon [1e-6].")
@click.option("--adam-beta1", type=float, default=None, help="Adam beta1 [0.9].")
@click.option("--adam-beta2", type=float, default=None, help="Adam beta2 [0.999].")
@click.option("--adam-eps", type=float, default=None, help="Adam epsilon [1e-8].")
@click.option("--weight-decay", type=float, default=None, help="L2 weight decay [0].")
@click.option("--clip-norm", type=float, default=None,
              help="Rescale the gradient to at most this L2 norm (paper: 1; 0 disables) [preset].")
@click.option("--label-smoothing", type=float, default=None, help="Label smoothing epsilon [0].")
@click.option("--normalize-loss", type=_choice("sentences", "tokens"), default=None,
              help="Divide a minibatch's summed loss by its pairs (paper presets) or its target tokens (others).")
@click.option("--lr-schedule", type=_choice("constant", "plateau"), default=None,
              help="constant, or plateau: multiply the lr by --lr-decay when the dev metric has not improved "
                   "for more than --lr-patience validations [constant].")
@click.option("--warmup-updates", type=int, default=None, metavar="N", help="Linear lr warm-up over N updates [0].")
@click.option("--lr-decay", type=float, default=None, help="Plateau decay factor [0.5].")
@click.option("--lr-patience", type=int, default=None, metavar="N", help="Validations without improvement before a decay [0].")
@click.option("--min-lr", type=float, default=None, help="Never decay the lr below this [0].")
# stopping
@click.option("--max-updates", type=int, default=None, metavar="N", help="Stop after N updates.")
@click.option("--max-epochs", type=int, default=None, metavar="N", help="Stop after N epochs.")
@click.option("--max-time", default=None, metavar="DURATION",
              help="Stop after this much training time over all sessions of the run: 3600, 90m, 12h, 2d.")
@click.option("--patience", type=int, default=None, metavar="N",
              help="Early stopping: stop after N validations without improvement of --best-metric.")
# validation, checkpoints, logs
@click.option("--valid-every", type=int, default=None, metavar="N", help="Validate every N updates [1000].")
@click.option("--valid-bleu-samples", type=int, default=None, metavar="N",
              help="Dev BLEU on the first N dev sentences (0: loss only) [500].")
@click.option("--valid-beam", type=int, default=None, metavar="K", help="Beam for dev BLEU (1: greedy) [1].")
@click.option("--valid-batch-size", type=int, default=None, metavar="N", help="Sentences per validation batch [64].")
@click.option("--best-metric", type=_choice("loss", "bleu"), default=None,
              help="Dev metric that selects checkpoint_best.pt, early stopping and plateau decay [loss].")
@click.option("--save-every", type=int, default=None, metavar="N", help="Write checkpoint_last.pt every N updates [1000].")
@click.option("--keep-every", type=int, default=None, metavar="N",
              help="Also keep checkpoint_<update>.pt (the model, no optimiser state) every N updates, for "
                   "scoring or averaging later; 0: never [0].")
@click.option("--log-every", type=int, default=None, metavar="N", help="Log training statistics every N updates [100].")
@click.option("--on-nan", type=_choice("stop", "skip"), default=None,
              help="On a non-finite loss: stop with a message (default) or skip the minibatch.")
@click.option("--tensorboard", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Also write metrics.jsonl's records (train loss, dev loss and BLEU, lr, gradient norm, tokens/s) "
                   "as TensorBoard scalars into DIR (`tensorboard --logdir DIR`); a resumed run appends to it. "
                   "Needs pip install 'nmtkit[tensorboard]'.")
# hardware and reproducibility
@click.option("--seed", type=int, default=None, help="Seed of initialisation, data order and dropout [1].")
@click.option("--device", type=_choice("auto", "cpu", "cuda"), default=None, help="auto: CUDA when available [auto].")
@click.option("--precision", type=_choice("fp32", "bf16", "fp16", "auto"), default=None,
              help="Autocast dtype (fp32 master weights): bf16 on CPU or GPU; fp16 with loss scaling, meant "
                   "for GPUs (it runs on a CPU, slowly); auto: bf16 on GPUs that have it (else fp16) and on "
                   "CPUs with native BF16 (AVX512-BF16, AMX), else fp32 [fp32; the small preset: auto].")
@click.option("--fuse", type=_choice("auto", "on", "off"), default=None,
              help="Fuse each recurrence step's elementwise work into a few compiled kernels (torch.compile; "
                   "the first run compiles for up to a minute, later runs reuse the cache). auto: on CUDA [auto].")
@click.option("--tf32/--no-tf32", default=None,
              help="fp32 runs on CUDA: matrix products and convolutions in TF32 (Ampere and newer; about "
                   "fp32's range with a 10-bit mantissa, several times faster). --no-tf32 for exact fp32 [on].")
@click.option("--threads", type=int, default=None, metavar="N", help="torch CPU threads [all cores, divided among local ranks].")
@click.option("--quiet", "-q", is_flag=True, help="No progress display, log lines or warnings on stderr (files are still written).")
@click.pass_context
def train_cmd(ctx: click.Context, data_dir: str, save_dir: str, resume: bool, force: bool, quiet: bool,
              **options: Any) -> None:
    """Train an RNNsearch, RNNencdec or LSTM-attention model.

    Reads a data directory from 'nmtkit preprocess' and writes a run directory. The paper's
    presets train as in Bahdanau et al. (2015): Adadelta, gradient norm 1, minibatches of 80
    pairs cut from 1600 pairs sorted by length. Ctrl-C or SIGTERM saves checkpoint_last.pt and
    exits; --resume continues exactly. Under torchrun, each process trains on its own
    minibatches (--batch-size is per process; DistributedDataParallel averages the gradients)
    and only rank 0 writes.
    """
    quiet_warnings(quiet)
    from nmtkit.train.config import parse_duration

    train_options = {k: options[k] for k in TRAIN_FIELDS if options.get(k) is not None}
    for k in ("optimizer", "normalize_loss", "lr_schedule", "best_metric", "on_nan", "device", "precision", "fuse", "arch"):
        if k in train_options:
            train_options[k] = train_options[k].lower()
    if "tensorboard" in train_options:  # recorded absolute, so --resume from another folder finds it
        train_options["tensorboard"] = os.path.abspath(train_options["tensorboard"])
    if "max_time" in train_options:
        train_options["max_time"] = parse_duration(train_options["max_time"])
    model_overrides = {k: options[k] for k in MODEL_FIELDS if options.get(k) is not None}

    from nmtkit.train import distributed as ddp
    from nmtkit.train.run import run_training

    info = ddp.env_info()
    reporter = Reporter(quiet=quiet or not info.is_main)
    try:
        result = run_training(data_dir, save_dir, train_options, model_overrides, resume=resume, force=force,
                              callbacks=reporter)
    finally:
        reporter.close()
    if info.is_main and not quiet:
        best = "-" if result.best_score is None else f"{result.best_score:.4g} at update {result.best_update}"
        click.echo(f"nmtkit train: stopped ({result.reason}) at update {result.update}, epoch {result.epoch}; "
                   f"best dev: {best}; run: {save_dir}", err=True)
    if result.interrupted:
        click.echo(f"nmtkit: {result.reason}: checkpoint saved to {save_dir}/checkpoint_last.pt; "
                   "continue with --resume", err=True)
        sys.exit(130 if result.reason == "SIGINT" else 143)


def _fmt_time(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "-"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Reporter:
    """Trainer callbacks -> a rich live display on a terminal, else plain log lines on stderr."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.live = progress_enabled(quiet)
        self.progress = None
        self.update = 0
        self.epoch = 1
        self.total: int | None = None
        self.last: dict[str, Any] = {}
        self.dev = "-"
        self.t0 = time.perf_counter()
        self.start_update = 0
        self.max_time: float | None = None
        self.elapsed0 = 0.0

    # callbacks
    def on_start(self, info: dict[str, Any]) -> None:
        self.start_update = info["update"]
        self.max_time = info.get("max_time")
        self.elapsed0 = info.get("elapsed", 0.0)
        if info.get("max_updates"):
            self.total = info["max_updates"]
        elif info.get("max_epochs"):
            self.total = info["max_epochs"] * info["batches_per_epoch"]
        self.t0 = time.perf_counter()
        line = (f"training {info['parameters']:,} parameters on {info['device']} x{info['world_size']}: "
                f"{info['train_pairs']:,} pairs ({info['dropped_pairs']:,} over --max-len dropped), "
                f"{info['batches_per_epoch']:,} minibatches per epoch, from update {info['update']:,}")
        if self.quiet:
            return
        if self.live:
            from rich.live import Live

            from nmtkit.cli.common import make_console

            console = make_console()
            console.print(line)
            self.update, self.epoch = info["update"], info["epoch"]
            self.progress = Live(get_renderable=self._render, console=console, refresh_per_second=4,
                                 transient=False)
            self.progress.start()
        else:
            click.echo(f"nmtkit train: {line}", err=True)

    def _render(self):
        """Three lines: progress and ETA, training statistics, last dev score."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        head = Table.grid(padding=(0, 1))
        total = f"/{self.total:,}" if self.total else ""
        pct = f" ({100 * self.update / self.total:.0f}%)" if self.total else ""
        if self.total:
            head.add_row(Text("train", style="bold"), ProgressBar(total=self.total, completed=self.update, width=24),
                         Text(f"update {self.update:,}{total}{pct}  epoch {self.epoch}  "
                              f"ETA {_fmt_time(self._eta(self.update))}"))
        else:
            head.add_row(Text("train", style="bold"),
                         Text(f"update {self.update:,}  epoch {self.epoch}  ETA {_fmt_time(self._eta(self.update))}"))
        r = self.last
        stats = (f"loss {r['loss']:.3f}  ppl {r['ppl']:.1f}  lr {r['lr']:.3g}  "
                 f"{r['tgt_tokens_per_s']:,.0f} tgt tok/s" if r else "loss -")
        return Group(head, Text("  " + stats), Text(f"  dev {self.dev}"))

    def _eta(self, update: int) -> float | None:
        done = update - self.start_update
        spent = time.perf_counter() - self.t0
        etas = []
        if self.total and done > 0:
            etas.append((self.total - update) * spent / done)
        if self.max_time:
            etas.append(max(0.0, self.max_time - self.elapsed0 - spent))
        return min(etas) if etas else None

    def on_update(self, update: int, epoch: int) -> None:
        self.update, self.epoch = update, epoch

    def on_log(self, rec: dict[str, Any]) -> None:
        self.last = rec
        if self.quiet:
            return
        if self.progress is None:
            click.echo(f"nmtkit train: update {rec['update']:,} | epoch {rec['epoch']} | loss {rec['loss']:.4f} | "
                       f"ppl {rec['ppl']:.2f} | lr {rec['lr']:.3g} | {rec['tgt_tokens_per_s']:,.0f} tgt tok/s | "
                       f"ETA {_fmt_time(self._eta(rec['update']))}", err=True)

    def on_validation(self, rec: dict[str, Any]) -> None:
        bleu = "" if rec.get("bleu") is None else f" BLEU {rec['bleu']:.2f}"
        self.dev = (f"loss {rec['loss']:.3f}  ppl {rec['ppl']:.1f}{bleu}  at update {rec['update']:,}"
                    f"{'  (best)' if rec['best'] else ''}")
        if self.quiet:
            return
        line = (f"validation at update {rec['update']:,}: dev loss {rec['loss']:.3f} ppl {rec['ppl']:.1f}{bleu}"
                f"{' (best)' if rec['best'] else ''}")
        if self.progress is not None:
            self.progress.console.print(line)
        else:
            click.echo(f"nmtkit train: {line}", err=True)

    def on_message(self, msg: str) -> None:
        if self.quiet:
            return
        if self.progress is not None:
            self.progress.console.print(msg)
        else:
            click.echo(f"nmtkit train: {msg}", err=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
