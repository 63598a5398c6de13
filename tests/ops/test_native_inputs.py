"""The C wrappers take only what their C loops read correctly: shapes, dtypes, strides and devices as the PyTorch
paths take them (refused with ``InputError``, or handed to the PyTorch path), never read past a tensor's end."""

import subprocess
import sys

import pytest
import torch
from native_libs import needs_built

from seqzoo.errors import InputError
from seqzoo.ops.causal_conv import causal_conv1d
from seqzoo.ops.causal_conv import native as conv_native
from seqzoo.ops.gateloop import rotation_native, scores_native
from seqzoo.ops.mlstm import output
from seqzoo.ops.slstm import native as slstm_native


@pytest.mark.parametrize(
    "mode", ["auto", pytest.param("native", marks=needs_built(conv_native._LIB)), "torch", "naive"]
)
@pytest.mark.parametrize("length", [1, 2, 9])
def test_causal_conv_refuses_a_bias_that_is_not_one_per_channel(mode, length):
    """The C loop read ``bias[c]`` for all 4,096 channels of a bias of length 1, 2 or 9 (non-finite output)."""
    x, w = torch.randn(2, 16, 4096), torch.randn(4096, 4)
    with pytest.raises(InputError, match=r"bias must have shape \(C=4096,\), got \(" + str(length)):
        causal_conv1d(x, w, torch.randn(length), mode=mode)
    y, _ = causal_conv1d(x, w, torch.randn(4096), mode=mode)
    assert torch.isfinite(y).all()


@needs_built(output._LIB)
def test_mlstm_output_with_a_broadcasting_weight_runs_the_composite():
    """A weight and skip of shape (1,) broadcast in the composite; the C loop read E values of each."""
    B, T, H, V = 2, 3, 2, 256
    h, x_c, z = torch.randn(B, T, H, V), torch.randn(B, T, H * V), torch.randn(B, T, H * V)
    w, skip = torch.randn(1), torch.randn(1)
    assert not output._fits(h, x_c, z, w, skip)
    assert output._fits(h, x_c, z, w.expand(H * V).contiguous(), skip.expand(H * V).contiguous())
    u = output.mlstm_output(h, x_c, z, w, skip, 1e-5)
    torch.testing.assert_close(u, output.output_reference(h, x_c, z, w, skip, 1e-5), rtol=0, atol=0)


@needs_built(scores_native._LIB)
def test_decayed_scores_native_refuses_operands_of_other_shapes():
    q, lam = torch.randn(4, 8, 2, 16), -torch.rand(4, 8, 16)
    assert scores_native.fits(q, q.clone(), lam)
    for k, lam_ in ((torch.randn(1, 8, 2, 16), lam), (q.clone(), lam[:1]), (q.clone(), lam[..., :8])):
        assert not scores_native.fits(q, k, lam_)
        with pytest.raises(InputError, match="decayed_scores_native: q, k must have one shape"):
            scores_native.decayed_scores_native(q, k, lam_)


@needs_built(rotation_native._LIB)
def test_rotation_in_c_only_for_operands_of_matching_shapes():
    q, rot = torch.randn(64, 100, 16), torch.randn(64, 100, 2, 16)
    assert rotation_native.fits(q, q.clone(), rot)
    assert not rotation_native.fits(q, q.clone(), rot[:1])  # would broadcast in PyTorch; C would read past it
    assert not rotation_native.fits(q, q[:1].clone(), rot)


@needs_built(slstm_native._LIB)
def test_slstm_c_loops_refuse_a_recurrent_kernel_off_the_cpu():
    """R on another device beside CPU inputs: the C loop read its address as host memory (a segmentation fault),
    so this runs in a child process."""
    code = (
        "import torch\n"
        "from seqzoo.errors import InputError\n"
        "from seqzoo.ops.slstm import slstm\n"
        "wx, R = torch.randn(1, 5, 2, 4, 3), torch.randn(2, 3, 4, 3, device='meta')\n"
        "try:\n"
        "    slstm(wx, R)\n"
        "except InputError as e:\n"
        "    print('refused:', e)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "refused: slstm: the C loops take CPU tensors, got R on meta" in run.stdout
