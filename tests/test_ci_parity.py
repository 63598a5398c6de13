"""Live parity runs in CI: .ci/run installs the official packages after the README's commands and runs every test
marked ``parity`` against them, where a skip is a failure (tests/conftest.py: SEQZOO_PARITY_REQUIRED)."""

import ast
import os
import subprocess
import sys

from conftest import REPO

CI = (REPO / ".ci" / "run").read_text()
OFFICIAL = ("xlstm", "recurrentgemma", "mlstm_kernels")  # the parity extra and what xlstm brings (mlstm_kernels)
# calls in a test body that import an official package (and skip without it)
OFFICIAL_IMPORTERS = {"import_recurrentgemma_torch", "_require"}


def commands(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_ci_installs_the_official_packages_and_runs_the_parity_tests_strictly():
    lines = commands(CI)
    first_test = next(i for i, line in enumerate(lines) if "pytest" in line)
    assert "python3 -m venv .venv" in lines[first_test]  # the README's command comes first (tests/test_readme.py)
    parity = [line for line in lines[first_test + 1 :] if "-m parity" in line]
    assert len(parity) == 1, lines
    assert '".[test,parity]"' in parity[0]
    assert "SEQZOO_PARITY_REQUIRED=1" in parity[0]
    pyproject = (REPO / "pyproject.toml").read_text()
    parity_extra = next(line for line in pyproject.splitlines() if line.startswith("parity = "))
    assert "xlstm" in parity_extra and "recurrentgemma[torch]" in parity_extra


def _marked_parity(fn: ast.FunctionDef) -> bool:
    return any("parity" in ast.unparse(d) for d in fn.decorator_list)


def _imports_official(fn: ast.FunctionDef) -> bool:
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func).split(".")[-1]
        if name in OFFICIAL_IMPORTERS:
            return True
        if name == "importorskip" and node.args and isinstance(node.args[0], ast.Constant):
            if str(node.args[0].value).split(".")[0] in OFFICIAL:
                return True
    return False


def test_every_test_that_needs_an_official_package_is_marked_parity():
    # an unmarked one would skip in the main run and not run in the parity step either
    unmarked, live = [], 0
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and _imports_official(node):
                live += 1
                if not _marked_parity(node):
                    unmarked.append(f"{path.relative_to(REPO)}::{node.name}")
    assert live >= 8 and not unmarked, unmarked  # xlstm 4 functions, recurrentgemma 1, bench --suite official 3


def _run_live_xlstm_test(tmp_path, required: bool) -> subprocess.CompletedProcess:
    """One live xLSTM parity test in a fresh pytest, with an ``xlstm`` on the path that cannot be imported."""
    blocked = tmp_path / "blocked" / "xlstm"
    blocked.mkdir(parents=True, exist_ok=True)
    (blocked / "__init__.py").write_text("raise ModuleNotFoundError('xlstm blocked by the test', name='xlstm')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked.parent), str(REPO)])}
    env.pop("SEQZOO_PARITY_REQUIRED", None)
    if required:
        env["SEQZOO_PARITY_REQUIRED"] = "1"
    args = ["-m", "parity", "-k", "live_mlstm_layer", "-p", "no:cacheprovider", "tests/test_xlstm_parity.py"]
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=REPO, capture_output=True, text=True, env=env)


def test_a_parity_test_that_skips_fails_when_parity_is_required(tmp_path):
    relaxed = _run_live_xlstm_test(tmp_path, required=False)
    assert relaxed.returncode == 0 and "2 skipped" in relaxed.stdout, relaxed.stdout[-2000:]
    strict = _run_live_xlstm_test(tmp_path, required=True)
    assert strict.returncode == 1 and "2 failed" in strict.stdout, strict.stdout[-2000:]
    assert "parity test skipped with SEQZOO_PARITY_REQUIRED=1" in strict.stdout
