"""Ablation (the paper's Table 3): remove a weight's projection onto its leading term.

Its computation and result (:class:`AblationTable`, :mod:`.compute`) and its figure
(:func:`plot_ablation`, :mod:`.figure`).
"""

from tl_leadterms.analyses.ablation.compute import AblationTable, ablate, evaluate_loss
from tl_leadterms.analyses.ablation.figure import plot_ablation
from tl_leadterms.results.sections import Section

__all__ = ["AblationTable", "ablate", "evaluate_loss", "plot_ablation", "report_section"]


def report_section(result: AblationTable) -> Section:
    """The report section of an ablation table: its table."""
    return Section("ablation", "Ablation of the leading terms", result._repr_html_())
