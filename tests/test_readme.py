"""Every code block of the README runs; the quick-start commands are exactly what CI runs."""

import os
import shlex
import subprocess
import sys

import pytest
from conftest import REPO, shared_dir
from doc_blocks import fenced_blocks, marked_need, python_blocks, run_python

BLOCKS = fenced_blocks(REPO / "README.md")
PYTHON = python_blocks(REPO / "README.md")
SEQZOO_LINES = [
    line.split("#")[0].strip()
    for lang, code in BLOCKS
    if lang == "bash"
    for line in code.splitlines()
    if line.startswith("seqzoo ")
]
QUICKSTART = [code.strip() for lang, code in BLOCKS if lang == "bash" and code.strip().startswith("python3 -m venv")]


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one():
    assert len(QUICKSTART) == 2
    main_job, tests = QUICKSTART
    assert "seqzoo zoo" in main_job and "pytest" in tests
    ci = (REPO / ".ci" / "run").read_text()
    assert tests in ci
    head = (REPO / "README.md").read_text().splitlines()[:15]  # a newcomer sees the set-up before anything else
    assert any(line.strip() == main_job for line in head) and any(line.strip() == tests for line in head)


@pytest.mark.parametrize("i", range(len(PYTHON)))
def test_python_block_runs(i, tmp_path):
    assert marked_need(PYTHON[i]) is None  # the README's examples all run, none is marked as needing a GPU
    res = run_python(PYTHON[i], tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]


def test_cli_examples_run_in_order(tmp_path):
    if shared_dir() is None:
        pytest.skip("the README's text example reads $SEQZOO_DATA: the data folder of ../shared or $SEQZOO_SHARED")
    data = str(shared_dir() / "data")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SEQZOO_DATA": data}
    for line in SEQZOO_LINES:
        line = line.replace("/tmp/", f"{tmp_path}/")  # one fresh folder per test run (the commands share it in order)
        args = shlex.split(line.replace("$SEQZOO_DATA", env["SEQZOO_DATA"]))[1:]  # as a shell would expand it
        res = subprocess.run(
            [sys.executable, "-m", "seqzoo", *args, *(["--no-progress"] if args[0] in ("train", "bench") else [])],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=env,
        )
        assert res.returncode == 0, f"{line}\n{res.stderr[-2000:]}"


@pytest.mark.slow
def test_main_job_default_runs(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "seqzoo", "zoo", "--out", str(tmp_path / "zoo"), "--no-progress"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "zoo" / "report.html").stat().st_size > 1000
    assert "| probe | setting | model |" in res.stdout
