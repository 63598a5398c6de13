"""Models: causal LM and bidirectional encoder over a per-layer mixer pattern; presets by name."""

from .base import MODEL_TYPES, SeqzooModel
from .config import ModelConfig
from .encoder import Encoder, EncoderOutput
from .lm import LanguageModel, LMOutput, lm_loss
from .presets import PRESETS, Preset, build_model, register_preset
from .rmt import RMT, RMTConfig, RMTOutput

__all__ = [
    "MODEL_TYPES",
    "PRESETS",
    "RMT",
    "Encoder",
    "EncoderOutput",
    "LMOutput",
    "LanguageModel",
    "ModelConfig",
    "Preset",
    "RMTConfig",
    "RMTOutput",
    "SeqzooModel",
    "build_model",
    "lm_loss",
    "register_preset",
]
