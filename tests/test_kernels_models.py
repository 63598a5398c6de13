"""Whole models through the Triton kernels against the same models on the PyTorch paths: loss and every
parameter's gradient, over two SGD steps, in fp32 (not AdamW: its first step moves every weight by about lr whatever
the gradient's size, so gradients equal to rounding would become different weights).

One preset per family that has a kernel: mLSTM (``xlstm10-tiny``, the 7B-style block ``xlstm7b-tiny``), GateLoop
with heads (chunkwise GLA kernel), Hawk and Griffin (fused RG-LRU and causal conv kernels). With CUDA the models run
on the GPU with the compiled kernels and ``auto`` must pick them; without it the kernels run under Triton's CPU
interpreter (``use_kernels("triton")``), at a shorter length. Which implementation ran is read from the switch's
once-per-op log, so a model that silently stayed on the torch path fails.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from helpers import DEV, needs_triton

from seqzoo.kernels import use_kernels
from seqzoo.models.presets import build_model

pytest.importorskip("triton")

# preset -> the ops whose Triton kernels it must run
PRESETS = {
    "xlstm10-tiny": {"mlstm"},
    "xlstm7b-tiny": {"mlstm"},
    "gateloop-tiny-heads": {"gateloop"},
    "hawk-tiny": {"rglru", "causal_conv1d"},
    "griffin-tiny": {"rglru", "causal_conv1d"},
}
T = 130 if DEV == "cuda" else 21  # GPU: several chunks and a masked tail; interpreter: one chunk and a tail


def _kernel_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "seqzoo.kernels"]


# under the interpreter Hawk, Griffin and xLSTM[1:0] take 1-2 min each on a 2-core CPU: on demand there (``-m slow``;
# ``tests/ops/test_mlstm.py`` trains an mLSTM model through the kernels in CI), always on a GPU
_CPU_SLOW = {"hawk-tiny", "griffin-tiny", "xlstm10-tiny"}
CASES = [
    pytest.param(p, marks=pytest.mark.slow) if DEV == "cpu" and p in _CPU_SLOW else pytest.param(p) for p in PRESETS
]


@needs_triton
@pytest.mark.parametrize("preset", CASES)
def test_model_on_the_triton_kernels_equals_the_torch_paths(preset, caplog, kernels_reset):
    torch.manual_seed(0)
    ref = build_model(preset).to(DEV)
    tri = copy.deepcopy(ref)
    vocab = ref.config.vocab_size
    ids = torch.randint(0, vocab, (2, T + 1), generator=torch.Generator().manual_seed(1)).to(DEV)
    caplog.set_level(logging.INFO, logger="seqzoo.kernels")
    # on CUDA ``auto`` must choose the kernels by itself; the CPU interpreter is only ever forced
    fast = "auto" if DEV == "cuda" else "triton"
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, tri)]
    for _ in range(2):
        losses = []
        for model, opt, setting in ((ref, opts[0], "torch"), (tri, opts[1], fast)):
            opt.zero_grad()
            with use_kernels(setting):
                loss = model(ids[:, :-1], labels=ids[:, 1:]).loss
                loss.backward()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-5)
        for (name, p_ref), p_tri in zip(ref.named_parameters(), tri.parameters()):
            if p_ref.grad is None:
                assert p_tri.grad is None, name
                continue
            scale = max(p_ref.grad.abs().max().item(), 1e-3)
            torch.testing.assert_close(p_tri.grad, p_ref.grad, rtol=1e-4, atol=2e-5 * scale, msg=name)
        for opt in opts:
            opt.step()
    lines = _kernel_lines(caplog)
    for op in PRESETS[preset]:
        assert any(f"{op} runs the triton implementation on {DEV}" in m for m in lines), (op, lines)
