"""Plots: circuitsvis views (offline HTML) and static matplotlib figures.

>>> from tl_leadterms.plot import View, plot_associations, plot_attention, plot_history
"""

from tl_leadterms.plot.associations import plot_associations
from tl_leadterms.plot.figures import plot_history, plot_scores, plot_sweep, plot_sweep_null
from tl_leadterms.plot.html import View, figure_html, save_html
from tl_leadterms.plot.views import plot_attention

__all__ = [
    "View",
    "figure_html",
    "plot_associations",
    "plot_attention",
    "plot_history",
    "plot_scores",
    "plot_sweep",
    "plot_sweep_null",
    "save_html",
]
