"""The documentation site (mkdocs.yml): its navigation, its includes and API names, and its getting-started code.

`mkdocs build --strict` in .ci/run is the full check (links, anchors, every API page rendered). These tests catch
the common breakages without mkdocs installed: a page missing from the navigation or a navigation entry without a
page, an include of a file that is gone, an API name that no longer exists, and a getting-started example that no
longer runs. The strict build itself runs here only where the ``docs`` extra is installed.
"""

import importlib
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

yaml = pytest.importorskip("yaml")

DOCS = REPO / "docs"
CONFIG = yaml.safe_load((REPO / "mkdocs.yml").read_text())
EXCLUDED = {line.strip() for line in CONFIG.get("exclude_docs", "").splitlines() if line.strip()}
GETTING_STARTED = (DOCS / "getting-started.md").read_text()
GETTING_STARTED_BLOCKS = re.findall(r"```(\w+)\n(.*?)```", GETTING_STARTED, re.S)
GETTING_STARTED_PYTHON = [code for lang, code in GETTING_STARTED_BLOCKS if lang == "python"]
GETTING_STARTED_COMMANDS = [
    line.split("#")[0].split()[1:]  # the arguments after `seqzoo`, without the comment
    for lang, code in GETTING_STARTED_BLOCKS
    if lang == "bash"
    for line in code.splitlines()
    if line.startswith("seqzoo ")
]

# one thread per example process: on a loaded machine two threads per process can make a run many times slower
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def nav_files(entries) -> list[str]:
    """Every page the navigation names, depth first, in order."""
    files = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        files.extend(nav_files(value) if isinstance(value, list) else [value])
    return files


def markdown_pages() -> set[str]:
    return {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")} - EXCLUDED


def api_references() -> list[tuple[str, list[str]]]:
    """(identifier, explicitly listed members) of every mkdocstrings ``::: name`` block in the docs."""
    refs = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text()
        for match in re.finditer(r"^::: ([\w.]+)\n((?:    .*\n)*)", text, re.M):
            members = re.search(r"members: \[(.*)\]", match.group(2))
            refs.append((match.group(1), [m.strip() for m in members.group(1).split(",")] if members else []))
    return refs


def resolve(identifier: str):
    """Import the longest module prefix of ``identifier``, then follow attributes: what mkdocstrings documents."""
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(identifier)


def test_every_page_is_in_the_navigation_and_every_entry_is_a_page():
    listed = nav_files(CONFIG["nav"])
    assert len(listed) == len(set(listed)), "a page is listed twice"
    assert not [f for f in listed if not (DOCS / f).is_file()], "navigation entries without a page"
    assert markdown_pages() - set(listed) == set(), "pages missing from the navigation"


def test_generated_tables_are_not_pages():
    # the full ahead-of-time compile table lives outside docs/ (benchmarks/aot/); the site shows its summary
    assert not [p.name for p in DOCS.iterdir() if p.suffix == ".csv" or p.name.startswith("kernels_compile_table")]
    assert (REPO / "benchmarks" / "aot" / "compile_table.csv").is_file()
    assert not EXCLUDED & set(nav_files(CONFIG["nav"]))


def test_the_required_pages_are_in_the_navigation():
    listed = set(nav_files(CONFIG["nav"]))
    families = {"gateloop.md", "orchid.md", "rmt.md", "xlstm.md", "griffin.md"}
    assert {"index.md", "getting-started.md", "zoo.md", "benchmarks.md", "convert.md", "hf.md"} | families <= listed
    assert "contributing.md" in listed and any(f.startswith("api/") for f in listed)


def test_included_files_exist():
    # pages that show a repository file (CONTRIBUTING.md, ARCHITECTURE.md) include it with pymdownx.snippets
    includes = [m for page in DOCS.rglob("*.md") for m in re.findall(r'^--8<-- "(.+)"$', page.read_text(), re.M)]
    assert "CONTRIBUTING.md" in includes
    assert [name for name in includes if not (REPO / name).is_file()] == []


def test_api_pages_name_existing_objects():
    refs = api_references()
    named = {ident for ident, _ in refs}
    assert {"seqzoo.build_mixer", "seqzoo.build_model", "seqzoo.ModelConfig", "seqzoo.LanguageModel"} <= named
    assert {"seqzoo.MIXERS", "seqzoo.train.TrainConfig", "seqzoo.train.train", "seqzoo.tasks.build_task"} <= named
    assert "seqzoo.errors.InputError" in named
    members_named = {f"{ident}.{member}" for ident, members in refs for member in members}
    entry_points = ["mlstm.mlstm", "slstm.slstm", "gateloop.gateloop", "rglru.rglru", "causal_conv.causal_conv1d"]
    assert {f"seqzoo.ops.{op}" for op in [*entry_points, "fftconv.fftconv"]} <= members_named
    for ident, members in refs:
        obj = resolve(ident)
        for member in members:
            assert hasattr(obj, member), f"{ident} has no {member}"


@pytest.mark.parametrize("i", range(len(GETTING_STARTED_PYTHON)))
def test_getting_started_python_block_runs(i, tmp_path):
    # each block writes under its own folder, so a run folder left in /tmp by an earlier run cannot change it
    code = GETTING_STARTED_PYTHON[i].replace('"/tmp/', f'"{tmp_path}/')
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=ONE_THREAD)
    assert res.returncode == 0, res.stderr[-2000:]


def run_seqzoo(args: list[str], cwd) -> None:
    extra = ["--no-progress"] if args[0] in ("train", "bench") else []
    res = subprocess.run(
        [sys.executable, "-m", "seqzoo", *args, *extra], cwd=cwd, capture_output=True, text=True, env=ONE_THREAD
    )
    assert res.returncode == 0, f"{args}\n{res.stderr[-2000:]}"


def test_getting_started_commands_run_in_order(tmp_path):
    # in one fresh folder, in the page's order: eval reads the run that train wrote
    assert [args[0] for args in GETTING_STARTED_COMMANDS] == ["list", "train", "eval", "bench"]
    for args in GETTING_STARTED_COMMANDS[:3]:
        run_seqzoo(args, tmp_path)


@pytest.mark.slow  # about 15 s of CPU: attention and the two mixers at two lengths, each point in its own process
def test_getting_started_bench_runs(tmp_path):
    run_seqzoo(GETTING_STARTED_COMMANDS[3], tmp_path)


def test_ci_builds_the_site_strictly_after_the_tests():
    ci = (REPO / ".ci" / "run").read_text()
    assert "mkdocs build --strict" in ci
    assert ci.index("python -m pytest") < ci.index("mkdocs build --strict")
    assert "/site/" in (REPO / ".gitignore").read_text().splitlines()


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip(
        "mkdocstrings_handlers.python", reason="the docs extra is not installed: pip install -e .[docs]"
    )
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # no end-of-life banner in the output,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "seqzoo" / "index.html").is_file()
