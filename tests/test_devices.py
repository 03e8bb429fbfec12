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
