"""GateLoop op under stress: long sequences, |a| near 0 and 1, resets, the unsafe surrogate form, bf16."""

import torch
import torch.nn.functional as F
from test_gateloop_ops import make, rel

from seqzoo.ops.gateloop import gateloop


def test_unsafe_surrogate_form_overflows_and_safe_form_does_not():
    g = torch.Generator().manual_seed(0)
    B, T, H = 1, 200, 8
    q, k, v = (torch.randn(B, T, H, 1, generator=g) for _ in range(3))
    lm = F.logsigmoid(torch.randn(B, T, H, 1, generator=g))  # γ̃ ~ N(0, 1)
    ph = torch.randn(B, T, H, 1, generator=g)
    y_bad, _ = gateloop(q, k, v, lm, ph, mode="naive_unsafe")
    assert not torch.isfinite(y_bad).all()
    y_ok, _ = gateloop(q, k, v, lm, ph, mode="attention")
    y_ref, _ = gateloop(q.double(), k.double(), v.double(), lm.double(), ph.double(), mode="naive")
    assert torch.isfinite(y_ok).all() and rel(y_ok.double(), y_ref) <= 1e-4


def test_attention_fp32_at_4096_uses_fp64_sums():
    g = torch.Generator().manual_seed(1)
    B, T, H = 1, 4096, 1
    q, k, v, pre, ph = (torch.randn(B, T, H, 1, generator=g, dtype=torch.float64) for _ in range(5))
    lm = F.logsigmoid(1 + 2 * pre)
    y_ref, S_ref = gateloop(q, k, v, lm, ph, mode="two_level")
    y, S = gateloop(q.float(), k.float(), v.float(), lm.float(), ph.float(), mode="attention")
    assert rel(y.double(), y_ref) <= 1e-4 and rel(S.to(S_ref.dtype), S_ref) <= 1e-4


def test_stress_65536_near_one_and_near_zero():
    # one channel per regime: γ̃ ≈ +10, +20 (|a| near 1), -30, -1e4 (|a| near 0); θ ~ N(0, 1)
    T = 65536
    g = torch.Generator().manual_seed(2)
    centre = torch.tensor([10.0, 20.0, -30.0, -1e4], dtype=torch.float64)
    pre = centre[:, None] + 0.5 * torch.randn(1, T, 4, 1, generator=g, dtype=torch.float64)  # (1, T, 4, 1)
    lm = F.logsigmoid(pre)
    q, k, v, ph = (torch.randn(1, T, 4, 1, generator=g, dtype=torch.float64) for _ in range(4))
    y_ref, S_ref = gateloop(q, k, v, lm, ph, mode="two_level")  # fp64
    args32 = [t.float() for t in (q, k, v, lm, ph)]
    for impl in ("naive", "chunkwise"):
        y, S = gateloop(*args32, mode=impl)
        assert torch.isfinite(y).all() and torch.isfinite(torch.view_as_real(S)).all(), impl
        for c in range(4):  # per regime, relative to that channel's max |y|
            assert rel(y[..., c, :].double(), y_ref[..., c, :]) <= 1e-3, (impl, c)


def test_resets_every_100_tokens_fp32_chunkwise():
    # a = 0 every 100 tokens, γ̃ ≈ 8 and θ ≈ 3 elsewhere: segment sums keep fp32 at ~1e-6 (cumsum differences ~3e-4)
    T, H = 16384, 2
    g = torch.Generator().manual_seed(5)
    pre = 8 + 0.1 * torch.randn(1, T, H, 1, generator=g, dtype=torch.float64)
    pre[:, ::100] = -1e4
    lm = F.logsigmoid(pre)
    ph = 3 + 0.1 * torch.randn(1, T, H, 1, generator=g, dtype=torch.float64)
    q, k, v = (torch.randn(1, T, H, 1, generator=g, dtype=torch.float64) for _ in range(3))
    y_ref, _ = gateloop(q, k, v, lm, ph, mode="two_level")
    y, _ = gateloop(*(t.float() for t in (q, k, v, lm, ph)), mode="chunkwise")
    assert rel(y.double(), y_ref) <= 1e-4


def test_bf16_inputs_give_finite_fp32_output_and_complex64_state():
    q, k, v, lm, ph, _ = make(2, 50, 2, 3, 4, state=False)
    y, S = gateloop(*(t.bfloat16() for t in (q, k, v, lm, ph)), mode="chunkwise")
    assert y.dtype == torch.float32 and S.dtype == torch.complex64 and torch.isfinite(y).all()
