"""seqzoo's naming scheme for its public API, and the renamed keys that saved configurations may still hold.

The scheme (CONTRIBUTING.md "Naming"): ``n_heads`` (number of heads), ``n_blocks`` (number of blocks),
``chunk_size`` (chunk length), ``conv_size`` (width of a mixer's short convolution), ``state`` (the initial /
carried state), ``mode`` (the algorithm: a mixer's
``modes``, an op's ``MODES``; ``<what>_mode`` for the mode of an inner op, e.g. GateLoop's ``scan_mode``), and an
op's entry point named after the op (``mlstm``, ``gateloop``, ...), its implementations ``<op>_<mode>``.

``upgrade_mixer_kwargs`` maps the keys of configurations written before the rename (``config.json`` files,
presets' overrides, ``build_mixer`` calls) to the new names with a ``FutureWarning`` naming old -> new key.
"""

from __future__ import annotations

import warnings
from typing import Any

from .errors import InputError

# mixer constructor arguments renamed by the naming scheme: old -> new, for every mixer or for one mixer
RENAMED_MIXER_KEYS: dict[str, str] = {"num_heads": "n_heads", "num_blocks": "n_blocks"}
RENAMED_MIXER_KEYS_BY_MIXER: dict[str, dict[str, str]] = {
    "gateloop": {"scan_impl": "scan_mode"},
    "mlstm": {"conv_kernel": "conv_size"},
    "slstm": {"impl": "cell_mode", "conv_kernel": "conv_size"},
    "rglru": {"conv_width": "conv_size"},
    "orchid": {"short_kernel": "conv_size"},
}
# preset builders' keyword arguments renamed by the scheme: builder -> old -> new
RENAMED_PRESET_KEYS: dict[str, dict[str, str]] = {"xlstm_config": {"conv_kernel": "conv_size"}}


def renamed_keys(mixer: str) -> dict[str, str]:
    """Old -> new constructor argument names of ``mixer``."""
    return {**RENAMED_MIXER_KEYS, **RENAMED_MIXER_KEYS_BY_MIXER.get(mixer, {})}


def upgrade_kwargs(mixer: str, kwargs: dict[str, Any], where: str) -> dict[str, Any]:
    """``kwargs`` of ``mixer`` with renamed keys replaced by their new names; a ``FutureWarning`` per old key.

    Both the old and the new name of one argument is an ``InputError`` (which one would win is not clear)."""
    return rename_keys(renamed_keys(mixer), kwargs, where, stacklevel=5)


def rename_keys(table: dict[str, str], kwargs: dict[str, Any], where: str, stacklevel: int = 3) -> dict[str, Any]:
    """``kwargs`` with the old keys of ``table`` (old -> new) renamed, as ``upgrade_kwargs``; the warning points
    ``stacklevel`` frames up (3: the caller of the function that calls this one)."""
    old = [k for k in kwargs if k in table]
    if not old:
        return kwargs
    out = dict(kwargs)
    for key in old:
        new = table[key]
        if new in kwargs:
            raise InputError(f"{where}: both {key!r} (the old name) and {new!r} are given; keep only {new!r}")
        warnings.warn(
            f"{where}: key {key!r} is deprecated, renamed to {new!r} (seqzoo naming scheme, CONTRIBUTING.md); "
            "it is read as the new key, and a config saved again is written with it",
            FutureWarning,
            stacklevel=stacklevel,
        )
        out[new] = out.pop(key)
    return out


def upgrade_mixer_kwargs(mixer_kwargs: Any, where: str = "ModelConfig.mixer_kwargs") -> Any:
    """``ModelConfig.mixer_kwargs`` (mixer name -> constructor arguments) with renamed keys upgraded."""
    if not isinstance(mixer_kwargs, dict):
        return mixer_kwargs  # ModelConfig's validation refuses it by name
    return {
        name: upgrade_kwargs(name, kw, f"{where}[{name!r}]") if isinstance(kw, dict) else kw
        for name, kw in mixer_kwargs.items()
    }
