"""Device and core-count resolution shared by train, translate and the text commands."""
from __future__ import annotations

import os

import pytest
import torch

from nmtkit.devices import available_cores, resolve_device, threads_per_process
from nmtkit.errors import ConfigError


def test_cores_follow_the_affinity_mask_and_threads_split_them_between_local_processes():
    assert available_cores() == len(os.sched_getaffinity(0))
    assert threads_per_process(1) == available_cores()
    assert threads_per_process(10 * available_cores()) == 1  # never zero threads


def test_auto_and_cpu_resolve_to_a_usable_device():
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given where there is no GPU")
@pytest.mark.parametrize("name", ["cuda", "cuda:0"])
def test_asking_for_cuda_without_a_gpu_is_a_config_error(name):
    with pytest.raises(ConfigError, match="no CUDA device"):
        resolve_device(name)


def test_unknown_device_names_are_config_errors():
    with pytest.raises(ConfigError, match="auto, cpu, cuda or cuda:N"):
        resolve_device("tpu")


def _two_gpus(monkeypatch) -> list:
    """torch.cuda as a machine with two GPUs shows it; the devices made current are recorded."""
    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    return current


def test_cuda_is_the_processs_own_gpu_modulo_the_gpu_count(monkeypatch):
    """Under torchrun, rank 3 of a machine with two GPUs gets GPU 1, not a GPU 3 that does not exist."""
    current = _two_gpus(monkeypatch)
    assert [resolve_device("cuda", rank) for rank in range(4)] == [torch.device("cuda", i) for i in (0, 1, 0, 1)]
    assert current == [torch.device("cuda", i) for i in (0, 1, 0, 1)]


def test_cuda_n_past_the_last_gpu_is_a_config_error(monkeypatch):
    _two_gpus(monkeypatch)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match=r"^--device cuda:2: there are 2 CUDA device\(s\)$"):
        resolve_device("cuda:2")
