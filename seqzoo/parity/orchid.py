"""Parity with the Orchid authors' standalone block (stored fixtures ``fixtures/orchid``; docs/orchid.md "Parity with the authors' block").

    python -m seqzoo.parity.orchid /path/to/shared/fixtures/orchid

loads each case's weights into a seqzoo ``Orchid`` built with the authors' conventions
(``fft_scaling="authors"``: spectra scaled by 1/n, ``type2_layout="authors"``, causal short conv,
centred zero-padded conditioning convs) and reports the largest gap to every stored output and
intermediate. ``type1_padded`` (the authors' ``causal=True`` path) is not seqzoo's ``conv="linear"``,
so only its conditioning intermediates are compared (docs/orchid.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..errors import InputError
from ..mixers.orchid import Orchid

CASES = ("type1_circular", "type2_circular", "type1_padded", "type2_sigmoid_abs")
_COND_TYPE = {"absfreq": "type1", "corrTime": "type2"}
_SIGMA = {"id": "identity", "sigmoid_abs": "sigmoid"}


def load_case(directory: str | Path, case: str) -> tuple[dict[str, torch.Tensor], dict]:
    """The tensors and the JSON description of one fixture case."""
    directory = Path(directory)
    tensors = load_file(str(directory / f"{case}.safetensors"))
    meta = json.loads((directory / f"{case}.json").read_text())
    return tensors, meta


def orchid_kwargs(meta: dict) -> dict:
    """Map the authors' constructor arguments to ``Orchid`` keyword arguments."""
    kw, ck = meta["constructor_kwargs"], meta["constructor_kwargs"]["conv_kernel"]
    if ck["type"] not in _COND_TYPE:
        raise InputError(f"unsupported conditioning type {ck['type']!r} in fixture")
    return dict(
        d_model=kw["d_model"],
        l_max=kw["l_max"],
        conditioning=_COND_TYPE[ck["type"]],
        sigma=_SIGMA.get(ck.get("actq", "id"), "identity"),
        sigma_eps=1e-6,
        conv="linear" if kw.get("causal", True) else "circular",
        conv_size=kw["short_filter_order"],
        short_padding="causal",
        cond_kernel=ck["conv_filter_size"],
        cond_padding="zeros",
        freq_kernel=ck["conv_filter_size"],
        filter_emb_dim=kw["emb_dim"],
        filter_width=kw["filter_order"],
        filter_inner=kw["num_inner_mlps"],
        filter_w=kw["w"],
        residual_long_conv=True,
        fft_scaling="authors",
        type2_layout="authors",
    )


def _filter_map(prefix: str, ours: str, n_inner: int) -> dict[str, str]:
    m = {
        f"{prefix}.bias": f"{ours}.skip",
        f"{prefix}.pos_emb.z": f"{ours}.pos_z",
        f"{prefix}.pos_emb.t": f"{ours}.pos_t",
        f"{prefix}.modulation.deltas": f"{ours}.deltas",
        f"{prefix}.implicit_filter.1.freq": f"{ours}.freq",
    }
    for i in range(n_inner + 2):  # Linears sit at even indices 0, 2, ..., Sins (shared freq) at odd ones
        m[f"{prefix}.implicit_filter.{2 * i}.weight"] = f"{ours}.linears.{i}.weight"
        m[f"{prefix}.implicit_filter.{2 * i}.bias"] = f"{ours}.linears.{i}.bias"
    return m


def name_map(conditioning: str, n_inner: int) -> dict[str, str]:
    """Authors' state_dict name -> seqzoo ``Orchid`` name (shared Sin frequencies map from layer 1)."""
    m = {
        "in_linear.weight": "in_proj.weight",
        "in_linear.bias": "in_proj.bias",
        "out_linear.weight": "out_proj.weight",
        "out_linear.bias": "out_proj.bias",
        "conv1d_short.weight": "short_conv.weight",
        "conv1d_short.bias": "short_conv.bias",
    }
    m.update(_filter_map("fixed_conv", "filter", n_inner))
    m.update(_filter_map("fixed_conv_res", "filter_res", n_inner))
    cn = "conv_kernel_nn"
    if conditioning == "type1":
        parts = {"nn_model": ("time_conv", "time_norm"), "nn_model2": ("freq_conv", "freq_norm")}
    else:
        parts = {
            "nn_model_k": ("k_conv", "k_norm"),
            "nn_model_q": ("q_conv", "q_norm"),
            "nn_model_frq": ("freq_conv", "freq_norm"),
        }
    for theirs, (conv, norm) in parts.items():
        for p in ("weight", "bias"):
            m[f"{cn}.{theirs}.conv1d_ls.0.{p}"] = f"cond.{conv}.{p}"
            m[f"{cn}.{theirs}.norm_ls.0.norm_conv_kernel.{p}"] = f"cond.{norm}.{p}"
    return m


def build_from_case(tensors: dict[str, torch.Tensor], meta: dict, dtype=torch.float64) -> Orchid:
    """A seqzoo Orchid holding the fixture's weights (every mixer tensor is set, strictly)."""
    kwargs = orchid_kwargs(meta)
    mixer = Orchid(**kwargs)
    official = {k: v for k, v in tensors.items() if ":" not in k}
    names = name_map(kwargs["conditioning"], kwargs["filter_inner"])
    sd = {}
    for theirs, v in official.items():
        if ".implicit_filter." in theirs and theirs.endswith(".freq") and not theirs.endswith(".1.freq"):
            first = theirs.rsplit(".", 2)[0] + ".1.freq"  # every Sin layer lists the one shared tensor
            if not torch.equal(v, official[first]):
                raise InputError(f"{theirs} differs from {first}: the Sin frequencies are expected to be shared")
            continue
        if theirs not in names:
            raise KeyError(f"no seqzoo name for the authors' tensor {theirs!r}")
        sd[names[theirs]] = v
    mixer.load_state_dict(sd, strict=True)
    return mixer.to(dtype).eval()


def _complex(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_complex(t.contiguous())


def compare_case(directory: str | Path, case: str, dtype=torch.float64) -> dict[str, float]:
    """Max abs gap between seqzoo and every comparable fixture tensor of one case."""
    tensors, meta = load_case(directory, case)
    m = build_from_case(tensors, meta, dtype)
    x = tensors["input:x"].to(dtype)
    T = x.shape[1]
    n = m.fft_size(T)
    gaps: dict[str, float] = {}

    def gap(name, ours):
        ref = tensors[name].to(ours.dtype if not ours.is_complex() else ours.real.dtype)
        ours = torch.view_as_real(ours) if ours.is_complex() else ours
        gaps[name] = float((ours.detach() - ref).abs().max())

    with torch.no_grad():
        z = m.in_proj(x)
        gap("inter:in_linear", z)
        gap("inter:h0", m.filter.kernel(T).T[None])
        gap("inter:h0_res", m.filter_res.kernel(T).T[None])
        c = m.conditioning_input(x, z, None)
        from ..ops.fftconv import rfft

        if m.conditioning == "type1":
            a = m.cond._time(c, m.cond.time_conv, m.cond.time_norm)
            gap("inter:conv_kernel_nn.nn_model", a.transpose(1, 2))
            gap("inter:conv_kernel_nn.nn_model2.input", m.cond.features(c, n, rfft, 1.0 / n).transpose(1, 2))
        else:
            K = rfft(m.cond._time(c, m.cond.k_conv, m.cond.k_norm), n) / n
            Q = rfft(m.cond._time(c, m.cond.q_conv, m.cond.q_norm), n) / n
            gap("inter:cond_K", K)
            gap("inter:cond_Q", Q)
            if "inter:cond_Q_gated" in tensors:
                gap("inter:cond_Q_gated", m.cond.gate(Q))
        H_theta = m.adaptive_spectrum(x, z)
        gap("inter:H_theta", H_theta)
        if m.conv == "linear":  # the authors' causal=True path is not seqzoo's linear conv
            return gaps
        y, _ = m(x)
        gap("output:y_fp64" if dtype == torch.float64 else "output:y", y)
        gap("inter:H0", m._static_spectrum(m.filter, T, n, "fft", dtype))
        gap("inter:H0_res", m._static_spectrum(m.filter_res, T, n, "fft", dtype))
    return gaps


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    directory = Path(argv[0]) if argv else Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "orchid"
    for case in CASES:
        for dtype in (torch.float64, torch.float32):
            gaps = compare_case(directory, case, dtype)
            worst = max(gaps, key=gaps.get)
            print(
                f"{case:18s} {dtype!s:14s} max gap {gaps[worst]:.2e} ({worst}); "
                + ", ".join(f"{k.split(':')[1]}={v:.1e}" for k, v in gaps.items())
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
