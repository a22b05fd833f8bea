"""Plots: circuitsvis views (offline HTML) and static matplotlib figures.

Importing this package registers each result's ``.plot()``: a ``Decomposition`` draws
:func:`plot_scores`, a ``TrainHistory`` :func:`plot_history`, a ``SweepTable``
:func:`plot_sweep` (its first score unless ``score=`` is given), a ``HeadAtlas``
:func:`plot_atlas`, an ``AttentionAgreement`` :func:`plot_agreement`, a
``CovarianceSimilarity`` :func:`plot_covariance`, an ``AblationTable`` :func:`plot_ablation`
and ``TokenMaps`` :func:`plot_token_maps`.

>>> from tl_leadterms.plot import View, plot_associations, plot_attention, plot_history
"""

from tl_leadterms.analyzers.table import register_plot
from tl_leadterms.plot.associations import plot_associations
from tl_leadterms.plot.atlas import plot_atlas
from tl_leadterms.plot.explorer import Explorer, explore
from tl_leadterms.plot.figures import plot_history, plot_scores, plot_sweep, plot_sweep_null
from tl_leadterms.plot.html import View, figure_html, save_html
from tl_leadterms.plot.result_figures import (
    plot_ablation,
    plot_agreement,
    plot_covariance,
    plot_token_maps,
)
from tl_leadterms.plot.views import plot_attention


def _sweep_plot(table, score=None, **kwargs):
    """:func:`plot_sweep` of ``table``, its first ``(analysis, score)`` by default."""
    if score is None:
        kwargs.setdefault("analysis", table.scores()[0][0])
        score = table.scores()[0][1]
    return plot_sweep(table, score, **kwargs)


register_plot("Decomposition", plot_scores)
register_plot("TrainHistory", plot_history)
register_plot("SweepTable", _sweep_plot)
register_plot("HeadAtlas", plot_atlas)
register_plot("AttentionAgreement", plot_agreement)
register_plot("CovarianceSimilarity", plot_covariance)
register_plot("AblationTable", plot_ablation)
register_plot("TokenMaps", plot_token_maps)

__all__ = [
    "Explorer",
    "View",
    "explore",
    "figure_html",
    "plot_ablation",
    "plot_agreement",
    "plot_associations",
    "plot_atlas",
    "plot_attention",
    "plot_covariance",
    "plot_history",
    "plot_scores",
    "plot_sweep",
    "plot_sweep_null",
    "plot_token_maps",
    "save_html",
]
