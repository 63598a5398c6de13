"""Token mixers. Every module in this package registers its mixers in ``MIXERS`` on import.

Modules are discovered automatically, so adding a mixer means adding one file here.
"""

import importlib
import pkgutil

from .base import MIXERS, Mixer, build_mixer, collect_optim_overrides, register_mixer

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_") and _info.name != "base":
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["MIXERS", "Mixer", "build_mixer", "collect_optim_overrides", "register_mixer"]
