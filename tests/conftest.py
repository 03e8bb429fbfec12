"""Shared fixtures: paths to ../shared/data (tests that need it skip when absent)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("DATA") or REPO.parent / "shared" / "data")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real corpora not found at {SHARED_DATA} (set DATA=...)")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _one_torch_thread(monkeypatch):
    """One torch thread per test (2-core machines; tiny tensors gain nothing from more), without
    importing torch into tests that do not use it. Subprocesses get OMP_NUM_THREADS=1."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    yield


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A tiny synthetic data directory (tests/train_fixtures.py) shared by a module's tests."""
    from tests.train_fixtures import make_data_dir

    return make_data_dir(tmp_path_factory.mktemp("tiny") / "data")


@pytest.fixture(scope="module")
def bad_input_files(tmp_path_factory):
    """The tiny checkpoint and data directory the bad-input tables' World shares within a module."""
    from tests.train_fixtures import make_data_dir
    from tests.translate_fixtures import make_checkpoint

    base = tmp_path_factory.mktemp("bad")
    return make_checkpoint(base / "model.pt", seed=3), make_data_dir(base / "data", n_train=48, n_valid=8)


@pytest.fixture
def world(tmp_path, bad_input_files):
    """The bad-input tables' World (tests/test_bad_inputs.py) in a fresh tmp dir; mounts undone after."""
    from tests.test_bad_inputs import World

    w = World(tmp_path, *bad_input_files)
    yield w
    w.cleanup()

