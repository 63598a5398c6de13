"""The naming scheme of the public API (CONTRIBUTING.md "Naming", seqzoo/naming.py).

Walks every registered mixer's constructor and ``forward``, every op's exported functions, ``ModelConfig``'s
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
    for op in OPS:
        module = importlib.import_module(f"seqzoo.ops.{op}")
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                yield op, name, obj


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
    }
    for name, new in old.items():
        assert outside_scheme(name) == new, name
    for name in ("n_heads", "n_kv_heads", "mlstm_n_heads", "chunk_size", "state", "mode", "scan_mode", "modes"):
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
    "mlstm": {"n_heads": "num_heads", "n_blocks": "num_blocks"},
    "slstm": {"n_heads": "num_heads", "cell_mode": "impl"},
}


def _tiny_xlstm():
    from seqzoo import LanguageModel
    from seqzoo.models.presets.xlstm import xlstm_config

    torch.manual_seed(0)
    cfg = xlstm_config(32, 2, [1], vocab_size=32, mlstm_n_heads=2, slstm_n_heads=2, chunk_size=16)
    return LanguageModel(cfg).eval()


def test_old_config_json_loads_with_a_warning_and_gives_the_same_model(tmp_path):
    """A config.json written with the old keys (num_heads, num_blocks, the sLSTM's impl) loads: each old key
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
