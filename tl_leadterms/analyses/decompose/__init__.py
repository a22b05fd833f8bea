"""`decompose`: each weight of a model against its leading term (bigram, interchangeability, context).

Its computation (:mod:`.compute`, the fit onto the basis in :mod:`.fit`, the common component in
:mod:`.common`), its result (:class:`Decomposition`, :mod:`.result`) and its figure
(:func:`plot_scores`, :mod:`.figure`).
"""

from tl_leadterms.analyses.decompose.compute import decompose, leading_cosines
from tl_leadterms.analyses.decompose.figure import plot_scores
from tl_leadterms.analyses.decompose.result import Decomposition, PairDifference

__all__ = ["Decomposition", "PairDifference", "decompose", "leading_cosines", "plot_scores"]
