"""``SEQZOO_FAILURE_LOG`` (tests/conftest.py): each failure's traceback is appended as it is reported."""

from types import SimpleNamespace

from conftest import pytest_runtest_logreport


def test_failures_are_appended_as_they_happen(tmp_path, monkeypatch):
    log = tmp_path / "failures.log"
    report = SimpleNamespace(
        failed=True, nodeid="tests/ops/test_x.py::test_y[real]", when="call", longreprtext="E boom"
    )
    pytest_runtest_logreport(report)  # no variable: nothing written anywhere
    assert not log.exists()
    monkeypatch.setenv("SEQZOO_FAILURE_LOG", str(log))
    pytest_runtest_logreport(SimpleNamespace(failed=False, nodeid="a::b", when="call", longreprtext=""))
    assert not log.exists()
    pytest_runtest_logreport(report)
    pytest_runtest_logreport(SimpleNamespace(**{**vars(report), "nodeid": "a::c", "longreprtext": "E second"}))
    text = log.read_text()
    assert "=== tests/ops/test_x.py::test_y[real] (call)\nE boom" in text
    assert text.index("E boom") < text.index("=== a::c (call)\nE second")
