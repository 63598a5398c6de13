"""The model builders of the Orchid experiments and of the zoo's encoder probe (``ar_model``, ``vision_model``,
``mlm_model``): a run configuration names one as ``{"builder": "seqzoo.experiments.orchid_models:...", "args":
...}``, and the run key hashes this file's source (``sweep/grid.py``), so the builders live apart from the
experiments' tables and plots: editing a report does not retrain a run.
"""

from __future__ import annotations


def ar_model(task, mixer: str, d_model: int, n_layers: int, **mixer_kwargs):
    """The §8 recall model (``orchid_ar_config``) for ``task`` (associative_recall); ``mixer_kwargs`` (e.g. the
    implicit filters' optimiser rule, ``filter_optim``) go to the mixer."""
    from ..models import Encoder
    from ..models.presets.orchid import orchid_ar_config

    return Encoder(orchid_ar_config(mixer, task.vocab_size, task.seq_len, d_model, n_layers, **mixer_kwargs))


def vision_config(mixer: str, task, patch: int, d_model: int, n_layers: int, mlp_hidden: int | None = None):
    from ..models.presets.orchid import orchid_vit_config

    return orchid_vit_config(
        mixer,
        d_model=d_model,
        n_layers=n_layers,
        image_size=task.image_size,
        patch_size=patch,
        channels=task.channels,
        max_value=float(task.max_value),
        mlp_hidden=mlp_hidden,
        **({"param_groups": False} if mixer in ("orchid", "long_conv") else {}),
    )


def vision_model(task, mixer: str, patch: int, d_model: int, n_layers: int, mlp_hidden: int | None = None):
    """The ViT-style classifier with ``mixer`` in every block, for an image task."""
    from ..models.vision import VisionClassifier

    return VisionClassifier(vision_config(mixer, task, patch, d_model, n_layers, mlp_hidden))


def mlm_model(task, mixer: str, d_model: int, n_layers: int, filter_width: int):
    """Orchid-BERT (M2-style) for ``task`` (mlm); another ``mixer`` takes the Orchid slot of the same model."""
    from ..models import Encoder
    from ..models.presets.orchid import orchid_bert_config

    cfg = orchid_bert_config(
        d_model, n_layers=n_layers, filter_width=filter_width, seq_len=task.seq_len, vocab_size=task.vocab_size
    )
    if mixer != "orchid":
        kw = {
            "attention": {"n_heads": 4, "rope_fraction": 0.0},  # BERT: learned positions only
            "long_conv": {"l_max": task.seq_len, "filter_width": filter_width},
        }.get(mixer, {})
        cfg = cfg.replace(pattern=[mixer], mixer_kwargs={mixer: kw})
    return Encoder(cfg)
