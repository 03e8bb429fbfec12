"""The example recipes: every Makefile target exists and chains (make -n), and the smoke chain
runs end to end on the local corpora (slow)."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli, size_args

REPO = Path(__file__).resolve().parent.parent
WMT = REPO / "examples" / "wmt14-en-fr"
TATOEBA = REPO / "examples" / "tatoeba-en-fr"
BACKTRANSLATION = REPO / "examples" / "backtranslation"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make not installed")


def _recipe_env() -> dict[str, str]:
    """This interpreter's `nmtkit` first on PATH, and no DATA: the suite's DATA names the corpora
    folder, a recipe's DATA its own data folder (an empty DATA from `make test-slow` emptied it)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop("DATA", None)
    return env


def _dry_run(folder: Path, *args: str) -> str:
    """`make -n -B`: every command of the chain, whatever outputs a local run left behind."""
    env = _recipe_env()
    proc = subprocess.run(["make", "-n", "-B", *args], cwd=folder, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("target,expected", [
    ("data", ["curl", "training-parallel-europarl-v7.tgz", "training-giga-fren.tar", "verify_checksum.py",
              "sacrebleu -t wmt14/full"]),
    ("tok", ["nmtkit tokenize", "--lang en", "--lang fr"]),
    ("select", ["nmtkit select-data", "--words 348000000", "--in-domain work/tok/news", "--output-prefix"]),
    ("prep-50", ["nmtkit preprocess", "--src-vocab-size 30000", "--max-len 50"]),
    ("prep-bpe", ["--bpe 30000"]),
    ("rnnencdec-30", ["--preset rnnencdec-30", "--data work/data-50"]),  # the paper's one vocabulary
    ("rnnsearch-30", ["--preset rnnsearch-30"]),
    ("rnnencdec-50", ["--preset rnnencdec-50", "--data work/data-50"]),
    ("rnnsearch-50", ["--preset rnnsearch-50"]),
    ("rnnsearch-50star", ["--preset rnnsearch-50", "--patience 10", "--save-dir work/runs/rnnsearch-50star"]),
    ("modern", ["--data work/data-bpe", "--optimizer adam", "--dropout", "--max-len 80"]),  # as its data
    ("eval", ["nmtkit translate", "--beam 12", "--paper-bleu --no-unk", "make_table.py", "--by-length",
              "--plot-attention", "--ban-unk -i work/corpus/test.en -o work/eval/rnnsearch-50star.nounk.hyp",
              "--hyp work/eval/rnnsearch-50star.nounk.hyp"]),
])
def test_every_wmt14_target_prints_real_commands_that_chain_from_download(target, expected, tmp_path):
    out = _dry_run(WMT, target)
    for piece in expected:
        assert piece in out, (target, piece)
    if target not in ("data",):
        # each target pulls its prerequisites in from the start of the chain
        assert "curl" in out or "sacrebleu" in out


def test_gpus_uses_torchrun_and_keeps_the_papers_global_batch_of_80():
    out = _dry_run(WMT, "rnnsearch-50", "GPUS=4")
    assert "torchrun --nproc_per_node 4 -m nmtkit train" in out
    assert "--batch-size 20" in out  # per GPU: 4 x 20 = 80 pairs an update
    assert "--batch-size" not in _dry_run(WMT, "rnnsearch-50")  # one GPU: the preset's 80


@pytest.mark.parametrize("gpus", ["0", "abc"])
def test_gpus_that_is_not_a_count_of_gpus_is_refused_in_one_line(gpus):
    """GPUS=0 printed bash's "80 / 0: division by 0" on every make and ran torchrun --nproc_per_node 0
    with a --batch-size without a value."""
    proc = subprocess.run(["make", "-n", "rnnsearch-50", f"GPUS={gpus}"], cwd=WMT, capture_output=True, text=True,
                          env=_recipe_env())
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1 and f"GPUS={gpus}: the number of GPUs" in proc.stderr


def test_wmt14_eval_decodes_as_the_paper_without_length_normalisation():
    """Section 4.2: the beam search maximises the conditional probability; translate's default
    --lenpen 1 ranks by the per-word average instead, so every decoding of the recipe says 0."""
    lines = [ln for ln in _dry_run(WMT, "eval").replace("\\\n", " ").splitlines() if "nmtkit translate" in ln]
    assert len(lines) == 11 and all("--beam 12 --lenpen 0 " in ln for ln in lines), lines


def test_data_points_at_a_local_copy_instead_of_downloading():
    out = _dry_run(WMT, "data", "DATA=/somewhere")
    assert "/somewhere/training-parallel-un.tgz" in out


def test_tatoeba_recipe_chains_preprocess_train_translate_score():
    out = _dry_run(TATOEBA)
    for piece in ("nmtkit preprocess", "--bpe 10000", "nmtkit train", "--max-time 30m", "--keep-every 400",
                  "nmtkit average --last 5 --save-dir work/run -o work/run/average5.pt", "nmtkit translate -m "
                  "work/run/average5.pt", "nmtkit score", "write_results.py", "--plot-attention"):
        assert piece in out, piece
    plain = _dry_run(TATOEBA, "AVERAGE=0", "KEEP_EVERY=0")
    assert "nmtkit average" not in plain and "--keep-every" not in plain
    assert "translate -m work/run/checkpoint_best.pt" in plain


def test_tatoeba_results_name_the_training_device_and_every_timed_step(tmp_path):
    """results.md says where the run trained (train.log's first line) and each step's wall time,
    so that a GPU run of the recipe reports its own figures."""
    run, seconds, attention = tmp_path / "run", tmp_path / "seconds", tmp_path / "attention"
    for d in (run, seconds, attention):
        d.mkdir()
    (run / "train.log").write_text("2026-11-29 11:29:18 INFO training rnnsearch (9 parameters) on cuda x1: 160123 "
                                   "pairs (0 over --max-len 50 dropped), 2502 minibatches per epoch, from update 0\n")
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "train", "update": 7, "epoch": 1, "elapsed": 60.0,
                                                   "tgt_tokens_per_s": 1000.0}) + "\n")
    score = {"metric": "bleu", "name": "BLEU", "label": "BLEU", "score": 12.5, "signature": "sig"}
    (tmp_path / "scores.json").write_text(json.dumps({"lines": 2, "systems": [{"scores": [score]}]}))
    for step, t in (("preprocess", 21.7), ("train", 366.0), ("translate-test", 3.3)):
        (seconds / step).write_text(f"{t}\n")
    out = tmp_path / "results.md"
    proc = subprocess.run([sys.executable, str(TATOEBA / "write_results.py"), "--run", str(run), "--scores",
                           str(tmp_path / "scores.json"), "--seconds", str(seconds), "--attention", str(attention),
                           "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith("# Tatoeba English→French: a small RNNsearch trained on cuda\n")
    for row in ("| wall time of `preprocess` (start-up included) | 21.7 s |",
                "| wall time of `train` (start-up included) | 366.0 s |",
                "| translating the test split | 3.3 s (0.6 sentences/s, start-up included) |"):
        assert row in text, row
    assert "`average`" not in text  # a step that did not run has no row
    assert "`translate-test`" not in text  # its own row above, with the rate, not twice


@pytest.mark.parametrize("recipe", ["tatoeba", "wmt14", "backtranslation", "demo"])
def test_every_recipe_translation_into_a_file_replaces_the_earlier_one(recipe):
    """A step redone (new inputs: `make AVERAGE=3` after `make`, a second `make demo`) translates
    over its earlier output: without --force translate refused it, and every rerun failed alike."""
    text = {"tatoeba": lambda: _dry_run(TATOEBA), "wmt14": lambda: _dry_run(WMT, "eval"),
            "backtranslation": lambda: _dry_run(BACKTRANSLATION),
            "demo": lambda: (REPO / "examples" / "demo" / "run.sh").read_text()}[recipe]()
    lines = [ln for ln in text.replace("\\\n", " ").splitlines() if "nmtkit translate" in ln and " -o " in ln]
    assert lines and all("--force" in ln for ln in lines), lines


def test_tatoeba_translates_again_when_its_model_is_newer_than_the_translation(tmp_path):
    """`make AVERAGE=3` after `make`: the new average3.pt is newer than results/test.hyp.fr."""
    from tests.conftest import make_checkpoint

    work, results, data = tmp_path / "work", tmp_path / "results", tmp_path / "data"
    for d in (work / "data", work / "run", results, data):
        d.mkdir(parents=True)
    (data / "test.en").write_text("the cat\n")
    hyp = results / "test.hyp.fr"
    for t, p in enumerate((work / "data" / "manifest.json", work / "run" / "DONE", hyp)):
        p.write_text("old\n")
        os.utime(p, (1e9 + t, 1e9 + t))
    make_checkpoint(work / "run" / "average3.pt")
    proc = subprocess.run(["make", "-f", str(TATOEBA / "Makefile"), str(hyp), f"WORK={work}", f"RESULTS={results}",
                           f"DATA={data}", "AVERAGE=3", f"PYTHON={sys.executable}"], cwd=tmp_path,
                          capture_output=True, text=True, env=_recipe_env())
    assert proc.returncode == 0, proc.stderr
    assert hyp.read_text().count("\n") == 1 and hyp.read_text() != "old\n"


@pytest.mark.parametrize("folder, args, dirs, deleted, redone", [
    (WMT, ["eval", "SMOKE=1", "DATA=/nowhere"], ["w/corpus", "w/tok", "w/select", "w/data-50", "w/eval", "r/attention",
     *(f"w/runs/{s}" for s in ("rnnencdec-30", "rnnsearch-30", "rnnencdec-50", "rnnsearch-50", "rnnsearch-50star"))],
     "w/eval/rnnsearch-50.hyp", "-o w/eval/rnnsearch-50.hyp"),
    (BACKTRANSLATION, ["SHARED=/nowhere"], [f"w/{d}/{s}" for d in ("fr-en", "real", "real+bt") for s in ("data", "run")]
     + ["w/bt", "r"], "w/real/run/DONE", "--save-dir w/real/run"),
])
def test_an_output_deleted_after_a_run_is_made_again(tmp_path, folder, args, dirs, deleted, redone):
    """The READMEs' "delete the outputs first": under a bare .SECONDARY (every target treated as
    intermediate) a deleted output was never made again while what it feeds was up to date."""
    for d in dirs:
        (tmp_path / d).mkdir(parents=True)
    make = ["make", "-f", str(folder / "Makefile"), "WORK=w", "RESULTS=r", *args]
    touched = subprocess.run([*make, "-t"], cwd=tmp_path, capture_output=True, text=True, env=_recipe_env())
    assert touched.returncode == 0 and (tmp_path / deleted).exists(), touched.stderr  # every step "done"
    (tmp_path / deleted).unlink()
    proc = subprocess.run([*make, "-n"], cwd=tmp_path, capture_output=True, text=True, env=_recipe_env())
    assert proc.returncode == 0 and redone in proc.stdout, proc.stdout + proc.stderr


def test_wmt14_smoke_pool_fails_whole_when_a_corpus_of_it_is_missing(tmp_path):
    """The smoke pool joins two corpora; one read through <(gzip -dc ...) failed unseen by pipefail,
    and the pool was built silently without it."""
    for side in ("en", "fr"):
        (tmp_path / "d" / "giga-fren-sample").mkdir(parents=True, exist_ok=True)
        (tmp_path / "d" / "giga-fren-sample" / f"train.{side}").write_text("a\n")
    proc = subprocess.run(["make", "-f", str(WMT / "Makefile"), "SMOKE=1", "DATA=d", "CORPUS=c", "c/pool.en"],
                          cwd=tmp_path, capture_output=True, text=True, env=_recipe_env())
    assert proc.returncode != 0 and "train.en.gz" in proc.stderr, proc.stderr
    assert not (tmp_path / "c" / "pool.en").exists() and not (tmp_path / "c" / "pool.fr").exists()


@pytest.mark.parametrize("folder, run, data", [(WMT, "runs/rnnsearch-30", "data-50"), (TATOEBA, "run", "data"),
                                              (BACKTRANSLATION, "real/run", "real/data")])
@pytest.mark.parametrize("leftover, flag", [("checkpoint_last.pt", "--resume"), ("config.json", "--force"),
                                             ("old checkpoint_last.pt", "--force")])
def test_training_resumes_only_a_run_interrupted_on_its_data(tmp_path, folder, run, data, leftover, flag):
    """wmt14: a run interrupted before its first checkpoint (config.json alone) was started again
    without --force, which train refuses; one whose data was made again since (a new manifest) was
    resumed on the new data, trained nothing ("already reached its --max-time") and kept the old
    model. tatoeba, backtranslation: a run stopped by Ctrl-C ("continue with --resume") was started
    over with --force, its training lost."""
    run_dir, manifest = tmp_path / "w" / run, tmp_path / "w" / data / "manifest.json"
    run_dir.mkdir(parents=True)
    manifest.parent.mkdir(parents=True)
    for t, p in enumerate((run_dir / leftover.split()[-1], manifest)):
        p.write_text("x")
        os.utime(p, (1e9 + t, 1e9 + t) if leftover.startswith("old") else (1e9 - t, 1e9 - t))
    proc = subprocess.run(["make", "-f", str(folder / "Makefile"), "WORK=w", "RESULTS=r", "NMTKIT=echo nmtkit",
                           f"PYTHON={sys.executable}", "-o", f"w/{data}/manifest.json", f"w/{run}/DONE"],
                          cwd=tmp_path, capture_output=True, text=True, env=_recipe_env())
    train = [ln for ln in proc.stdout.splitlines() if ln.startswith("nmtkit train ")]
    assert proc.returncode == 0 and len(train) == 1 and train[0].endswith(f" {flag}"), proc.stdout + proc.stderr


def test_wmt14_smoke_runs_from_another_folder(tmp_path):
    """`make -f .../Makefile smoke` elsewhere: the inner make looked for ./Makefile ("No rule to
    make target 'eval'"); it is given the recipe's own Makefile now."""
    proc = subprocess.run(["make", "-n", "-f", str(WMT / "Makefile"), "smoke", "DATA=/nowhere"], cwd=tmp_path,
                          capture_output=True, text=True, env=_recipe_env())
    assert proc.returncode == 0 and "nmtkit select-data" in proc.stdout, proc.stderr


@pytest.mark.parametrize("folder, args, wanted, unwanted", [
    (WMT, ["BEAM=3", "DATA=/nowhere"], "--beam 3 ", "--beam 5 "),  # the smoke's beam 5 replaced the user's
    (BACKTRANSLATION, ["WORK=w", "RESULTS=r", "SHARED=/nowhere"], "--save-dir w/real/run", "work-smoke"),
])
def test_smoke_honours_the_variables_given_on_the_command_line(tmp_path, folder, args, wanted, unwanted):
    """`make smoke` set BEAM, WORK and RESULTS for its inner make, over the user's own."""
    proc = subprocess.run(["make", "-n", "-f", str(folder / "Makefile"), "smoke", *args], cwd=tmp_path,
                          capture_output=True, text=True, env=_recipe_env())
    assert proc.returncode == 0 and wanted in proc.stdout and unwanted not in proc.stdout, proc.stdout + proc.stderr


def test_backtranslation_recipe_samples_the_french_side_only_and_gives_both_systems_equal_updates():
    out = _dry_run(BACKTRANSLATION, "UPDATES=77")
    for piece in ("--src-lang fr --tgt-lang en", "giga-fren-sample/train.fr > work/bt/mono.fr",
                  "--sampling --sampling-topk 0 --seed 1", "cat /", "--dest work/real+bt/data",
                  "nmtkit score", "--significance", "write_results.py"):
        assert piece in out, piece
    assert "giga-fren-sample/train.en" not in out  # the English side is never read
    # the two English->French systems train for the same number of updates
    assert out.count("--max-updates 77") == 2
    assert "--save-dir work/real/run --max-updates 77" in out and "--save-dir work/real+bt/run --max-updates 77" in out


@pytest.mark.slow
def test_backtranslation_smoke_chain_writes_results(shared_data):
    env = _recipe_env()
    proc = subprocess.run(["make", "smoke", f"SHARED={shared_data}", "THREADS=1"], cwd=BACKTRANSLATION,
                          capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = (BACKTRANSLATION / "results-smoke" / "results.md").read_text(encoding="utf-8")
    assert "English→French, real + back-translated pairs" in results and "Paired bootstrap" in results
    mono = (BACKTRANSLATION / "work-smoke" / "bt" / "mono.fr").read_bytes().count(b"\n")
    synth = (BACKTRANSLATION / "work-smoke" / "bt" / "synth.en").read_bytes().count(b"\n")
    assert mono == synth == 50


WMT_TRAINING_TARGETS = ["rnnencdec-30", "rnnsearch-30", "rnnencdec-50", "rnnsearch-50", "rnnsearch-50star", "modern"]
def _real_train_argv(target: str) -> list[str]:
    """The `nmtkit train` arguments of a wmt14 target exactly as `make -n` prints them (the real,
    non-smoke flag set), without the shell's `$( ... && echo --resume )`."""
    lines = [ln for ln in _dry_run(WMT, target).splitlines() if ln.startswith("nmtkit train ")]
    assert len(lines) == 1, lines
    line = lines[0].split("$(", 1)[0]
    return shlex.split(line)[2:]


@pytest.mark.parametrize("target", WMT_TRAINING_TARGETS)
def test_every_wmt14_training_target_starts_with_its_real_flags(target, data_dir, tmp_path):
    """Every training flag the recipe passes is accepted and trains: only the data, run folder,
    model sizes and a few seconds' time limit are replaced; every other flag is kept as printed."""
    argv = _real_train_argv(target)
    values = dict(zip(argv, argv[1:]))
    preset = values["--preset"]
    argv[argv.index("--data") + 1] = str(data_dir)
    argv[argv.index("--save-dir") + 1] = str(tmp_path / "run")
    argv += size_args(preset.split("-")[0]) + ["--max-time", "2s", "--threads", "1"]  # the recipe's sizes: minutes a step
    code, _, err = run_cli(["train", *argv])
    assert code == 0, f"{target}: nmtkit train {shlex.join(argv)} exited with {code}:\n{err}"
    assert (tmp_path / "run" / "checkpoint_last.pt").exists()


@pytest.mark.slow
def test_wmt14_smoke_chain_produces_table_plot_and_attention(shared_data, tmp_path):
    env = _recipe_env()
    proc = subprocess.run(["make", "smoke", f"DATA={shared_data}"], cwd=WMT,
                          capture_output=True, text=True, env=env, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = WMT / "results-smoke"
    table = (results / "table1.md").read_text()
    assert "RNNsearch-50*" in table and "33.30" in table
    assert "which every system shares" in table  # one No-UNK subset: one vocabulary for the five systems
    assert len(list((WMT / "work-smoke" / "eval").glob("*.nounk.hyp"))) == 5  # kept, not deleted as intermediate
    assert (results / "bleu-by-length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((results / "attention").glob("*.png"))


def _score_json(path: Path, kept: int, total: int = 300) -> None:
    scores = [{"metric": "paper_bleu", "score": 20.0}, {"metric": "bleu", "score": 19.0}]
    path.write_text(json.dumps({"systems": [{"scores": scores}],
                                "no_unk": {"kept": kept, "total": total, "systems": [{"scores": scores}]}}))


def test_table1_names_the_no_unk_subset_it_scores_and_each_systems_where_they_differ(tmp_path):
    """Its footnote named one subset "shared" by the -30 and -50 systems, whose vocabularies (and
    so subsets: 10 and 9 of 300 sentences) differed."""
    for shared in (True, False):
        for name, kept in (("rnnsearch-30", 9 if shared else 10), ("rnnsearch-50", 9)):
            _score_json(tmp_path / f"{name}.json", kept)
        out = tmp_path / "table1.md"
        proc = subprocess.run([sys.executable, str(WMT / "make_table.py"), "--eval", str(tmp_path), "--systems",
                               "rnnsearch-30", "rnnsearch-50", "-o", str(out)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        note = " ".join(out.read_text().split())
        if shared:
            assert "the 9 of 300 sentences" in note and "which every system shares" in note
        else:
            assert "rnnsearch-30: 10 of 300, rnnsearch-50: 9 of 300" in note and "they differ" in note
