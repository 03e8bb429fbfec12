"""nmtkit against OpenNMT-py on one device, at the peer benchmark's spec, for one wall budget each.

Each run trains for `--budget` seconds of wall time (from the training process's start; the
vocabulary build or `nmtkit preprocess` before it is timed apart), keeps a checkpoint every few
updates, is stopped with SIGINT, and then every checkpoint is decoded on the dev set at beam 5:
dev BLEU against training time, target tokens/s (each toolkit's own log), peak device memory
(nvidia-smi, per process) or peak RSS on a CPU. Runs:
  nmtkit       the peer benchmark's spec (small preset, Adam 1e-3, 64 sentences, dropout 0.2)
  opennmt-py   OpenNMT-py 3.5.1 at the same spec (the peer benchmark's settings), `--onmt-python`
  nmtkit-best  nmtkit at its own best settings there (--max-tokens, bf16 and CUDA graphs by default)

    python benchmarks/race.py prepare --out .race-data            # needs ../shared (the peer data)
    python benchmarks/race.py run --data .race-data --out OUT --device cuda --budget 150 \\
        --runs nmtkit,opennmt-py,nmtkit-best --onmt-python python3
    python benchmarks/race.py report OUT                          # OUT/race.md and OUT/race.png
    python benchmarks/race.py prepare --out D --quick && python benchmarks/race.py run --quick ...

A run writes OUT/<run>.json as it ends, so runs split over several calls report together.
`--quick` (the tests): 2,000 training pairs, 100 dev pairs, a few seconds a run.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from rss import rss_kb, tree_pids  # noqa: E402 - a sibling script

PEERS = Path(os.environ.get("PEERS", REPO.parent / "shared" / "peers-bench"))
DATA = Path(os.environ.get("DATA", REPO.parent / "shared" / "data"))
SPEC = {"emb": 256, "enc_per_direction": 256, "dec": 512, "dropout": 0.2, "lr": 0.001, "betas": (0.9, 0.999),
        "clip": 1.0, "batch_sents": 64, "seed": 42}
RUNS = ("nmtkit", "opennmt-py", "nmtkit-best")


# ---- data -------------------------------------------------------------------------------------

def prepare(out: Path, quick: bool) -> None:
    """The peer benchmark's data (its prepare.py: Moses tokenisation, pairs over 50 tokens dropped,
    joint BPE of 10,000 merges) in `out`: train.bpe.*, dev.bpe.*, dev.raw.*."""
    raw = DATA / "tatoeba-eng-fra"
    with tempfile.TemporaryDirectory() as tmp:
        if quick:  # the first lines of each split
            small = Path(tmp) / "raw"
            small.mkdir()
            for split, n in (("train", 2000), ("dev", 100)):
                for lang in ("en", "fr"):
                    with open(raw / f"{split}.{lang}", encoding="utf-8") as fh:
                        (small / f"{split}.{lang}").write_text("".join(fh.readline() for _ in range(n)), "utf-8")
            raw = small
        done = subprocess.run([sys.executable, str(PEERS / "prepare.py"), "--raw", str(raw), "--work", tmp,
                               "--results", tmp], capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"race: {PEERS / 'prepare.py'} failed:\n{done.stderr[-2000:]}")
        out.mkdir(parents=True, exist_ok=True)
        for lang in ("en", "fr"):  # train gzipped, to travel
            with gzip.open(out / f"train.bpe.{lang}.gz", "wb") as fh:
                fh.write((Path(tmp) / "data" / f"train.bpe.{lang}").read_bytes())
            for name in (f"dev.bpe.{lang}", f"dev.raw.{lang}"):
                (out / name).write_bytes((Path(tmp) / "data" / name).read_bytes())


def _first_lines(data: Path, n: int) -> tuple[Path, int]:
    """A folder with the first `n` dev pairs of `data` (dev.bpe.en, dev.raw.fr), and their count."""
    out = data / f"first-{n}"
    out.mkdir(exist_ok=True)
    for name in ("dev.bpe.en", "dev.raw.fr"):
        lines = (data / name).read_text("utf-8").splitlines(keepends=True)[:n]
        (out / name).write_text("".join(lines), "utf-8")
    return out, len(lines)


def unpacked(data: Path, work: Path) -> Path:
    """`data` with its gzipped training text unpacked (OpenNMT-py reads plain text only), in `work`."""
    if not (data / "train.bpe.en.gz").exists():
        return data
    plain = work / "data"
    plain.mkdir(parents=True, exist_ok=True)
    for f in data.iterdir():
        target = plain / f.name.removesuffix(".gz")
        if not target.exists():
            target.write_bytes(gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes())
    return plain


# ---- carrying it to a GPU node (64 MiB a call): wheels and stand-ins ----------------------------

ONMT_WHEELS = ["OpenNMT-py==3.5.1", "configargparse", "pyyaml", "pyonmttok>=1.37,<2"]
# what nmtkit's race path leaves unused: plots (drawn back home from the JSONs), serve, the tests
LEFT_OUT = {"matplotlib", "pillow", "fonttools", "kiwisolver", "contourpy", "cycler", "pyparsing", "python_dateutil",
            "aiohttp", "aiohappyeyeballs", "aiosignal", "attrs", "frozenlist", "multidict", "propcache", "yarl", "idna",
            "pytest", "iniconfig", "pluggy", "setuptools", "tzdata", "nmtkit"}
# OpenNMT-py imports every transform at start-up; these serve transforms the race never uses
STAND_INS = {"spacy/__init__.py": "", "ahocorasick.py": "", "fasttext.py": "",
             "rapidfuzz/__init__.py": "", "rapidfuzz/fuzz.py": "", "rapidfuzz/process.py": ""}


def _project(wheel: Path) -> str:
    return wheel.name.split("-")[0].lower()


def wheels(wheelhouse: Path, out: Path, python_version: str) -> None:
    """`out`: nmtkit's dependency wheels from `wheelhouse` (tools/wheelhouse.py) but LEFT_OUT, and
    OpenNMT-py 3.5.1 with what its training and translation need, for `python_version`."""
    out.mkdir(parents=True, exist_ok=True)
    for wheel in sorted(wheelhouse.glob("*.whl")):
        if _project(wheel) not in LEFT_OUT:
            (out / wheel.name).write_bytes(wheel.read_bytes())
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", python_version, "--platform", "manylinux2014_x86_64", "-d", str(out),
                    *ONMT_WHEELS], check=True)
    size = sum(w.stat().st_size for w in out.glob("*.whl"))
    print(f"{len(list(out.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB in {out}")


def install(wheel_dir: Path, dest: Path) -> None:
    """Each wheel of `wheel_dir` whose project this interpreter lacks, into `dest` (no index, no
    dependency resolution: the set is complete), and the stand-ins; then put `dest` on PYTHONPATH."""
    import importlib.metadata

    dest.mkdir(parents=True, exist_ok=True)
    todo = []
    for wheel in sorted(wheel_dir.glob("*.whl")):
        try:
            importlib.metadata.version(wheel.name.split("-")[0])
        except importlib.metadata.PackageNotFoundError:
            todo.append(str(wheel))
    if todo:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
                        "--no-deps", "--target", str(dest), *todo], check=True)
    for name, text in STAND_INS.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_text(text or "# a stand-in: OpenNMT-py imports it for a transform the race never uses\n")
    print(f"installed {len(todo)} wheels into {dest}: {', '.join(Path(t).name.split('-')[0] for t in todo) or '-'}")


# ---- watching a run ---------------------------------------------------------------------------

def _smi(query: str) -> list[str]:
    try:
        return subprocess.run(["nvidia-smi", f"--query-{query}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return []


def _gpu_used_mb() -> float:
    """Memory in use on the first GPU, all processes (nvidia-smi)."""
    lines = _smi("gpu=memory.used")
    return float(lines[0]) if lines else 0.0


def _gpu_mb(pids: list[int], baseline: float) -> float:
    """The GPU memory of these processes; where nvidia-smi cannot see them (a container's own
    PID namespace), the GPU's memory in use above `baseline`."""
    used = 0.0
    for line in _smi("compute-apps=pid,used_memory"):
        pid, _, mb = line.partition(",")
        if pid.strip().isdigit() and int(pid) in pids:
            used += float(mb)
    return used or max(_gpu_used_mb() - baseline, 0.0)


class Watch(threading.Thread):
    """Polls a process tree's peak memory: device memory on CUDA, RSS on the CPU."""

    def __init__(self, pid: int, device: str):
        super().__init__(daemon=True)
        self.pid, self.device, self.peak, self.done = pid, device, 0.0, threading.Event()
        self.baseline = _gpu_used_mb() if device == "cuda" else 0.0

    def run(self) -> None:
        while not self.done.wait(0.5):
            pids = tree_pids(self.pid)
            self.peak = max(self.peak, _gpu_mb(pids, self.baseline) if self.device == "cuda" else rss_kb(pids) / 1024)


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background shell may have left it ignored


def train_for(cmd: list, log: Path, budget: float, device: str, env: dict) -> dict:
    """Run `cmd` for `budget` s, then SIGINT its process group (SIGKILL 120 s later): its start
    time, wall time, peak memory and log lines."""
    start = time.time()
    with open(log, "w") as fh:
        proc = subprocess.Popen([str(c) for c in cmd], stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, preexec_fn=_default_signals)
        watch = Watch(proc.pid, device)
        watch.start()
        try:
            proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        watch.done.set()
        watch.join()
    return {"start": start, "wall_s": round(time.time() - start, 1), "peak_mb": round(watch.peak, 1),
            "memory": "GPU memory (nvidia-smi)" if device == "cuda" else "RSS", "returncode": proc.returncode}


# ---- the toolkits -----------------------------------------------------------------------------

def _nmtkit(*args) -> list:
    return [sys.executable, "-m", "nmtkit", *args]


NMTKIT_STEP = re.compile(r"update ([\d,]+) \|.*?\| ([\d,]+) tgt tok/s")  # its progress line


def nmtkit_run(name: str, data: Path, work: Path, device: str, budget: float, keep_every: int) -> tuple[dict, list]:
    """nmtkit preprocess, then nmtkit train at the spec (`nmtkit`) or its best settings there."""
    t = time.time()
    subprocess.run(_nmtkit("preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", data / "train.bpe",
                           "--valid", data / "dev.bpe", "--input-format", "tok", "--max-len", "1000", "--max-ratio",
                           "1000", "--dest", work / "data", "--force", "--quiet"), check=True)
    prep_s = time.time() - t
    batch = ["--batch-size", str(SPEC["batch_sents"])] if name == "nmtkit" else ["--max-tokens", "8000"]
    cmd = _nmtkit("train", "--data", work / "data", "--save-dir", work / "run", "--force", "--preset", "small",
                  "--optimizer", "adam", "--lr", SPEC["lr"], "--adam-beta1", SPEC["betas"][0], "--adam-beta2",
                  SPEC["betas"][1], "--clip-norm", SPEC["clip"], *batch, "--dropout", SPEC["dropout"],
                  "--label-smoothing", "0", "--seed", SPEC["seed"], "--device", device, "--valid-every", "100000000",
                  "--valid-bleu-samples", "0", "--save-every", "100000000", "--keep-every", keep_every,
                  "--log-every", "20", "--max-epochs", "1000")
    res = train_for(cmd, work / "train.log", budget, device, dict(os.environ))
    found = [(int(m.group(1).replace(",", "")), float(m.group(2).replace(",", "")))
             for m in NMTKIT_STEP.finditer((work / "train.log").read_text())]
    updates, rates = [u for u, _ in found], [r for _, r in found]
    ckpts = sorted((int(m.group(1)), p) for p in (work / "run").glob("checkpoint_*.pt")
                   if (m := re.fullmatch(r"checkpoint_(\d+)\.pt", p.name)))
    last = work / "run" / "checkpoint_last.pt"
    points = [(u, min(p.stat().st_mtime - res["start"], budget), p) for u, p in ckpts]  # saved at the stop: its time
    if last.exists() and updates and (not ckpts or updates[-1] > ckpts[-1][0]):
        points.append((updates[-1], min(last.stat().st_mtime - res["start"], budget), last))
    res.update(prep_s=round(prep_s, 1), updates=updates[-1] if updates else 0, tok_s=_steady(rates))
    return res, points


ONMT_STEP = re.compile(r"Step (\d+)(?:/\s*\d+)?;.*?([\d.]+)/\s*([\d.]+) tok/s")


def onmt_config(data: Path, work: Path, device: str, keep_every: int) -> str:
    """OpenNMT-py 3.5.1 at the spec: the peer benchmark's settings (its adapters/opennmt_py.py)."""
    gpu = "gpu_ranks: [0]\nworld_size: 1" if device == "cuda" else "gpu_ranks: []\nworld_size: 1"
    return f"""save_data: {work}/onmt
src_vocab: {work}/vocab.src
tgt_vocab: {work}/vocab.tgt
share_vocab: false
src_vocab_size: 1000000
tgt_vocab_size: 1000000
src_words_min_frequency: 0
tgt_words_min_frequency: 0
vocab_size_multiple: 1
overwrite: true
data:
  corpus_1:
    path_src: {data}/train.bpe.en
    path_tgt: {data}/train.bpe.fr
model_task: seq2seq
encoder_type: brnn
decoder_type: rnn
rnn_type: GRU
layers: 1
word_vec_size: {SPEC["emb"]}
hidden_size: {SPEC["dec"]}
global_attention: mlp
global_attention_function: softmax
input_feed: 1
bridge: true
share_embeddings: false
share_decoder_embeddings: false
dropout: [{SPEC["dropout"]}]
seed: {SPEC["seed"]}
optim: adam
learning_rate: {SPEC["lr"]}
adam_beta1: {SPEC["betas"][0]}
adam_beta2: {SPEC["betas"][1]}
decay_method: none
start_decay_steps: 100000000
warmup_steps: 0
max_grad_norm: {SPEC["clip"]}
label_smoothing: 0.0
batch_type: sents
batch_size: {SPEC["batch_sents"]}
normalization: sents
accum_count: [1]
param_init: 0.1
model_dtype: fp32
train_steps: 100000000
valid_steps: 100000000
report_every: 20
save_model: {work}/model
save_checkpoint_steps: {keep_every}
keep_checkpoint: -1
num_workers: 0
{gpu}
"""


def onmt_run(py: str, data: Path, work: Path, device: str, budget: float, keep_every: int) -> tuple[dict, list]:
    cfg = work / "train.yaml"
    cfg.write_text(onmt_config(data, work, device, keep_every))
    t = time.time()
    subprocess.run([py, "-m", "onmt.bin.build_vocab", "-config", cfg, "-n_sample", "-1"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    prep_s = time.time() - t
    res = train_for([py, "-m", "onmt.bin.train", "-config", cfg], work / "train.log", budget, device, dict(os.environ))
    found = [(int(m.group(1)), float(m.group(3))) for m in ONMT_STEP.finditer((work / "train.log").read_text())]
    points = sorted((int(m.group(1)), min(p.stat().st_mtime - res["start"], budget), p)
                    for p in work.glob("model_step_*.pt")
                    if (m := re.fullmatch(r"model_step_(\d+)\.pt", p.name)) and zipfile.is_zipfile(p))  # whole ones
    res.update(prep_s=round(prep_s, 1), updates=max([u for u, _ in found] + [u for u, _, _ in points] + [0]),
               tok_s=_steady([r for _, r in found]))
    return res, points


def _steady(rates: list[float]) -> float | None:
    """The mean of the logged rates but the first (warm-up)."""
    rates = rates[1:] if len(rates) > 1 else rates
    return round(sum(rates) / len(rates), 1) if rates else None


# ---- decoding and scoring ---------------------------------------------------------------------

def translate(run: str, ckpt: Path, src: Path, out: Path, device: str, onmt_py: str | None) -> None:
    if run == "opennmt-py":
        env = dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")  # OpenNMT-py 3.5 pickles its options
        subprocess.run([onmt_py, "-m", "onmt.bin.translate", "-model", ckpt, "-src", src, "-output", out,
                        "-beam_size", "5", "-gpu", "0" if device == "cuda" else "-1"], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        subprocess.run(_nmtkit("translate", "-m", ckpt, "--beam", "5", "--input-format", "bpe", "--output-format",
                               "bpe", "-i", src, "-o", out, "--force", "--device", device, "-q"), check=True)


def bleu(hyp_bpe: Path, ref: Path) -> float:
    """BLEU of BPE output against the raw reference: BPE joined, Moses-detokenised (the peer
    benchmark's post-processing), sacrebleu's default 13a."""
    import sacrebleu
    from sacremoses import MosesDetokenizer

    md = MosesDetokenizer("fr")
    hyps = [md.detokenize(line.replace("@@ ", "").split()) for line in hyp_bpe.read_text("utf-8").splitlines()]
    refs = ref.read_text("utf-8").splitlines()
    return round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)


# ---- the race ---------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = unpacked(Path(args.data).resolve(), Path(tempfile.mkdtemp(prefix="race-data-", dir=args.work)))
    subset, n_curve = _first_lines(data, args.curve_lines)
    for name in args.runs.split(","):
        if name not in RUNS:
            sys.exit(f"race: unknown run {name!r} (runs: {', '.join(RUNS)})")
        if name == "opennmt-py" and not args.onmt_python:
            sys.exit("race: the opennmt-py run needs --onmt-python (a Python with OpenNMT-py 3.5.1)")
        work = Path(tempfile.mkdtemp(prefix=f"race-{name}-", dir=args.work))
        keep = args.keep_every_onmt if name == "opennmt-py" else args.keep_every
        print(f"race: {name}: training {args.budget:g} s on {args.device} in {work}", file=sys.stderr, flush=True)
        if name == "opennmt-py":
            res, points = onmt_run(args.onmt_python, data, work, args.device, args.budget, keep)
        else:
            res, points = nmtkit_run(name, data, work, args.device, args.budget, keep)
        curve = []
        for updates, at, ckpt in points:  # the curve on the first --curve-lines dev pairs
            hyp = work / f"dev.{updates}.bpe"
            t = time.time()
            translate(name, ckpt, subset / "dev.bpe.en", hyp, args.device, args.onmt_python)
            curve.append({"updates": updates, "train_s": round(at, 1), "bleu": bleu(hyp, subset / "dev.raw.fr"),
                          "decode_s": round(time.time() - t, 1)})
            print(f"race: {name}: update {updates} at {at:.0f} s: BLEU {curve[-1]['bleu']} on {n_curve} dev pairs",
                  file=sys.stderr, flush=True)
        final = None
        if points:  # the last checkpoint on the whole dev set
            t = time.time()
            translate(name, points[-1][2], data / "dev.bpe.en", work / "dev.final.bpe", args.device, args.onmt_python)
            final = {"updates": points[-1][0], "bleu": bleu(work / "dev.final.bpe", data / "dev.raw.fr"),
                     "decode_s": round(time.time() - t, 1)}
        res.update(run=name, device=args.device, budget_s=args.budget, curve=curve, curve_lines=n_curve,
                   final=final, work=str(work))
        (out / f"{name}.json").write_text(json.dumps(res, indent=1) + "\n")
    report(out)


def report(out: Path) -> str:
    """OUT/race.md (a table) and OUT/race.png (BLEU against training time) from OUT/*.json."""
    results = {r: json.loads((out / f"{r}.json").read_text()) for r in RUNS if (out / f"{r}.json").exists()}
    onmt = results.get("opennmt-py")
    rows = ["| run | device | budget (s) | updates | target tok/s | vs OpenNMT-py | peak memory (MB) | "
            "dev BLEU, beam 5 | vs OpenNMT-py | time to OpenNMT-py's final BLEU (s) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        final = r["final"]["bleu"] if r.get("final") else None
        reach = speed = gain = None
        if onmt and onmt["curve"] and r["curve"]:
            goal = onmt["curve"][-1]["bleu"]  # on the curve's dev pairs, as every point
            reach = next((p["train_s"] for p in r["curve"] if p["bleu"] >= goal), None)
        if onmt and onmt.get("tok_s") and r.get("tok_s"):
            speed = f"{r['tok_s'] / onmt['tok_s']:.2f}x"
        if onmt and onmt.get("final") and final is not None:
            gain = f"{final - onmt['final']['bleu']:+.1f}"
        rate = f"{r['tok_s']:,.0f}" if r.get("tok_s") else "-"
        rows.append(f"| {name} | {r['device']} | {r['budget_s']:g} | {r['updates']:,} | "
                    f"{rate} | "
                    f"{speed or '-'} | {r['peak_mb']:,.0f} ({r['memory']}) | {final if final is not None else '-'} | "
                    f"{gain or '-'} | {reach if reach is not None else '-'} |")
    text = "\n".join(rows) + "\n"
    (out / "race.md").write_text(text)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, r in results.items():
        ax.plot([p["train_s"] for p in r["curve"]], [p["bleu"] for p in r["curve"]], marker="o", label=name)
    ax.set_xlabel("training time (s)")
    n = next(iter(results.values()))["curve_lines"] if results else 0
    ax.set_ylabel(f"dev BLEU, beam 5 (first {n} pairs)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "race.png", dpi=120)
    plt.close(fig)
    print(text, end="")
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="the peer benchmark's data, in --out")
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    r = sub.add_parser("run", help="train, decode and score the runs; then report")
    r.add_argument("--data", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    r.add_argument("--budget", type=float, default=150.0, help="seconds of training a run")
    r.add_argument("--runs", default=",".join(RUNS))
    r.add_argument("--onmt-python", help="a Python that has OpenNMT-py 3.5.1")
    r.add_argument("--keep-every", type=int, default=500, help="nmtkit: a checkpoint to decode every N updates")
    r.add_argument("--keep-every-onmt", type=int, default=200, help="OpenNMT-py: the same")
    r.add_argument("--work", help="where the runs' folders go (default: the system's temporary folder)")
    r.add_argument("--curve-lines", type=int, default=500, help="dev pairs each checkpoint is scored on")
    r.add_argument("--quick", action="store_true",
                   help="the tests' smoke run: 10 s a run, a checkpoint every 5 updates")
    s = sub.add_parser("report", help="OUT/race.md and OUT/race.png from OUT/*.json")
    s.add_argument("out")
    w = sub.add_parser("wheels", help="the wheels a GPU node needs for the race (from tools/wheelhouse.py's)")
    w.add_argument("--wheelhouse", default="dist/wheelhouse")
    w.add_argument("--out", default="dist/race-wheels")
    w.add_argument("--python-version", default="3.12")
    i = sub.add_parser("install", help="on the node: the wheels this interpreter lacks, and the stand-ins")
    i.add_argument("--wheels", default="dist/race-wheels")
    i.add_argument("--dest", default=".race-site")
    args = ap.parse_args()
    if args.cmd == "prepare":
        prepare(Path(args.out), args.quick)
    elif args.cmd == "wheels":
        wheels(Path(args.wheelhouse), Path(args.out), args.python_version)
    elif args.cmd == "install":
        install(Path(args.wheels), Path(args.dest))
    elif args.cmd == "run":
        if args.quick:
            args.budget, args.keep_every, args.keep_every_onmt, args.curve_lines = min(args.budget, 10.0), 5, 5, 50
        run(args)
    else:
        report(Path(args.out))


if __name__ == "__main__":
    main()
