"""On a GPU, nmtkit computes what it computes on the CPU (`make test-gpu`; skipped without CUDA).

Tiny models on the tiny synthetic task (tests/conftest.py), dropout off so that the two
devices' different random streams do not matter.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmtkit.checkpoint import load_checkpoint
from nmtkit.train.presets import ModelOverrides
from tests.conftest import TINY_MODEL, tiny_context, tiny_options, tiny_train_args, train_run

REPO = Path(__file__).resolve().parent.parent
NO_CUDA = "CUDA is not available: these tests need an NVIDIA GPU and a CUDA build of torch (make test-gpu)"
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)]
MODEL = dict(TINY_MODEL, dropout=0.0)
OVERRIDES = ModelOverrides(**MODEL)
TINY_CLI = [*tiny_train_args(device="cuda"), "--dropout", "0", "--valid-bleu-samples", "0"]


def _env(**extra: str) -> dict[str, str]:
    """The environment for a child process: this repository first on PYTHONPATH, before what it
    held (make test-gpu SYSTEM_TORCH=1 puts nmtkit's dependencies there)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def _one_update(data_dir, run_dir, device, precision, fuse="off", cuda_graphs="off"):
    """(parameters before, their change after one `train_step`) on `device`, as CPU tensors."""
    from nmtkit.train.context import train_step

    ctx = tiny_context(data_dir, run_dir, model=dict(dropout=0.0), valid_bleu_samples=0, device=device,
                       precision=precision, optimizer="sgd", lr=1.0, tf32=False, fuse=fuse, cuda_graphs=cuda_graphs)
    try:
        before = {n: p.detach().cpu().clone() for n, p in ctx.model.named_parameters()}
        assert train_step(ctx, [ctx.epoch_plan(1)[0]])
        return before, {n: p.detach().cpu() - before[n] for n, p in ctx.model.named_parameters()}
    finally:
        ctx.close()


@pytest.mark.parametrize("cuda_graphs", ["on", "off"])
@pytest.mark.parametrize("fuse", ["off", "on"])
@pytest.mark.parametrize("precision,tol", [("fp32", 1e-3), ("bf16", 3e-2)])
def test_one_training_step_on_cuda_equals_the_cpu_step(data_dir, tmp_path, precision, tol, fuse, cuda_graphs):
    # plain SGD at lr 1: the change of the weights is the clipped gradient itself (Adam would
    # turn tiny gradient differences into sign flips). TF32 off: the fp32 step is exact fp32.
    # Unfused on CUDA the encoder is cuDNN's packed GRU; fused, Triton kernels compiled by inductor.
    # With CUDA graphs the decoder loops replay graphs captured over padded shapes.
    cpu_before, cpu_delta = _one_update(data_dir, tmp_path / "cpu", "cpu", precision)
    gpu_before, gpu_delta = _one_update(data_dir, tmp_path / "gpu", "cuda", precision, fuse, cuda_graphs)
    for name in cpu_before:
        assert torch.equal(cpu_before[name], gpu_before[name]), f"{name}: different initial weights"
    a = torch.cat([d.flatten() for d in cpu_delta.values()])
    b = torch.cat([gpu_delta[n].flatten() for n in cpu_delta])
    assert a.norm() > 0
    assert (a - b).norm() / a.norm() < tol


def test_graph_captured_steps_equal_eager_steps(data_dir, tmp_path):
    # 12 SGD updates over batches of varied lengths (and a validation between them), exact fp32:
    # the graphs, over padded shapes, give the eager run's weights up to rounding
    from nmtkit.models.fast.fusion import loop_graphs

    runner = loop_graphs(torch.device("cuda"))
    opts = tiny_options(device="cuda", max_updates=12, valid_every=6, save_every=6, valid_bleu_samples=0,
                        optimizer="sgd", lr=0.5, tf32=False)
    train_run(data_dir, tmp_path / "eager", opts.replace(cuda_graphs="off"), OVERRIDES)
    before = runner.captures
    train_run(data_dir, tmp_path / "graphs", opts.replace(cuda_graphs="on"), OVERRIDES)
    assert runner.captures > before, "the run with --cuda-graphs on captured no graph"
    a = load_checkpoint(tmp_path / "eager" / "checkpoint_last.pt")["model_state"]
    b = load_checkpoint(tmp_path / "graphs" / "checkpoint_last.pt")["model_state"]
    for name, tensor in a.items():
        torch.testing.assert_close(b[name], tensor, rtol=1e-4, atol=1e-5, msg=name)


def resume_runs_child(data_dir: str, out: str) -> None:
    """In a fresh process (deterministic CUDA kernels need their settings before CUDA starts):
    12 updates, and 6 + resume + 6, into out/full and out/half."""
    torch.use_deterministic_algorithms(True)
    opts = tiny_options(device="cuda", max_updates=12, valid_every=4, save_every=4, lr=0.02,
                        lr_schedule="plateau", warmup_updates=3, valid_bleu_samples=0)
    out_dir = Path(out)
    train_run(data_dir, out_dir / "full", opts, OVERRIDES)
    train_run(data_dir, out_dir / "half", opts.replace(max_updates=6), OVERRIDES)
    train_run(data_dir, out_dir / "half", opts, OVERRIDES, resume=True)


def test_resume_on_cuda_equals_the_uninterrupted_run(data_dir, tmp_path):
    env = _env(CUBLAS_WORKSPACE_CONFIG=":4096:8")
    code = f"from tests.test_cuda import resume_runs_child; resume_runs_child({str(data_dir)!r}, {str(tmp_path)!r})"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a = load_checkpoint(tmp_path / "full" / "checkpoint_last.pt")
    b = load_checkpoint(tmp_path / "half" / "checkpoint_last.pt")
    assert a["trainer"]["update"] == b["trainer"]["update"] == 12
    for name, tensor in a["model_state"].items():
        assert torch.equal(tensor, b["model_state"][name]), name
    sa, sb = a["optimizer_state"]["state"], b["optimizer_state"]["state"]
    for k in sa:
        for key in sa[k]:
            assert torch.equal(torch.as_tensor(sa[k][key]), torch.as_tensor(sb[k][key])), (k, key)


@pytest.mark.parametrize("fuse", ["off", "on"])
def test_translate_on_cuda_gives_the_cpu_output(tmp_path, fuse):
    import nmtkit
    from tests.conftest import make_checkpoint

    ckpt = str(make_checkpoint(tmp_path / "model.pt", seed=4))
    lines = ["the cat sat on a mat .", "a big red dog ran in the park", "the house is small , and red .", ""]
    outs = {}
    for device in ("cpu", "cuda"):
        model = nmtkit.load(ckpt, device=device, precision="fp32", batch_size=2, fuse=fuse if device == "cuda" else "off")
        outs[device] = model.translate(lines, beam=4)
    assert outs["cuda"] == outs["cpu"]
    assert any(outs["cpu"])


def _torchrun(nproc: int, data_dir, run, *extra):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           "-m", "nmtkit", "train", "--data", str(data_dir), "--save-dir", str(run), *TINY_CLI, *extra]
    env = _env()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load_checkpoint(run / "checkpoint_last.pt")


def _torchrun_trains_and_resumes(nproc: int, data_dir, tmp_path):
    full = _torchrun(nproc, data_dir, tmp_path / "full", "--max-updates", "8", "--valid-every", "4")
    _torchrun(nproc, data_dir, tmp_path / "half", "--max-updates", "4", "--valid-every", "4")
    half = _torchrun(nproc, data_dir, tmp_path / "half", "--max-updates", "8", "--valid-every", "4", "--resume")
    assert full["trainer"]["update"] == half["trainer"]["update"] == 8
    assert full["trainer"]["world_size"] == half["trainer"]["world_size"] == nproc
    for name, tensor in full["model_state"].items():
        assert tensor.device.type == "cpu" or tensor.is_cuda
        torch.testing.assert_close(half["model_state"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_torchrun_at_world_size_1_trains_and_resumes_on_cuda(data_dir, tmp_path):
    # one process: nmtkit starts no process group (nothing to all-reduce), so NCCL is untouched
    _torchrun_trains_and_resumes(1, data_dir, tmp_path)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs one GPU per rank: fewer than 2 GPUs")
def test_torchrun_with_nccl_on_two_gpus_trains_and_resumes(data_dir, tmp_path):
    _torchrun_trains_and_resumes(2, data_dir, tmp_path)
