"""Checkpoints: load any TransformerLens-convertible model, train and sweep checkpoint series.

Sits above the analyzers: a sweep runs them on every checkpoint of a series.
"""

from tl_leadterms.checkpoints.loading import load_model, load_series
from tl_leadterms.checkpoints.series import load_windows, train_neox_series
from tl_leadterms.checkpoints.sweep import sweep
from tl_leadterms.checkpoints.sweep_table import SweepTable
from tl_leadterms.checkpoints.tiny import save_tiny_model

__all__ = [
    "SweepTable",
    "load_model",
    "load_series",
    "load_windows",
    "save_tiny_model",
    "sweep",
    "train_neox_series",
]
