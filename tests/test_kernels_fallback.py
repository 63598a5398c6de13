"""Shapes no autotune config can serve go to the PyTorch path before any launch; autotune keys separate variants.

* ``kernels/prune.py: launch_unfit`` applies the autotune hook's rule (fits the target's shared memory, no spills)
  to the launches an op would make, recorded from its real entry point on tiny inputs
  (``kernels/_common.py: probe_launches``). Without a GPU the compiled resources are fabricated here (a target
  with small shared memory, a kernel that spills); ``tests/test_kernels_aot.py`` reads real ones from cubins.
* ``kernels/switch.py: want_triton(shape=...)``: ``auto`` falls back and logs the reason once, ``triton`` refuses.
* Every autotuned kernel's ``key=`` names its variant flags (``HAS_STATE``, ``STATES_ONLY``, ...): a config tuned
  for one variant is never reused for another.
"""

from __future__ import annotations

import inspect
import logging

import pytest
import torch

from seqzoo.errors import InputError
from seqzoo.kernels import switch, usable_on, use_kernels
from seqzoo.kernels.prune import ResourcePrune, Usage, keep_mask, why_none_kept

triton = pytest.importorskip("triton")

from seqzoo.kernels import _common, prune


@pytest.fixture(autouse=True)
def _fresh(kernels_reset, monkeypatch):
    monkeypatch.setattr(prune, "_verdicts", {})
    from seqzoo.ops.gateloop import triton as g
    from seqzoo.ops.mlstm import triton as m

    m._shape_unfit.cache_clear()
    g._shape_unfit.cache_clear()
    yield
    m._shape_unfit.cache_clear()
    g._shape_unfit.cache_clear()


def _fabricate(monkeypatch, smem_of_bk=None, spill_of_bk=None):
    """Every compile of every config returns resources from the launch's BK (head-dim tile): ``smem_of_bk(BK)``
    bytes of shared memory, ``spill_of_bk(BK)`` spill bytes. Records the kernels asked."""
    asked = []

    def usage(self, config, nargs, kwargs):
        bk = kwargs["BK"]
        asked.append(self.kernel.__name__)
        return Usage(128, (spill_of_bk or (lambda b: 0))(bk), (smem_of_bk or (lambda b: 20_000))(bk))

    monkeypatch.setattr(ResourcePrune, "usage", usage)
    return asked


def _mlstm_in(K, V=None, T=20, grad=True):
    g = torch.Generator().manual_seed(0)
    V = V or K
    q, k = (torch.randn(1, T, 2, K, generator=g).requires_grad_(grad) for _ in range(2))
    v = torch.randn(1, T, 2, V, generator=g).requires_grad_(grad)
    return q, k, v


# ------------------------------------------------------------------------------------------------ the decision
def test_why_none_kept_names_the_cause():
    lim = 100_000
    assert why_none_kept([None, None], lim) == "no autotune config compiles"
    assert "shared memory" in why_none_kept([Usage(1, 0, 266_000), None], lim)
    msg = why_none_kept([Usage(255, 64, 10), Usage(255, 32, 10), Usage(1, 0, 200_000)], lim)
    assert "spills" in msg and "32 B" in msg
    assert keep_mask([Usage(255, 32, 10)], lim) == [False]  # a spilling config is never kept


def test_probe_records_the_launches_without_running_them():
    from seqzoo.ops.mlstm.triton import mlstm_triton

    q, k, v = _mlstm_in(16)
    i, f = torch.zeros(1, 20, 2), torch.zeros(1, 20, 2)

    def run():  # inputs that require grad: ``apply`` runs the backward inside the probe
        mlstm_triton(q, k, v, i, f, chunk_size=16)

    rec = _common.probe_launches(run)
    names = [(kern.fn.__name__, kw.get("STATES_ONLY")) for kern, _, kw in rec]
    assert names == [
        ("_mlstm_fwd_kernel", False),
        ("_mlstm_fwd_kernel", True),
        ("_mlstm_bwd_dstate_kernel", None),
        ("_mlstm_bwd_kernel", None),
    ]
    assert _common._probing.get() is None  # launches run again after the probe


def test_mlstm_head_dim_256_is_unfit_on_a_small_smem_target(monkeypatch):
    """Head dim 256 (xlstm-7b): every config over the shared memory of the target -> a reason naming the
    kernel and the target; head dim 64 fits. Forward-only probes ask the forward kernel only."""
    from seqzoo.ops.mlstm.triton import shape_unfit

    asked = _fabricate(monkeypatch, smem_of_bk=lambda bk: 266_000 if bk >= 256 else 30_000)
    q, k, v = _mlstm_in(256)
    why = shape_unfit(q, k, v, 16, cc=80)
    assert why is not None and "_mlstm_fwd_kernel on sm_80" in why and "shared memory" in why and "K=256" in why
    assert shape_unfit(q, k, v, 16, cc=90) is not None  # 266 KB > 227 KB too
    assert shape_unfit(*_mlstm_in(64), 16, cc=80) is None
    asked.clear()
    with torch.no_grad():
        assert shape_unfit(*_mlstm_in(32, grad=False), 16, cc=80) is None
    assert set(asked) == {"_mlstm_fwd_kernel"}
    # remembered: a second ask compiles nothing
    asked.clear()
    assert shape_unfit(q, k, v, 16, cc=80) is not None and asked == []


@pytest.mark.parametrize("K", [257, 384, 1024])
def test_mlstm_qk_head_wider_than_the_register_tile_is_refused_before_any_compile(K, monkeypatch):
    """Heads over ``MAX_QK_TILE`` (xlstm71-125m: 384, xlstm10-1.3b: 1024) are unfit on every GPU from their size:
    no config is compiled (a build at a 512-wide tile took ptxas up to 87 minutes), explicit ``mode="triton"`` on a
    GPU is an error naming q, and the interpreter (no GPU) still runs them."""
    from seqzoo.ops.mlstm import triton as m

    asked = _fabricate(monkeypatch)
    q, k, v = _mlstm_in(K, V=32, T=16)
    for cc in (80, 90, 100):
        why = m.shape_unfit(q, k, v, 16, cc=cc)
        assert why is not None and f"K={K}" in why and f"K <= {m.MAX_QK_TILE}" in why
        assert m.kernel_tile(q, k, v, 64, cc=cc) == (None, why)
    assert asked == []
    assert m.kernel_tile(q, k, v, 64) == (64, None)  # no GPU: no register limit
    assert m.shape_unfit(*_mlstm_in(m.MAX_QK_TILE, V=32, T=16), 16, cc=90) is None and asked  # 256 is probed
    i, f = torch.zeros(1, 16, 2), torch.zeros(1, 16, 2)
    monkeypatch.setattr(m, "compute_capability", lambda t, cc=None: 90)  # as if q were on an H100
    with pytest.raises(InputError, match=r"mlstm_triton: q: qk head dim K=\d+ .* use mode='chunkwise'"):
        m.mlstm_triton(q, k, v, i, f, chunk_size=16)


def test_mlstm_backward_kernel_that_spills_makes_training_unfit(monkeypatch):
    from seqzoo.ops.mlstm.triton import shape_unfit

    def usage(self, config, nargs, kwargs):
        spills = 512 if self.kernel.__name__ == "_mlstm_bwd_dstate_kernel" else 0
        return Usage(255, spills, 10_000)

    monkeypatch.setattr(ResourcePrune, "usage", usage)
    why = shape_unfit(*_mlstm_in(64), 16, cc=90)
    assert why is not None and "_mlstm_bwd_dstate_kernel" in why and "spills" in why
    with torch.no_grad():  # inference launches only the forward kernel: fine
        assert shape_unfit(*_mlstm_in(64, grad=False), 16, cc=90) is None


@pytest.mark.parametrize("op", ["mlstm", "gateloop"])
def test_shape_probe_records_the_backward_without_autograds_engine(op, monkeypatch):
    """The probe calls the backward itself (``kernels/_common.py: apply``): autograd's engine runs a CUDA graph's
    backward on a device thread that does not see the recording, so on the first GPU run the backward kernels were
    launched for real and a spilling one raised from the autotune hook. Here the engine refuses to run at all, and
    the probe must still find the backward kernel that spills."""
    from seqzoo.ops.gateloop.triton import shape_unfit as gateloop_unfit
    from seqzoo.ops.mlstm.triton import shape_unfit as mlstm_unfit

    bwd = "_mlstm_bwd_dstate_kernel" if op == "mlstm" else "_gla_bwd_dstate_kernel"

    def usage(self, config, nargs, kwargs):
        return Usage(255, 512 if self.kernel.__name__ == bwd else 0, 10_000)

    def engine(*a, **kw):
        raise AssertionError("the shape probe ran autograd's engine")

    monkeypatch.setattr(ResourcePrune, "usage", usage)
    monkeypatch.setattr(torch.autograd, "backward", engine)
    monkeypatch.setattr(torch.Tensor, "backward", engine)
    q, k, v = _mlstm_in(32)
    why = mlstm_unfit(q, k, v, 16, cc=90) if op == "mlstm" else gateloop_unfit(q, v, cc=90)
    assert why is not None and bwd in why and "spills" in why


def test_mlstm_runs_shorter_tiles_where_the_chunk_spills(monkeypatch):
    """sm_80, head dim 64, chunk 64 (measured by ``seqzoo kernels check``): the h-writing forward spills at L = 64
    in every config and fits at 32. ``kernel_tile`` halves the tile until every kernel fits (the chunkwise mLSTM
    is the same function at any chunk length) and gives up with the first reason below 16."""
    from seqzoo.ops.mlstm.triton import kernel_tile, shape_unfit

    def usage(self, config, nargs, kwargs):
        spills = 128 if kwargs["L"] >= limit[0] else 0
        return Usage(255, spills, 20_000)

    limit = [64]
    monkeypatch.setattr(ResourcePrune, "usage", usage)
    q, k, v = _mlstm_in(64, T=70)
    assert kernel_tile(q, k, v, 64, cc=80) == (32, None)
    assert kernel_tile(q, k, v, 32, cc=80) == (32, None)
    assert kernel_tile(q, k, v, 64) == (64, None)  # off CUDA without cc: the interpreter has no limits
    limit[0] = 16  # every tile spills
    tile, why = kernel_tile(q, k, v, 128, cc=90)
    assert tile is None and "chunk 128" in why and "spills" in why
    assert shape_unfit(q, k, v, 128, cc=90) == why


def test_gateloop_shape_probe(monkeypatch):
    from seqzoo.ops.gateloop.triton import shape_unfit

    _fabricate(monkeypatch, smem_of_bk=lambda bk: 300_000 if bk >= 64 else 10_000)
    q = torch.zeros(1, 20, 2, 32, requires_grad=True)
    v = torch.zeros(1, 20, 2, 16)
    assert shape_unfit(q, v, None, None, 16, cc=90) is None  # K = 32
    why = shape_unfit(q, v, torch.zeros_like(q), None, 16, cc=90)  # complex: 2K = 64
    assert why is not None and "complex" in why and "_gla_fwd_kernel on sm_90" in why


# ------------------------------------------------------------------------------------------------ the dispatch
def test_auto_falls_back_and_logs_once(monkeypatch, caplog):
    monkeypatch.setattr(switch, "triton_unusable", lambda device: None)  # as on a GPU with triton
    calls = []

    def shape():
        calls.append(1)
        return "no config fits"

    with caplog.at_level(logging.INFO, logger="seqzoo.kernels"):
        assert switch.want_triton("mlstm", "cuda", None, shape) is False
        assert switch.want_triton("mlstm", "cuda", None, shape) is False
        assert switch.want_triton("mlstm", "cuda", None, lambda: None) is True
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == ["seqzoo.kernels: mlstm falls back to the torch path on cuda tensors: no config fits"]
    assert switch.want_triton("mlstm", "cuda", "dtype float64", shape) is False and len(calls) == 2  # not asked
    assert switch.want_triton("mlstm", "cpu", None, shape) is False and len(calls) == 2  # CPU: never asked
    with use_kernels("torch"):
        assert switch.want_triton("mlstm", "cuda", None, shape) is False and len(calls) == 2
    with use_kernels("triton"), pytest.raises(InputError, match="mlstm Triton kernel cannot run: no config fits"):
        switch.want_triton("mlstm", "cuda", None, shape)


@pytest.mark.skipif(not usable_on("cpu"), reason="needs triton under TRITON_INTERPRET=1 (CPU tensors)")
def test_mlstm_and_gateloop_dispatch_ask_the_shape(monkeypatch):
    """The ops' own dispatch passes the shape check: forced Triton on an unfit shape is an InputError with it."""
    from seqzoo.ops.gateloop import gateloop
    from seqzoo.ops.gateloop import triton as g
    from seqzoo.ops.mlstm import mlstm
    from seqzoo.ops.mlstm import triton as m

    monkeypatch.setattr(m, "shape_unfit", lambda *a, **kw: "simulated: mlstm does not fit")
    monkeypatch.setattr(g, "shape_unfit", lambda *a, **kw: "simulated: gla does not fit")
    q, k, v = _mlstm_in(16, grad=False)
    gates = torch.zeros(1, 20, 2)
    with use_kernels("triton"), pytest.raises(InputError, match="simulated: mlstm does not fit"):
        mlstm(q, k, v, gates, gates, chunk_size=16)
    log_mag = -torch.rand(1, 20, 2, 16)
    with use_kernels("triton"), pytest.raises(InputError, match="simulated: gla does not fit"):
        gateloop(q, k, v, log_mag, None, chunk_size=16)


# ------------------------------------------------------------------------------------------------ autotune keys
DERIVED = {"BK", "KP", "DOT", "IEEE"}  # functions of a keyed size (K, C) or of the tensor dtypes (in every key)


def test_autotune_keys_name_every_variant_flag():
    from seqzoo.ops.causal_conv import triton as c
    from seqzoo.ops.gateloop import triton as g
    from seqzoo.ops.mlstm import triton as m
    from seqzoo.ops.rglru import triton as r

    tuned = [v for mod in (c, g, m, r) for v in vars(mod).values() if isinstance(v, triton.runtime.Autotuner)]
    assert len(tuned) == 12
    for t in tuned:
        fn = getattr(t.fn, "fn", t.fn)
        params = inspect.signature(fn).parameters
        constexprs = {n for n, p in params.items() if "constexpr" in str(p.annotation)}
        config_keys = {k for cfg in t.configs for k in cfg.kwargs}
        missing = constexprs - config_keys - DERIVED - set(t.keys)
        assert not missing, f"{fn.__name__}: autotune key misses {sorted(missing)}"
    fwd = {t.fn.__name__: t.keys for t in tuned}
    assert {"HAS_STATE", "STATES_ONLY"} <= set(fwd["_mlstm_fwd_kernel"]) & set(fwd["_gla_fwd_kernel"])


def test_states_only_and_plain_forward_tune_separately():
    """The autotuner's cache key (triton's ``Autotuner.run``: the ``key=`` values, then tensor dtypes) differs
    between the h-writing forward and the backward's states-only recompute of the same sizes."""
    from seqzoo.ops.mlstm import triton as m

    t = m._mlstm_fwd_kernel

    def cache_key(**flags):
        args = {"K": 64, "V": 64, "L": 64, "HAS_STATE": False, "STATES_ONLY": False, "T": 128, **flags}
        return tuple(args[k] for k in t.keys if k in args)

    assert cache_key() != cache_key(STATES_ONLY=True)
    assert cache_key() != cache_key(HAS_STATE=True)


def test_hook_compiles_each_config_from_the_autotuners_own_call(monkeypatch):
    """The autotuner calls the hook with the launch's keywords, ``grid`` and ``warmup`` among them
    (``Autotuner.prune_configs``: ``early_config_prune(configs, nargs, **kwargs)``). The hook's compile-only
    warmup must take its own grid and the config's meta-parameters: on the first GPU run every config failed to
    compile with "multiple values for keyword argument 'grid'" and every kernel launch raised."""
    from seqzoo.ops.causal_conv.triton import _conv_fwd_kernel as tuned

    class Compiled:
        n_regs, n_spills = 64, 0
        metadata = type("M", (), {"shared": 1024})()

        def _init_handles(self):
            pass

    class Kernel:  # JITFunction.warmup's signature: grid keyword-only, everything else passed through
        __name__ = "_conv_fwd_kernel"

        def __init__(self):
            self.calls = []

        def warmup(self, *args, grid, **kwargs):
            self.calls.append((grid, kwargs))
            return Compiled()

    kernel = Kernel()
    monkeypatch.delenv("SEQZOO_AUTOTUNE", raising=False)  # every config (gpu_check.sh sets "first")
    monkeypatch.setattr(tuned.early_config_prune, "kernel", kernel)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (9, 0))
    tuned.nargs = {name: torch.zeros(1) for name in tuned.arg_names}
    launch = {"grid": lambda meta: (4,), "warmup": False}
    kept = tuned.prune_configs(launch)
    assert kept == tuned.configs and len(kernel.calls) == len(tuned.configs)
    for (grid, kwargs), config in zip(kernel.calls, tuned.configs):
        assert grid == (1,) and "warmup" not in kwargs
        assert kwargs == config.all_kwargs()
