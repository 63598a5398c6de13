"""The docs pages render as written (issue #46).

Markdown: the site's renderer (Python-Markdown) reads a list that follows a paragraph line without a blank line as
text of that paragraph, and nests a list only when its items are indented by a multiple of four spaces; both
checks read the page text, so they run without mkdocs installed.
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


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_lists_render_as_lists(page):
    found = [f"{page.name}:{n}: {why}" for n, why in list_problems(page.read_text())]
    assert not found, "\n".join(found)
