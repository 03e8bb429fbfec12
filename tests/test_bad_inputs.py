"""Bad inputs and hostile destinations for every command, as one table.

Each row is one case: a command line built from a small world of files (a tiny checkpoint, a
tiny data directory, a small parallel corpus), what it must do (fail with ONE line naming the
culprit, or succeed), and an optional check of the files afterwards. The next case is one row.

Read-only and full destinations are real mounts (a read-only tmpfs, a small tmpfs filled to
the last byte, a read-only bind mount): as root, a chmod'ed folder stops nothing. Rows that
need them, or a private character device (mknod), skip where the test does not run as root.

Rows run `nmtkit.cli.main` in this process (conftest's `run_cli`); what only a whole process shows (a
full stdout at the interpreter's exit) has its own subprocess test below.
"""
from __future__ import annotations

import contextlib
import gzip
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import TGT_WORDS, make_checkpoint, run_cli, tiny_train_args


def umask() -> int:
    """The process umask (read here, not from nmtkit, so that the table runs against any nmtkit)."""
    old = os.umask(0o022)
    os.umask(old)
    return old

REPO = Path(__file__).resolve().parent.parent
TINY = [*tiny_train_args(), "--valid-bleu-samples", "0"]
EN = ["the cat sat on a mat .", "a dog ran in the park", "the big red house", "cat and dog", "the mat is red"] * 4
FR = ["le chat assis sur un tapis .", "un chien courait dans le parc", "la grande maison rouge", "chat et chien",
      "le tapis est rouge"] * 4
# select-data's pool: another text than its in-domain "corpus" (the same text is refused)
POOL_EN = ["the park is big", "a cat ran on the mat .", "shares fell on monday", "the red dog", "a house and a park"] * 4
POOL_FR = ["le parc est grand", "un chat courait sur le tapis .", "les actions ont baissé lundi", "le chien rouge",
           "une maison et un parc"] * 4


class World:
    """The files a row may use, built lazily in one tmp dir; mounts are undone at teardown."""

    def __init__(self, tmp: Path, ckpt: Path, data: Path):
        self.tmp, self.ckpt, self.data = tmp, ckpt, data
        self.mounts: list[Path] = []
        self.src = tmp / "in.en"
        self.src.write_text("\n".join(EN[:5]) + "\n", encoding="utf-8")
        for prefix, en, fr in (("corpus", EN, FR), ("pool", POOL_EN, POOL_FR)):
            (tmp / f"{prefix}.en").write_text("\n".join(en) + "\n", encoding="utf-8")
            (tmp / f"{prefix}.fr").write_text("\n".join(fr) + "\n", encoding="utf-8")

    # ---- special destinations --------------------------------------------------------------
    def _mount(self, path: Path, *args: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a read-only or full file system needs root")
        path.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["mount", *args, str(path)], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount here: {proc.stderr.strip()}")
        self.mounts.append(path)
        return path

    def readonly(self) -> Path:
        """An empty read-only file system."""
        p = self.tmp / "ro"
        return p if p in self.mounts else self._mount(p, "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs")

    def full(self) -> Path:
        """A file system without one free byte (a small tmpfs filled by a file)."""
        p = self.tmp / "full"
        if p in self.mounts:
            return p
        self._mount(p, "-t", "tmpfs", "-o", "size=256k", "tmpfs")
        _fill(p / ".filler")
        return p

    def readonly_copy(self, src: Path) -> Path:
        """`src` bind-mounted read-only."""
        p = self.tmp / f"ro-{src.name}"
        self._mount(p, "--bind", str(src))
        subprocess.run(["mount", "-o", "remount,bind,ro", str(p)], check=True)
        return p

    def char_device(self, name: str, minor: int = 3) -> Path:
        """A private character device with /dev/null's (1, 3) or /dev/full's (1, 7) numbers."""
        if os.geteuid() != 0:
            pytest.skip("mknod needs root")
        node = self.tmp / name
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        return node

    def run_dir(self, name: str = "run") -> Path:
        """A finished two-update run (checkpoints, metrics, log)."""
        run = self.tmp / name
        code, _, err = run_cli(_train(self, run))
        assert code == 0, err
        return run

    def cleanup(self) -> None:
        for p in reversed(self.mounts):
            subprocess.run(["umount", "-l", str(p)], capture_output=True)


def _socket(w: World, name: str) -> Path:
    """A Unix socket's file at `name` under tmp (it stays when the socket is closed)."""
    import socket

    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.bind(str(w.tmp / name))
        except OSError as err:  # a path too long for a socket address
            pytest.skip(f"cannot bind a socket here: {err}")
    return w.tmp / name


def _fill(path: Path) -> None:
    """Write zeros to `path` until its file system has no byte left."""
    with open(path, "ab", buffering=0) as f:
        for size in (1 << 16, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * size)


@dataclass
class Row:
    id: str
    argv: Callable[[World], list[str]]
    ok: bool = False  # True: must succeed; False: must fail with one `nmtkit: error:` line
    needles: tuple[str, ...] = ()  # in the error line (or, with ok, in stderr)
    check: Callable[[World], None] | None = None  # the files afterwards
    feed_fifo: str | None = None  # a FIFO at this name under tmp, read while the command runs
    tags: tuple[str, ...] = field(default=())
    absent: tuple[str, ...] = ()  # never in stderr (a misleading or dangerous message)


def _is_char(p: Path, minor: int = 3) -> None:
    st = os.lstat(p)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, minor), f"{p} is no longer a device"


def _mode(p: Path, want: int) -> None:
    assert stat.S_IMODE(os.stat(p).st_mode) == want, (oct(os.stat(p).st_mode), oct(want))


def _translate(w: World, *extra: str) -> list[str]:
    return ["translate", "-m", str(w.ckpt), "-i", str(w.src), "--beam", "2", "--max-len-b", "3", *extra]


def _train(w: World, save: Path, *extra: str) -> list[str]:
    return ["train", "--data", str(w.data), "--save-dir", str(save), *TINY, "--max-updates", "2",
            "--valid-every", "2", "--save-every", "2", *extra]


def _preprocess(w: World, dest: Path, train: str = "corpus", *extra: str) -> list[str]:
    return ["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", str(w.tmp / train), "--valid",
            str(w.tmp / "corpus"), "--dest", str(dest), "--workers", "1", "--quiet", *extra]


def _select(w: World, prefix: Path, *extra: str) -> list[str]:
    return ["select-data", "--src-lang", "en", "--tgt-lang", "fr", "--in-domain", str(w.tmp / "corpus"),
            "--pool", str(w.tmp / "pool"), "--output-prefix", str(prefix), "--workers", "1", "--lines", "3", *extra]


def _score(w: World, *extra: str) -> list[str]:
    return ["score", "--hyp", str(w.tmp / "corpus.fr"), "--ref", str(w.tmp / "corpus.fr"), "--src",
            str(w.tmp / "corpus.en"), "--metrics", "bleu", "-j", "1", *extra]


def _truncate(p: Path, n: int) -> Path:
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) - n)
    return p


def _data_copy(w: World) -> Path:
    d = w.tmp / "data-copy"
    shutil.copytree(w.data, d)
    return d


def _failed_first_run(w: World) -> Path:
    run = w.tmp / "failed"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"kind": "train", "update": 1, "loss": 1.0}\n')
    (run / "train.log").write_text("started\n")
    return run


def _gz_corpus(w: World) -> str:
    for lang, lines in (("en", EN), ("fr", FR)):
        with gzip.open(w.tmp / f"gz.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return "gz"


def _gzip_as_text(w: World) -> str:
    (w.tmp / "zipped.en").write_bytes(gzip.compress(("\n".join(EN) + "\n").encode()))
    shutil.copy(w.tmp / "corpus.fr", w.tmp / "zipped.fr")
    return "zipped"


def _tokenised(w: World, prefix: str, *flags: str) -> str:
    """`nmtkit tokenize` of PREFIX.{en,fr} into tok-PREFIX.{en,fr}, each with its .tokinfo.json."""
    for lang in ("en", "fr"):
        code, _, err = run_cli(["tokenize", "--lang", lang, *flags, "--workers", "1", "-i", str(w.tmp / f"{prefix}.{lang}"),
                                "-o", str(w.tmp / f"tok-{prefix}.{lang}")])
        assert code == 0, err
    return f"tok-{prefix}"


def _translate_tok(w: World, flags: tuple[str, ...], reference_flags: tuple[str, ...] | None = None) -> list[str]:
    """translate --input-format tok of tok-corpus.en tokenised with `flags`, scoring tok-pool.fr's with `reference_flags`."""
    argv = ["translate", "-m", str(w.ckpt), "-i", str(w.tmp / f"{_tokenised(w, 'corpus', *flags)}.en"),
            "--input-format", "tok"]
    if reference_flags is not None:
        return [*argv, "--score-reference", str(w.tmp / f"{_tokenised(w, 'pool', *reference_flags)}.fr")]
    return [*argv, "--beam", "1"]


def _with_valid(argv: list[str], prefix: Path) -> list[str]:
    argv[argv.index("--valid") + 1] = str(prefix)
    return argv


def _linked(w: World, name: str) -> Path:
    """A symbolic link to file `name` of tmp."""
    (link := w.tmp / f"linked-{name}").symlink_to(w.tmp / name)
    return link


def _blank_refs(w: World) -> str:
    """A dev set of sentences whose references are all blank lines."""
    shutil.copy(w.tmp / "corpus.en", w.tmp / "blank-refs.en")
    (w.tmp / "blank-refs.fr").write_text(" \n" * len(EN), encoding="utf-8")
    return "blank-refs"


def _linked_pool(w: World) -> str:
    """The pool again, as another prefix whose files are symbolic links to the pool's."""
    (w.tmp / "linked").mkdir()
    for lang in ("en", "fr"):
        (w.tmp / "linked" / f"pool.{lang}").symlink_to(w.tmp / f"pool.{lang}")
    return str(w.tmp / "linked" / "pool")


def _binary_as_text(w: World) -> str:
    (w.tmp / "bin.en").write_bytes(b"\n".join(e.encode() for e in EN[:3]) + b"\n\x00\x01\x02" + b"x\n" * 17)
    shutil.copy(w.tmp / "corpus.fr", w.tmp / "bin.fr")
    return "bin"


def _processed(w: World) -> str:
    """proc.{en,fr}: the corpus as another pipeline leaves it, with XML escapes (en line 2) and BPE (fr line 4)."""
    for lang, lines, n, line in (("en", EN, 2, "the cat &apos;s mat"), ("fr", FR, 4, "le ch@@ at")):
        (w.tmp / f"proc.{lang}").write_text("\n".join([*lines[:n - 1], line, *lines[n:]]) + "\n", encoding="utf-8")
    return "proc"


def _stale_tmp(w: World) -> Path:
    dest = w.tmp / "pp-stale"
    (w.tmp / "pp-stale.tmp-oldname").mkdir()
    return dest


def _existing(w: World, name: str, mode: int) -> Path:
    p = w.tmp / name
    p.write_text("old\n")
    os.chmod(p, mode)
    return p


def _data_copy_of_mode(w: World, mode: int) -> Path:
    d = _data_copy(w)
    os.chmod(d, mode)
    return d


ROWS = [
    # ---- data loss: nodes are written in place, never replaced --------------------------------
    Row("translate-o-chardev-force", lambda w: _translate(w, "-o", str(w.char_device("null")), "--force"), ok=True,
        check=lambda w: _is_char(w.tmp / "null")),
    Row("translate-o-dev-null-without-force", lambda w: _translate(w, "-o", "/dev/null"), ok=True),
    Row("translate-o-fifo", lambda w: _translate(w, "-o", str(w.tmp / "fifo")), ok=True, feed_fifo="fifo",
        check=lambda w: stat.S_ISFIFO(os.lstat(w.tmp / "fifo").st_mode) or pytest.fail("FIFO replaced")),
    Row("score-plot-chardev", lambda w: _score(w, "--plot", str(w.char_device("plot.png"))), ok=True,
        check=lambda w: _is_char(w.tmp / "plot.png")),
    Row("select-data-output-chardev-force",
        lambda w: _select(w, w.tmp / "sel", "--force") if w.char_device("sel.en") else [], ok=True,
        check=lambda w: _is_char(w.tmp / "sel.en")),
    # ---- permissions: what open(path, "w") would give ---------------------------------------------
    Row("translate-o-new-file-mode", lambda w: _translate(w, "-o", str(w.tmp / "new.txt")), ok=True,
        check=lambda w: _mode(w.tmp / "new.txt", 0o666 & ~umask())),
    Row("translate-o-force-keeps-mode",
        lambda w: _translate(w, "-o", str(_existing(w, "old.txt", 0o644)), "--force"), ok=True,
        check=lambda w: _mode(w.tmp / "old.txt", 0o644)),
    Row("train-checkpoint-mode", lambda w: _train(w, w.tmp / "run-mode"), ok=True,
        check=lambda w: _mode(w.tmp / "run-mode" / "checkpoint_last.pt", 0o666 & ~umask())),
    Row("preprocess-data-dir-mode", lambda w: _preprocess(w, w.tmp / "pp-mode"), ok=True,
        check=lambda w: _mode(w.tmp / "pp-mode", 0o777 & ~umask())),
    Row("preprocess-force-keeps-the-data-dirs-mode",
        lambda w: _preprocess(w, _data_copy_of_mode(w, 0o750), "corpus", "--force"), ok=True,
        check=lambda w: _mode(w.tmp / "data-copy", 0o750)),
    # ---- outputs checked before the work starts ----------------------------------------------------
    Row("translate-o-readonly", lambda w: _translate(w, "-o", str(w.readonly() / "out.txt")),
        needles=("out.txt", "Read-only file system")),
    Row("translate-o-missing-folder", lambda w: _translate(w, "-o", str(w.tmp / "missing" / "out.txt")),
        needles=("out.txt", "folder does not exist")),
    Row("translate-o-existing-folder-force", lambda w: _translate(w, "-o", str(w.tmp), "--force"),
        needles=("is a directory",)),
    Row("translate-plot-attention-readonly", lambda w: _translate(w, "--plot-attention", str(w.readonly() / "p")),
        needles=("Read-only file system",)),
    Row("train-save-dir-readonly", lambda w: _train(w, w.readonly()), needles=("Read-only file system",)),
    Row("train-save-dir-is-a-file", lambda w: _train(w, w.src),  # was "in.en/train.lock: Not a directory"
        needles=("--save-dir", "in.en exists and is not a directory"), absent=("train.lock",),
        check=lambda w: w.src.read_text() == "\n".join(EN[:5]) + "\n" or pytest.fail("in.en changed")),
    Row("train-save-dir-parent-readonly", lambda w: _train(w, w.readonly() / "run"),
        needles=("run", "Read-only file system")),
    Row("train-resume-readonly-run-dir", lambda w: _train(w, w.readonly_copy(w.run_dir()), "--resume"),
        needles=("Read-only file system",)),
    # ---- full disks --------------------------------------------------------------------------
    Row("translate-o-full", lambda w: _translate(w, "-o", str(w.full() / "out.txt")),
        needles=("out.txt", "No space left on device")),
    Row("train-save-dir-full", lambda w: _train(w, w.full() / "run"), needles=("/full/run/", "No space left on device")),
    Row("preprocess-dest-full", lambda w: _preprocess(w, w.full() / "pp"), needles=("No space left on device",)),
    Row("select-data-output-prefix-full", lambda w: _select(w, w.full() / "sel"), needles=("No space left on device",)),
    Row("score-plot-full", lambda w: _score(w, "--plot", str(w.full() / "p.png")),
        needles=("p.png", "No space left on device")),
    # ---- a socket, which open() cannot write: refused before the work, not after it ----------
    Row("select-data-output-prefix-socket", lambda w: _select(w, _socket(w, "sel.en").with_suffix(""), "--force"),
        needles=("sel.en", "is a socket")),
    Row("score-plot-socket", lambda w: _score(w, "--plot", str(_socket(w, "p.png"))), needles=("p.png", "is a socket")),
    Row("preprocess-dest-readonly", lambda w: _preprocess(w, w.readonly() / "pp"), needles=("Read-only file system",)),
    Row("select-data-output-prefix-readonly", lambda w: _select(w, w.readonly() / "sel"), needles=("Read-only file system",)),
    Row("score-plot-readonly", lambda w: _score(w, "--plot", str(w.readonly() / "p.png")),
        needles=("p.png", "Read-only file system")),
    # ---- inputs -------------------------------------------------------------------------------
    Row("train-truncated-ids-npy",
        lambda w: _train(_w_data(w, lambda d: _truncate(d / "train.en.ids.npy", 8)), w.tmp / "run-trunc"),
        needles=("train.en.ids.npy", "truncated")),
    Row("train-lr-nan", lambda w: _train(w, w.tmp / "r1", "--lr", "nan"), needles=("--lr", "finite")),
    Row("train-lr-inf", lambda w: _train(w, w.tmp / "r2", "--lr", "inf"), needles=("--lr", "finite")),
    Row("train-adadelta-rho-2", lambda w: _train(w, w.tmp / "r3", "--optimizer", "adadelta", "--adadelta-rho", "2"),
        needles=("--adadelta-rho",)),
    Row("train-weight-decay-negative", lambda w: _train(w, w.tmp / "r4", "--weight-decay", "-1"),
        needles=("--weight-decay",)),
    Row("train-adam-beta2-one", lambda w: _train(w, w.tmp / "r5", "--adam-beta2", "1"), needles=("--adam-beta2",)),
    Row("train-clip-norm-nan", lambda w: _train(w, w.tmp / "r6", "--clip-norm", "nan"), needles=("--clip-norm",)),
    Row("train-update-freq-0", lambda w: _train(w, w.tmp / "r8", "--update-freq", "0"),
        needles=("--update-freq", "at least 1")),
    Row("translate-ban-unk-with-replace-unk", lambda w: _translate(w, "--ban-unk", "--replace-unk"),
        needles=("--ban-unk and --replace-unk",)),
    Row("train-run-dir-without-checkpoint-needs-force", lambda w: _train(w, _failed_first_run(w)),
        needles=("failed: holds the files of a run that saved no checkpoint", "--force"),
        check=lambda w: (w.tmp / "failed" / "train.log").read_text() == "started\n" or pytest.fail("replaced")),
    Row("train-max-tokens-1-warns", lambda w: _train(w, w.tmp / "r7", "--max-tokens", "1"), ok=True,
        needles=("--max-tokens 1",)),
    Row("train-sort-pool-below-the-batch-warns", lambda w: _train(w, w.tmp / "r7b", "--sort-pool", "1"), ok=True,
        needles=("--sort-pool 1 is below --batch-size",)),  # trained one-pair minibatches without a word
    Row("translate-max-tokens-1-warns", lambda w: _translate(w, "--max-tokens", "1"), ok=True,
        needles=("--max-tokens 1",)),
    # past 2^63-1: islice() refused the --buffer-size, and torch.full() the dev BLEU's --valid-beam (a traceback)
    Row("translate-buffer-size-past-2-63", lambda w: _translate(w, "--buffer-size", str(2**63)), ok=True),
    Row("train-valid-beam-past-2-63", lambda w: _train(w, w.tmp / "r9", "--valid-bleu-samples", "2", "--valid-beam",
                                                       str(2**63)), ok=True),
    Row("translate-sampling-temperature-0", lambda w: _translate(w, "--sampling", "--temperature", "0"),
        needles=("--temperature must be > 0",)),
    Row("translate-sampling-topk-negative", lambda w: _translate(w, "--sampling", "--sampling-topk", "-1"),
        needles=("--sampling-topk",)),
    Row("translate-seed-without-sampling", lambda w: _translate(w, "--seed", "3"), needles=("--seed", "--sampling")),
    Row("translate-sampling-nbest-2", lambda w: _translate(w, "--sampling", "--nbest", "2"), needles=("--nbest",)),
    Row("translate-sampling", lambda w: _translate(w, "--sampling", "--seed", "3"), ok=True),
    Row("preprocess-stale-tmp-dir-is-reported",  # a warning: shown unless --quiet
        lambda w: [a for a in _preprocess(w, _stale_tmp(w)) if a != "--quiet"], ok=True,
        needles=("pp-stale.tmp-oldname",)),
    # a file given where a PREFIX is wanted (`--train corpus.en`) names the prefix meant
    Row("preprocess-file-given-as-prefix", lambda w: _preprocess(w, w.tmp / "pp-pf", "corpus.en"),
        needles=("corpus.en.en: no such file", "corpus.en is a file", "PREFIX names PREFIX.en: give ", "/corpus?")),
    Row("select-data-file-given-as-prefix",
        lambda w: ["select-data", "--src-lang", "en", "--tgt-lang", "fr", "--in-domain", str(w.tmp / "corpus.en"),
                   "--pool", str(w.tmp / "pool"), "--output-prefix", str(w.tmp / "sel-pf"), "--lines", "3"],
        needles=("corpus.en.en: no such file", "corpus.en is a file", "PREFIX names PREFIX.en: give ", "/corpus?")),
    Row("preprocess-gz-input", lambda w: _preprocess(w, w.tmp / "pp-gz", _gz_corpus(w)), ok=True,
        check=lambda w: (w.tmp / "pp-gz" / "manifest.json").is_file() or pytest.fail("no data dir")),
    Row("preprocess-gzip-bytes-in-plain-name", lambda w: _preprocess(w, w.tmp / "pp-z", _gzip_as_text(w)),
        needles=("zipped.en", "gzip")),
    Row("preprocess-binary-input", lambda w: _preprocess(w, w.tmp / "pp-b", _binary_as_text(w)),
        needles=("bin.en", "binary")),
    # tokenised text tokenised again is split further ("J' aime" -> "J ' aime") than translate splits raw text
    Row("preprocess-tokenised-input-read-as-raw-warns",
        lambda w: [a for a in _preprocess(w, w.tmp / "pp-tok", _tokenised(w, "corpus")) if a != "--quiet"], ok=True,
        needles=("tok-corpus.en.tokinfo.json records it as 'nmtkit tokenize' output", "--input-format tok")),
    Row("translate-tokenised-input-read-as-raw-warns",  # translated without a word, as preprocess and select-data warn
        lambda w: ["translate", "-m", str(w.ckpt), "-i", str(w.tmp / f"{_tokenised(w, 'corpus')}.en"), "--beam", "1"],
        ok=True, needles=("tok-corpus.en.tokinfo.json records it as 'nmtkit tokenize' output", "--input-format tok")),
    # Moses' escaped output or BPE'd text read as raw was tokenised again without a word ("&apos;s" -> "& apos ; s")
    Row("preprocess-escaped-or-bpe-input-read-as-raw-warns",
        lambda w: [a for a in _preprocess(w, w.tmp / "pp-proc", _processed(w)) if a != "--quiet"], ok=True,
        needles=("proc.en: line 2 holds '&apos;'", "proc.fr: line 4 holds 'ch@@'", "already tokenised")),
    Row("translate-bpe-input-read-as-raw-warns", lambda w: [*_translate(w), "-i", str(w.tmp / f"{_processed(w)}.fr")],
        ok=True, needles=("proc.fr: line 4 holds 'ch@@'", "--input-format")),
    Row("translate-escaped-tok-input-warns", lambda w: [*_translate(w), "-i", str(w.tmp / f"{_processed(w)}.en"),
        "--input-format", "tok"], ok=True, needles=("proc.en: line 2 holds '&apos;'", "tokenised input keeps")),
    Row("translate-raw-text-with-ampersands-and-ats", lambda w: [*_translate(w), "-i", str(p) if (p := w.tmp / "amp.en")
        .write_text("Tom & Jerry\nmail a@b.org @home\nR&amp D @ 5\n") else ""], ok=True, absent=("already tokenised",)),
    # were translated without a word, split otherwise than the model's training data
    Row("translate-tok-input-tokenised-with-other-settings", lambda w: _translate_tok(w, ("--lowercase",)),
        needles=("tok-corpus.en.tokinfo.json", "lowercase=True there, False here (tokenize's --lowercase)",
                 "--input-format raw")),
    Row("translate-tok-reference-tokenised-with-other-settings",
        lambda w: _translate_tok(w, (), ("--aggressive-dash-splits",)),
        needles=("tok-pool.fr.tokinfo.json", "aggressive_dash_splits=True there, False here")),
    Row("translate-tok-input-tokenised-alike", lambda w: _translate_tok(w, (), ()), ok=True, absent=("tokinfo",)),
    Row("select-data-tokenised-pool-read-as-raw-warns",
        lambda w: [str(w.tmp / _tokenised(w, "pool")) if a == str(w.tmp / "pool") else a for a in _select(w, w.tmp / "st")],
        ok=True, needles=("tok-pool.fr.tokinfo.json records it as 'nmtkit tokenize' output", "--input-format tok")),
    Row("preprocess-valid-references-all-blank",  # was a data directory whose dev BLEU could only be 0
        lambda w: _with_valid(_preprocess(w, w.tmp / "pp-br"), w.tmp / _blank_refs(w)),
        needles=("blank-refs.fr", "the valid split's 20 lines hold no word")),
    Row("select-data-pool-twice-through-symlinks", lambda w: _select(w, w.tmp / "sl", "--pool", _linked_pool(w)),
        needles=("--pool", "linked/pool is the pool", "selected twice"),  # its pairs were selected twice
        check=lambda w: not list(w.tmp.glob("sl.*")) or pytest.fail("wrote a selection")),
    Row("score-ref-twice-through-a-symlink",  # scored as one reference, but the signature said nrefs:2
        lambda w: _score(w, "--ref", str(_linked(w, "corpus.fr"))), needles=("linked-corpus.fr is given twice",)),
    *(Row(f"score{opt}-empty", lambda w, opt=opt: _score(w, opt, ""), needles=(f"{opt} ''", "not a language code"))
      for opt in ("--tgt-lang", "--src-lang")),  # guessed the language from the file suffix, without a word
    *(Row(f"preprocess{opt}-empty", lambda w, opt=opt: _preprocess(w, w.tmp / "pp-lang", "corpus", opt, ""),
          needles=(f"{opt} ''", "not a language code"), absent=("required",))  # was "are required", as select-data's
      for opt in ("--tgt-lang", "--src-lang")),  # and score's same empty value was not
    Row("select-data-lines-0", lambda w: _select(w, w.tmp / "sel0")[:-2] + ["--lines", "0"], needles=("--lines",)),
    # ---- average, --protect, --tensorboard ------------------------------------------------------
    Row("average-missing-checkpoint", lambda w: ["average", "-m", str(w.ckpt), "-m", str(w.tmp / "gone.pt"), "-o",
                                                 str(w.tmp / "avg.pt")], needles=("gone.pt", "checkpoint not found")),
    Row("average-incompatible", lambda w: ["average", "-m", str(w.ckpt), "-m", str(_other_vocab_ckpt(w)), "-o",
                                           str(w.tmp / "avg.pt")], needles=("other.pt", "vocabulary differs")),
    Row("average-last-more-than-kept", lambda w: ["average", "--last", "5", "--save-dir", str(w.run_dir()), "-o",
                                                  str(w.tmp / "avg.pt")], needles=("--last 5", "kept 0")),
    Row("average-output-is-an-input", lambda w: ["average", "-m", str(w.ckpt), "-o", str(w.ckpt), "--force"],
        needles=("-o output is the same file as the -m input",)),
    Row("average-m-directory", lambda w: ["average", "-m", str(w.run_dir()), "-o", str(w.tmp / "avg.pt")],
        needles=("run:", "is a directory", "--last N --save-dir RUN"), absent=("not found",)),
    Row("average-m-char-device-is-named-not-a-regular-file",  # was "/dev/zero: checkpoint not found"
        lambda w: ["average", "-m", str(w.ckpt), "-m", "/dev/zero", "-o", str(w.tmp / "avg.pt")],
        needles=("/dev/zero", "not a regular file"), absent=("not found",),
        check=lambda w: not (w.tmp / "avg.pt").exists() or pytest.fail("avg.pt written")),
    Row("average-save-dir-a-file", lambda w: ["average", "--last", "1", "--save-dir", str(w.ckpt), "-o",
                                              str(w.tmp / "avg.pt")], needles=("model.pt", "not a directory")),
    Row("average-last-output-is-a-kept-checkpoint-of-the-run",
        lambda w: ["average", "--last", "1", "--save-dir", str(_kept_run(w)), "-o", str(w.tmp / "kept" / "checkpoint_2.pt"),
                   "--force"], needles=("checkpoint_2.pt: is a file of the training run in", "another name"),
        absent=("-m input",)),
    Row("average-o-readonly", lambda w: ["average", "-m", str(w.ckpt), "-o", str(w.readonly() / "avg.pt")],
        needles=("avg.pt", "Read-only file system")),
    Row("preprocess-protect-invalid-regex", lambda w: _preprocess(w, w.tmp / "pp-p", "corpus", "--protect",
                                                                  str(_patterns(w, "%s\n[x\n"))),
        needles=("patterns.txt:2:", "invalid regular expression")),
    Row("preprocess-protect-unknown-set", lambda w: _preprocess(w, w.tmp / "pp-p", "corpus", "--protect", "printff"),
        needles=("--protect printff", "named set")),
    Row("preprocess-protect-missing-file", lambda w: _preprocess(w, w.tmp / "pp-p", "corpus", "--protect",
                                                                 str(w.tmp / "gone.txt")),
        needles=("gone.txt", "not found")),
    Row("train-tensorboard-readonly", lambda w: _train(w, w.tmp / "run-tb", "--tensorboard", str(w.readonly() / "tb")),
        needles=("tb", "Read-only file system")),
    Row("train-precision-int8-is-for-decoding", lambda w: _train(w, w.tmp / "run-int8", "--precision", "int8"),
        needles=("--precision int8", "decoding")),
    Row("translate-precision-int8", lambda w: _translate(w, "--precision", "int8", "--device", "cpu"), ok=True),
    Row("translate-m-char-device-is-named-not-a-regular-file", lambda w: ["translate", "-m", "/dev/zero"],
        needles=("/dev/zero", "not a regular file"), absent=("not found",)),
    Row("translate-m-fifo-is-named-not-a-regular-file", lambda w: ["translate", "-m", str(_fifo(w))],
        needles=("model-fifo.pt", "not a regular file"), absent=("not found",)),
]


def _fifo(w: World) -> Path:
    """A FIFO with a checkpoint's name, which nothing writes to: opening it would block."""
    os.mkfifo(w.tmp / "model-fifo.pt")
    return w.tmp / "model-fifo.pt"


def _other_vocab_ckpt(w: World) -> Path:
    return make_checkpoint(w.tmp / "other.pt", seed=3, tgt_words=list(reversed(TGT_WORDS)))


def _kept_run(w: World) -> Path:
    """A finished two-update run that kept checkpoint_2.pt (train --keep-every)."""
    run = w.tmp / "kept"
    code, _, err = run_cli(_train(w, run, "--keep-every", "2"))
    assert code == 0, err
    return run


def _patterns(w: World, text: str) -> Path:
    p = w.tmp / "patterns.txt"
    p.write_text(text, encoding="utf-8")
    return p


def _w_data(w: World, damage: Callable[[Path], object]) -> World:
    d = _data_copy(w)
    damage(d)
    w.data = d
    return w




@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input_table(row: Row, world: World):
    check_row(row, world)


EMPTY_PATHS = [  # (command, option, command line): an unset shell variable, e.g. --save-dir "$RUN"
    ("train", "--save-dir", lambda w: _train(w, "")),
    ("train", "--tensorboard", lambda w: _train(w, w.tmp / "run-e", "--tensorboard", "")),
    ("train", "--data", lambda w: ["train", "--data", "", "--save-dir", str(w.tmp / "run-e"), *TINY]),
    ("preprocess", "--dest", lambda w: _preprocess(w, "")),
    ("average", "--save-dir", lambda w: ["average", "--last", "1", "--save-dir", "", "-o", str(w.tmp / "avg.pt")]),
    ("translate", "--plot-attention", lambda w: _translate(w, "--plot-attention", "")),
    ("score", "--plot", lambda w: _score(w, "--plot", "")),
    ("select-data", "--pool", lambda w: [a if a != str(w.tmp / "pool") else "" for a in _select(w, w.tmp / "sel-e")]),
]


@pytest.mark.parametrize("command, option, argv", EMPTY_PATHS, ids=[f"{c}{o}" for c, o, _ in EMPTY_PATHS])
def test_an_empty_path_is_refused_and_never_taken_for_the_current_directory(command, option, argv, world,
                                                                            monkeypatch):
    """An empty path opens the current directory: train --save-dir "" trained into it, and
    --tensorboard "" wrote its event files there, where average -o "" was refused."""
    cwd = world.tmp / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    check_row(Row(f"empty-{option}", argv, needles=(f"{option} '' names no",)), world)
    assert list(cwd.iterdir()) == [] and not (world.tmp / "run-e").exists()


def test_a_deleted_current_folder_is_one_line_saying_so(world, monkeypatch):
    """A shell left in a deleted folder: `translate` died loading torch ("Intel oneMKL FATAL ERROR",
    status 2), `tokenize -o out.txt` said "cannot read or write a file: No such file or directory"."""
    cwd = world.tmp / "gone"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    cwd.rmdir()
    check_row(Row("deleted-cwd", lambda w: ["tokenize", "--lang", "en", "-i", str(w.src), "-o", "out.txt"],
                  needles=("the current folder no longer exists",)), world)


def test_a_warning_quoting_a_file_name_with_a_line_break_stays_one_line(world):
    """A --train prefix named with a newline, given as --valid too: preprocess's warning that the two
    are the same text ran over three lines, the name's break printed as it is (errors escape it)."""
    prefix = str(world.tmp / "two\nlines")
    for lang in ("en", "fr"):
        shutil.copy(world.tmp / f"corpus.{lang}", f"{prefix}.{lang}")
    code, _, err = run_cli(["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", prefix, "--valid", prefix,
                            "--dest", str(world.tmp / "d-nl"), "--workers", "1"])
    [warning] = [line for line in err.splitlines() if "same text as --train" in line]
    assert code == 0 and warning.startswith("nmtkit: warning: ") and "two\\nlines.en" in warning, err


def test_columns_0_loses_no_summary(world, monkeypatch):
    """COLUMNS=0 made rich's console zero columns wide: preprocess's summary (its table, what was
    dropped, the vocabulary sizes) vanished, even from a file, and the command succeeded."""
    monkeypatch.setenv("COLUMNS", "0")
    code, _, err = run_cli([a for a in _preprocess(world, world.tmp / "d-col") if a != "--quiet"])
    assert code == 0 and "dropped from train" in err and "vocabularies" in err, err


def test_a_narrow_terminal_cuts_no_number_of_the_summary_short(world, monkeypatch):
    """At 40 columns (a split pane) preprocess's summary table cut its columns to fit: "6,2…" for
    6,212 tokens, "0.…" for an UNK rate."""
    monkeypatch.setenv("COLUMNS", "40")
    code, _, err = run_cli([a for a in _preprocess(world, world.tmp / "d-narrow") if a != "--quiet"])
    assert code == 0 and "…" not in err and "en tokens" in err and "fr UNK%" in err, err


def test_the_summary_breaks_no_long_destination_or_line_in_two(world, monkeypatch):
    """stderr to a log file (80 columns): preprocess's summary title broke a long --dest path in
    two lines mid-name ("/data/longlon" / "glong"), and COLUMNS=20 broke the vocabularies line."""
    monkeypatch.setenv("COLUMNS", "20")
    dest = world.tmp / ("long" * 20)
    code, _, err = run_cli([a for a in _preprocess(world, dest) if a != "--quiet"])
    lines = err.splitlines()
    assert code == 0 and any(line.startswith(f"nmtkit preprocess en-fr: {dest}") for line in lines), err
    assert any(line.startswith("vocabularies (") and line.endswith(" entries") for line in lines), err


def assert_names_options_that_exist(command: str, line: str) -> None:
    """Each --option an error or warning of `command` names is one of its own, or of a command it
    names before the option ('nmtkit preprocess --valid', "tokenize's --protect"): translate named
    tokenize's --lowercase as if it were its own."""
    from nmtkit.cli import cli
    from nmtkit.cli import command as cli_command

    names = {c: {o for p in cli_command(c).params for o in p.opts + p.secondary_opts} for c in cli.list_commands(None)}
    for m in re.finditer(r"(?<![\w-])--[a-z][\w-]*[a-z0-9]", line):
        said = [c for c in names if re.search(rf"(?<![\w-]){c}(?:'s)? +(?:[^ ]* )?$|nmtkit {c}\b", line[:m.start()])]
        assert any(m[0] in names[c] for c in [command, *said]), (command, m[0], line)


def check_row(row: Row, world: World) -> None:
    """Run one row and check what it must do (the table's one judge; sibling tables use it too)."""
    argv = row.argv(world)
    got: list[bytes] = []
    reader = None
    if row.feed_fifo:
        fifo = world.tmp / row.feed_fifo
        os.mkfifo(fifo)
        reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
        reader.start()
    code, _, err = run_cli(argv)
    assert "Traceback" not in err, err
    if row.ok:
        assert code == 0, err
        for n in row.needles:
            assert n in err, (n, err)
    else:
        assert code != 0
        progress = ("nmtkit: warning", "nmtkit train: ")  # warnings and train's progress lines
        lines = [x for x in err.strip().splitlines() if not x.startswith(progress)]
        assert len(lines) == 1 and lines[0].startswith("nmtkit: error: "), err
        for n in row.needles:
            assert n in lines[0], (n, err)
    for n in row.absent:
        assert n not in err, (n, err)
    for line in err.splitlines() if argv else ():
        if line.startswith(("nmtkit: error: ", "nmtkit: warning: ")):
            assert_names_options_that_exist(argv[0], line)
    if reader is not None:
        reader.join(30)
        assert got and got[0].count(b"\n") == 5
    if row.check:
        row.check(world)


def test_stdout_on_a_full_disk_is_one_line(world):
    """`nmtkit translate ... > /dev/full` (a private /dev/full node): one line, no traceback."""
    node = world.char_device("full", minor=7)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    with open(node, "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "nmtkit", *_translate(world)], stdout=out,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == ["nmtkit: error: <stdout>: No space left on device"]


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_stdout_is_utf8_whatever_the_locale_says(encoding, monkeypatch):
    """stdin is read as UTF-8, but stdout was written in the locale's encoding: under an ASCII
    one (PYTHONIOENCODING=ascii, or LC_ALL=C where Python does not coerce it) `tokenize` ended in
    a UnicodeEncodeError traceback; under latin-1 it wrote text its own next command refused."""
    monkeypatch.setenv("PYTHONIOENCODING", encoding)
    code, out, err = run_cli(["tokenize", "--lang", "en"], "héllo wörld\n", process=True)
    assert (code, out, err) == (0, "héllo wörld\n", "")


def test_a_file_name_that_is_not_utf8_is_written_to_stdout_as_its_own_bytes(tmp_path, monkeypatch):
    """Under a UTF-8 locale (stdout's errors strict; PYTHONIOENCODING=utf-8 here) `score` with a
    --hyp named in Latin-1 (the name holds a surrogate) ended in a UnicodeEncodeError traceback."""
    monkeypatch.setenv("PYTHONIOENCODING", "utf-8")
    ref = tmp_path / "ref.fr"
    ref.write_text("le chat\n", encoding="utf-8")
    hyp = tmp_path / os.fsdecode(b"h\xffp.fr")
    hyp.write_text("le chien\n", encoding="utf-8")
    code, out, err = run_cli(["score", "--hyp", str(ref), "--hyp", str(hyp), "-r", str(ref), "-q"], process=True)
    assert (code, err) == (0, "") and "# h\\xffp.fr" in out, err


def test_torch_that_cannot_load_under_a_memory_limit_is_one_line(world, monkeypatch):
    """Under `ulimit -v 300000` Python starts but torch's libraries do not fit: translate, train,
    serve and average ended in a traceback of `import torch` ("libtorch_cpu.so: failed to map
    segment from shared object"). A stand-in torch package raises that ImportError here."""
    fake = world.tmp / "no-torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("libtorch_cpu.so: failed to map segment from shared object")\n')
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    code, _, err = run_cli(_translate(world), process=True)
    assert code == 1 and err.splitlines() == ["nmtkit: error: cannot load torch: libtorch_cpu.so: failed to map segment "
                                              "from shared object (a memory limit such as ulimit -v too low for its "
                                              "libraries, or a broken install)"], err


@pytest.mark.parametrize("threads", ["0", "abc", ""])
def test_an_omp_num_threads_libgomp_refuses_is_one_warning_line(world, threads):
    """OMP_NUM_THREADS=0 (or garbage) made libgomp write a blank line and an unprefixed "libgomp:
    Invalid value for environment variable OMP_NUM_THREADS" as torch loaded, even under -q."""
    env = dict(os.environ, OMP_NUM_THREADS=threads, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "nmtkit", *_translate(world, "-o", os.devnull)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stderr.splitlines() == [
        f"nmtkit: warning: OMP_NUM_THREADS={threads!r} is not a number of threads: ignored",
        "nmtkit: translated 5 lines"], proc.stderr


@pytest.mark.parametrize("stderr", ["full", "reader gone"])
def test_a_stderr_that_cannot_be_written_fails_no_run_whose_outputs_are(world, stderr):
    """`nmtkit translate ... 2>/dev/full` (or a stderr pipe whose reader went away): the
    translations were all written and committed, then the summary line on stderr failed, and so
    did the error line reporting it: exit 1 ("lost sys.stderr") for a run that had succeeded."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    if stderr == "full":
        err_fd = os.open(world.char_device("full", minor=7), os.O_WRONLY)
    else:
        read_end, err_fd = os.pipe()
        os.close(read_end)
    try:
        out = world.tmp / "out.fr"
        ok = subprocess.run([sys.executable, "-m", "nmtkit", *_translate(world, "-o", str(out))], stderr=err_fd,
                            stdout=subprocess.PIPE, env=env, timeout=120)
        failed = subprocess.run([sys.executable, "-m", "nmtkit", *_translate(world, "-o", str(out))], stderr=err_fd,
                                stdout=subprocess.PIPE, env=env, timeout=120)
    finally:
        os.close(err_fd)
    assert ok.returncode == 0 and ok.stdout == b""
    assert out.read_text(encoding="utf-8").count("\n") == 5
    assert failed.returncode == 1  # the output exists: still an error, its line unshown


def test_a_ctrl_c_inside_a_checkpoint_write_is_that_interrupt_not_torchs_zip_error(tmp_path, monkeypatch):
    """train's second Ctrl-C ('abort at once') landing in torch.save's write ended the command with
    a traceback of torch's zip writer ("RuntimeError: ... unexpected pos") instead of 'aborted'."""
    import nmtkit.checkpoint as ck

    path = tmp_path / "checkpoint_last.pt"
    ck.save_checkpoint({"x": 1}, path)
    before = path.read_bytes()

    class Interrupted:  # the file under torch.save, hit by Ctrl-C at its third write
        def __init__(self, file):
            self.file, self.writes = file, 0

        def write(self, data):
            self.writes += 1
            if self.writes == 3:
                raise KeyboardInterrupt
            return self.file.write(data)

        def flush(self):
            self.file.flush()

    real = ck._WriteRecorder.__init__
    monkeypatch.setattr(ck._WriteRecorder, "__init__", lambda self, file: real(self, Interrupted(file)))
    import torch

    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint({"w": torch.zeros(100_000)}, path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["checkpoint_last.pt"]


def test_a_checkpoint_on_a_full_disk_names_the_file_and_keeps_the_previous_one(world, tmp_path):
    """torch.save's "inline_container ... unexpected pos" on a full disk becomes ENOSPC naming the file."""
    import errno

    from nmtkit.checkpoint import load_checkpoint, save_checkpoint

    full = world.full()
    os.remove(full / ".filler")
    small = {"x": 1}
    save_checkpoint(small, full / "checkpoint_last.pt")  # the previous checkpoint: fits
    _fill(full / ".filler")
    import torch

    with pytest.raises(OSError) as exc:
        save_checkpoint({"w": torch.zeros(100_000)}, full / "checkpoint_last.pt")
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(full / "checkpoint_last.pt")
    assert load_checkpoint(full / "checkpoint_last.pt")["x"] == 1
    assert sorted(p.name for p in full.iterdir()) == [".filler", "checkpoint_last.pt"]  # no temp file left

