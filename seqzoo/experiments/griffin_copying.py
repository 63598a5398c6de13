"""``seqzoo experiment griffin-copying``: selective copying and induction heads trained at one length and scored
at 4x, 8x and 16x it; the zoo's attention reference vs Hawk vs Griffin at equal width and depth (Griffin, De et al.,
arXiv:2402.19427 §6.2). Tasks in ``seqzoo/tasks/copying.py``; the shared machinery in ``length_gen.py``.

Both tasks rebuild at any length: their ids do not depend on ``seq_len`` (0 blank, 1 marker / trigger, data
tokens 2..V-1), the zoo's models have no position table (RoPE is computed for any position,
``seqzoo/ops/rope.py``), and Griffin's local attention keeps the window it was built with (T/4 of the training
length) at every evaluation length, as a deployed model would.
"""

from __future__ import annotations

from .length_gen import LengthStudy, register_study
from .zoo_probes import SUITES

STUDY = LengthStudy(
    name="griffin-copying",
    title="copying and retrieval past the training length (Griffin §6.2)",
    claim=(
        "Griffin §6.2: on selective copying and induction heads, models with attention (MQA, Griffin's local "
        "MQA) copy and retrieve where Hawk's fixed-size state degrades, and the paper reports how each model holds "
        "up when scored on sequences longer than it was trained on"
    ),
    tasks={
        "selective_copy": {"name": "selective_copy", "vocab_size": 16, "seq_len": 32, "n_tokens": 4},
        "induction_heads": {"name": "induction_heads", "vocab_size": 16, "seq_len": 32},
    },
    models=("attention", "hawk", "griffin"),
    factors=(1, 4, 8, 16),
    # the zoo full suite's budget (1500 steps x batch 64): attention learns both tasks within it (docs/zoo.md)
    budget=dict(SUITES["full"]["train"]),
    above=(("attention", "hawk"), ("griffin", "hawk"), ("hawk", "attention"), ("griffin", "attention")),
    notes=(
        "attention is the zoo's reference: 4 query heads of dimension 16 with 4 KV heads, RoPE base 100 (the "
        "paper's baseline is multi-query: one KV head); Griffin here is (RG-LRU, local MQA with window T/4) "
        "at depth 2",
        "selective_copy: accuracy over the n_tokens copied positions (context of seq_len blanks, the tokens "
        "spread over it); induction_heads: the last position only, chance 1/(V-2)",
    ),
)


run_griffin_copying = register_study(
    STUDY, "selective copy / induction heads at 1-16x the training length (Griffin §6.2)"
)
