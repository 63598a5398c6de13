"""Every Python block of docs/*.md runs as written (the README's run in tests/test_readme.py).

A block that needs what the tests cannot have (a GPU, a downloaded checkpoint) carries the visible marker of
tests/doc_blocks.py in its first line; it is then run anyway and must stop for exactly that reason, so the marker
cannot hide a block that is merely broken. Examples stay small so that these tests stay fast.
"""

import importlib.util
import re

import pytest
import torch
from conftest import REPO, shared_dir
from doc_blocks import NEEDS, NOT_RUN, marked_need, python_blocks, run_python

PAGES = sorted((REPO / "docs").glob("*.md"))
BLOCKS = [(page, i, code) for page in PAGES for i, code in enumerate(python_blocks(page))]
IDS = [f"{page.stem}-{i}" for page, i, _ in BLOCKS]
OPTIONAL = ("transformers", "peft")  # the test extra installs them; a reader's block may import them


def _env_for(code: str) -> dict:
    """Skip what this machine cannot offer to an unmarked block; the data folder when the block reads one."""
    for name in OPTIONAL:
        if re.search(rf"^\s*(from|import) {name}\b", code, flags=re.M) and importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    if "SEQZOO_DATA" not in code:
        return {}
    if shared_dir() is None:
        pytest.skip("the block reads $SEQZOO_DATA: the data folder of ../shared or $SEQZOO_SHARED")
    return {"SEQZOO_DATA": str(shared_dir() / "data")}


def test_every_page_with_code_has_python_blocks_found():
    assert len(BLOCKS) >= 8 and {"hf", "rmt", "xlstm", "gateloop"} <= {page.stem for page, _, _ in BLOCKS}


@pytest.mark.parametrize("page,i,code", BLOCKS, ids=IDS)
def test_python_block_runs(page, i, code, tmp_path):
    need = marked_need(code)
    if need is not None and not (need[0] == "a GPU" and torch.cuda.is_available()):
        pytest.skip(f"marked: needs {need[0]} (tested by test_marked_block_stops_for_its_reason)")
    res = run_python(code, tmp_path, _env_for(code))
    assert res.returncode == 0, f"{page.name} block {i}:\n{res.stderr[-3000:]}"


MARKED = [(page, i, code) for page, i, code in BLOCKS if marked_need(code) is not None]


def test_some_block_is_marked_so_the_marker_rules_are_exercised():
    assert MARKED


@pytest.mark.parametrize("page,i,code", MARKED, ids=[f"{p.stem}-{i}" for p, i, _ in MARKED])
def test_marked_block_stops_for_its_reason(page, i, code, tmp_path):
    need, detail = marked_need(code)
    assert need in NEEDS, f"{page.name} block {i}: the marker may only say: {sorted(NEEDS)}, not {need!r}"
    if need == "a GPU":
        assert "cuda" in code, f"{page.name} block {i} is marked as needing a GPU but never uses one"
        if torch.cuda.is_available():
            pytest.skip("a GPU is present: the block runs in test_python_block_runs")
    if need == "a downloaded checkpoint":
        assert detail and detail in code, f"{page.name} block {i}: the marker names the checkpoint the block loads"
        assert not (REPO / detail).exists()
    res = run_python(code, tmp_path, _env_for(code))
    assert res.returncode != 0, f"{page.name} block {i} runs here: remove its marker"
    assert NEEDS[need].search(res.stderr), f"{page.name} block {i} failed for another reason:\n{res.stderr[-3000:]}"
    if detail:
        assert detail in res.stderr, res.stderr[-3000:]


def test_the_marker_is_only_ever_a_first_line():
    for page in [REPO / "README.md", *PAGES]:
        for code in python_blocks(page):
            lines = code.splitlines()
            assert not any(NOT_RUN.strip() in line for line in lines[1:]), page.name
