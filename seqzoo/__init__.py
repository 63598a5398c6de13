"""seqzoo: efficient long-sequence architectures behind one PyTorch interface.

import seqzoo
model = seqzoo.build_model("attention-tiny")
out = model(ids, labels=labels)      # out.logits (B, T, V), out.loss
"""

__version__ = "0.1.0"

from .mixers import MIXERS, Mixer, build_mixer, register_mixer
from .models import PRESETS, Encoder, LanguageModel, ModelConfig, build_model

__all__ = [
    "MIXERS",
    "PRESETS",
    "Encoder",
    "LanguageModel",
    "Mixer",
    "ModelConfig",
    "__version__",
    "build_mixer",
    "build_model",
    "register_mixer",
]
