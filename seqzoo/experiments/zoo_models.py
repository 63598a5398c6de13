"""The zoo's models at one width and depth: every seed system as a run-config ``model`` entry (see sweep/train_run.py).

* single-mixer stacks (SwiGLU MLP, ratio 2): ``attention`` (the reference), ``local_attention`` (window T/4, so
  the window is smaller than the sequence), ``gateloop`` (Katsch 2023, arXiv:2311.01927), ``mlstm`` and ``slstm``
  (Beck et al. 2024, arXiv:2405.04517);
* ``xlstm``: mLSTM blocks with one sLSTM block in every 8 (xLSTM[7:1], paper §4), its last block sLSTM when the
  stack is shallower than 8, with the paper's initialisation;
* ``hawk`` and ``griffin`` (De et al. 2024, arXiv:2402.19427 §2): RG-LRU blocks, D_RNN = 4D/3, gated GeLU MLP;
  Griffin's pattern (RG-LRU, RG-LRU, local MQA with window T/4) is cut to (RG-LRU, local MQA) below 3 layers.

A mixer class may declare ``zoo_kwargs`` / ``zoo_block_kwargs`` (its constructor / block arguments at this scale).
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError
from ..mixers import MIXERS
from ..models import ModelConfig

SINGLE = ("attention", "local_attention", "gateloop", "mlstm", "slstm")
ZOO_MODELS = (*SINGLE, "xlstm", "hawk", "griffin")
DESCRIPTIONS = {
    "attention": "softmax attention, RoPE (the reference)",
    "local_attention": "sliding-window attention, window T/4",
    "gateloop": "GateLoop, data-controlled complex transitions",
    "mlstm": "mLSTM blocks",
    "slstm": "sLSTM blocks",
    "xlstm": "xLSTM[7:1]: mLSTM with one sLSTM per 8 blocks (last block when fewer)",
    "hawk": "Hawk: RG-LRU blocks",
    "griffin": "Griffin: RG-LRU + local MQA (window T/4)",
}


def single_mixer_config(mixer: str, vocab_size: int, d_model: int, n_layers: int, **mixer_kwargs: Any) -> ModelConfig:
    cls = MIXERS[mixer]
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        pattern=[mixer],
        mixer_kwargs={mixer: {**getattr(cls, "zoo_kwargs", {}), **mixer_kwargs}},
        block_kwargs={mixer: dict(getattr(cls, "zoo_block_kwargs", {}))},
        mlp="swiglu",
        mlp_ratio=2.0,
    )


def model_spec(name: str, vocab_size: int, d_model: int, n_layers: int, seq_len: int) -> dict[str, Any]:
    """``{"type": "lm", "config": ModelConfig dict, "init": ...}`` for zoo model ``name``."""
    window = max(4, seq_len // 4)
    init = None
    if name == "local_attention":
        cfg = single_mixer_config(name, vocab_size, d_model, n_layers, window=window)
    elif name in SINGLE or name in MIXERS:
        cfg = single_mixer_config(name, vocab_size, d_model, n_layers)
    elif name == "xlstm":
        from ..models.presets.xlstm import xlstm_config

        at = [i for i in range(n_layers) if i % 8 == 7] or [n_layers - 1]
        cfg = xlstm_config(d_model, n_layers, at, vocab_size=vocab_size, mlstm_heads=2, slstm_heads=4, chunk_size=64)
        init = "xlstm"
    elif name in ("hawk", "griffin"):
        from ..models.presets.griffin import griffin_config

        d_rnn = max(16, (4 * d_model // 3) // 16 * 16)
        cfg = griffin_config(name, vocab_size, d_model, d_rnn, n_layers, 4, n_blocks=4, window=window)
        if name == "griffin" and n_layers < 3:
            cfg = cfg.replace(pattern=["rglru", "local_attention"])
    else:
        raise InputError(
            f"models: unknown zoo model {name!r}; expected some of {', '.join(ZOO_MODELS)} or a mixer name"
        )
    return {"type": "lm", "config": cfg.to_dict(), "init": init}
