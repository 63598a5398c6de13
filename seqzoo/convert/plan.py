"""A conversion plan: one rule per output tensor, run lazily over any source of named tensors.

``Rule(dst, srcs, fn)`` builds the output tensor ``dst`` from the source tensors ``srcs`` (``fn=None``: the one
source as is). ``run_plan`` checks first that the source holds exactly the tensors the rules read (unknown and
missing names are refused by name), then reads, transforms, checks the shape and writes one rule at a time, so
only the tensors of one rule are alive besides what the writer buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from ..errors import InputError


@dataclass(frozen=True)
class Rule:
    dst: str
    srcs: tuple[str, ...]
    fn: Callable[..., torch.Tensor] | None = None

    def apply(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        return tensors[0] if self.fn is None else self.fn(*tensors)


def _names(keys: Iterable[str], limit: int = 8) -> str:
    keys = sorted(keys)
    more = f" (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(repr(k) for k in keys[:limit]) + more


def check_keys(rules: list[Rule], available: Iterable[str], what: str, optional: Iterable[str] = ()) -> None:
    """Refuse a source whose tensor names differ from the ones the rules read (``optional`` may be absent/extra)."""
    needed = {s for r in rules for s in r.srcs}
    have, optional = set(available), set(optional)
    missing = needed - have - optional
    unknown = have - needed - optional
    if missing:
        raise InputError(f"{what}: missing tensor(s) {_names(missing)}")
    if unknown:
        raise InputError(f"{what}: unknown tensor(s) {_names(unknown)} (not part of this configuration)")


def run_plan(
    rules: list[Rule],
    get: Callable[[str], torch.Tensor],
    write: Callable[[str, torch.Tensor], None],
    what: str,
    dst_shapes: dict[str, tuple[int, ...]] | None = None,
    src_shapes: dict[str, tuple[int, ...]] | None = None,
    dtype: torch.dtype | None = None,
    progress: bool = False,
) -> None:
    """Run ``rules`` tensor by tensor: read, check shapes (by source and destination name), cast, write."""
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(rules), desc=f"convert {what}", unit="tensor")
    for rule in rules:
        tensors = [get(s) for s in rule.srcs]
        for name, t in zip(rule.srcs, tensors, strict=True):
            want = None if src_shapes is None else src_shapes.get(name)
            if want is not None and tuple(t.shape) != tuple(want):
                raise InputError(f"{what}: tensor {name!r} has shape {tuple(t.shape)}, expected {tuple(want)}")
        try:
            out = rule.apply(tensors)
        except (RuntimeError, IndexError) as e:  # a layout transform on a tensor of the wrong rank / size
            shapes = ", ".join(f"{n!r} {tuple(t.shape)}" for n, t in zip(rule.srcs, tensors, strict=True))
            raise InputError(f"{what}: tensor(s) {shapes} do not fit {rule.dst!r}: {e}") from None
        del tensors
        want = None if dst_shapes is None else dst_shapes.get(rule.dst)
        if want is not None and tuple(out.shape) != tuple(want):
            raise InputError(
                f"{what}: tensor(s) {_names(rule.srcs)} give {rule.dst!r} of shape {tuple(out.shape)}, "
                f"expected {tuple(want)} for this configuration"
            )
        if dtype is not None and out.is_floating_point():
            out = out.to(dtype)
        write(rule.dst, out.contiguous())
        del out
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
