"""bench/flops.py: the analytic model FLOPs against torch.utils.flop_counter.FlopCounterMode on tiny models.

What the counter sees: every aten mm / addmm / bmm / baddbmm / convolution, also inside the sLSTM's custom
autograd Function (FlopCounterMode is a dispatch mode: the Function's forward and hand-written backward run aten
ops under it). What it cannot see or miscounts, and how the test handles it:

* the CPU flash-attention kernel (``_scaled_dot_product_flash_attention_for_cpu``) is not in its registry, so
  attention runs under the MATH SDPA backend (explicit bmm of the full T×T scores: the dense convention,
  ``causal=False``);
* the backward of a depthwise (grouped) convolution is counted without dividing by the groups (≈ channels ×
  too much), so ``convolution_backward`` is replaced by 2 × the forward convolution (grad input + grad weight);
* the in-place ``baddbmm_`` (the mLSTM and GateLoop chunkwise add their intra-chunk output into the inter-chunk
  one in place) is not in the counter's registry; it gets the out-of-place ``baddbmm``'s formula (``COUNT_ALSO``);
* Triton kernels (CUDA only) would be invisible; on CPU none run; so are the sLSTM's loops in C
  (``ops/slstm/native.c``: the recurrent ``h R`` product of every step), so the sLSTM is counted on the PyTorch
  loops they replace (``native.unavailable`` reports the C loops unavailable while counting);
* two fast CPU paths issue other ops than the useful matmuls the formula counts: the causal conv's C loops
  (``ops/causal_conv/native.c``, invisible; turned off while counting) or its PyTorch shifted multiply-adds
  (``ops/causal_conv/torch_conv.py: _ShiftedTaps``, elementwise, so not counted) and the mLSTM's q/k/v maps
  with its gates (``ops/mlstm/headwise.py``: C loops, invisible, or grouped block-diagonal matmuls, 8x the
  useful flops in zeros). While counting, the conv runs as the depthwise ``F.conv1d`` it equals
  (tests/ops/test_causal_conv.py holds the two equal through the naive loop) and the q/k/v blocks as one bmm
  each, the gates as matmuls (``_GROUP_MIN_TOKENS`` out of reach).

Forward counts must match to 1e-6 relative (same matmuls, same shapes). A training step (forward + backward)
must match ``3 × forward`` within 10 %: the backward of a product whose operand needs no gradient is skipped,
e.g. the mLSTM's inter-chunk readout q·C_prev of the first chunk (its zero state has no gradient), a 1/chunks
effect; with 4 chunks (T = 256) it is below 1 %.
"""

import math
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode, flop_registry

import seqzoo.ops.causal_conv as causal_conv
import seqzoo.ops.causal_conv.torch_conv as torch_conv
import seqzoo.ops.mlstm.headwise as mlstm_headwise
import seqzoo.ops.slstm.native as slstm_native
from seqzoo.bench.flops import gemm_gflops, layer_flops, mean_visible_keys, model_flops
from seqzoo.bench.models import FAMILIES, family_config
from seqzoo.errors import InputError
from seqzoo.mixers.attention import visible_mask
from seqzoo.models.config import ModelConfig
from seqzoo.models.lm import LanguageModel

TINY = {"d_model": 32, "n_layers": 3, "window": 16}
# the counter's own baddbmm formula, unwrapped (FlopCounterMode wraps custom mappings itself)
COUNT_ALSO = {torch.ops.aten.baddbmm_: flop_registry[torch.ops.aten.baddbmm].__wrapped__}


def _conv_as_conv1d(xs, weight, bias):
    """``_ShiftedTaps.apply``'s result as a depthwise ``F.conv1d`` (which the counter sees): ``xs (B, k-1+T, C)``."""
    return F.conv1d(xs.transpose(1, 2), weight.unsqueeze(1), bias, groups=xs.shape[-1]).transpose(1, 2)


def counted(cfg, T: int, backward: bool) -> float:
    """FlopCounterMode's FLOPs per token of a forward (and backward) of ``LanguageModel(cfg)`` on one sequence."""
    torch.manual_seed(0)
    model = LanguageModel(cfg)
    x = torch.randint(0, cfg.vocab_size, (1, T))
    with (
        mock.patch.object(causal_conv, "native_unfit", lambda *a: "counting FLOPs"),
        mock.patch.object(torch_conv._ShiftedTaps, "apply", _conv_as_conv1d),
        mock.patch.object(mlstm_headwise, "_GROUP_MIN_TOKENS", 1 << 62),
        mock.patch.object(slstm_native, "unavailable", lambda: "counting FLOPs"),
        sdpa_kernel(SDPBackend.MATH),
        FlopCounterMode(display=False, custom_mapping=COUNT_ALSO) as fc,
    ):
        logits = model(x).logits
        if backward:
            logits.float().square().mean().backward()
    by_op = {str(k): v for k, v in fc.get_flop_counts()["Global"].items()}
    if backward and "aten.convolution" in by_op:  # the counter ignores groups in a grouped conv's backward
        by_op["aten.convolution_backward"] = 2 * by_op["aten.convolution"]
    return sum(by_op.values()) / T


@pytest.mark.parametrize("family", list(FAMILIES))
def test_forward_flops_match_the_counter(family):
    cfg = family_config(family, "small", **TINY)
    for T in (40, 96):  # 96: one mLSTM chunk of 64 and a tail of 32; window 16 < T for Griffin's local attention
        want = counted(cfg, T, backward=False)
        got = model_flops(cfg, T, causal=False)["forward_per_token"]
        assert got == pytest.approx(want, rel=1e-6), (family, T, model_flops(cfg, T, causal=False)["by_part"])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_training_flops_are_three_forwards(family):
    cfg = family_config(family, "small", **TINY)
    T = 256
    got = model_flops(cfg, T, causal=False)["train_per_token"]
    assert got == pytest.approx(counted(cfg, T, backward=True), rel=0.10), family


def test_causal_attention_counts_the_visible_keys():
    for T, W in ((1, None), (7, None), (64, None), (64, 16), (17, 16), (16, 16), (100, 3)):
        mask = visible_mask(torch.arange(T), torch.arange(T), W)
        assert mean_visible_keys(T, W) == pytest.approx(mask.sum().item() / T), (T, W)
        assert mean_visible_keys(T, W, causal=False) == T
    cfg = family_config("transformer", "small", **TINY)
    dense = model_flops(cfg, 64, causal=False)["by_part"]
    causal = model_flops(cfg, 64)["by_part"]
    assert causal["attention"] == pytest.approx(dense["attention"] * 65 / 128)
    assert causal["mlp"] == dense["mlp"] and causal["projections"] == dense["projections"]


def test_mlstm_intra_chunk_is_halved_when_causal():
    cfg = family_config("xlstm10", "small", **TINY)
    mixer = LanguageModel(cfg).blocks[0].mixer
    H, K, V = mixer.n_heads, mixer.qk_dim, mixer.v_dim
    dense, causal = layer_flops(mixer, 128, causal=False), layer_flops(mixer, 128)
    # chunks of 64: 2 (K + V) l per head and token, l = 64 keys (dense) or 65 / 2 on average (causal)
    assert dense["recurrence"] - causal["recurrence"] == pytest.approx(H * 2 * (K + V) * (64 - 32.5))


def test_training_is_three_forwards_and_grows_with_T_only_through_attention():
    for fam in FAMILIES:
        cfg = family_config(fam, "10m")
        a, b = model_flops(cfg, 1024), model_flops(cfg, 4096)
        assert a["train_per_token"] == 3 * a["forward_per_token"]
        grow = b["forward_per_token"] - a["forward_per_token"]
        if fam == "transformer":  # 13 layers x 4 H e x (4097 - 1025) / 2 extra keys per query
            assert grow == pytest.approx(13 * 4 * 256 * (4097 - 1025) / 2)
        elif fam == "griffin":  # 4 local-attention layers, window 1024: a query sees at most 1025 keys
            assert grow == pytest.approx(4 * 4 * 256 * (mean_visible_keys(4096, 1024) - 1025 / 2))
        else:
            assert grow == 0, fam
        # ~2 FLOPs per parameter and token (every weight is in one product) + attention and the mLSTM cell
        assert 0.95 < a["forward_per_token"] / (2 * _params(cfg)) < 1.6, fam


def _params(cfg) -> int:
    with torch.device("meta"):
        return LanguageModel(cfg).num_parameters()


def test_unmodelled_mixers_are_refused():
    cfg = ModelConfig(
        vocab_size=16, d_model=16, n_layers=1, pattern=["gateloop"], mixer_kwargs={"gateloop": {"n_heads": 4}}
    )
    with pytest.raises(InputError, match="GateLoop with heads of K=4"):
        model_flops(cfg, 8)
    with pytest.raises(InputError, match="T must be a positive int"):
        model_flops(family_config("hawk", "small", **TINY), 0)


def test_gemm_calibration():
    g = gemm_gflops(32, rows=64, repeats=2)
    assert math.isfinite(g) and g > 0
    with pytest.raises(InputError, match="gemm_gflops"):
        gemm_gflops(0)
