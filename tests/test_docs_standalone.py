"""The repository stands alone: no doc, docstring or comment sends a reader to a file outside it.

Every tracked (or new, not ignored) ``.md`` and ``.py`` file is scanned for references to the planning notes
that were never part of the repository (the per-paper implementation notes, the design and anchor notes, the
README of the parity-fixture folder, and section references into those notes) and for absolute paths of one machine (``/work``, ``/root``, ``/home``).
Citations belong to papers (arXiv id and section) or to files in the repository; data and fixture paths are
arguments, environment variables or paths relative to the repository (``tests/conftest.py``).

Reading fixture *data* in tests through ``conftest.shared_dir()`` stays allowed: only the documents above and
absolute paths are refused. The patterns are spelled so that this file does not match itself.
"""

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# (label, pattern). Character classes such as [s]pec keep the literal names out of this file's own text.
FORBIDDEN = [
    ("planning note (spec folder)", re.compile(r"(?<![A-Za-z0-9_])[s]pec/")),
    ("planning note (design)", re.compile(r"(?<![A-Za-z0-9_])[d]esign\.md\b")),
    ("planning note (anchors)", re.compile(r"(?<![A-Za-z0-9_])[a]nchors\.md\b")),
    ("fixture folder README", re.compile(r"[f]ixtures/README")),
    ("planning note (section)", re.compile(r"(?<![A-Za-z0-9_])[Ss]pec (?:§|anchor)|\b[Tt]he [s]pec's\b")),
    ("absolute machine path", re.compile(r"(?<![A-Za-z0-9_.~])/(?:[w]ork|[r]oot|[h]ome)/")),
]
SKIP_PARTS = {".venv", "results", "runs", ".git", "build", "dist", "__pycache__"}


def repo_files() -> list[Path]:
    """Tracked plus untracked-but-not-ignored files from git; a plain walk when git is unavailable."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        names = [REPO / line for line in out.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):
        names = [p for p in REPO.rglob("*") if p.is_file()]
    return sorted(
        p
        for p in names
        if p.suffix in {".md", ".py"}
        and p.is_file()
        and not SKIP_PARTS.intersection(p.relative_to(REPO).parts)
        and not any(part.endswith(".egg-info") for part in p.relative_to(REPO).parts)
    )


def offending_lines(text: str) -> list[tuple[int, str, str]]:
    """(line number, label, line) for every forbidden reference in ``text``."""
    hits = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        for label, pattern in FORBIDDEN:
            if pattern.search(line):
                hits.append((lineno, label, line.strip()))
    return hits


def test_the_walk_sees_the_repository():
    names = {p.relative_to(REPO).as_posix() for p in repo_files()}
    assert {"README.md", "ARCHITECTURE.md", "seqzoo/__init__.py", "tests/conftest.py"} <= names
    assert not any(n.startswith(".venv/") for n in names)


@pytest.mark.parametrize(
    "planted",
    [
        "see " + "sp" + "ec/orchid.md §2",
        "the contract of " + "des" + "ign.md",
        "figures of " + "anc" + "hors.md §3",
        "as " + "sp" + "ec §5.2 says",
        "the " + "sp" + "ec's CPU setting",
        "read ../shared/" + "fix" + "tures/README.md",
        "default path " + "/wo" + "rk/shared/data",
        "cache in " + "/ro" + "ot/.cache/x",
        "python " + "/ho" + "me/user/seqzoo/x.py",
    ],
)
def test_the_check_catches_a_planted_reference(planted):
    assert offending_lines(f"ok line\n{planted}\n") != []


@pytest.mark.parametrize(
    "allowed",
    [
        "Orchid (Karami & Ghodsi, arXiv:2402.18508, §3.2)",
        "fixtures = shared_dir() / 'fixtures' / 'orchid'",
        "--set path=../shared/data/wikitext-2-raw/wiki.valid.raw",
        "the mixer contract (seqzoo/mixers/base.py)",
        "inspect.signature(fn)  # importlib.util.find_spec/",
        "out_dir='/tmp/seqzoo-run'",
        "spec = build_run_spec(args)  # the spec dict",
    ],
)
def test_the_check_allows_repository_and_paper_references(allowed):
    assert offending_lines(allowed) == []


def test_no_document_points_outside_the_repository():
    found = []
    for path in repo_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, label, line in offending_lines(text):
            found.append(f"{path.relative_to(REPO).as_posix()}:{lineno}: {label}: {line[:140]}")
    assert not found, "references outside the repository (cite a paper or a repository file):\n" + "\n".join(found)
