"""``seqzoo/settings.py`` is the only reader of the environment, each setting validates its variable, and the docs'
table of variables is the one the module renders."""

import ast
from pathlib import Path

import pytest

import seqzoo
from seqzoo import settings
from seqzoo.errors import InputError

PACKAGE = Path(seqzoo.__file__).parent
DOC = PACKAGE.parent / "docs" / "getting-started.md"


def _copied_for_a_child(node: ast.AST, parent: ast.AST | None) -> bool:
    """``dict(os.environ, X=...)``, ``{**os.environ, ...}`` and ``os.environ.items()`` / ``.copy()`` copy the whole
    environment into a child process's: a pass-through, not a setting seqzoo reads."""
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "dict":
        return bool(parent.args) and parent.args[0] is node
    if isinstance(parent, ast.Dict):
        return any(k is None and v is node for k, v in zip(parent.keys, parent.values, strict=True))
    return isinstance(parent, ast.Attribute) and parent.attr in ("items", "copy")


def environment_reads(source: str) -> list[int]:
    """Line numbers where ``source`` reads an environment variable: ``os.environ`` (or a bare ``environ`` imported
    from os) anywhere but as an assignment target or a copy for a child process, and every ``getenv``."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            lines += [node.lineno for a in node.names if a.name in ("environ", "getenv", "environb", "getenvb")]
        is_environ = (isinstance(node, ast.Attribute) and node.attr in ("environ", "environb")) or (
            isinstance(node, ast.Name) and node.id in ("environ", "environb")
        )
        is_getenv = (isinstance(node, ast.Attribute) and node.attr in ("getenv", "getenvb")) or (
            isinstance(node, ast.Name) and node.id in ("getenv", "getenvb")
        )
        if is_getenv:
            lines.append(node.lineno)
        elif is_environ:
            parent = parents.get(node)
            written = isinstance(parent, ast.Subscript) and isinstance(parent.ctx, (ast.Store, ast.Del))
            if not written and not _copied_for_a_child(node, parent):
                lines.append(node.lineno)
    return lines


def test_only_the_settings_module_reads_the_environment():
    readers = []
    for f in sorted(PACKAGE.rglob("*.py")):
        if f == PACKAGE / "settings.py":
            continue
        readers += [f"{f.relative_to(PACKAGE.parent)}:{n}" for n in environment_reads(f.read_text())]
    assert not readers, "read the variable through seqzoo/settings.py instead:\n" + "\n".join(readers)


@pytest.mark.parametrize(
    "source",
    [
        "import os\nx = os.environ.get('A')",
        "import os\nx = os.environ['A']",
        "import os\nx = 'A' in os.environ",
        "import os\nx = os.getenv('A')",
        "from os import environ\nx = environ['A']",
        "from os import getenv\nx = getenv('A')",
        "import os\nfor k in os.environ:\n    pass",
    ],
)
def test_the_walk_finds_each_way_of_reading(source):
    assert environment_reads(source)


@pytest.mark.parametrize(
    "source",
    [
        "import os\nos.environ['OMP_NUM_THREADS'] = '1'",
        "import os\nenv = dict(os.environ, TRITON_INTERPRET='1')",
        "import os\nenv = {**os.environ, 'A': '1'}",
        "import os\nenv = {k: v for k, v in os.environ.items() if k != 'A'}",
    ],
)
def test_writes_and_copies_for_a_child_are_not_reads(source):
    assert environment_reads(source) == []


@pytest.mark.parametrize(
    ("variable", "read", "unset", "given", "expected"),
    [
        ("SEQZOO_KERNELS", settings.kernels, "auto", " Triton ", "triton"),
        ("SEQZOO_NATIVE", settings.native_enabled, True, "0", False),
        ("SEQZOO_AUTOTUNE", settings.autotune, "all", "first", "first"),
        ("SEQZOO_MALLOC", settings.malloc, "retain", "SYSTEM", "system"),
        ("TRITON_INTERPRET", settings.triton_interpret, False, "1", True),
        ("CC", settings.c_compiler, "cc", "clang", "clang"),
        ("SEQZOO_DATA", settings.data_dir, None, "/data/x", Path("/data/x")),
        ("RANK", settings.rank, 0, "3", 3),
        ("LOCAL_RANK", settings.local_rank, 0, "1", 1),
        ("WORLD_SIZE", settings.world_size, 1, "4", 4),
    ],
)
def test_each_setting_has_its_default_and_is_read_at_call_time(variable, read, unset, given, expected, monkeypatch):
    monkeypatch.delenv(variable, raising=False)
    assert read() == unset
    monkeypatch.setenv(variable, "")
    assert read() == unset  # empty is unset
    monkeypatch.setenv(variable, given)
    assert read() == expected


def test_cache_dir_default_and_override(monkeypatch, tmp_path):
    monkeypatch.delenv("SEQZOO_CACHE", raising=False)
    assert settings.cache_dir() == Path.home() / ".cache" / "seqzoo"
    monkeypatch.setenv("SEQZOO_CACHE", str(tmp_path))
    assert settings.cache_dir() == tmp_path


@pytest.mark.parametrize(
    ("variable", "read", "bad", "choices"),
    [
        ("SEQZOO_KERNELS", settings.kernels, "cuda", "auto, torch, triton"),
        ("SEQZOO_NATIVE", settings.native_enabled, "no", "1, 0"),
        ("SEQZOO_AUTOTUNE", settings.autotune, "fastest", "all, first"),
        ("SEQZOO_MALLOC", settings.malloc, "always", "retain, system"),
        ("WORLD_SIZE", settings.world_size, "0", "an int >= 1"),
        ("RANK", settings.rank, "two", "an int >= 0"),
    ],
)
def test_a_bad_value_names_the_variable_and_the_choices(variable, read, bad, choices, monkeypatch):
    monkeypatch.setenv(variable, bad)
    with pytest.raises(InputError) as err:
        read()
    assert variable in str(err.value) and repr(bad) in str(err.value)
    assert all(c in str(err.value) for c in choices.replace("an int ", "").split(", "))


def test_every_variable_read_is_documented():
    names = {v.name for v in settings.VARIABLES}
    calls = [n for n in ast.walk(ast.parse((PACKAGE / "settings.py").read_text())) if isinstance(n, ast.Call)]
    readers = [c for c in calls if isinstance(c.func, ast.Name) and c.func.id in ("_raw", "_choice", "_int")]
    read = {c.args[0].value for c in readers if isinstance(c.args[0], ast.Constant)}
    assert read == names


def test_the_docs_table_is_the_one_the_module_renders():
    assert settings.variables_table() in DOC.read_text(), (
        "regenerate the table of docs/getting-started.md: python -c 'from seqzoo import settings; "
        "print(settings.variables_table())'"
    )
