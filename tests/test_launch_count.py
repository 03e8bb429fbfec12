"""devtools/launches.py counts kernel-launching ops: known tiny functions give known counts."""
from __future__ import annotations

import threading

import torch

from devtools.launches import count_launches


def test_elementwise_ops_count_one_launch_each_and_views_none():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    launches, out = count_launches(lambda: torch.relu(a + b))
    assert launches.total == 2
    assert set(launches.by_op) == {"aten::add", "aten::relu"} or set(launches.by_op) == {"aten::add",
                                                                                        "aten::clamp_min"}
    views, _ = count_launches(lambda: a.view(64).t().unsqueeze(0).transpose(0, 1).reshape(8, 8)[1:, 2])
    assert views.total == 0
    copy, _ = count_launches(lambda: a.t().contiguous())  # a real copy launches a kernel
    assert copy.total == 1


def test_matmul_counts_once_despite_no_kernel_children():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    launches, _ = count_launches(lambda: a @ b)
    assert launches.total == 1


def test_backward_ops_are_counted_and_marked():
    a = torch.randn(8, 8, requires_grad=True)

    def fwd_bwd():
        torch.relu(a * 2).sum().backward()

    launches, _ = count_launches(fwd_bwd)
    assert launches.backward >= 2  # at least relu's and mul's backward kernels
    assert launches.total > launches.backward >= 2


def test_foreach_op_counts_as_one_launch():
    ts = [torch.randn(4) for _ in range(5)]
    launches, _ = count_launches(lambda: torch._foreach_mul_(ts, 2.0))
    assert launches.total == 1
    loop, _ = count_launches(lambda: [t.mul_(2.0) for t in ts])
    assert loop.total == 5


def test_ops_on_other_threads_are_counted():
    a = torch.randn(8, 8)

    def on_thread():
        th = threading.Thread(target=lambda: torch.relu(a + 1))
        th.start()
        th.join()

    launches, _ = count_launches(on_thread)
    assert launches.total == 2
