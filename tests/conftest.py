"""Shared fixtures: paths to ../shared/data (tests that need it skip when absent)."""
from __future__ import annotations

import os
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
def _few_threads(monkeypatch):
    """Keep torch to one thread in unit tests: the machine has 2 cores and tests run in parallel."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield
