"""Tasks: synthetic (MQAR, memory horizon, ...) and real text. Modules here self-register in ``TASKS``."""

import importlib
import pkgutil

from .base import IGNORE_INDEX, TASKS, Task, build_task, register_task, split_seed

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_") and _info.name != "base":
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["IGNORE_INDEX", "TASKS", "Task", "build_task", "register_task", "split_seed"]
