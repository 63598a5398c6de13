"""The naming scheme of the public API (CONTRIBUTING.md "Naming", seqzoo/naming.py).

Walks every registered mixer's constructor and ``forward``, every op's exported functions and the public
functions of every module of an op package (``triton.py``, ``naive.py``, ``bench.py``, ...), ``ModelConfig``'s
fields, the preset builders and every preset's ``mixer_kwargs``, and every CLI flag, and fails on a name outside
the scheme (the banned-alias table below). Old ``config.json`` keys still load, with a ``FutureWarning`` naming
old -> new key, and give the same model.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import pkgutil

import pytest
import torch

import seqzoo.models.presets as presets_pkg
from seqzoo.errors import InputError
from seqzoo.mixers import MIXERS, build_mixer
from seqzoo.models.config import ModelConfig
from seqzoo.models.presets import PRESETS

# name outside the scheme -> the scheme's word. A name is refused when it is a key here or ends in "_<key>"
# (``scan_impl``, ``mlstm_heads``) without ending in the scheme's word (``mlstm_n_heads`` is fine).
BANNED = {
    "num_heads": "n_heads",
    "nheads": "n_heads",
    "n_head": "n_heads",
    "heads": "n_heads",
    "num_blocks": "n_blocks",
    "nblocks": "n_blocks",
    "chunk": "chunk_size",
    "chunk_len": "chunk_size",
    "chunk_length": "chunk_size",
    "chunksize": "chunk_size",
    "h0": "state",
    "init_state": "state",
    "initial_state": "state",
    "state0": "state",
    "impl": "mode",
    "impls": "modes",
    "implementation": "mode",
    "algorithm": "mode",
    "conv_kernel": "conv_size",
    "conv_width": "conv_size",
    "short_kernel": "conv_size",
    "kernel_size": "conv_size",
}
ALLOWED = {"n_kv_heads"}  # a different quantity (key/value heads of multi-query attention)

# op package -> its entry points (``<op>(..., state=..., mode="auto")``); chunked ops also take ``chunk_size``
OPS = {
    "causal_conv": ("causal_conv1d",),
    "fftconv": ("fftconv", "spectral_conv"),
    "gateloop": ("gateloop",),
    "mlstm": ("mlstm",),
    "rglru": ("rglru", "linear_scan"),
    "slstm": ("slstm",),
}
STATELESS = {"fftconv", "spectral_conv"}
CHUNKED = {"gateloop", "mlstm", "rglru", "linear_scan"}


def outside_scheme(name: str) -> str | None:
    """The scheme's word for ``name`` when ``name`` is outside the scheme, else None."""
    if name in ALLOWED:
        return None
    if name in BANNED:
        return BANNED[name]
    for old, new in BANNED.items():
        if name.endswith("_" + old) and not name.endswith(new):
            return name[: -len(old)] + new
    return None


def params(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]


def violations(where_names: list[tuple[str, str]]) -> list[str]:
    return [f"{where}: {name!r} -> {outside_scheme(name)!r}" for where, name in where_names if outside_scheme(name)]


def op_functions():
    """Every op's exported functions, and the public (no leading ``_``) Python functions defined in each module of
    its package: the unexported implementations ``<op>_triton`` / ``<op>_naive``, scans, benchmark helpers."""
    for op in OPS:
        module = importlib.import_module(f"seqzoo.ops.{op}")
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                yield op, name, obj
        for info in pkgutil.iter_modules(module.__path__):
            sub = importlib.import_module(f"seqzoo.ops.{op}.{info.name}")
            for name, fn in inspect.getmembers(sub, inspect.isfunction):
                if fn.__module__ == sub.__name__ and not name.startswith("_"):
                    yield f"{op}.{info.name}", name, fn


def test_the_op_walk_reaches_the_unexported_triton_entry_points():
    walked = {(op, name) for op, name, _ in op_functions()}
    for op, name in [("rglru.triton", "linear_scan_triton"), ("rglru.triton", "rglru_fused_triton"),
                     ("mlstm.triton", "mlstm_triton"), ("gateloop.triton", "gateloop_triton"),
                     ("causal_conv.triton", "causal_conv1d_triton"), ("gateloop.scan", "scan_two_level")]:  # fmt: skip
        assert (op, name) in walked, (op, name)


def cli_flags(parser: argparse.ArgumentParser, prefix: str = "seqzoo"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from cli_flags(sub, f"{prefix} {sub_name}")
        for opt in action.option_strings:
            if opt.startswith("--"):
                yield f"{prefix} {opt}", opt[2:].replace("-", "_")


# ------------------------------------------------------------------------------------------------ the checker
def test_checker_refuses_the_old_names():
    """The check can fail: every name the scheme replaced is refused, with the new word."""
    old = {
        "num_heads": "n_heads",
        "num_blocks": "n_blocks",
        "chunk": "chunk_size",
        "h0": "state",
        "impl": "mode",
        "scan_impl": "scan_mode",
        "slstm_impl": "slstm_mode",
        "mlstm_heads": "mlstm_n_heads",
        "slstm_heads": "slstm_n_heads",
        "impls": "modes",
        "conv_kernel": "conv_size",
        "conv_width": "conv_size",
        "short_kernel": "conv_size",
    }
    for name, new in old.items():
        assert outside_scheme(name) == new, name
    scheme = (
        "n_heads",
        "n_kv_heads",
        "mlstm_n_heads",
        "chunk_size",
        "state",
        "mode",
        "scan_mode",
        "modes",
        "conv_size",
    )
    for name in scheme:
        assert outside_scheme(name) is None, name

    def old_op(q, k, v, h0=None, impl="auto", chunk=64, num_heads=4):
        return q

    assert len(violations([("old_op", p) for p in params(old_op)])) == 4


# ------------------------------------------------------------------------------------------------ the code
@pytest.mark.parametrize("name", sorted(MIXERS))
def test_mixer_signatures(name):
    cls = MIXERS[name]
    found = [(f"{name}.__init__", p) for p in params(cls.__init__)]
    found += [(f"{name}.forward", p) for p in params(cls.forward)]
    found += [(f"{name}.test_kwargs", k) for k in cls.test_kwargs]
    assert not violations(found)


def test_op_entry_points():
    """Each op: entry points named after it taking ``state``, ``mode="auto"`` and (chunked) ``chunk_size``,
    a ``MODES`` tuple starting with "auto", no ``IMPLS``, no ``<op>_op``; every exported function's parameters
    are in the scheme."""
    found, problems = [], []
    for op, entries in OPS.items():
        module = importlib.import_module(f"seqzoo.ops.{op}")
        if getattr(module, "MODES", ("",))[0] != "auto" or hasattr(module, "IMPLS"):
            problems.append(f"seqzoo.ops.{op}: needs MODES = ('auto', ...) and no IMPLS")
        for entry in entries:
            sig = inspect.signature(getattr(module, entry))
            if sig.parameters.get("mode") is None or sig.parameters["mode"].default != "auto":
                problems.append(f"{op}.{entry}: no mode='auto' parameter")
            if entry not in STATELESS and "state" not in sig.parameters:
                problems.append(f"{op}.{entry}: no state parameter")
            if entry in CHUNKED and "chunk_size" not in sig.parameters:
                problems.append(f"{op}.{entry}: no chunk_size parameter")
    for op, name, fn in op_functions():
        if name.endswith("_op"):
            problems.append(f"seqzoo.ops.{op}.{name}: entry points are named after the op, without _op")
        found += [(f"seqzoo.ops.{op}.{name}", p) for p in params(fn)]
    from seqzoo.ops import rope

    found += [(f"seqzoo.ops.rope.{n}", p) for n, f in inspect.getmembers(rope, inspect.isfunction) for p in params(f)]
    assert not problems + violations(found)


def test_model_config_fields_and_presets():
    found = [("ModelConfig", f.name) for f in __import__("dataclasses").fields(ModelConfig)]
    for info in pkgutil.iter_modules(presets_pkg.__path__):
        module = importlib.import_module(f"seqzoo.models.presets.{info.name}")
        for fname, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__:
                found += [(f"presets.{info.name}.{fname}", p) for p in params(fn)]
    for name, preset in PRESETS.items():
        cfg = preset.make()
        for mixer, kwargs in cfg.mixer_kwargs.items():
            found += [(f"preset {name}: mixer_kwargs[{mixer!r}]", k) for k in kwargs]
    assert not violations(found)


def test_cli_flags():
    from seqzoo.cli import make_parser

    flags = list(cli_flags(make_parser()))
    assert len(flags) > 20  # the walk reached the subcommands
    assert not violations(flags)


# ------------------------------------------------------------------------------------------------ old configs
OLD_KEYS = {
    "mlstm": {"n_heads": "num_heads", "n_blocks": "num_blocks", "conv_size": "conv_kernel"},
    "slstm": {"n_heads": "num_heads", "cell_mode": "impl", "conv_size": "conv_kernel"},
}


def _tiny_xlstm():
    from seqzoo import LanguageModel
    from seqzoo.models.presets.xlstm import xlstm_config

    torch.manual_seed(0)
    cfg = xlstm_config(32, 2, [1], vocab_size=32, mlstm_n_heads=2, slstm_n_heads=2, chunk_size=16, conv_size=3)
    return LanguageModel(cfg).eval()


def test_old_config_json_loads_with_a_warning_and_gives_the_same_model(tmp_path):
    """A config.json written with the old keys (num_heads, num_blocks, conv_kernel, the sLSTM's impl) loads: each old key
    gives a FutureWarning naming old -> new, the config holds the new keys, and the model is the same."""
    from seqzoo.models.base import SeqzooModel

    model = _tiny_xlstm()
    model.save_pretrained(tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    for mixer, renames in OLD_KEYS.items():
        kw = meta["mixer_kwargs"][mixer]
        for new, old in renames.items():
            kw[old] = kw.pop(new)
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.warns(FutureWarning) as record:
        loaded = SeqzooModel.from_pretrained(tmp_path)
    messages = [str(r.message) for r in record if issubclass(r.category, FutureWarning)]
    for mixer, renames in OLD_KEYS.items():
        for new, old in renames.items():
            assert any(f"[{mixer!r}]: key {old!r} is deprecated, renamed to {new!r}" in m for m in messages), (
                old,
                messages,
            )
    assert loaded.config == model.config
    for (name, p), q in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(p, q), name
    ids = torch.randint(0, 32, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)


def test_old_keys_in_build_mixer_and_model_config():
    with pytest.warns(FutureWarning, match="'scan_impl' is deprecated, renamed to 'scan_mode'"):
        m = build_mixer("gateloop", d_model=8, n_heads=2, scan_impl="two_level")
    assert m.scan_mode == "two_level"
    with pytest.warns(FutureWarning, match=r"mixer_kwargs\['mlstm'\]: key 'num_heads' is deprecated"):
        cfg = ModelConfig(pattern=["mlstm"], mixer_kwargs={"mlstm": {"num_heads": 2}})
    assert cfg.mixer_kwargs == {"mlstm": {"n_heads": 2}}
    with pytest.raises(InputError, match="both 'num_heads' .* and 'n_heads'"):
        build_mixer("mlstm", d_model=32, num_heads=2, n_heads=4)


@pytest.mark.parametrize(
    "mixer, old, kwargs",
    [
        ("mlstm", "conv_kernel", {"n_heads": 2}),
        ("slstm", "conv_kernel", {"n_heads": 2}),
        ("rglru", "conv_width", {"d_rnn": 8, "n_blocks": 2}),
        ("orchid", "short_kernel", {"l_max": 16, "filter_width": 8}),
    ],
)
def test_old_short_conv_width_names(mixer, old, kwargs):
    """The three old names of the short-conv width load as ``conv_size`` (build_mixer and ModelConfig) and give the
    same mixer; both names at once is refused."""
    torch.manual_seed(0)
    new = build_mixer(mixer, d_model=16, conv_size=5, **kwargs)
    with pytest.warns(FutureWarning, match=f"'{old}' is deprecated, renamed to 'conv_size'"):
        torch.manual_seed(0)
        legacy = build_mixer(mixer, d_model=16, **{old: 5}, **kwargs)
    assert legacy.conv_size == new.conv_size == 5
    for (name, p), q in zip(new.state_dict().items(), legacy.state_dict().values()):
        assert torch.equal(p, q), name
    with pytest.warns(FutureWarning, match=f"key '{old}' is deprecated"):
        cfg = ModelConfig(pattern=[mixer], mixer_kwargs={mixer: {old: 5, **kwargs}})
    assert cfg.mixer_kwargs[mixer] == {"conv_size": 5, **kwargs}
    with pytest.raises(InputError, match=f"both '{old}' .* and 'conv_size'"):
        build_mixer(mixer, d_model=16, conv_size=3, **{old: 5}, **kwargs)


def test_old_conv_kernel_of_the_xlstm_preset_builder_sets_both_mixers():
    from seqzoo.models.presets.xlstm import xlstm_config

    args = dict(vocab_size=32, mlstm_n_heads=2, slstm_n_heads=2)
    with pytest.warns(FutureWarning, match="xlstm_config: key 'conv_kernel' is deprecated, renamed to 'conv_size'"):
        cfg = xlstm_config(32, 2, [1], conv_kernel=3, **args)
    assert cfg == xlstm_config(32, 2, [1], conv_size=3, **args)
    assert cfg.mixer_kwargs["mlstm"]["conv_size"] == cfg.mixer_kwargs["slstm"]["conv_size"] == 3
    with pytest.raises(InputError, match="both 'conv_kernel'"):
        xlstm_config(32, 2, [1], conv_kernel=3, conv_size=2, **args)


# ------------------------------------------------------------------------------------------------ the tests
def test_no_test_file_imports_another():
    """Shared fixtures live in helper modules (tests/helpers.py, tests/rmt_helpers.py), not in test files."""
    import ast
    from pathlib import Path

    tests = Path(__file__).parent
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.relative_to(tests)} imports {n}" for n in names if n.split(".")[-1].startswith("test_")]
    assert not found
