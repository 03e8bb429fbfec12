"""The tests' shared helpers, one of each: a tiny model (`tiny_model`), its checkpoint
(`make_checkpoint`, the `ckpt` fixture), a tiny data directory (`make_data_dir`, the `data_dir`
fixture), tiny training options (`tiny_options`, `tiny_train_args` on the command line), padded
random batches, one CLI runner (`run_cli`), and the paths of ../shared/data.

torch is imported lazily: tests that do not use it stay free of it.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("DATA") or REPO.parent / "shared" / "data")


def pytest_configure(config):
    """The suite runs as from a terminal, however it was started: SIGINT at Python's default and
    SIGHUP at the system's, so that the commands the tests start take them as Ctrl-C and a closed
    terminal (a background job of a non-interactive shell ignores SIGINT, one under nohup SIGHUP;
    children inherit that, and nmtkit keeps an ignored signal ignored)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


# ---- the tiny model -----------------------------------------------------------------------------
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]
SRC_WORDS = "the cat sat on a mat dog ran in park big small red house . , and is".split()
TGT_WORDS = "le chat assis sur un tapis chien courait dans parc grand petit rouge maison . , et est".split()
SIZES = {  # per architecture; the vocabulary sizes are SPECIALS + the words
    "rnnsearch": dict(emb_dim=16, enc_hidden=16, dec_hidden=24, att_hidden=12, maxout=8),
    "rnnencdec": dict(emb_dim=16, enc_hidden=16, dec_hidden=24, maxout=8),
    "lstm-attention": dict(emb_dim=16, enc_hidden=16, dec_hidden=24),
}
TINY = {arch: dict(sizes, src_vocab_size=len(SPECIALS) + len(SRC_WORDS), tgt_vocab_size=len(SPECIALS) + len(TGT_WORDS))
        for arch, sizes in SIZES.items()}  # whole model configs, for build_model
TINY_MODEL = dict(SIZES["rnnsearch"], init="default")  # the model overrides of a tiny training run


def child_pids(pid: int) -> list[int]:
    """The pids of `pid`'s children, read from /proc (Linux)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def tiny_overrides(**changes):
    """TINY_MODEL as `nmtkit train`'s model options (nmtkit.train.presets.ModelOverrides)."""
    from nmtkit.train.presets import ModelOverrides

    return ModelOverrides(**{**TINY_MODEL, **changes})


def tiny_model(arch: str = "rnnsearch", seed: int = 0, *, exact: bool = False, src_vocab: int | None = None,
               tgt_vocab: int | None = None, dtype=None, **over):
    """A tiny `arch` model with random weights (seed), dropout 0, in eval mode; `over` changes
    config fields. exact=True: in float64 with every parameter drawn from N(0, 0.5) (the paper
    init zeroes v_a and the biases), for the tests that compare the models' equations."""
    import torch

    from nmtkit.models import build_model

    torch.manual_seed(seed)
    cfg = dict(TINY[arch], init="default", dropout=0.0)
    cfg.update({k: v for k, v in (("src_vocab_size", src_vocab), ("tgt_vocab_size", tgt_vocab)) if v is not None})
    cfg.update(over)
    model = build_model(arch, cfg)
    if exact:
        model = model.to(torch.float64)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.5)
    return model.to(dtype or next(model.parameters()).dtype).eval()


def make_checkpoint(path: Path, seed: int = 0, tgt_words: list[str] | None = None, pipeline=None,
                    src_words: list[str] | None = None, model=None, arch: str = "rnnsearch", **extra) -> Path:
    """Write a checkpoint (nmtkit.checkpoint.make_checkpoint, as the trainer does) around a
    `tiny_model` over the test vocabularies (or `model`, e.g. one whose weights a test set), with
    a word-level en-fr pipeline; `extra` overrides fields (e.g. a future format_version)."""
    from dataclasses import asdict

    from nmtkit import checkpoint
    from nmtkit.text.pipeline import TextPipeline
    from nmtkit.train.config import TrainConfig

    src_vocab = SPECIALS + list(src_words or SRC_WORDS)
    tgt_vocab = SPECIALS + list(tgt_words or TGT_WORDS)
    m = model if model is not None else tiny_model(arch, seed, src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab))
    pipe = pipeline or TextPipeline(src_lang="en", tgt_lang="fr")
    ckpt = checkpoint.make_checkpoint(
        arch=arch, model_config=asdict(m.config), model_state=m.state_dict(), pipeline=pipe.to_dict(),
        src_lang="en", tgt_lang="fr", src_vocab=src_vocab, tgt_vocab=tgt_vocab,
        train_config=TrainConfig(max_len=50, max_updates=1).to_dict())
    ckpt.update(extra)
    checkpoint.save_checkpoint(ckpt, path)
    return path


@pytest.fixture(scope="module")
def ckpt(request, tmp_path_factory) -> str:
    """A tiny checkpoint (`make_checkpoint`) shared by a module's tests: seed 3, or the module's
    CKPT_SEED where its tests need a model that behaves in some way (say, emits no <unk>)."""
    seed = getattr(request.module, "CKPT_SEED", 3)
    return str(make_checkpoint(tmp_path_factory.mktemp("ckpt") / "model.pt", seed=seed))


def random_batch(src_vocab: int = 11, tgt_vocab: int = 13, seed: int = 1,
                 src_lens=(5, 2, 3, 1), tgt_lens=(4, 1, 3, 2)):
    """Padded batch: (src (B,S), src_lens, tgt_in (B,T), tgt_out (B,T), sentences).

    Source ids avoid the specials; tgt_in = [BOS] + y, tgt_out = y + [EOS], padded with 0.
    `sentences` is the list of (src ids, tgt ids) without specials, for the references.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    B = len(src_lens)
    S, T = max(src_lens), max(tgt_lens) + 1
    src = torch.zeros(B, S, dtype=torch.long)
    tgt_in = torch.zeros(B, T, dtype=torch.long)
    tgt_out = torch.zeros(B, T, dtype=torch.long)
    sents = []
    for b in range(B):
        x = torch.randint(4, src_vocab, (src_lens[b],), generator=g)
        y = torch.randint(4, tgt_vocab, (tgt_lens[b],), generator=g)
        src[b, : len(x)] = x
        tgt_in[b, : len(y) + 1] = torch.cat([torch.tensor([2]), y])
        tgt_out[b, : len(y) + 1] = torch.cat([y, torch.tensor([3])])
        sents.append((x.tolist(), y.tolist()))
    return src, torch.tensor(src_lens), tgt_in, tgt_out, sents


def random_sources(seed: int = 1, B: int = 7, vocab: int = 22, S: int = 9):
    """A padded source batch for decoding: (src (B, S) ids in 4..vocab-1, the first row of full
    length S, src_lens (B,))."""
    import torch

    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, S + 1, (B,), generator=g)
    lens[0] = S
    src = torch.zeros(B, S, dtype=torch.long)
    for i, n in enumerate(lens.tolist()):
        src[i, :n] = torch.randint(4, vocab, (n,), generator=g)
    return src, lens


# ---- the tiny data directory and training runs ----------------------------------------------------
# The task is learnable in a few dozen updates: the target is the source reversed, with each
# source word w<k> translated to v<k>.
N_WORDS = 8


def make_pairs(n: int, seed: int, max_len: int = 6) -> list[tuple[list[int], list[int]]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(1, max_len + 1))
        src = [int(x) + len(SPECIALS) for x in rng.integers(0, N_WORDS, size=length)]
        out.append((src, src[::-1]))
    return out


def make_varied_pairs(n: int, seed: int, max_len: int = 10, n_long: int = 0, long_len: int = 24
                      ) -> list[tuple[list[int], list[int]]]:
    """Pairs of every shape case: target as long as the source (T == S), shorter, longer, length 1,
    and `n_long` long pairs (a small token budget makes each a batch of one)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        length = long_len if k < n_long else int(rng.integers(1, max_len + 1))
        src = [int(x) + len(SPECIALS) for x in rng.integers(0, N_WORDS, size=length)]
        tgt = (src[::-1] * 2)[: max(1, length + int(rng.integers(-2, 3)))]
        out.append((src, tgt))
    return out


def make_data_dir(path: Path, n_train: int = 240, n_valid: int = 24, max_len: int = 6,
                  pairs: dict[str, list] | None = None) -> Path:
    """A data directory as `nmtkit preprocess` writes it (manifest, vocabularies, splits);
    `pairs` ({"train": [...], "valid": [...]}) replaces the reversal task's pairs."""
    from nmtkit.data.binarized import write_split
    from nmtkit.data.manifest import new_manifest
    from nmtkit.text.vocab import Vocab

    path.mkdir(parents=True, exist_ok=True)
    src_vocab = Vocab(list(SPECIALS) + [f"w{k}" for k in range(N_WORDS)])
    tgt_vocab = Vocab(list(SPECIALS) + [f"v{k}" for k in range(N_WORDS)])
    src_vocab.save(path / "vocab.en.txt")
    tgt_vocab.save(path / "vocab.fr.txt")
    splits = {}
    for name, n, seed in (("train", n_train, 1), ("valid", n_valid, 2)):
        split = pairs[name] if pairs is not None else make_pairs(n, seed, max_len)
        write_split(path, name, "en", [s for s, _ in split])
        write_split(path, name, "fr", [t for _, t in split])
        splits[name] = {"lines": len(split), "src_tokens": sum(len(s) for s, _ in split),
                        "tgt_tokens": sum(len(t) for _, t in split)}
    from nmtkit.text.pipeline import TextPipeline

    pipe = TextPipeline("en", "fr").to_dict()
    manifest = new_manifest("en", "fr", {"src": "vocab.en.txt", "tgt": "vocab.fr.txt", "src_size": len(src_vocab),
                                         "tgt_size": len(tgt_vocab)}, pipeline=pipe, splits=splits,
                            settings={})
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A tiny synthetic data directory (`make_data_dir`) shared by a module's tests."""
    return make_data_dir(tmp_path_factory.mktemp("tiny") / "data")


def tiny_options(**changes):
    """Train options (nmtkit.train.config.TrainOptions) for a fast CPU run on the tiny data
    (explicit, so presets do not matter)."""
    from nmtkit.train.config import TrainOptions

    opts = dict(arch="rnnsearch", optimizer="adam", lr=0.01, batch_size=16, sort_pool=64, max_len=20,
                max_updates=20, valid_every=10, save_every=10, log_every=5, valid_bleu_samples=8,
                threads=1, seed=3, device="cpu")
    opts.update(changes)
    return TrainOptions(**opts)


def train_run(data_dir, save_dir, options=None, model=None, *, callbacks=(), loss_hook=None, **flags):
    """`nmtkit.train.run` on the RunConfig of these arguments (`flags`: resume, force); meanwhile
    `loss_hook(update, loss_sum) -> loss_sum` changes each minibatch's loss (e.g. to a NaN)."""
    from nmtkit import train
    from nmtkit.train import context

    given = {k: v for k, v in (("options", options), ("model", model)) if v is not None}
    config = train.RunConfig(data_dir, save_dir, **given, **flags)
    context._loss_hook = loss_hook
    try:
        return train.run(config, callbacks)
    finally:
        context._loss_hook = None


def tiny_config(**changes):
    """The TrainConfig of `tiny_options` with `changes` (None unsets a field), for the tests that
    build a trainer themselves instead of through `nmtkit.train.run`."""
    from nmtkit.train.config import TrainConfig

    return TrainConfig.from_dict({**tiny_options().given(), **changes})


def tiny_context(data_dir: Path, run_dir: Path, arch: str = "rnnsearch", model: dict | None = None, **changes):
    """A training context (nmtkit.train.context.TrainContext) of `arch` at the tiny sizes on the
    tiny data, with `tiny_config(**changes)`; `model` changes model fields. Close it after use."""
    from nmtkit.train.context import TrainContext
    from nmtkit.train.data import DataDir
    from nmtkit.train.presets import resolve_model

    data = DataDir.open(data_dir)
    sizes = dict(SIZES[arch], init="default", **(model or {}))
    arch, mcfg = resolve_model(arch, None, sizes, len(data.src_vocab), len(data.tgt_vocab))
    return TrainContext(tiny_config(arch=arch, **changes), data, run_dir, arch, mcfg)


def size_args(arch: str = "rnnsearch") -> list[str]:
    """The model size flags of `nmtkit train` for `arch` at the sizes of `tiny_model`."""
    return [f"--{k.replace('_', '-')}={v}" for k, v in SIZES[arch].items()]


def tiny_train_args(arch: str = "rnnsearch", device: str = "cpu") -> list[str]:
    """`nmtkit train` flags for a tiny, fast run of `arch` (the sizes of `tiny_model`)."""
    return ["--arch", arch, *size_args(arch), "--optimizer", "adam", "--lr", "0.01", "--batch-size", "16",
            "--threads", "1", "--device", device]


def records(run: Path, kind: str) -> list[dict]:
    """The metrics.jsonl records of one kind ("train" or "valid") of a run directory."""
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["kind"] == kind]


# ---- the command line ---------------------------------------------------------------------------
class CliResult(NamedTuple):
    code: int
    out: str
    err: str


def run_cli(argv: list[str], stdin: str | bytes = "", *, process: bool = False, timeout: float = 300) -> CliResult:
    """`nmtkit ARGV` with `stdin` (text, or bytes as they are) -> (exit status, stdout, stderr).

    By default in this process: nmtkit's entry point (`nmtkit.cli.main`, what `python -m nmtkit`
    runs) with stdin, stdout and stderr swapped for in-memory streams (click's CliRunner
    isolation), as a subprocess per call would spend most of its time importing torch. An
    exception that escapes `main` is put into stderr as the traceback a subprocess would have
    printed (and exit status 1), so "no traceback" can be checked. torch's thread count, which
    `train --threads` sets, is restored afterwards. process=True runs `python -m nmtkit` in a
    subprocess, for what only a whole process shows (the real command line, pipes, exit-time
    flushing).
    """
    if process:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
            [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
        proc = subprocess.run([sys.executable, "-m", "nmtkit", *argv], input=_bytes(stdin), capture_output=True,
                              env=env, cwd=REPO, timeout=timeout)
        return CliResult(proc.returncode, _text(proc.stdout), _text(proc.stderr))
    import traceback

    from click.testing import CliRunner

    from nmtkit.cli import main

    threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
    code, tb = 0, ""
    root = logging.getLogger()
    handlers, root.handlers = root.handlers, []  # a fresh process has none: warnings reach logging.lastResort
    with CliRunner().isolation(input=_bytes(stdin), env={"OMP_NUM_THREADS": "1"}) as (out, err, _mixed):
        try:
            main(list(argv))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:  # noqa: BLE001 - what would have been a traceback in a subprocess
            code, tb = 1, traceback.format_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            root.handlers = handlers
        text_out, text_err = _text(out.getvalue()), _text(err.getvalue()) + tb
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads or sys.modules["torch"].get_num_threads())
    return CliResult(code, text_out, text_err)


def _bytes(stdin: str | bytes) -> bytes:
    return stdin if isinstance(stdin, bytes) else stdin.encode("utf-8")


def _text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


# ---- the environment ----------------------------------------------------------------------------
@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real corpora not found at {SHARED_DATA} (set DATA=...)")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _one_torch_thread(monkeypatch):
    """One torch thread per test (2-core machines; tiny tensors gain nothing from more), without
    importing torch into tests that do not use it. Subprocesses get OMP_NUM_THREADS=1. nmtkit's
    note of torch's own count (`devices.default_threads`, taken once per process) is 1 as well, so
    that no test's translator forks --workers because an earlier test first imported torch."""
    import nmtkit.devices

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(nmtkit.devices, "_DEFAULT_THREADS", [1])
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    yield


@pytest.fixture(scope="module")
def bad_input_files(tmp_path_factory):
    """The tiny checkpoint and data directory the bad-input tables' World shares within a module."""
    base = tmp_path_factory.mktemp("bad")
    return make_checkpoint(base / "model.pt", seed=3), make_data_dir(base / "data", n_train=48, n_valid=8)


@pytest.fixture
def world(tmp_path, bad_input_files):
    """The bad-input tables' World (tests/test_bad_inputs.py) in a fresh tmp dir; mounts undone after."""
    from tests.test_bad_inputs import World

    w = World(tmp_path, *bad_input_files)
    yield w
    w.cleanup()


def load_translator(models, warn=None, **options):
    """(a Translator over `models` loaded with the `DecodeConfig` options among `options`, the
    `SearchConfig` options among them, for its calls): a test's one place that splits the two."""
    from dataclasses import fields

    from nmtkit.translate.config import DecodeConfig, SearchConfig
    from nmtkit.translate.translator import Translator

    models = (models,) if isinstance(models, (str, Path)) else tuple(models)
    search = {f.name for f in fields(SearchConfig)}
    load = {k: v for k, v in options.items() if k not in search}
    load.setdefault("ensemble", len(models) > 1)
    config = DecodeConfig(models=tuple(str(m) for m in models), **load)
    return Translator(config, warn=warn), {k: v for k, v in options.items() if k in search}


def translate_lines(models, lines, **options):
    """`lines` translated by `models` as `options` (load and search options together) say."""
    translator, search = load_translator(models, **options)
    return translator.translate(lines, **search)


class BoundTranslator:
    """A Translator with its calls' search options bound (a test that translates alike many times);
    a call's own options win, and every other attribute is the translator's."""

    def __init__(self, translator, search: dict):
        self.translator, self.search = translator, search

    def translate(self, lines, **search):
        return self.translator.translate(lines, **{**self.search, **search})

    def generate(self, lines, **search):
        return self.translator.generate(lines, **{**self.search, **search})

    def __getattr__(self, name):
        return getattr(self.translator, name)


def bound_translator(models, warn=None, **options) -> BoundTranslator:
    """`load_translator`'s translator with its search options bound."""
    return BoundTranslator(*load_translator(models, warn, **options))
