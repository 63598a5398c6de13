"""A run's key: 12 hex digits of SHA-256 over its run function, its whole resolved configuration and the code version.

The key names the run's folder (``<root>/runs/<key>/``), so an identical run is found done and a changed one trains
anew. It hashes ``fn``, ``config`` and the **code version**: the package version plus a SHA-256 of every source that
defines the computation (``COMPUTE_SUFFIXES``: Python, and the C files the CPU paths compile on first use): the
packages ``ops``, ``mixers``, ``blocks``, ``models``, ``tasks``, ``train``, ``eval``, ``kernels`` (the switch and
launch settings that pick which kernel runs), the standard run ``sweep/train_run.py`` (other run functions build on
it) and the file that defines ``fn``; a run whose model comes from a ``builder`` function also hashes that builder's
module. Plots, reports, docs and the CLI are left out (they do not change a number). We chose a source hash over
the git commit because a commit misses uncommitted edits (a run made from a modified tree would be filed under the
clean commit) and is absent in an installed package; the cost is that any edit of a computing file, even a
comment, reruns the sweep, which errs on the safe side.

A task that reads files (task arguments ``path``, ``test_path``, ``bpe_dir``: a file, a folder or a list of them)
also puts the SHA-256 of those files' names and bytes into the key (:func:`data_digest`), so an edited corpus at
the same path trains anew instead of reusing results of the old text.

Lives under ``train/`` beside :class:`~seqzoo.train.spec.RunSpec`, the one run schema whose method
:meth:`~seqzoo.train.spec.RunSpec.key` calls :func:`run_key`; run functions are named by ``"module:function"``
strings and imported by name, so nothing here imports a layer above.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]
COMPUTE_PACKAGES = ("ops", "mixers", "blocks", "models", "tasks", "train", "eval", "kernels")
# every kind of file whose edit can change a number: the C sources are the default CPU path of several ops (built on
# first use, ops/native_build.py), so hashing only the Python would file results of old C code as current
COMPUTE_SUFFIXES = (".py", ".c", ".h")


@functools.cache
def _tree_hash(root: Path = PACKAGE) -> str:
    """SHA-256 over the names and bytes of the computing sources under the package folder ``root``."""
    h = hashlib.sha256()
    for sub in COMPUTE_PACKAGES:
        files = (f for f in (root / sub).rglob("*") if f.suffix in COMPUTE_SUFFIXES and f.is_file())
        for path in sorted(files):
            h.update(str(path.relative_to(root).as_posix()).encode())
            h.update(path.read_bytes())
    h.update((root / "sweep" / "train_run.py").read_bytes())
    return h.hexdigest()


@functools.cache
def code_version(fn: str = "") -> str:
    """``<version>+<12 hex>``: the package version and the hash of the computing sources (and ``fn``'s file)."""
    from .. import __version__

    h = hashlib.sha256(_tree_hash().encode())
    if fn:
        mod = importlib.import_module(fn.split(":")[0])
        h.update(Path(mod.__file__).read_bytes())
    return f"{__version__}+{h.hexdigest()[:12]}"


DATA_ARGS = ("path", "test_path", "bpe_dir")  # task arguments that name files a run reads


def _files(arg: Any) -> list[Path]:
    if isinstance(arg, (list, tuple)):
        return [f for item in arg for f in _files(item)]
    p = Path(str(arg)).expanduser()
    if p.is_dir():
        return sorted(f for f in p.rglob("*") if f.is_file())
    return [p] if p.is_file() else []  # a missing path: the task itself refuses it with its own error


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    """SHA-256 of one file's bytes; cached by (path, size, mtime) so a sweep hashes each corpus once."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def data_digest(task: Any) -> str | None:
    """16 hex digits of SHA-256 over the names and contents of every file the task arguments ``DATA_ARGS`` name
    (folders: every file below them), or None for a task that reads no file."""
    if not isinstance(task, dict):
        return None
    files = [(name, f) for name in DATA_ARGS if task.get(name) for f in _files(task[name])]
    if not files:
        return None
    h = hashlib.sha256()
    for name, f in files:
        st = f.stat()
        h.update(f"{name}:{f.name}:{_file_digest(str(f.resolve()), st.st_size, st.st_mtime_ns)}\n".encode())
    return h.hexdigest()[:16]


@functools.cache
def _module_hash(module: str) -> str:
    """SHA-256 (12 hex) of a module's source file: a model builder outside the computing packages."""
    mod = importlib.import_module(module)
    return hashlib.sha256(Path(mod.__file__).read_bytes()).hexdigest()[:12]


def canonical(obj: Any) -> str:
    """One JSON text per configuration: sorted keys, tuples as lists, no whitespace."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=list)


def run_key(fn: str, config: dict[str, Any], code: str | None = None) -> str:
    """12 hex digits of SHA-256 over (fn, config, code version, the source of a model ``builder`` module the config
    names, the contents of the data files the task reads); ``code`` overrides the code version (tests)."""
    code = code_version(fn) if code is None else code
    model = config.get("model")
    builder = model.get("builder") if isinstance(model, dict) else None
    extra = {"builder_code": _module_hash(builder.split(":")[0])} if builder else {}
    data = data_digest(config.get("task"))
    if data:
        extra["data"] = data
    text = canonical({"fn": fn, "config": config, "code": code, **extra})
    return hashlib.sha256(text.encode()).hexdigest()[:12]
