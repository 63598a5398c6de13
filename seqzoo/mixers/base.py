"""The mixer contract (ARCHITECTURE.md "The contracts", README "Use it from Python") and the registry every token mixer joins.

A mixer maps ``x (B, T, d_model)`` to ``y (B, T, d_model)`` and returns the state it must carry
to the next call: ``y, state = mixer(x, state=None, mode=None)``. The state is returned, never
stored on the module, so one module can serve many streams.

Subclasses implement ``_forward(x, state, mode)`` and set the class attributes ``modes`` (algorithm
names, all giving the same result) and ``causal``. The base class validates the input before any
work, resolves ``mode=None`` through ``default_mode`` and keeps the registry.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn

from ..errors import InputError
from ..naming import upgrade_kwargs
from ..ops.context_parallel import group_rank_size

MIXERS: dict[str, type[Mixer]] = {}


def register_mixer(name: str) -> Callable[[type[Mixer]], type[Mixer]]:
    """Class decorator: ``@register_mixer("gateloop")`` adds the class to ``MIXERS``."""

    def wrap(cls: type[Mixer]) -> type[Mixer]:
        if name in MIXERS and MIXERS[name] is not cls:
            raise InputError(f"mixer name {name!r} is already registered by {MIXERS[name].__qualname__}")
        cls.name = name
        MIXERS[name] = cls
        return cls

    return wrap


def build_mixer(name: str, d_model: int, **kwargs: Any) -> Mixer:
    """Instantiate a registered mixer by name (clear error for an unknown name)."""
    if name not in MIXERS:
        raise InputError(f"unknown mixer {name!r}; registered mixers: {sorted(MIXERS)}")
    kwargs = upgrade_kwargs(name, kwargs, f"build_mixer({name!r})")  # renamed keys: new names, FutureWarning
    params = _init_arguments(MIXERS[name])
    if params is not None:
        unknown = sorted(set(kwargs) - params)
        if unknown:  # named here: Python's own TypeError would not say which mixer or what it takes
            known = sorted(params - {"self", "d_model"})
            raise InputError(f"mixer {name!r} has no argument(s) {unknown}; its arguments: {known}")
    return MIXERS[name](d_model=d_model, **kwargs)


def _init_arguments(cls: type) -> set[str] | None:
    """The keyword arguments ``cls(...)`` takes: its ``__init__``'s and, where that passes ``**kwargs`` on, its
    bases' (``local_attention`` -> ``attention``); None when they reach a signature that takes any."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        names |= {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return names
    return None


def collect_optim_overrides(module: nn.Module) -> dict[str, dict[str, float]]:
    """Every mixer's ``optim_overrides()`` inside ``module`` (itself included), keyed by full parameter name.

    The one place optimiser hints are gathered: any model or wrapper (an RMT around a backbone, a classifier)
    gets its mixers' hints, whatever trainer builds the optimiser. Two hints for one parameter must agree.
    """
    out: dict[str, dict[str, float]] = {}
    for mod_name, mod in module.named_modules():
        if not isinstance(mod, Mixer):
            continue
        for pname, setting in mod.optim_overrides().items():
            full = f"{mod_name}.{pname}" if mod_name else pname
            if out.setdefault(full, setting) != setting:
                raise InputError(f"conflicting optimiser overrides for {full}: {out[full]} and {setting}")
    return out


class Mixer(nn.Module):
    """Base class of every token mixer.

    Class attributes a subclass sets:
      * ``modes``: tuple of algorithm names; the first is the reference when nothing better applies.
      * ``causal``: True when y[:, t] depends only on x[:, :t+1]; only causal mixers carry state.
      * ``test_kwargs``: tiny constructor kwargs used by the registry-wide contract tests.
    """

    name: ClassVar[str] = "mixer"
    modes: ClassVar[tuple[str, ...]] = ()
    causal: ClassVar[bool] = True
    test_kwargs: ClassVar[dict[str, Any]] = {}
    supports_segment_pos: ClassVar[bool] = False  # True: accepts ``segment_pos`` (packed documents, resets at 0)
    # True: accepts ``context_parallel`` (its input is one rank's block of a sequence split along time)
    supports_context_parallel: ClassVar[bool] = False

    def __init__(self, d_model: int):
        super().__init__()
        if not isinstance(d_model, int) or isinstance(d_model, bool) or d_model <= 0:
            raise InputError(f"d_model must be a positive int, got {d_model!r}")
        self.d_model = d_model

    # ------------------------------------------------------------------ contract
    def forward(
        self,
        x: torch.Tensor,
        state: Any = None,
        mode: str | None = None,
        segment_pos: torch.Tensor | None = None,
        context_parallel: dist.ProcessGroup | None = None,
        return_state: bool = True,
    ):
        """``segment_pos (B, T)``: position inside the current document (0 = a document starts here).

        Only mixers with ``supports_segment_pos`` accept it; they must not let information cross a
        document start.

        ``context_parallel``: a process group over which one sequence is split along time; ``x`` is this rank's
        block of consecutive tokens (rank order = time order), ``state`` the state entering the whole sequence
        (rank 0's is used) and the returned state the one after the whole sequence, on every rank. Only mixers
        with ``supports_context_parallel`` accept a group of more than one rank; for the others it is refused
        with an error that names the mixer. A group of one rank (or none) is the ordinary call.

        ``return_state=False``: the caller does not read the state after the sequence (training); the returned
        state is None, and under context parallelism the mixer skips the collective that would bring the last
        rank's state to every rank.
        """
        self.check_input(x)
        if state is not None and not self.causal:
            raise InputError(f"{self.name} is not causal and carries no state; got state={type(state).__name__}")
        mode = self.resolve_mode(x, state, mode)
        kwargs = {}
        if context_parallel is not None and group_rank_size(context_parallel)[1] > 1:
            if not self.supports_context_parallel:
                raise InputError(
                    f"{self.name} does not support context parallelism (a sequence split along time across ranks)"
                )
            kwargs["context_parallel"] = context_parallel
            if not return_state:
                kwargs["return_state"] = False
        if segment_pos is not None:
            if not self.supports_segment_pos:
                raise InputError(f"{self.name} does not support segment_pos (packed documents with resets)")
            if segment_pos.shape != x.shape[:2]:
                raise InputError(
                    f"{self.name}: segment_pos must have shape {tuple(x.shape[:2])}, got {tuple(segment_pos.shape)}"
                )
            kwargs["segment_pos"] = segment_pos
        y, new_state = self._forward(x, state, mode, **kwargs)
        return (y, new_state) if return_state else (y, None)

    def _forward(self, x: torch.Tensor, state: Any, mode: str):  # pragma: no cover - abstract
        raise NotImplementedError

    def default_mode(self, x: torch.Tensor, state: Any) -> str:
        """The mode used when ``mode=None``; subclasses pick the fastest for the input."""
        return self.modes[0]

    def resolve_mode(self, x: torch.Tensor, state: Any, mode: str | None) -> str:
        if mode is None:
            return self.default_mode(x, state)
        if not isinstance(mode, str) or mode not in self.modes:
            raise InputError(f"{self.name}: unknown mode {mode!r}; expected one of {self.modes}")
        return mode

    def check_input(self, x: Any) -> None:
        if not isinstance(x, torch.Tensor):
            raise InputError(
                f"{self.name}: x must be a torch.Tensor of shape (B, T, {self.d_model}), got {type(x).__name__}"
            )
        if not x.is_floating_point():
            raise InputError(f"{self.name}: x must be a floating-point tensor, got dtype {x.dtype}")
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise InputError(f"{self.name}: x must have shape (B, T, d_model={self.d_model}), got {tuple(x.shape)}")
        if x.shape[1] == 0:
            raise InputError(f"{self.name}: x must have at least one time step, got shape {tuple(x.shape)}")

    # ------------------------------------------------------------ optimiser hook
    def optim_overrides(self) -> dict[str, dict[str, float]]:
        """Per-parameter optimiser settings, keyed by parameter name relative to this module.

        Values may hold ``lr`` (absolute), ``lr_scale`` (times the base rate) and ``weight_decay``.
        The trainer turns them into AdamW parameter groups (e.g. GateLoop's state-transition
        projections get their own rate and no weight decay).
        """
        return {}

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, modes={self.modes}, causal={self.causal}"
