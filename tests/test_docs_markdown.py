"""The docs pages render as written and state what is (issue #46).

Markdown: the site's renderer (Python-Markdown) reads a list that follows a paragraph line without a blank line as
text of that paragraph, and nests a list only when its items are indented by a multiple of four spaces; both
checks read the page text, so they run without mkdocs installed.

Narration: the pages say what the code does and what was measured, with the command and at most one "measured at
version X" line per table; how the work went (runs and sessions in order, commit hashes, what was tried) belongs
to CHANGELOG.md. Fenced code and ``code`` spans are left out of both narration checks: run keys and code versions
written there are names a reader can look up, not prose.
"""

import re

import pytest
from conftest import REPO

DOCS = REPO / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md"))

FENCE = re.compile(r"^\s*(```|~~~)")
LIST_ITEM = re.compile(r"^( *)(?:[-*+]|\d+[.)]) +\S")
HEADING = re.compile(r"^#{1,6} ")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    lines, in_fence = [], False
    for lineno, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append((lineno, line))
    return lines


def list_problems(text: str) -> list[tuple[int, str]]:
    """(line number, why) for each list item that Python-Markdown would not render as the list it looks like."""
    problems = []
    prev = ""
    block_is_list = False  # the block since the last blank line starts with a list item (so nests lists inside it)
    for lineno, line in prose_lines(text):
        item = LIST_ITEM.match(line)
        if not prev.strip():
            block_is_list = bool(item)
        if item:
            indent = len(item.group(1))
            if indent % 4:
                problems.append((lineno, f"nested by {indent} spaces, not a multiple of 4"))
            if prev.strip() and not block_is_list and not HEADING.match(prev):
                problems.append((lineno, "list item directly after a paragraph line (needs a blank line)"))
        prev = line
    return problems


# a hexadecimal word of 7-40 characters with at least one digit and one letter: a commit hash, not a number or a word
HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
CODE_SPAN = re.compile(r"`[^`\n]*`")
# how-the-work-went wording that has no place on a page that states what is
NARRATION = re.compile(
    r"\b(?:first|second|third|fourth|fifth|sixth|earlier|previous|later) (?:GPU )?(?:run|session)s?\b|"
    r"\bGPU session\b|\btried and not kept\b|\bthis session\b|\bstop \d+\b|\bthe old tree\b|\bas it was written then\b|"
    r"\bfor the record\b|\bmeasured again\b|\bre-measured\b|\ba worktree\b|\buncommitted tree\b",
    flags=re.I,
)


def narration_problems(text: str) -> list[tuple[int, str]]:
    """(line number, what) for each commit hash in prose and each narration phrase (a phrase broken across two lines
    is found on the first)."""
    lines = prose_lines(text)
    problems = []
    for i, (lineno, line) in enumerate(lines):
        prose = CODE_SPAN.sub("", line)
        problems += [(lineno, f"commit hash {m.group(0)}") for m in HASH.finditer(prose)]
        joined = prose + " " + (CODE_SPAN.sub("", lines[i + 1][1]).strip() if i + 1 < len(lines) else "")
        problems += [
            (lineno, f"narration {m.group(0)!r}") for m in NARRATION.finditer(joined) if m.start() < len(prose)
        ]
    return problems


@pytest.mark.parametrize(
    "text",
    [
        "Some text:\n- a\n- b\n",
        "**Bold.**\n1. a\n",
        "| a |\n|---|\n| 1 |\n- x\n",
        "- a\n  - b\n",
        "1. a\n   continued\n   - sub\n",
        "- a\n\n    a second paragraph of a\n- b\n",
    ],
)
def test_the_list_check_catches_lists_that_render_as_text(text):
    assert list_problems(text) != []


@pytest.mark.parametrize(
    "text",
    [
        "Some text:\n\n- a\n- b\n",
        "## Heading\n- a\n",
        "- a\n    - b\n- c\n",
        "1. a\n    continued\n    - sub\n2. b\n",
        "- a\n  continued\n- b\n",
        "- a\n\n- b\n\ntext\n",
        "```\ntext\n- not markdown\n```\n",
    ],
)
def test_the_list_check_allows_lists_that_render(text):
    assert list_problems(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "measured at commit 469e91b on the CPU",
        "The first run aborted.",
        "In the second GPU session the kernels",
        "Tried and not kept: a fused kernel",
        "the earlier\nrun took 5 s",
        "before (2b3e0ee), run 1",
    ],
)
def test_the_narration_check_catches_hashes_and_narration(text):
    assert narration_problems(text) != []


@pytest.mark.parametrize(
    "text",
    [
        "| 1500 | 0.0000089 | 1.000 |",
        "the runs of code version `0.1.0+bc39ba7e9e52`",
        "```\npython tools/probe.py runs/{fac0eec69a16,34136d40b5d5}\n```",
        "a decade of facade runs",
        "Measured at version 0.1.0 on one NVIDIA H200.",
    ],
)
def test_the_narration_check_allows_numbers_words_and_code(text):
    assert narration_problems(text) == [], narration_problems(text)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_lists_render_as_lists(page):
    found = [f"{page.name}:{n}: {why}" for n, why in list_problems(page.read_text())]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_pages_state_what_is(page):
    found = [f"{page.name}:{n}: {what}" for n, what in narration_problems(page.read_text())]
    assert not found, "\n".join(found)
