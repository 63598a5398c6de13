"""Shared test fixtures: where ../shared (data and parity fixtures) lives."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path | None:
    """``$SEQZOO_SHARED`` or ``../shared`` beside the repository; None when absent."""
    cand = Path(os.environ.get("SEQZOO_SHARED", REPO.parent / "shared"))
    return cand if cand.is_dir() else None


@pytest.fixture
def shared():
    path = shared_dir()
    if path is None:
        pytest.skip("../shared (data and fixtures) is not beside the repository; set SEQZOO_SHARED")
    return path
