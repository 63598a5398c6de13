"""Imports run only down the layers (ARCHITECTURE.md): every ``seqzoo`` import in every module, the lazy ones inside
functions included, goes to a layer below the importing module's (or stays inside its own package), and no two
modules import each other, directly or around a cycle."""

import ast
from collections import defaultdict
from pathlib import Path

import seqzoo

PACKAGE = Path(seqzoo.__file__).parent

# top-level units of the package, bottom first; a unit imports only units of a lower number
LAYERS = {
    "errors": 0,
    "settings": 0.5,  # the one reader of the environment: above errors, below everything that reads a setting
    "naming": 1,
    "kernels": 1,  # what the Triton kernels of ops/ share (device checks, the switch, autotune pruning)
    "plots": 1,
    "overrides": 1,  # deep merge of configuration overrides
    "field_types": 1,  # dataclass fields checked against their annotations
    "outputs": 1,  # output folders checked before any work
    "cli_options": 1,  # the options every subcommand shares (--device, hidden aliases, help with defaults)
    "cli_logging": 1,  # -v / -q: the seqzoo loggers to stderr while a command runs
    "host_memory": 2,
    "ops": 2,
    "tasks": 2,
    "mixers": 3,
    "blocks": 4,
    "models": 5,
    "__init__": 6,  # the package root re-exports the builders of mixers and models
    "eval": 7,
    "parity": 7,
    "hf": 7,
    "convert": 8,
    "train": 8,
    "sweep": 9,
    "bench": 9,
    "experiments": 10,
    "cli": 11,
    "__main__": 12,
}


def _modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = list(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The seqzoo modules ``name`` imports anywhere in its file (module level or inside a function)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = base + (node.module.split(".") if node.module else [])
            if not target or target[0] != "seqzoo":
                continue
            mod = ".".join(target)
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                found.add(f"{mod}.{alias.name}" if f"{mod}.{alias.name}" in modules else mod)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("seqzoo"):
                    found.add(alias.name if alias.name in modules else alias.name.rsplit(".", 1)[0])
    return found - {name}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_every_unit_has_a_layer():
    assert {_unit(m) for m in _modules()} <= set(LAYERS), sorted({_unit(m) for m in _modules()} - set(LAYERS))


def test_imports_run_only_down_the_layers():
    upward = []
    for name, targets in _graph().items():
        for target in targets:
            a, b = _unit(name), _unit(target)
            if a != b and LAYERS[b] >= LAYERS[a]:
                upward.append(f"{name} imports {target} ({a} is layer {LAYERS[a]}, {b} layer {LAYERS[b]})")
    assert not upward, "\n".join(sorted(upward))


def test_no_import_cycles():
    graph = _graph()
    # a package's __init__ re-exporting its own submodules is not a cycle with them
    edges = {m: {t for t in ts if not (m == t.rsplit(".", 1)[0] and t.startswith(m + "."))} for m, ts in graph.items()}
    colour: dict[str, int] = defaultdict(int)  # 0 new, 1 on the path, 2 done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        colour[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if colour[nxt] == 1:
                cycles.append(" -> ".join(path[path.index(nxt) :] + [node, nxt]) if nxt in path else f"{node} -> {nxt}")
            elif colour[nxt] == 0:
                visit(nxt, [*path, node])
        colour[node] = 2

    for m in sorted(edges):
        if colour[m] == 0:
            visit(m, [])
    assert not cycles, "\n".join(cycles)


def test_the_walk_sees_lazy_and_relative_imports():
    """The walk itself: a relative import inside a function, and `from pkg import module`, are both found."""
    graph = _graph()
    assert "seqzoo.ops.mlstm.triton" in graph["seqzoo.bench.aot"]  # lazy, inside a function
    assert "seqzoo.kernels.prune" in graph["seqzoo.bench.aot"]  # module level, relative
    assert "seqzoo.bench.aot" in graph["seqzoo.bench.aot_cli"]  # `from . import aot`
