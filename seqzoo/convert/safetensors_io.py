"""Lazy reading and shard-by-shard writing of safetensors checkpoints (single file or sharded with an index).

A checkpoint folder holds either ``model.safetensors`` or shards ``model-0000i-of-0000N.safetensors`` listed in
``model.safetensors.index.json`` (``{"metadata": {"total_size": ...}, "weight_map": {name: shard}}``), the layout
transformers and seqzoo both write. ``CheckpointReader`` opens the files with ``safetensors.safe_open``
(memory-mapped) and materialises one tensor per ``get``; ``ShardedWriter`` buffers tensors until a shard is full
and writes it, so a conversion holds about one shard plus one tensor, never the whole model.

Both count bytes (``CheckpointReader.peak_live_bytes``: the most bytes of tensors it handed out that were alive at
once; ``ShardedWriter.peak_pending_bytes``: the largest buffered shard) so tests can check that memory stays
bounded without timing anything.
"""

from __future__ import annotations

import json
import os
import weakref
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..errors import InputError

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
DEFAULT_SHARD_BYTES = 2 * 1024**3


def parse_size(text: str | int) -> int:
    """``"2GB"`` / ``"500MB"`` / ``"64KiB"`` / ``12345`` -> bytes (decimal units, ``i`` for binary)."""
    if isinstance(text, int):
        value = text
    else:
        s = str(text).strip().upper().replace(" ", "")
        units = {"KIB": 1024, "MIB": 1024**2, "GIB": 1024**3, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "B": 1}
        value = None
        for unit, mult in units.items():
            if s.endswith(unit):
                try:
                    value = int(float(s[: -len(unit)]) * mult)
                except ValueError:
                    value = None
                break
        else:
            value = int(s) if s.isdigit() else None
        if value is None:
            raise InputError(f"--max-shard-size must be a size like 2GB, 500MB or 64KiB, got {text!r}")
    if value <= 0:
        raise InputError(f"--max-shard-size must be positive, got {text!r}")
    return value


class CheckpointReader:
    """Memory-mapped access to the tensors of a checkpoint folder, one tensor at a time."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        index, single = self.folder / INDEX, self.folder / SINGLE
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise InputError(f"{index} is not a safetensors index (needs a 'weight_map'): {e}") from None
            for shard in sorted(set(weight_map.values())):
                if not (self.folder / shard).is_file():
                    raise InputError(f"missing shard {shard!r}: {index.name} lists it but {self.folder} lacks it")
            self.weight_map: dict[str, str] = dict(weight_map)
        elif single.is_file():
            with safe_open(str(single), framework="pt") as f:
                self.weight_map = dict.fromkeys(f.keys(), SINGLE)  # noqa: SIM118 (safe_open has no __iter__)
        else:
            raise InputError(f"{self.folder} holds no weights: expected {SINGLE} or {INDEX} with its shards")
        self._handles: dict[str, object] = {}
        self.live_bytes = 0
        self.peak_live_bytes = 0
        self.bytes_read = 0

    def keys(self) -> list[str]:
        return list(self.weight_map)

    def __contains__(self, key: str) -> bool:
        return key in self.weight_map

    def _handle(self, key: str):
        shard = self.weight_map[key]
        if shard not in self._handles:
            self._handles[shard] = safe_open(str(self.folder / shard), framework="pt")
        return self._handles[shard]

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._handle(key).get_slice(key).get_shape())

    def get(self, key: str) -> torch.Tensor:
        if key not in self.weight_map:
            raise InputError(f"tensor {key!r} is not in the checkpoint {self.folder}")
        t = self._handle(key).get_tensor(key)
        n = t.numel() * t.element_size()
        self.bytes_read += n
        self.live_bytes += n
        self.peak_live_bytes = max(self.peak_live_bytes, self.live_bytes)
        weakref.finalize(t, self._release, n)  # counts bytes still referenced by the caller
        return t

    def _release(self, n: int) -> None:
        self.live_bytes -= n

    def close(self) -> None:
        self._handles.clear()


class ShardedWriter:
    """Collect tensors and write them in shards of at most ``max_shard_bytes`` (a bigger tensor gets its own).

    ``close()`` names the result like transformers: one shard becomes ``model.safetensors``; several become
    ``model-0000i-of-0000N.safetensors`` plus ``model.safetensors.index.json``. Stale weight files of an
    earlier conversion in the same folder are removed first, so shards of two runs never mix.
    """

    def __init__(self, folder: str | Path, max_shard_bytes: int = DEFAULT_SHARD_BYTES, metadata=None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        for old in list(self.folder.glob("model*.safetensors")) + [self.folder / INDEX]:
            if old.is_file():
                old.unlink()
        self.max_shard_bytes = max_shard_bytes
        self.metadata = {"format": "pt", **(metadata or {})}
        self._pending: dict[str, torch.Tensor] = {}
        self._pending_bytes = 0
        self.peak_pending_bytes = 0
        self._shards: list[tuple[Path, list[str]]] = []
        self.total_bytes = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        if name in self._pending or any(name in names for _, names in self._shards):
            raise InputError(f"tensor {name!r} written twice")
        n = tensor.numel() * tensor.element_size()
        if self._pending and self._pending_bytes + n > self.max_shard_bytes:
            self.flush()
        self._pending[name] = tensor.detach().to("cpu").contiguous()
        self._pending_bytes += n
        self.total_bytes += n
        self.peak_pending_bytes = max(self.peak_pending_bytes, self._pending_bytes)

    def flush(self) -> None:
        if not self._pending:
            return
        path = self.folder / f".partial-{len(self._shards):05d}.safetensors"
        save_file(self._pending, str(path), metadata=self.metadata)
        self._shards.append((path, list(self._pending)))
        self._pending, self._pending_bytes = {}, 0

    def close(self) -> list[Path]:
        self.flush()
        n = len(self._shards)
        if n == 0:
            raise InputError("no tensors were written")
        if n == 1:
            final = self.folder / SINGLE
            os.replace(self._shards[0][0], final)
            return [final]
        weight_map, out = {}, []
        for i, (path, names) in enumerate(self._shards):
            final = self.folder / f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            os.replace(path, final)
            out.append(final)
            weight_map.update(dict.fromkeys(names, final.name))
        index = {"metadata": {"total_size": self.total_bytes}, "weight_map": dict(sorted(weight_map.items()))}
        (self.folder / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        return out
