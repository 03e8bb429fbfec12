"""Translation speed: sentences/s and target tokens/s of batched beam search, and its gain over
translating one sentence at a time (the target: >= 3x on CPU at beam 12).

Translates the first --lines lines of newstest2014 (English) with beam 12 and beam 1, for the
"small" preset and the paper's rnnsearch-50, on the CPU (and on CUDA when available). Without
--checkpoint the models are randomly initialised: such a model rarely says EOS, so every
hypothesis runs to the length cap (max-len-a 1.5, max-len-b 5 by default): a worst case for
the number of decoder steps, and the same work for every configuration. With --checkpoint the
figures are those of a trained model (e.g. beam 5 on data/tatoeba-eng-fra/dev.en, the
BENCHMARKS.md setup: `--checkpoint RUN/checkpoint_best.pt --input .../dev.en --beams 5,1`).

Decoding time excludes the text pipeline (timed separately as "prep"); "cpu" is the process's
CPU time for the same span (on a shared machine, wall time / CPU time shows the contention). Peak memory: the
process's peak RSS on the CPU (monotonic over the run), torch's peak allocation on CUDA.

    python benchmarks/translate_speed.py            # 500 lines, CPU (+ CUDA if present)
    python benchmarks/translate_speed.py --quick    # 64 lines, small preset only (about a minute)
    python benchmarks/translate_speed.py --quick --threads 1 --beams 12   # the batching ratio only

On a shared machine use --threads 1: the two modes then compete for one core alike.

Cold start: `--cold-start CKPT` times `echo hello | nmtkit translate -m CKPT --beam 5` as a new
process (imports, checkpoint, first line), --reps times, and reports the median wall time and
the peak RSS. `--trees A,B` runs the same with the nmtkit source trees A and B (e.g. an
exported older commit), alternating, so that their ratio is taken under the same load:

    python benchmarks/translate_speed.py --cold-start RUN/checkpoint_last.pt --reps 5 --trees /tmp/old,.

A tree that cannot read the other's checkpoint format takes its own copy of the same model:
`--cold-start OLD.pt,NEW.pt`, one checkpoint per tree, in the order of --trees.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = Path(os.environ.get("DATA", REPO.parent / "shared" / "data"))
DEFAULT_INPUT = DATA / "wmt14-newstest" / "newstest2014-fren.en"


def random_checkpoint(preset_name: str, lines: list[str], out: Path) -> Path:
    """A randomly initialised checkpoint of a preset: word pipeline, source vocabulary from the
    input's most frequent tokens, a synthetic target vocabulary of the preset's size."""
    import torch

    from nmtkit.checkpoint import save_checkpoint
    from nmtkit.models import build_model
    from nmtkit.text.pipeline import TextPipeline
    from nmtkit.text.vocab import SPECIALS
    from nmtkit.train.presets import preset

    arch, cfg = preset(preset_name)
    pipe = TextPipeline(src_lang="en", tgt_lang="fr")
    counts = Counter(t for line in lines for t in pipe.encode(line, "src"))
    src_vocab = list(SPECIALS) + [t for t, _ in counts.most_common(cfg["src_vocab_size"] - len(SPECIALS))]
    src_vocab += [f"<src{i}>" for i in range(cfg["src_vocab_size"] - len(src_vocab))]
    tgt_vocab = list(SPECIALS) + [f"w{i}" for i in range(cfg["tgt_vocab_size"] - len(SPECIALS))]
    torch.manual_seed(0)
    model = build_model(arch, cfg)
    save_checkpoint(dict(arch=arch, model_config=cfg, model_state=model.state_dict(), pipeline=pipe.to_dict(),
                         src_lang="en", tgt_lang="fr", src_vocab=src_vocab, tgt_vocab=tgt_vocab,
                         train_config={}), out)
    return out


def peak_memory(device) -> str:
    import torch

    if device.type == "cuda":
        return f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB (torch, peak)"
    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB (RSS, process peak)"


def cold_start(ckpts: list[str], trees: list[str], reps: int) -> None:
    """One-line translations from a fresh process, per source tree (module docstring); `ckpts`:
    one checkpoint for every tree, or one per tree."""
    import statistics
    import subprocess

    if len(ckpts) not in (1, len(trees)):
        raise SystemExit(f"--cold-start: {len(ckpts)} checkpoints for {len(trees)} trees (give one, or one per tree)")
    runs: dict[str, list[tuple[float, float]]] = {t: [] for t in trees}
    for _ in range(reps):
        for tree, ckpt in zip(trees, ckpts * len(trees) if len(ckpts) == 1 else ckpts):
            t0 = time.perf_counter()
            proc = subprocess.Popen([sys.executable, "-m", "nmtkit", "translate", "-m", ckpt, "--beam", "5"],
                                    cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            proc.stdin.write(b"hello\n")  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
            _, status, usage = os.wait4(proc.pid, 0)
            if os.waitstatus_to_exitcode(status):
                raise SystemExit(f"nmtkit translate failed in {tree}")
            runs[tree].append((time.perf_counter() - t0, usage.ru_maxrss / 1024))
    base = statistics.median(w for w, _ in runs[trees[0]])
    for tree in trees:
        wall = statistics.median(w for w, _ in runs[tree])
        print(f"cold start, one line, beam 5 ({tree}): median {wall:.2f}s of {reps} "
              f"({base / wall:.2f}x the first tree's speed), peak RSS {max(r for _, r in runs[tree]):.0f} MB", flush=True)


def run_one(ckpt: str, lines: list[str], beam: int, device: str, args, batch_size: int) -> dict:
    import torch

    from nmtkit.data.binarized import length_batches
    from nmtkit.translate import DecodeConfig, Translator
    from nmtkit.translate.config import SearchConfig

    cfg = DecodeConfig(models=(ckpt,), batch_size=batch_size, device=device, precision=args.precision,
                       max_src_len=args.max_src_len)
    search = SearchConfig(beam=beam, lenpen=1.0, max_len_a=args.max_len_a, max_len_b=args.max_len_b)
    tr = Translator(cfg, warn=lambda m: None)
    t0 = time.perf_counter()
    toks = [tr._prepare(line, i, "<input>")[0] for i, line in enumerate(lines, 1)]
    prep = time.perf_counter() - t0
    idx = [i for i, t in enumerate(toks) if t]
    batches = length_batches([len(toks[i]) for i in idx], batch_size, longest_first=True)
    if tr.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(tr.device)
        torch.cuda.synchronize()
    n_tgt = 0
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for b in batches:
        for hyps in tr._decode_batch([toks[idx[j]] for j in b], search, False, b):
            n_tgt += len(hyps[0].tokens) + 1
    if tr.device.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    return dict(sents=len(lines), secs=dt, cpu=cpu, prep=prep, sent_s=len(lines) / dt, tok_s=n_tgt / dt,
                mem=peak_memory(tr.device), device=str(tr.device))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=str(DEFAULT_INPUT))
    ap.add_argument("--lines", type=int, default=None, help="lines to translate [500 on CPU, all on CUDA]")
    ap.add_argument("--presets", default="small,rnnsearch-50")
    ap.add_argument("--checkpoint", default=None, help="a trained checkpoint instead of random presets")
    ap.add_argument("--beams", default="12,1")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--one-by-one-lines", type=int, default=64,
                    help="lines translated one at a time for the batched/unbatched comparison (beam 12, CPU) "
                         "[64: one full batch of the default --batch-size; fewer lines compare a smaller batch]")
    ap.add_argument("--reps", type=int, default=2,
                    help="interleaved repetitions of the batched/unbatched comparison (best of each)")
    ap.add_argument("--max-len-a", type=float, default=1.5)
    ap.add_argument("--max-len-b", type=float, default=5)
    ap.add_argument("--max-src-len", type=int, default=100)
    ap.add_argument("--devices", default=None, help="comma list [cpu, and cuda when available]")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads [torch's default]")
    ap.add_argument("--quick", action="store_true", help="64 lines, small preset")
    ap.add_argument("--cold-start", metavar="CKPT[,CKPT]", default=None,
                    help="time one-line translations from a fresh process instead (module docstring)")
    ap.add_argument("--trees", default=str(REPO), help="with --cold-start: comma list of nmtkit source trees")
    args = ap.parse_args()
    if args.cold_start:
        cold_start([str(Path(c).resolve()) for c in args.cold_start.split(",")], args.trees.split(","), args.reps)
        return
    if os.environ.get("NMTKIT_BENCH_QUICK"):
        args.quick = True

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if not Path(args.input).is_file():
        print(f"input {args.input} not found (set DATA=...); skipping", file=sys.stderr)
        return
    with open(args.input, encoding="utf-8") as f:
        all_lines = [line.rstrip("\n") for line in f]
    presets = args.presets.split(",")
    if args.quick:
        args.lines, presets = args.lines or 64, ["small"]
    devices = args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    beams = [int(b) for b in args.beams.split(",")]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, input {args.input}")
    print(f"max target length = {args.max_len_a} * source length + {args.max_len_b}; lenpen 1; "
          f"{'trained checkpoint' if args.checkpoint else 'random init (hypotheses run to the cap)'}")
    with tempfile.TemporaryDirectory() as tmp:
        models = [("checkpoint", args.checkpoint)] if args.checkpoint else [
            (p, str(random_checkpoint(p, all_lines, Path(tmp) / f"{p}.pt"))) for p in presets]
        for name, ckpt in models:
            for dev in devices:
                n = args.lines or (500 if dev == "cpu" else len(all_lines))
                lines = all_lines[:n]
                for beam in beams:
                    r = run_one(ckpt, lines, beam, dev, args, args.batch_size)
                    print(f"{name:12s} {r['device']:6s} beam {beam:2d}: {r['sents']} sents in {r['secs']:.1f}s = "
                          f"{r['sent_s']:.1f} sent/s, {r['tok_s']:.0f} tgt tok/s (cpu {r['cpu']:.1f}s, prep {r['prep']:.1f}s); "
                          f"peak mem {r['mem']}", flush=True)
                    if dev == "cpu" and beam == 12 and args.one_by_one_lines:
                        # same lines, same code, same process: batches of --batch-size against
                        # batches of 1, interleaved --reps times after a warm-up; best of each
                        m = min(args.one_by_one_lines, len(lines))
                        run_one(ckpt, lines[:5], beam, dev, args, 1)
                        runs = {"batched": [], "single": []}
                        for _ in range(args.reps):
                            runs["single"].append(run_one(ckpt, lines[:m], beam, dev, args, 1))
                            runs["batched"].append(run_one(ckpt, lines[:m], beam, dev, args, args.batch_size))
                        b = min(runs["batched"], key=lambda r: r["secs"])
                        s1 = min(runs["single"], key=lambda r: r["secs"])
                        wall = b["sent_s"] / s1["sent_s"]
                        print(f"{name:12s} {dev:6s} beam 12, {m} lines (best of {args.reps}): batched {b['sent_s']:.2f} sent/s "
                              f"({b['secs']:.1f}s, cpu {b['cpu']:.1f}s) vs one at a time {s1['sent_s']:.2f} sent/s "
                              f"({s1['secs']:.1f}s, cpu {s1['cpu']:.1f}s)", flush=True)
                        print(f"{name:12s} {dev:6s} beam 12 SPEED-UP batched / one at a time: {wall:.2f}x wall, "
                              f"{s1['cpu'] / b['cpu']:.2f}x cpu (target >= 3x: "
                              f"{'met' if wall >= 3 else 'NOT met'})", flush=True)


if __name__ == "__main__":
    main()
