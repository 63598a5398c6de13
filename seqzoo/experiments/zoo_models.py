"""The zoo's models at one width and depth: every seed system as a run-config ``model`` entry (see sweep/train_run.py).

* single-mixer stacks (SwiGLU MLP, ratio 2): ``attention`` (the reference), ``local_attention`` (window T/4, so
  the window is smaller than the sequence), ``gateloop`` (Katsch 2023, arXiv:2311.01927), ``mlstm`` and ``slstm``
  (Beck et al. 2024, arXiv:2405.04517);
* ``xlstm``: mLSTM blocks with one sLSTM block in every 8 (xLSTM[7:1], paper §4), its last block sLSTM when the
  stack is shallower than 8, with the paper's initialisation;
* ``hawk`` and ``griffin`` (De et al. 2024, arXiv:2402.19427 §2): RG-LRU blocks, D_RNN = 4D/3, gated GeLU MLP;
  Griffin's pattern (RG-LRU, RG-LRU, local MQA with window T/4) is cut to (RG-LRU, local MQA) below 3 layers.

* ``rmt``: the Recurrent Memory Transformer (Bulatov et al., arXiv:2207.06881) around the ``attention`` stack, with
  read/write memory tokens and segments of T/2, so most queries fall into a later segment than their fact (probes
  that name it in ``Probe.models``);
* ``orchid`` and ``attention_encoder``: bidirectional encoders (Orchid, Karami & Ghodsi, arXiv:2402.18508, §4's
  recall model) for encoder-side probes (recall as classification); attention is their reference.

Attention settings of the zoo (a zoo choice, not the presets' defaults): ``ZOO_HEADS = 4`` heads (without it the
mixer's default is one head of dimension 64, which stays on the recall plateau; the full suite's MQAR at T 64 needs
2 heads of 32, its ``attention_heads``) and RoPE base ``ZOO_ROPE_BASE = 100`` for
``attention``, ``local_attention``, RMT's backbone and Griffin's local MQA. With head dimension 16 and the usual
base 10000 almost every rotary frequency is too slow to tell neighbouring positions apart, so the previous-token
head that recall needs forms late and attention sits on the MQAR plateau for hundreds of steps (docs/zoo.md).

A mixer class may declare ``zoo_kwargs`` / ``zoo_block_kwargs`` (its constructor / block arguments at this scale).
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError
from ..mixers import MIXERS
from .zoo_builders import ZOO_HEADS, ZOO_ROPE_BASE, single_mixer_config

SINGLE = ("attention", "local_attention", "gateloop", "mlstm", "slstm")
LM_MODELS = (*SINGLE, "xlstm", "hawk", "griffin")  # every probe without its own model list
PROBE_ONLY = ("rmt", "orchid", "attention_encoder")  # only on probes that name them (Probe.models)
ZOO_MODELS = (*LM_MODELS, *PROBE_ONLY)
RMT_MEM_TOKENS = 4
DESCRIPTIONS = {
    "attention": "softmax attention, RoPE (the reference)",
    "local_attention": "sliding-window attention, window T/4",
    "gateloop": "GateLoop, data-controlled complex transitions",
    "mlstm": "mLSTM blocks",
    "slstm": "sLSTM blocks",
    "xlstm": "xLSTM[7:1]: mLSTM with one sLSTM per 8 blocks (last block when fewer)",
    "hawk": "Hawk: RG-LRU blocks",
    "griffin": "Griffin: RG-LRU + local MQA (window T/4)",
    "rmt": f"RMT: {RMT_MEM_TOKENS} read/write memory tokens around the attention stack, segments of T/2",
    "orchid": "Orchid encoder (data-dependent global convolution), recall as classification",
    "attention_encoder": "bidirectional attention encoder with Orchid's short convolution (its reference)",
}


def model_spec(
    name: str, vocab_size: int, d_model: int, n_layers: int, seq_len: int, attention_heads: int = ZOO_HEADS
) -> dict[str, Any]:
    """The run-config ``model`` entry of zoo model ``name``: ``{"type": "lm", "config": ..., "init": ...}`` or a
    ``{"builder": ..., "args": ...}`` for RMT and the encoders. ``attention_heads``: the head count of
    ``attention``, ``local_attention`` and RMT's backbone (a suite setting, ``SUITES[...]["attention_heads"]``)."""
    window = max(4, seq_len // 4)
    init = None
    if name == "rmt":
        args = {"d_model": d_model, "n_layers": n_layers, "segment_size": max(1, seq_len // 2)}
        # named only where it differs from the default, so runs of the default keep their configuration hashes
        heads = {} if attention_heads == ZOO_HEADS else {"n_heads": attention_heads}
        return {
            "builder": "seqzoo.experiments.zoo_builders:rmt_model",
            "args": {**args, "num_mem_tokens": RMT_MEM_TOKENS, **heads},
        }
    if name in ("orchid", "attention_encoder"):
        mixer = "orchid" if name == "orchid" else "attention"
        args = {"mixer": mixer, "d_model": d_model, "n_layers": n_layers}
        return {"builder": "seqzoo.experiments.orchid_models:ar_model", "args": args}
    if name in ("attention", "local_attention"):
        kw = {"window": window} if name == "local_attention" else {}
        cfg = single_mixer_config(
            name, vocab_size, d_model, n_layers, rope_base=ZOO_ROPE_BASE, n_heads=attention_heads, **kw
        )
    elif name in SINGLE or name in MIXERS:
        cfg = single_mixer_config(name, vocab_size, d_model, n_layers)
    elif name == "xlstm":
        from ..models.presets.xlstm import xlstm_config

        at = [i for i in range(n_layers) if i % 8 == 7] or [n_layers - 1]
        cfg = xlstm_config(
            d_model, n_layers, at, vocab_size=vocab_size, mlstm_n_heads=2, slstm_n_heads=4, chunk_size=64
        )
        init = "xlstm"
    elif name in ("hawk", "griffin"):
        from ..models.presets.griffin import griffin_config

        d_rnn = max(16, (4 * d_model // 3) // 16 * 16)
        cfg = griffin_config(name, vocab_size, d_model, d_rnn, n_layers, 4, n_blocks=4, window=window)
        if name == "griffin":  # its local MQA has RoPE: the zoo's base (see the module docstring)
            kw = {
                **cfg.mixer_kwargs,
                "local_attention": {**cfg.mixer_kwargs["local_attention"], "rope_base": ZOO_ROPE_BASE},
            }
            cfg = cfg.replace(mixer_kwargs=kw)
    else:
        raise InputError(
            f"models: unknown zoo model {name!r}; expected some of {', '.join(ZOO_MODELS)} or a mixer name"
        )
    return {"type": "lm", "config": cfg.to_dict(), "init": init}
