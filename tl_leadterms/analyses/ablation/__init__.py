"""Ablation (the paper's Table 3): remove a weight's projection onto its leading term.

Its computation and result (:class:`AblationTable`, :mod:`.compute`) and its figure
(:func:`plot_ablation`, :mod:`.figure`).
"""

from tl_leadterms.analyses.ablation.compute import AblationTable, ablate, evaluate_loss
from tl_leadterms.analyses.ablation.figure import plot_ablation

__all__ = ["AblationTable", "ablate", "evaluate_loss", "plot_ablation"]
