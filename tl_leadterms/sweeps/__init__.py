"""Analyses over time: checkpoint sweeps (local or on Ray) and the training monitor.

* :mod:`~tl_leadterms.sweeps.run`: :func:`sweep` over a series of checkpoints, resumable;
  its inputs (:mod:`~tl_leadterms.sweeps.inputs`), analyses (:mod:`~tl_leadterms.sweeps.analyses`),
  results file (:mod:`~tl_leadterms.sweeps.results`) and table (:class:`SweepTable`);
* :mod:`~tl_leadterms.sweeps.on_ray`: one Ray task per checkpoint;
* :mod:`~tl_leadterms.sweeps.monitor`: :class:`LeadingTermMonitor`, a training run watched;
* :mod:`~tl_leadterms.sweeps.figure`: the sweep heatmaps.
"""

from tl_leadterms.sweeps.figure import plot_sweep, plot_sweep_null, report_section
from tl_leadterms.sweeps.monitor import LeadingTermMonitor
from tl_leadterms.sweeps.on_ray import RayExecutor
from tl_leadterms.sweeps.run import sweep
from tl_leadterms.sweeps.table import SweepTable

__all__ = [
    "LeadingTermMonitor",
    "RayExecutor",
    "SweepTable",
    "plot_sweep",
    "plot_sweep_null",
    "report_section",
    "sweep",
]
