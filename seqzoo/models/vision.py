"""ViT-style image classifier over the ``Encoder`` trunk (Orchid, arXiv:2402.18508, §4.3).

    pixels (B, H*W*C) or (B, C, H, W)  ->  p x p patches in raster order (B, N, p*p*C)
    -> Linear patch embedding + learned position embedding (B, N, D)  -> Encoder blocks (any mixer pattern)
    -> final norm -> mean pool over patches -> class logits (B, n_classes)

Image geometry lives in ``ModelConfig.extra``: ``image_size``, ``patch_size``, ``channels``, ``max_value``
(integer pixels are divided by it). The class is registered as model type ``"vision"``, so presets with
``kind="vision"``, ``save_pretrained`` and ``from_pretrained`` work as for the other models.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from ..errors import InputError
from .base import MODEL_TYPES
from .config import ModelConfig
from .encoder import Encoder, EncoderOutput


class VisionClassifier(Encoder):
    model_type = "vision"

    def __init__(self, config: ModelConfig):
        ex = config.extra
        for key in ("image_size", "patch_size"):
            if not isinstance(ex.get(key), int) or ex[key] <= 0:
                raise InputError(
                    f"ModelConfig.extra[{key!r}] must be a positive int for a VisionClassifier, got {ex.get(key)!r}"
                )
        if ex["image_size"] % ex["patch_size"]:
            raise InputError(f"patch_size={ex['patch_size']} must divide image_size={ex['image_size']}")
        if not config.n_classes:
            raise InputError("a VisionClassifier needs ModelConfig.n_classes")
        super().__init__(config)
        self.image_size, self.patch_size = ex["image_size"], ex["patch_size"]
        self.channels, self.max_value = ex.get("channels", 1), float(ex.get("max_value", 1.0))
        self.n_patches = (self.image_size // self.patch_size) ** 2
        self.patch_embed = nn.Linear(self.channels * self.patch_size**2, config.d_model)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.n_patches, config.d_model))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)

    def patchify(self, pixels: torch.Tensor) -> torch.Tensor:
        """``(B, H*W*C)`` (raster order, channels last) or ``(B, C, H, W)`` -> ``(B, N, p*p*C)``."""
        S, C, p = self.image_size, self.channels, self.patch_size
        if pixels.dim() == 2 and pixels.shape[1] == S * S * C:
            img = rearrange(pixels, "b (h w c) -> b c h w", h=S, w=S, c=C)
        elif pixels.dim() == 4 and pixels.shape[1:] == (C, S, S):
            img = pixels
        else:
            raise InputError(
                f"pixels must have shape (B, {S * S * C}) or (B, {C}, {S}, {S}), got {tuple(pixels.shape)}"
            )
        img = img.to(self.patch_embed.weight.dtype) / self.max_value
        return rearrange(img, "b c (h p) (w q) -> b (h w) (p q c)", p=p, q=p)  # raster order of patches

    def forward(self, input_ids=None, labels=None, inputs_embeds=None, head: str = "cls", mode=None) -> EncoderOutput:
        if input_ids is not None:
            inputs_embeds = self.patch_embed(self.patchify(input_ids)) + self.pos_embed  # (B, N, D)
            input_ids = None
        return super().forward(input_ids=input_ids, labels=labels, inputs_embeds=inputs_embeds, head=head, mode=mode)


MODEL_TYPES["vision"] = VisionClassifier
