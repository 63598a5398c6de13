"""Mixers pass their mode to the op and never decide how it runs: no mixer (``seqzoo/mixers/*.py``) calls a
``fits`` / ``unfit`` check, the kernels switch, the Triton availability checks, the C library builder or an op's
``choose_implementation``, compares a tensor's device type, nor imports ``seqzoo.kernels`` or
``ops/native_build.py``. That decision lives in each
op's dispatch (ARCHITECTURE.md, "Where an op's implementation is decided"); tests/test_op_dispatch.py tests it."""

import ast
from pathlib import Path

import pytest

import seqzoo

MIXERS = Path(seqzoo.__file__).parent / "mixers"

# what only an op's dispatch may call: the kernels switch and device checks (seqzoo/kernels/switch.py, device.py),
# the C library's availability (ops/native_build.py) and the dispatch itself
DECIDERS = {
    "want_triton",
    "kernel_verdict",
    "require_triton",
    "kernels_setting",
    "set_kernels",
    "use_kernels",
    "triton_unusable",
    "triton_available",
    "usable_on",
    "interpreting",
    "cpu_floats_for",
    "choose_implementation",
    "library",
    "unavailable",
}
FORBIDDEN_MODULES = ("kernels", "native_build")  # seqzoo.kernels[.*], seqzoo.ops.native_build


def _called_name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _is_device_type(node: ast.AST) -> bool:
    """``<tensor>.device.type``: a comparison of it picks a path by device (passing it on, as to autocast, does not)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "type"
        and isinstance(node.value, ast.Attribute)
        and (node.value.attr == "device")
    )


def decisions(source: str) -> list[str]:
    """Where ``source`` decides how an op runs: calls of a fits / unfit check or of a DECIDERS function, reads of
    ``is_cuda``, and imports of the kernels package or the C library builder (``line: what``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = _called_name(node)
            if name and (name in DECIDERS or name == "fits" or name.endswith(("_fits", "_unfit"))):
                found.append(f"{node.lineno}: calls {name}")
        elif isinstance(node, ast.Attribute) and node.attr == "is_cuda":
            found.append(f"{node.lineno}: reads is_cuda")
        elif isinstance(node, ast.Compare) and any(_is_device_type(e) for e in [node.left, *node.comparators]):
            found.append(f"{node.lineno}: compares a device type")
        elif isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".") + [a.name for a in node.names]
            if any(p in FORBIDDEN_MODULES for p in parts):
                found.append(f"{node.lineno}: imports {'.' * node.level}{node.module or ''}")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: imports {a.name}" for a in node.names if "kernels" in a.name.split(".")]
    return found


def test_no_mixer_decides_how_an_op_runs():
    found = [f"{f.name}:{d}" for f in sorted(MIXERS.glob("*.py")) for d in decisions(f.read_text())]
    assert not found, "pass the mode to the op and let its choose_implementation decide:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "from ..ops.mlstm import triton_fits\nuse = triton_fits(q, k, v, 64)",
        "from ..ops.gateloop.scores_native import fits\nok = fits(q, k, lam)",
        "from ..ops.mlstm.headwise import native_fits\nok = native_fits(x, w)",
        "from ..ops.causal_conv.native import native_unfit\nwhy = native_unfit(x)",
        "from ..ops import native_build\n",
        "from ..ops.native_build import NativeLibrary\n",
        "from ..kernels import want_triton\n",
        "from ..kernels.switch import kernels_setting\n",
        "import seqzoo.kernels\n",
        "fast = x.is_cuda and y",
        "if q.device.type == 'cpu' and T > 128:\n    pass",
        "ok = lib.library() is not None",
        "ok = native.unavailable() is None",
        "c = mlstm_ops.choose_implementation(q, k, v)",
        "with use_kernels('torch'):\n    pass",
    ],
)
def test_the_walk_finds_each_kind_of_decision(source):
    assert decisions(source)


def test_passing_the_mode_to_the_op_is_not_a_decision():
    source = (
        "from ..ops.mlstm import mlstm\n"
        "def _cell(self, q, k, v, i, f, mode):\n"
        "    with torch.autocast(device_type=q.device.type, enabled=False):\n"
        "        return mlstm(q, k, v, i, f, mode=mode, follow_switch=True)\n"
    )
    assert decisions(source) == []
