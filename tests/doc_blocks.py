"""The fenced code blocks of the Markdown docs, and running a Python block as a reader would paste it.

Used by tests/test_readme.py (README.md) and tests/test_docs_examples.py (docs/*.md). A Python block that needs
what the tests cannot have says so in its first line, visibly: ``# not run by the tests: needs a GPU`` or
``# not run by the tests: needs a downloaded checkpoint: <path>``; tests/test_docs_examples.py checks that it does.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

FENCE = re.compile(r"```(\w*)\n(.*?)```", flags=re.S)
NOT_RUN = "# not run by the tests: needs "
# what a marked block may need, and the error it must then stop with where that is missing
NEEDS = {
    "a GPU": re.compile(r"CUDA|cuda"),
    "a downloaded checkpoint": re.compile(r"FileNotFoundError|MissingFileError|No such file|does not exist|not found"),
}


def fenced_blocks(path: Path) -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced block of a Markdown file, in order."""
    return FENCE.findall(path.read_text())


def python_blocks(path: Path) -> list[str]:
    return [code for lang, code in fenced_blocks(path) if lang == "python"]


def marked_need(code: str) -> tuple[str, str] | None:
    """``(need, detail)`` of a block whose first line is the not-run marker, else None."""
    first = code.splitlines()[0] if code.strip() else ""
    if not first.startswith(NOT_RUN):
        return None
    rest = first[len(NOT_RUN) :]
    need = next((n for n in NEEDS if rest.startswith(n)), rest)
    return need, rest[len(need) :].lstrip(": ").strip()


def run_python(code: str, tmp_path: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a block in a fresh interpreter inside ``tmp_path``, its ``"/tmp/...`` paths moved into ``tmp_path``, so
    that nothing an earlier run left there (an older run folder, a saved model) changes what the block does."""
    code = code.replace('"/tmp/', f'"{tmp_path}/')
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
