"""Published numbers the calibration page (``calibration.py``) sets beside seqzoo's measurements: plain data.

Three anchors, each a list of :class:`Published` entries keyed by the setting of the experiment that measures it:

* ``zoology-mqar``: Zoology's Fig. 2 (Arora et al., arXiv:2312.04927), MQAR accuracy at V = 8,192, 2 layers, best
  of 4 learning rates, per (T, pairs, d_model); the key is ``(seq_len, num_pairs, d_model)`` of ``seqzoo experiment
  zoology-mqar``. Attention is the calibration; Hyena, RWKV, H3 and BaseConv are context.
* ``xlstm-mqar``: the MQAR figure of the xLSTM paper (Beck et al., arXiv:2405.04517, §4.1): not found (below).
* ``mad``: the per-task MAD scores of MAD (Poli et al., arXiv:2403.17844); the key is ``(task, "all")`` of ``seqzoo
  experiment mad`` (a task's score is the mean over all of its settings). Not found (below).

A value is a fraction in [0, 1] (a percentage is stored divided by 100). ``kind`` says how it was obtained:
``"table"`` (printed in a table), ``"plot"`` (read off a figure, to within ``precision``) or ``"not found"``
(``value`` None: no number is written that was not read in a source).

How the Zoology values were read: the figure is ``assets/figure2.png`` of the HazyResearch/zoology repository, which
its README shows as the paper's Figure 2 (1391 × 271 pixels). The y axis runs 36.3 pixels per 0.25 (gridlines at
0, 0.25, 0.5, 0.75; the 1.00 gridline lies under the Attention line), so a pixel is 0.007. A value is the vertical
centre of a model's marker at the gridline of its d_model, found by the marker's colour; markers drawn over by
another model's marker are left out (a marker is kept only where at least 55 of its pixels are visible), so those
cells are ``not found``. Attention's markers at T = 64, d_model 128–512 are hidden under H3's and BaseConv's; its
line is visible to within 8 pixels on either side of each, at accuracy 1.00, so they are read from the line.

Where the MAD and xLSTM numbers were looked for: the stored arXiv HTML pages of 2403.17844v2 and 2405.04517 return
only their opening sections to the search, not the tables or figures; athms/mad-lab holds the protocol and task
configurations but no result files; NX-AI/xlstm holds no figure data. The xLSTM MQAR figure's settings (sequence
length, pairs, widths) were not read either, so its entries carry no setting key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ZOOLOGY_FIG2 = (
    "arXiv:2312.04927 Fig. 2, as HazyResearch/zoology assets/figure2.png (shown in its README as the paper's Figure 2)"
)
XLSTM_MQAR = "arXiv:2405.04517 §4.1, the MQAR figure"
MAD_TABLE = "arXiv:2403.17844 (v2), the per-task MAD scores"


@dataclass(frozen=True)
class Published:
    """One published number: ``model`` as the source names it, ``key`` the setting (anchor's ``key_names``; None
    where the setting itself was not found), ``value`` a fraction or None, its ``source``, ``kind`` and the read-off
    ``precision`` (plots only)."""

    anchor: str
    model: str
    key: tuple[Any, ...] | None
    value: float | None
    source: str
    kind: str  # "table" | "plot" | "not found"
    precision: float | None = None


@dataclass(frozen=True)
class Anchor:
    """An anchor: the experiment whose rows it matches, the names of its key, the published model that calibrates
    (``reference``) against our family ``family``, the tolerance of a verdict, and the paper's training budget per
    run where it was read: ``epochs`` passes over ``train_size`` examples (None: not found; ``train_size`` None:
    the setting's own, MAD's ``train_size`` of ``experiments/mad.py: SETTINGS``), in words with its source in
    ``budget``."""

    name: str
    experiment: str
    key_names: tuple[str, ...]
    reference: str
    family: str
    tolerance: float
    budget: str
    epochs: int | None = None
    train_size: int | None = None


ZOOLOGY_CONFIG = "HazyResearch/zoology zoology/experiments/paper_configs/iclr24_zoology_figure2/configs.py"
MAD_CONFIG = "athms/mad-lab mad/configs.py (epochs 200, batch 128) and configs/tasks/*.yml (training-set sizes)"

ANCHORS = {
    "zoology-mqar": Anchor(
        name="zoology-mqar",
        experiment="zoology-mqar",
        key_names=("seq_len", "num_pairs", "d_model"),
        reference="Attention",
        family="attention",
        tolerance=0.05,
        # at most: Zoology stops a run early once its validation accuracy reaches 0.99 (zoology/config.py)
        budget=f"100,000 training examples × up to 64 epochs, early stop at accuracy 0.99 ({ZOOLOGY_CONFIG})",
        epochs=64,
        train_size=100_000,
    ),
    "xlstm-mqar": Anchor(
        name="xlstm-mqar",
        experiment="zoology-mqar",
        key_names=("seq_len", "num_pairs", "d_model"),
        reference="Llama",
        family="attention",
        tolerance=0.05,
        budget="not found",
    ),
    "mad": Anchor(
        name="mad",
        experiment="mad",
        key_names=("task", "setting"),
        reference="Transformer",
        family="attention",
        tolerance=0.05,  # "within ±5 points" of accuracy in percent
        budget=f"200 epochs of each setting's training set, batch 128 ({MAD_CONFIG})",
        epochs=200,
    ),
}

# (T, pairs) -> model -> values at d_model 64, 128, 256, 512 (None: marker hidden, not read)
_ZOOLOGY_READ: dict[tuple[int, int], dict[str, tuple[float | None, ...]]] = {
    (64, 4): {
        "Attention": (1.00, 1.00, 1.00, 1.00),
        "Hyena": (0.52, 0.75, 0.85, 0.87),
        "RWKV": (None, None, None, None),
        "H3": (0.93, None, None, None),
        "BaseConv": (0.70, 0.95, 0.97, 1.00),
    },
    (128, 8): {
        "Attention": (1.00, 1.00, 1.00, 1.00),
        "Hyena": (None, None, None, 0.84),
        "RWKV": (0.18, 0.50, 0.76, None),
        "H3": (0.25, 0.74, 0.92, 0.76),
        "BaseConv": (0.38, 0.62, 0.84, 0.97),
    },
    (256, 16): {
        "Attention": (1.00, 1.00, 1.00, 1.00),
        "Hyena": (None, 0.14, 0.54, 0.69),
        "RWKV": (0.05, 0.06, 0.68, 0.80),
        "H3": (None, 0.64, None, None),
        "BaseConv": (0.14, 0.34, 0.81, 0.94),
    },
    (512, 64): {
        "Attention": (1.00, 1.00, 1.00, 1.00),
        "Hyena": (None, None, None, 0.18),
        "RWKV": (0.01, 0.02, 0.15, 0.37),
        "H3": (None, None, 0.02, 0.09),
        "BaseConv": (None, None, None, 0.71),
    },
}
ZOOLOGY_WIDTHS = (64, 128, 256, 512)
ZOOLOGY_PRECISION = 0.01  # a marker's centre to ±1 pixel (0.007), rounded to two decimals

MAD_TASKS = ("recall", "fuzzy-recall", "noisy-recall", "selective-copy", "compression", "memorization")
MAD_MODELS = ("Transformer", "Mamba", "Hyena", "GLA")
XLSTM_MODELS = ("xLSTM", "mLSTM", "Llama")


def _zoology() -> list[Published]:
    out = []
    for (T, P), models in _ZOOLOGY_READ.items():
        for model, values in models.items():
            for d, v in zip(ZOOLOGY_WIDTHS, values):
                kind, precision = ("plot", ZOOLOGY_PRECISION) if v is not None else ("not found", None)
                out.append(Published("zoology-mqar", model, (T, P, d), v, ZOOLOGY_FIG2, kind, precision))
    return out


PUBLISHED: list[Published] = [
    *_zoology(),
    *(Published("xlstm-mqar", m, None, None, XLSTM_MQAR, "not found") for m in XLSTM_MODELS),
    *(Published("mad", m, (t, "all"), None, MAD_TABLE, "not found") for m in MAD_MODELS for t in MAD_TASKS),
]


def entries(anchor: str) -> list[Published]:
    """The published entries of ``anchor``, in the order above."""
    return [p for p in PUBLISHED if p.anchor == anchor]
