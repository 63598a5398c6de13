"""The sweep runner under every experiment and the zoo: a grid of (model × task setting × seed) runs.

* ``grid.py``: ``product`` of axes; :class:`RunSpec` is the one run schema of ``train/spec.py`` (run function,
  model / task / train / seed / eval sections, labels) and its key (hash of config and code version) comes from
  ``train/run_key.py``;
* ``runner.py``: :func:`run_sweep` (one folder per key under ``<root>/runs``; done runs skipped, cut runs resumed,
  ``procs`` processes pinned to one thread each);
* ``train_run.py``: the standard run (seed, build, train, evaluate);
* ``merge.py``: seeds aggregated (mean, min, max, n) into csv / json / md tables; separations beyond the spread;
* ``report.py``: ``report.md`` + self-contained ``report.html``;
* ``options.py``: strict experiment options (unknown keys refused by name).
"""

from .grid import RunSpec, code_version, data_digest, product
from .merge import aggregate, mean_curve, separations, write_tables
from .options import as_bool, as_list, choose, resolve_options
from .report import Report, plot_series
from .runner import run_sweep, seed_everything

__all__ = [
    "Report",
    "RunSpec",
    "aggregate",
    "as_bool",
    "as_list",
    "choose",
    "code_version",
    "data_digest",
    "mean_curve",
    "plot_series",
    "product",
    "resolve_options",
    "run_sweep",
    "seed_everything",
    "separations",
    "write_tables",
]
