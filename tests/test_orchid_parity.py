"""Parity with the Orchid authors' standalone block (``fixtures/orchid`` under ``conftest.shared_dir()``; docs/orchid.md "Parity with the authors' block")."""

import pytest
import torch

from seqzoo.parity.orchid import CASES, build_from_case, compare_case, load_case


@pytest.mark.parametrize("case", CASES)
def test_float64_matches_the_authors(shared, case):
    gaps = compare_case(shared / "fixtures" / "orchid", case, torch.float64)
    tensors, _ = load_case(shared / "fixtures" / "orchid", case)
    if case != "type1_padded":
        ref = tensors["output:y_fp64"]
        assert gaps["output:y_fp64"] <= 1e-12 * float(ref.abs().max())
    # intermediates are stored in float32: compare at float32 rounding (README §7.6)
    for name, gap in gaps.items():
        if name != "output:y_fp64":
            assert gap <= 5e-5, f"{name}: {gap:.2e}"
    assert "inter:H_theta" in gaps


@pytest.mark.parametrize("case", CASES)
def test_float32_matches_the_authors(shared, case):
    directory = shared / "fixtures" / "orchid"
    tensors, meta = load_case(directory, case)
    gaps = compare_case(directory, case, torch.float32)
    for name, gap in gaps.items():
        assert gap <= 5e-5, f"{name}: {gap:.2e}"
    if case != "type1_padded":
        m = build_from_case(tensors, meta, torch.float32)
        with torch.no_grad():
            y, _ = m(tensors["input:x"])
        torch.testing.assert_close(y, tensors["output:y"], atol=1e-5, rtol=1.3e-6)


def test_exact_scaling_differs_from_the_authors(shared):
    """The default (exact) DFT scaling is not the authors' 1/n convention: the importer must set it."""
    directory = shared / "fixtures" / "orchid"
    tensors, meta = load_case(directory, "type1_circular")
    m = build_from_case(tensors, meta, torch.float64)
    m.fft_scaling = "exact"
    with torch.no_grad():
        y, _ = m(tensors["input:x"].double())
    ref = tensors["output:y_fp64"]
    assert float((y - ref).abs().max() / ref.abs().max()) > 1e-2
