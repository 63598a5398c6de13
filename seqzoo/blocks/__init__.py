"""Blocks: norms, MLPs and the residual blocks that wrap a mixer.

Every module in this package is imported on load, so a family adds its block by adding a file
that uses ``@register_block``.
"""

import importlib
import pkgutil

from .mlp import MLP, MLPS, make_mlp
from .norms import NORMS, make_norm
from .residual import BLOCKS, ResidualBlock, register_block

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["BLOCKS", "MLP", "MLPS", "NORMS", "ResidualBlock", "make_mlp", "make_norm", "register_block"]
