"""Behaviour snapshot of nmtkit's CLI: run a fixed pipeline on a source tree; compare two snapshots.

  /work/main/.venv/bin/python tools/snapshot.py run --tree TREE --out DIR  # ~1.5-4 min, one core
  /work/main/.venv/bin/python tools/snapshot.py compare DIR_A DIR_B        # rc 1 on any difference
`run` slices real en-fr text from /work/shared/data (NMTKIT_SNAPSHOT_DATA overrides), runs every
command (`python -m nmtkit`, PYTHONPATH=TREE, this interpreter) on it in the fixed folder
/tmp/nmtkit-snapshot-work (recorded absolute paths then agree), and moves it to DIR: outputs, and
per step argv, stdout, stderr (timings, dates, temp names, ports normalised) and exit code.
`compare`: bytes; checkpoints tensor by tensor; JSON and checkpoint fields without VOLATILE_KEYS.
Float and int8 results depend on the CPU: compare snapshots made on one machine.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

DATA = Path(os.environ.get("NMTKIT_SNAPSHOT_DATA", "/work/shared/data"))
WORK = Path("/tmp/nmtkit-snapshot-work")  # fixed: manifests and checkpoints record absolute paths
# keys whose values are wall-clock times, throughputs or dates: ignored in JSON and checkpoints
VOLATILE_KEYS = frozenset({"created", "elapsed", "seconds", "timings", "timings_s", "main_cpu_s", "tgt_tokens_per_s", "sents_per_s",
                           "updates_per_s", "took_ms", "uptime_s"})
# serve's /info: a checkpoint's digest, which covers its time fields
VOLATILE_PATHS = re.compile(r".*\.checkpoints\[\d+\]\.sha256$")
EXISTENCE_ONLY = frozenset({"train.lock"})  # holds the PID of the last trainer


# ----------------------------------------------------------------------------- inputs

def _lines(path: Path, start: int, stop: int) -> list[bytes]:
    if path.suffix == ".gz":
        import gzip
        with gzip.open(path, "rb") as f:
            data = f.read().splitlines(keepends=True)
    else:
        data = path.read_bytes().splitlines(keepends=True)
    return data[start:stop]


def _write(path: Path, lines: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines))


def make_inputs(inp: Path) -> None:
    tat, giga, m30k = DATA / "tatoeba-eng-fra", DATA / "giga-fren-sample", DATA / "multi30k-en-fr"
    for lang in ("en", "fr"):
        _write(inp / f"train.{lang}", _lines(tat / f"train.{lang}", 0, 600))
        _write(inp / f"dev.{lang}", _lines(tat / f"dev.{lang}", 0, 60))
        _write(inp / f"test.{lang}", _lines(tat / f"test.{lang}", 0, 40))
        # select-data: in-domain = more Tatoeba, pool = Tatoeba + giga-fren + Multi30k
        _write(inp / f"indomain.{lang}", _lines(tat / f"dev.{lang}", 60, 260))
        _write(inp / f"pool1.{lang}", _lines(tat / f"train.{lang}", 600, 800))
        _write(inp / f"pool2.{lang}", _lines(giga / f"train.{lang}", 0, 150))
        _write(inp / f"pool3.{lang}", _lines(m30k / f"val.{lang}.gz", 0, 100))
    # tokenize: giga-fren lines with URLs and e-mail addresses
    en = (giga / "train.en").read_bytes().splitlines(keepends=True)
    _write(inp / "urls.en", [ln for ln in en if re.search(rb"http|www\.|@", ln)][:40])
    _write(inp / "protect.txt", [b"[A-Z]{2,}-[0-9]+\n", b"\\$[0-9.,]+\n"])
    # bad inputs
    _write(inp / "badutf8.en", _lines(tat / "train.en", 0, 5) + [b"caf\xe9 \xff\xfe broken\n"])
    _write(inp / "badutf8.fr", _lines(tat / "train.fr", 0, 6))
    _write(inp / "uneven.en", _lines(tat / "train.en", 0, 10))
    _write(inp / "uneven.fr", _lines(tat / "train.fr", 0, 9))
    _write(inp / "nodata.txt", [b"not a checkpoint\n"])
    _write(inp / "unkdict.tsv", [b"Tom\tThomas\n", b"Mary\tMarie\n"])
    import gzip
    (inp / "test.en.gz").write_bytes(gzip.compress((inp / "test.en").read_bytes(), mtime=0))


# ----------------------------------------------------------------------------- the pipeline

TINY_LSTM = ["--emb-dim", "48", "--enc-hidden", "48", "--dec-hidden", "96"]
TINY_ENCDEC = TINY_LSTM + ["--maxout", "48"]
TINY = TINY_ENCDEC + ["--att-hidden", "48"]
CPU = ["--device", "cpu", "--threads", "1"]
TRAIN = CPU + ["--precision", "fp32", "--fuse", "off", "--seed", "7", "--batch-size", "24", "--lr", "0.004",
               "--valid-bleu-samples", "20", "--log-every", "25"]
DEC = CPU + ["--workers", "1", "--fuse", "off"]
PRE = ["preprocess", "--src-lang", "en", "--tgt-lang", "fr"]
SEL = ["select-data", "--src-lang", "en", "--tgt-lang", "fr", "--in-domain", "../inputs/indomain",
       "--pool", "../inputs/pool1", "--pool", "../inputs/pool2", "--pool", "../inputs/pool3"]
BEST = "run/checkpoint_best.pt"
WORD = "run-word/checkpoint_best.pt"
ENCDEC = "run-encdec/checkpoint_last.pt"
T_IN, REF = "../inputs/test.en", "../inputs/test.fr"
TR = ["translate", "-m", BEST, *DEC, "-i", T_IN]
Step = tuple  # (name, nmtkit arguments[, stdin file, relative to WORK/work])


def _prepare_steps() -> list[Step]:
    """preprocess (BPE, words, separate BPE, workers), select-data, tokenize."""
    train_dev = ["--train", "../inputs/train", "--valid", "../inputs/dev"]
    one = ["--workers", "1"]
    s: list[Step] = [
        ("pre-bpe", PRE + train_dev + ["--test", "../inputs/test", "--bpe", "800", "--dest", "data", *one]),
        ("pre-word", PRE + train_dev + ["--dest", "data-word", "--src-vocab-size", "400", "--tgt-vocab-size", "400",
                                        "--truecase", "--dedup", "--max-len", "12", *one]),
        ("pre-sep", PRE + train_dev + ["--dest", "data-sep", "--bpe", "300", "--bpe-separate",
                                       "--bpe-vocab-threshold", "2", "--lowercase", "--aggressive-dash-splits",
                                       "--vocab-min-count", "2", "--protect", "basic", *one, "-q"]),
        ("pre-bpe-workers2", PRE + train_dev + ["--test", "../inputs/test", "--bpe", "800", "--dest", "data-w2",
                                                "--workers", "2", "--chunk-size", "64"]),
        ("select-bilingual", SEL + [*one, "--output-prefix", "sel/bi", "--lines", "120", "--write-arpa"]),
        ("select-mono", SEL + [*one, "--output-prefix", "sel/mono", "--fraction", "0.3", "--method", "monolingual",
                               "--order", "3", "--lowercase", "--seed", "5"]),
        ("select-workers2", SEL + ["--workers", "2", "--output-prefix", "sel/w2", "--lines", "120"]),
        ("select-indomain", SEL + [*one, "--output-prefix", "sel/ind", "--words", "900", "--method", "in-domain",
                                   "--min-count", "2"]),
        ("tok-protect", ["tokenize", "--lang", "en", "-i", "../inputs/urls.en", "-o", "tok/urls.tok.en",
                         "--protect", "url", "--protect", "email", "--protect", "../inputs/protect.txt", *one]),
        ("tok-plain", ["tokenize", "--lang", "en", "-i", "../inputs/urls.en", *one]),
        ("tok-workers2", ["tokenize", "--lang", "fr", "-i", "../inputs/train.fr", "--workers", "2"]),
        ("tok-stdin-a", ["tokenize", "--lang", "fr", "--aggressive-dash-splits", "--lowercase",
                         "--no-normalize-punct", *one], REF),
    ]
    for lang in ("en", "fr"):
        for split in ("train", "dev"):
            s.append((f"tok-{split}-{lang}", ["tokenize", "--lang", lang, "-i", f"../inputs/{split}.{lang}",
                                              "-o", f"tok/{split}.{lang}", *one]))
    s.append(("pre-tok", PRE + ["--train", "tok/train", "--valid", "tok/dev", "--input-format", "tok",
                                "--bpe", "500", "--dest", "data-tok", *one]))
    return s


def _train_steps() -> list[Step]:
    """train (rnnsearch small 150 updates, a resumed run, lstm-attention on words, rnnencdec), average."""
    # without the small preset's moving average (newer than the reference tree), so that the models
    # stay comparable byte for byte
    small = ["train", "--data", "data", "--preset", "small", *TINY, *TRAIN, "--ema-decay", "0"]
    return [
        ("train-small", small + ["--save-dir", "run", "--max-updates", "150", "--valid-every", "50",
                                 "--save-every", "50", "--keep-every", "50"]),
        ("train-resume-a", small + ["--save-dir", "run-resume", "--max-updates", "60", "--valid-every", "50",
                                    "--save-every", "30"]),
        ("train-resume-b", ["train", "--data", "data", "--save-dir", "run-resume", "--resume",
                            "--max-updates", "100", "-q"]),
        ("train-word-lstm", ["train", "--data", "data-word", "--save-dir", "run-word", "--arch", "lstm-attention",
                             *TINY_LSTM, *TRAIN, "--max-updates", "60", "--valid-every", "30",
                             "--best-metric", "bleu", "--label-smoothing", "0.1", "--optimizer", "adam"]),
        ("train-encdec", ["train", "--data", "data", "--save-dir", "run-encdec", "--arch", "rnnencdec",
                          *TINY_ENCDEC, *TRAIN, "--max-updates", "40", "--valid-every", "40",
                          "--optimizer", "adadelta", "--lr", "1.0", "--clip-norm", "1",
                          "--lr-schedule", "plateau", "--warmup-updates", "10", "-q"]),
        ("avg-m", ["average", "-m", "run/checkpoint_100.pt", "-m", "run/checkpoint_150.pt", "-o", "avg.pt"]),
        ("avg-last", ["average", "--last", "3", "--save-dir", "run", "-o", "avg3.pt", "-q"]),
    ]


def _translate_steps() -> list[Step]:
    fp32 = ["--precision", "fp32"]
    return [
        ("tr-beam1", TR + ["--beam", "1", *fp32, "-o", "hyp/beam1.fr"]),
        ("tr-beam5", TR + ["--beam", "5", *fp32, "-o", "hyp/beam5.fr"]),
        ("tr-beam5-int8", TR + ["--beam", "5", "--precision", "int8", "-o", "hyp/beam5.int8.fr"]),
        ("tr-nbest", TR + ["--beam", "5", "--nbest", "3", *fp32, "--lenpen", "0", "-o", "hyp/nbest.txt"]),
        ("tr-align-hard", TR + ["--beam", "4", *fp32, "--alignments", "hard", "--alignments-file",
                                "hyp/align.hard", "-o", "hyp/align.fr"]),
        ("tr-align-soft", TR + ["--beam", "1", *fp32, "--alignments", "soft", "--alignments-file",
                                "hyp/align.soft.jsonl", "-o", "hyp/align-soft.fr", "--output-format", "bpe"]),
        ("tr-plot", TR + ["--beam", "2", *fp32, "--plot-attention", "hyp/att", "--plot-limit", "3",
                          "-o", "hyp/plot.fr"]),
        ("tr-sample", TR + ["--sampling", "--seed", "3", *fp32, "-o", "hyp/sample.fr"]),
        ("tr-sample-topk", TR + ["--sampling", "--seed", "4", "--sampling-topk", "5", "--temperature", "0.7",
                                 *fp32, "-o", "hyp/sample-topk.fr"]),
        ("tr-nosl-banunk", TR + ["--beam", "3", *fp32, "--shortlist", "off", "--ban-unk", "--max-len-a", "1.5",
                                 "--max-len-b", "3", "--output-format", "tok", "-o", "hyp/nosl.fr"]),
        ("tr-workers2", ["translate", "-m", BEST, "--device", "cpu", "--threads", "2", "--workers", "2",
                         "-i", "../inputs/test.en.gz", "--beam", "5", *fp32, "--batch-size", "8",
                         "-o", "hyp/workers2.fr"]),
        ("tr-avg", ["translate", "-m", "avg.pt", *DEC, "-i", T_IN, "--beam", "5", *fp32, "-o", "hyp/avg.fr"]),
        ("tr-ensemble", ["translate", "--ensemble", "-m", BEST, "-m", "run/checkpoint_100.pt", *DEC,
                         "-i", T_IN, "--beam", "4", *fp32, "-o", "hyp/ens.fr"]),
        ("tr-stdin", ["translate", "-m", "run-resume/checkpoint_last.pt", *DEC, "--beam", "3",
                      "--precision", "int8", "--batch-size", "7", "--buffer-size", "11"], T_IN),
        ("tr-word-unk", ["translate", "-m", WORD, *DEC, "-i", T_IN, "--beam", "4", *fp32, "--replace-unk",
                         "-o", "hyp/word-unk.fr"]),
        ("tr-word-unkdict", ["translate", "-m", WORD, *DEC, "-i", T_IN, "--beam", "2", "--precision", "int8",
                             "--replace-unk", "--unk-dict", "../inputs/unkdict.tsv", "-o", "hyp/word-unkdict.fr"]),
        ("tr-encdec", ["translate", "-m", ENCDEC, *DEC, "-i", T_IN, "--beam", "3", *fp32, "-o", "hyp/encdec.fr"]),
        ("tr-tok-in", ["translate", "-m", BEST, *DEC, "-i", "tok/dev.en", "--input-format", "tok", "--beam", "2",
                       *fp32, "--max-src-len", "12", "-o", "hyp/tokin.fr"]),
    ]


def _score_steps() -> list[Step]:
    """score, and serve (a special step: see `run_serve`)."""
    src, one = "../inputs/test.en", ["-j", "1"]
    return [
        ("score-basic", ["score", "--hyp", "hyp/beam5.fr", "-r", REF, *one]),
        ("score-paper-json", ["score", "--hyp", "hyp/beam5.fr", "-r", REF, "--paper-bleu", "--json", *one]),
        ("score-multi", ["score", "--hyp", "hyp/beam1.fr", "--hyp", "hyp/beam5.fr", "--hyp", "hyp/avg.fr",
                         "--label", "greedy", "--label", "beam5", "--label", "avg", "-r", REF, "--src", src,
                         "--by-length", "--bucket-width", "3", "--max-length", "12", "--plot", "score/bylen.png",
                         "--significance", "--bootstrap-samples", "200", "--seed", "9", *one]),
        ("score-nounk", ["score", "--hyp", "hyp/word-unk.fr", "-r", REF, "--src", src, "--no-unk", "-m", WORD,
                         "--paper-bleu", *one]),
        ("score-nounk-data", ["score", "--hyp", "hyp/beam5.fr", "-r", REF, "--src", src, "--no-unk",
                              "--data", "data", "--json", *one]),
        ("score-subset", ["score", "--hyp", "hyp/sample.fr", "-r", REF, "-r", "hyp/beam1.fr",
                          "--metrics", "bleu,chrf", "-lc", "-tok", "intl", *one]),
        ("score-workers2", ["score", "--hyp", "hyp/workers2.fr", "-r", REF, "--paper-bleu", "-j", "2"]),
        ("serve", ["serve", "-m", BEST, *CPU, "--fuse", "off", "--precision", "fp32", "--shortlist", "off",
                   "--beam", "4", "--max-lines", "5", "--batch-delay-ms", "0"]),
        ("score-stdin", ["score", "--hyp", "-", "-r", REF, "--metrics", "ter", "-q", *one], "hyp/beam1.fr"),
    ]


def _bad_steps() -> list[Step]:
    """Bad inputs: their exit codes and messages."""
    return [
        ("bad-missing-input", ["translate", "-m", BEST, *DEC, "-i", "nope.en", "-o", "hyp/x.fr"]),
        ("bad-score-lines", ["score", "--hyp", "hyp/beam5.fr", "-r", "../inputs/dev.fr", "-j", "1"]),
        ("bad-utf8-preprocess", PRE + ["--train", "../inputs/badutf8", "--valid", "../inputs/dev",
                                       "--dest", "bad-data", "--workers", "1"]),
        ("bad-utf8-tokenize", ["tokenize", "--lang", "en", "-i", "../inputs/badutf8.en", "--workers", "1"]),
        ("bad-uneven", PRE + ["--train", "../inputs/uneven", "--valid", "../inputs/dev", "--dest", "bad-data2",
                              "--workers", "1"]),
        ("bad-output-over-input", ["translate", "-m", BEST, *DEC, "-i", "hyp/beam1.fr", "-o", "hyp/beam1.fr",
                                   "--force"]),
        ("bad-not-checkpoint", ["translate", "-m", "../inputs/nodata.txt", *DEC, "-i", T_IN]),
        ("bad-average-over-input", ["average", "-m", "run/checkpoint_50.pt", "-m", "run/checkpoint_100.pt",
                                    "-o", "run/checkpoint_50.pt", "--force"]),
        ("bad-no-stop", ["train", "--data", "data", "--save-dir", "run-bad", "--preset", "small", *CPU]),
        ("bad-train-int8", ["train", "--data", "data", "--save-dir", "run-bad", "--preset", "small", *CPU,
                            "--max-updates", "1", "--precision", "int8"]),
        ("bad-select-budget", SEL + ["--workers", "1", "--output-prefix", "sel/bad", "--lines", "5",
                                     "--fraction", "0.1"]),
        ("bad-metric", ["score", "--hyp", "hyp/beam5.fr", "-r", REF, "--metrics", "bleu,meteor"]),
        ("bad-dest-exists", PRE + ["--train", "../inputs/train", "--valid", "../inputs/dev", "--dest", "data",
                                   "--workers", "1"]),
        ("bad-encdec-align", ["translate", "-m", ENCDEC, *DEC, "-i", T_IN, "--alignments", "hard",
                              "--alignments-file", "hyp/x.align", "-o", "hyp/x2.fr"]),
        ("bad-temperature", TR + ["--sampling", "--temperature", "0"]),
        ("bad-resume-empty", ["train", "--data", "data", "--save-dir", "run-none", "--resume", *CPU]),
        ("bad-average-mixed", ["average", "-m", BEST, "-m", WORD, "-o", "mixed.pt"]),
        ("bad-truncated-ckpt", ["translate", "-m", "truncated.pt", *DEC, "-i", T_IN]),  # made by cmd_run
    ]


def pipeline() -> list[Step]:
    """Every step, in order."""
    return _prepare_steps() + _train_steps() + _translate_steps() + _score_steps() + _bad_steps()


# ----------------------------------------------------------------------------- serve

SERVE_REQUESTS: list[tuple[str, str, Any]] = [
    ("GET", "/health", None),
    ("GET", "/info", None),
    ("POST", "/translate", {"text": ["I play piano.", "He slept in the car.", ""], "beam": 3, "nbest": 2,
                            "alignments": True}),
    ("POST", "/translate", {"text": ["I may outlive you."]}),
    ("POST", "/translator/translate", [{"src": "I want to help if I can.", "id": 100}, {"src": "Go.", "id": 7}]),
    ("POST", "/translate", {"text": ["a"] * 6}),  # over --max-lines
    ("POST", "/translate", b"{not json"),
    ("POST", "/translate", {"text": ["x"], "beam": 50}),  # wider than the server's beam
    ("POST", "/translate", {"txt": ["x"]}),
    ("GET", "/nope", None),
    ("GET", "/health", None),
    ("GET", "/", None),
]


def run_serve(args: list[str], cwd: Path, env: dict[str, str], d: Path) -> tuple[int, str]:
    """Start `nmtkit serve` on a free port, send SERVE_REQUESTS one at a time, record each answer
    in d/responses.jsonl, stop it with SIGTERM; (exit code, the port to normalise)."""
    import signal
    import socket
    import urllib.error
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    with open(d / "stdout", "wb") as so, open(d / "stderr", "wb") as se:
        proc = subprocess.Popen([sys.executable, "-m", "nmtkit", *args, "--port", str(port)], cwd=cwd, env=env,
                                stdin=subprocess.DEVNULL, stdout=so, stderr=se)
        try:
            deadline = time.monotonic() + 180
            while True:
                if proc.poll() is not None:
                    return proc.returncode, str(port)  # refused to start: its message is in stderr
                if time.monotonic() > deadline:
                    raise RuntimeError("nmtkit serve did not answer /health within 180 s")
                try:
                    urllib.request.urlopen(base + "/health", timeout=5).read()
                    break
                except (urllib.error.URLError, ConnectionError, OSError):
                    time.sleep(0.2)
            records = []
            for method, path, body in SERVE_REQUESTS:
                data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
                req = urllib.request.Request(base + path, data=data, method=method,
                                             headers={"Content-Type": "application/json"} if data else {})
                try:
                    with urllib.request.urlopen(req, timeout=120) as resp:
                        status, ctype, raw = resp.status, resp.headers.get("Content-Type"), resp.read()
                except urllib.error.HTTPError as err:
                    status, ctype, raw = err.code, err.headers.get("Content-Type"), err.read()
                text = raw.decode("utf-8", errors="replace")
                try:
                    answer: Any = json.loads(text)
                except ValueError:
                    answer = text
                records.append(json.dumps({"request": f"{method} {path}", "status": status, "type": ctype,
                                           "answer": answer}, ensure_ascii=False, sort_keys=True))
            (d / "responses.jsonl").write_text("\n".join(records) + "\n", encoding="utf-8")
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return rc, str(port)


# ----------------------------------------------------------------------------- normalisation

_RATE = r"tgt tok/s|src tok/s|tok/s|tokens/s|sents?/s|sentences/s|lines/s|words/s|updates/s|it/s|pairs/s"


def _normaliser(tree: Path) -> Callable[[str], str]:
    subs = [
        (re.escape(str(tree.resolve())), "<TREE>"),
        (re.escape(sys.executable), "<PYTHON>"),
        (r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?", "<DATE>"),
        (r"(?<![\w/])/tmp/(?!nmtkit-snapshot-work)[^\s'\":,)]+", "<TMP>"),
        (r"\.tmp[A-Za-z0-9_]{4,}", ".tmp<X>"),
        (rf"\b({_RATE}) [\d,]+(?:\.\d+)?", r"\1 <N>"),  # train.log: "tok/s 8037"
        (rf"[\d,]+(?:\.\d+)?(\s*)({_RATE})(?! <N>)", r"<N>\1\2"),  # "8,037 tgt tok/s"
        (r"ETA \d+(?::\d\d)+", "ETA <T>"),
        (r"\b\d+(?:\.\d+)?(\s?)(s|ms|sec|seconds|min)\b", r"<T>\1\2"),
        (r"\b\d+:\d\d(?::\d\d)?(?:\.\d+)?\b", "<T>"),
        (r"\bpid \d+|PID \d+", "PID <N>"),
        (r"127\.0\.0\.1:\d+", "127.0.0.1:<PORT>"),
        (r".*Matplotlib is building the font cache.*\n", ""),
    ]
    compiled = [(re.compile(p), r) for p, r in subs]

    def norm(text: str) -> str:
        for p, r in compiled:
            text = p.sub(r, text)
        return text
    return norm


def _norm_file(path: Path, norm: Callable[[str], str]) -> None:
    text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    path.write_bytes(norm(text).encode("utf-8", errors="surrogateescape"))


# ----------------------------------------------------------------------------- run

def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NMTKIT_", "PYTHON", "CUDA", "OMP_", "MKL_"))}
    env.update(PYTHONPATH=str(tree), PYTHONHASHSEED="0", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="", COLUMNS="100", LINES="50", TERM="dumb", NO_COLOR="1",
               LC_ALL="C.UTF-8", LANG="C.UTF-8", TZ="UTC", PYTHONDONTWRITEBYTECODE="1")
    return env


def run_step(step: Step, cwd: Path, env: dict[str, str], d: Path, norm: Callable[[str], str]) -> int:
    """Run one step in `cwd`, recording argv.txt, stdout, stderr (normalised) and rc in `d`."""
    name, args = step[0], step[1]
    stdin_path = step[2] if len(step) > 2 else None
    d.mkdir()
    (d / "argv.txt").write_text("nmtkit " + " ".join(args) + (f" < {stdin_path}" if stdin_path else "") + "\n")
    port = None
    if name == "serve":
        rc, port = run_serve(args, cwd, env, d)
    else:
        with open(d / "stdout", "wb") as so, open(d / "stderr", "wb") as se:
            stdin = open(cwd / stdin_path, "rb") if stdin_path else subprocess.DEVNULL
            try:
                rc = subprocess.run([sys.executable, "-m", "nmtkit", *args], cwd=cwd, env=env, stdin=stdin,
                                    stdout=so, stderr=se, timeout=600).returncode
            finally:
                if stdin_path:
                    stdin.close()
    (d / "rc").write_text(f"{rc}\n")
    for f in ("stdout", "stderr"):
        if port:
            _norm_file(d / f, lambda t: t.replace(f":{port}", ":<PORT>"))
        _norm_file(d / f, norm)
    return rc


def cmd_run(tree: Path, out: Path) -> int:
    tree = tree.resolve()
    if not (tree / "nmtkit" / "__init__.py").is_file():
        sys.exit(f"snapshot: {tree} holds no nmtkit/ package")
    if out.exists() and any(out.iterdir()):
        sys.exit(f"snapshot: {out} exists and is not empty")
    with open(str(WORK) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one snapshot run at a time on this machine
        if WORK.exists():
            shutil.rmtree(WORK)
        inp, cwd, steps = WORK / "inputs", WORK / "work", WORK / "steps"
        for d in (inp, cwd, steps, *(cwd / sub for sub in ("sel", "tok", "hyp", "score"))):
            d.mkdir(parents=True)
        make_inputs(inp)
        norm, env = _normaliser(tree), _env(tree)
        t_all = time.monotonic()
        for i, step in enumerate(pipeline()):
            if step[0] == "bad-truncated-ckpt":
                (cwd / "truncated.pt").write_bytes((cwd / BEST).read_bytes()[:4096])
            t0 = time.monotonic()
            rc = run_step(step, cwd, env, steps / f"{i:02d}-{step[0]}", norm)
            print(f"{step[0]:24s} rc={rc:<3d} {time.monotonic() - t0:6.1f}s", flush=True)
        for log in cwd.rglob("train.log"):  # its lines carry dates and throughputs
            _norm_file(log, norm)
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            out.rmdir()
        shutil.move(str(WORK), str(out))
    (out / "TREE.txt").write_text(f"{tree}\n")
    print(f"snapshot of {tree} in {out} ({time.monotonic() - t_all:.0f}s)")
    return 0


# ----------------------------------------------------------------------------- compare

def _same(a: Any, b: Any, where: str, torch: Any) -> str | None:
    """None when equal, else a short description of the first difference."""
    if VOLATILE_PATHS.match(where):
        return None
    if torch is not None and isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor):
            return f"{where}: tensor vs {type(b).__name__}"
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{where}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
        return None if torch.equal(a, b) else f"{where}: tensor values differ"
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        ka = [k for k in a if k not in VOLATILE_KEYS]
        kb = [k for k in b if k not in VOLATILE_KEYS]
        if ka != kb:
            return f"{where}: keys differ: {sorted(set(ka) ^ set(kb), key=str) or 'order'}"
        for k in ka:
            r = _same(a[k], b[k], f"{where}.{k}", torch)
            if r:
                return r
        return None
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{where}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            r = _same(x, y, f"{where}[{i}]", torch)
            if r:
                return r
        return None
    if isinstance(a, float) and math.isnan(a) and math.isnan(b):
        return None
    if hasattr(a, "__array__") and hasattr(a, "dtype"):  # numpy arrays in rng states
        import numpy as np
        return None if (a.dtype == b.dtype and np.array_equal(a, b)) else f"{where}: array differs"
    return None if a == b else f"{where}: {str(a)[:60]!r} vs {str(b)[:60]!r}"


def _load_pt(path: Path, torch: Any) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return torch.load(path, map_location="cpu", weights_only=False)


def _compare_file(rel: str, a: Path, b: Path, torch_box: list) -> str | None:
    name = a.name
    if name in EXISTENCE_ONLY:
        return None
    ba, bb = a.read_bytes(), b.read_bytes()
    if ba == bb:
        return None
    if name.endswith(".pt"):
        if not torch_box:
            import torch
            torch_box.append(torch)
        torch = torch_box[0]
        try:
            return _same(_load_pt(a, torch), _load_pt(b, torch), "ckpt", torch)
        except Exception as err:  # a truncated file on one side
            return f"bytes differ and one does not load ({type(err).__name__})"
    if name.endswith(".jsonl") or name.endswith(".json"):
        try:
            ja = [json.loads(x) for x in ba.decode("utf-8").splitlines() if x.strip()] if name.endswith("l") \
                else [json.loads(ba)]
            jb = [json.loads(x) for x in bb.decode("utf-8").splitlines() if x.strip()] if name.endswith("l") \
                else [json.loads(bb)]
        except ValueError:
            ja = jb = None
        if ja is not None:
            return _same(ja, jb, "json", None)
    la, lb = ba.splitlines(), bb.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}: {x[:70]!r} vs {y[:70]!r}"
    return f"{len(la)} vs {len(lb)} lines" if len(la) != len(lb) else "bytes differ"


def cmd_compare(a: Path, b: Path) -> int:
    def files(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "TREE.txt"}

    for root in (a, b):
        if not (root / "steps").is_dir():
            sys.exit(f"snapshot: {root} is not a snapshot folder")
    fa, fb = files(a), files(b)
    torch_box: list = []
    bad = 0
    for rel in sorted(fa | fb):
        if rel not in fb or rel not in fa:
            status, diff = f"ONLY-IN-{'A' if rel in fa else 'B'}", ""
        else:
            diff = _compare_file(rel, a / rel, b / rel, torch_box) or ""
            status = "DIFFERENT" if diff else "same"
        bad += status != "same"
        print(f"{status:9s} {rel}" + (f"  ({diff})" if diff else ""))
    print(f"{'IDENTICAL' if not bad else 'DIFFERENT'}: {len(fa | fb)} files, {bad} differ"
          f" (ignored: the fields {', '.join(sorted(VOLATILE_KEYS))}, serve's checkpoint digests;"
          f" {', '.join(EXISTENCE_ONLY)}: existence only)")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="run the pipeline on a source tree")
    r.add_argument("--tree", required=True, type=Path, help="folder holding the nmtkit/ package")
    r.add_argument("--out", required=True, type=Path, help="snapshot folder to write (new or empty)")
    c = sub.add_parser("compare", help="compare two snapshot folders")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    ns = ap.parse_args()
    return cmd_run(ns.tree, ns.out) if ns.verb == "run" else cmd_compare(ns.a, ns.b)


if __name__ == "__main__":
    sys.exit(main())
