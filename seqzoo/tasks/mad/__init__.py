"""The MAD synthetic task suite (Poli et al., "Mechanistic Design and Scaling of Hybrid Architectures",
arXiv:2403.17844), with the settings of its benchmark configurations as defaults.

Six tasks, each registered in ``TASKS``: ``mad-recall`` (in-context recall), ``mad-noisy-recall``,
``mad-fuzzy-recall``, ``mad-selective-copy``, ``mad-compression`` and ``mad-memorization``. MAD trains every task on
a fixed set of samples for many epochs (``train_size``, MAD's ``num_train_examples``; the trainer draws that set
once from the run's seed) and scores a separate test set; the ``train`` split and the ``valid`` / ``test`` splits of
a task may score different positions, as MAD's generators do (``recall.py``). docs/mad.md lists the settings.
"""

from . import compression, fuzzy_recall, memorization, recall, selective_copy

__all__ = ["compression", "fuzzy_recall", "memorization", "recall", "selective_copy"]
