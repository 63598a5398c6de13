"""Small offline image classification: scikit-learn's 8x8 digits, Debian's Fashion-MNIST (CPU-sized stand-ins for Orchid's image classification, arXiv:2402.18508, §4.3).

Images are returned as integer gray levels flattened in raster order, ``inputs (N, H*W)`` LongTensor
(digits: 0..16, Fashion-MNIST: 0..255), with ``targets (N,)`` class ids (``kind = "cls"``);
``seqzoo.models.vision.VisionClassifier`` turns them into patches. Both sources are optional and imported
or read lazily: ``digits`` needs ``pip install scikit-learn`` (the CSV ships in the wheel), ``fashion-mnist``
the Debian package ``dataset-fashion-mnist`` (or ``path=`` to a folder with the four IDX gzip files).

Splits (disjoint): digits is split once, stratified with split seed 0, into ``test`` (20 %, 360 images) and the
rest, of which a stratified 10 % (144 images) is ``valid`` and the remaining 1,293 are ``train``; Fashion-MNIST uses
its own 60k/10k train/test split, with the last twelfth of the training images (5k of 60k) as ``valid``.
``build(n, seed, split)`` returns n rows drawn (with a seeded permutation, cycling if n exceeds the split).
"""

from __future__ import annotations

import gzip
import math
import struct
from functools import lru_cache
from pathlib import Path

import torch

from ..errors import InputError, MissingFileError
from .base import Task, register_task, split_seed

FASHION_DIRS = ("/usr/share/dataset-fashion-mnist", "/usr/share/fashion-mnist", "/usr/share/datasets/fashion-mnist")


def _digits():
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # optional dependency
        raise ImportError("the 'digits' task needs scikit-learn: pip install scikit-learn") from e
    return load_digits()


@lru_cache(maxsize=1)
def digits_split_indices() -> dict[str, torch.Tensor]:
    """Row indices of each digits split: stratified 20 % test, then 10 % of the rest valid (split seed 0)."""
    from sklearn.model_selection import train_test_split

    target = _digits().target
    rest, test = train_test_split(range(len(target)), test_size=0.2, stratify=target, random_state=0)
    train, valid = train_test_split(rest, test_size=0.1, stratify=target[rest], random_state=0)
    return {name: torch.as_tensor(idx) for name, idx in (("train", train), ("valid", valid), ("test", test))}


@lru_cache(maxsize=1)
def load_digits_split() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    d = _digits()
    x = torch.as_tensor(d.data, dtype=torch.long)  # (1797, 64) gray levels 0..16
    y = torch.as_tensor(d.target, dtype=torch.long)
    return {name: (x[idx], y[idx]) for name, idx in digits_split_indices().items()}


def _read_idx(path: Path) -> torch.Tensor:
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise InputError(f"{path} is not an unsigned-byte IDX file")
    shape = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    if len(data) - 4 - 4 * ndim != math.prod(shape):
        raise InputError(f"{path}: the IDX header says shape {shape}, the file holds {len(data) - 4 - 4 * ndim} bytes")
    return torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8).reshape(shape).long()


def find_fashion_mnist(path: str | Path | None = None) -> Path:
    cands = [Path(path)] if path else [Path(p) for p in FASHION_DIRS]
    for c in cands:
        if c.is_dir() and list(c.rglob("train-images-idx3-ubyte.gz")):
            return next(c.rglob("train-images-idx3-ubyte.gz")).parent
    raise MissingFileError(
        f"Fashion-MNIST IDX files not found in {[str(c) for c in cands]}; "
        "apt-get install dataset-fashion-mnist, or pass path="
    )


class _ImageTask(Task):
    kind = "cls"
    n_classes = 10

    def _splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        raise NotImplementedError

    def split_size(self, split: str) -> int:
        return self._splits()[split][0].shape[0]

    def build(self, n: int, seed: int, split: str = "train"):
        x, y = self._splits()[split]
        g = torch.Generator().manual_seed(split_seed(seed, split))
        reps = -(-n // x.shape[0])
        idx = torch.cat([torch.randperm(x.shape[0], generator=g) for _ in range(reps)])[:n]
        return x[idx], y[idx]


@register_task("digits")
class Digits(_ImageTask):
    """8x8 digits (1,797 images, 10 classes, gray levels 0..16); 64 pixel tokens in raster order."""

    image_size, channels, max_value = 8, 1, 16

    def __init__(self, train_size: int | None = None):
        self.vocab_size, self.seq_len = 17, 64
        self.train_size = train_size

    def config(self):
        return {"train_size": self.train_size}

    def _splits(self):
        return load_digits_split()


@register_task("fashion-mnist")
class FashionMNIST(_ImageTask):
    """28x28 Fashion-MNIST (60k train / 10k test, 10 classes, gray levels 0..255), 784 pixels in raster order."""

    image_size, channels, max_value = 28, 1, 255

    def __init__(self, path: str | None = None, train_size: int | None = None):
        self.path, self.train_size = path, train_size
        self.vocab_size, self.seq_len = 256, 784
        self._cache = None

    def config(self):
        return {"path": self.path, "train_size": self.train_size}

    def _splits(self):
        if self._cache is None:
            d = find_fashion_mnist(self.path)
            xtr = _read_idx(d / "train-images-idx3-ubyte.gz").reshape(-1, 784)
            ytr = _read_idx(d / "train-labels-idx1-ubyte.gz")
            xte = _read_idx(d / "t10k-images-idx3-ubyte.gz").reshape(-1, 784)
            yte = _read_idx(d / "t10k-labels-idx1-ubyte.gz")
            for images, labels, kind in ((xtr, ytr, "train"), (xte, yte, "t10k")):
                if images.shape[0] != labels.shape[0]:
                    raise InputError(f"{d}: {images.shape[0]} {kind} images but {labels.shape[0]} labels")
            n_train = xtr.shape[0] - xtr.shape[0] // 12  # 55k of the official 60k
            self._cache = {
                "train": (xtr[:n_train], ytr[:n_train]),
                "valid": (xtr[n_train:], ytr[n_train:]),
                "test": (xte, yte),
            }
        return self._cache
