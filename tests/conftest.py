"""Shared test fixtures: where ../shared (data and parity fixtures) lives."""

import os
from pathlib import Path

import pytest
import torch

# Without a GPU the Triton kernels run in Triton's CPU interpreter. The flag must be set before the first
# `import triton` anywhere in the session (transformers or torch may import it before a test module does).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

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


@pytest.fixture
def kernels_reset(monkeypatch):
    """The kernels switch as a fresh process has it: no ``SEQZOO_KERNELS``, no override, nothing logged yet."""
    from seqzoo.kernels import switch

    monkeypatch.delenv("SEQZOO_KERNELS", raising=False)
    monkeypatch.setattr(switch, "_override", None)
    monkeypatch.setattr(switch, "_seen", set())


def pytest_runtest_logreport(report):
    """With ``SEQZOO_FAILURE_LOG=path``, append each failure's traceback to that file as it happens (under xdist the
    controller sees every worker's reports). tools/gpu_check.sh sets it: a phase stopped at its time limit is
    killed before pytest prints its summary, and the failures' reasons were lost that way on an H200."""
    path = os.environ.get("SEQZOO_FAILURE_LOG")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With ``SEQZOO_PARITY_REQUIRED=1`` (.ci/run's live-parity step) a ``parity`` test that skips fails instead: the
    official packages were installed for it, so a skip would hide a parity check that never ran."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("SEQZOO_PARITY_REQUIRED") == "1" and item.get_closest_marker("parity"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"parity test skipped with SEQZOO_PARITY_REQUIRED=1: {reason}"
