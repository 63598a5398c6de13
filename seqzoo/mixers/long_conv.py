"""Static implicit long convolution (the Hyena-style baseline for Orchid).

Poli et al., "Hyena Hierarchy", arXiv:2302.10866; the baseline of Orchid (arXiv:2402.18508, §4.1):

    y = out_proj( x0 . (h_0 * (x1 . v) + D . (x1 . v)) + h_res * u + D_res . u )

i.e. the identical order-1.5 Orchid block with the data-dependent kernel removed (h = h_0, a fixed
implicit filter h_0 = FFN(PosEmb(t)) . window), so Orchid and this baseline differ by the conditioning
network only. Non-causal (circular convolution and centred short convs by default), state None.
"""

from __future__ import annotations

from ..errors import InputError
from .base import register_mixer
from .orchid import Orchid


@register_mixer("long_conv")
class LongConv(Orchid):
    """Orchid with ``conditioning="none"``: a static (input-independent) long convolution."""

    test_kwargs = {"l_max": 32, "filter_width": 16}

    def __init__(self, d_model: int, **kwargs):
        if kwargs.pop("conditioning", "none") != "none":
            raise InputError(
                "long_conv has no conditioning network; use the 'orchid' mixer for a data-dependent kernel"
            )
        super().__init__(d_model, conditioning="none", **kwargs)
