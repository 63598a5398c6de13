"""Training: one loop (``train``) for all models and tasks; optimiser groups; checkpoints; torchrun DDP/FSDP2."""

from .config import TrainConfig
from .curriculum import Curriculum, train_curriculum
from .loop import train
from .optim import build_optimizer, lr_factor, param_groups

__all__ = ["Curriculum", "TrainConfig", "build_optimizer", "lr_factor", "param_groups", "train", "train_curriculum"]
