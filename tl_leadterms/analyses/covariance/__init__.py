"""The paper's covariance protocol (its Pythia experiment), with the token maps it reads.

Its computation (:mod:`.compute`, the exact factored algebra in :mod:`.algebra`, each token's
residual stream in :mod:`.token_maps`), its results (:class:`CovarianceSimilarity`,
:mod:`.result`; :class:`TokenMaps`) and its figures (:mod:`.figure`).
"""

from tl_leadterms.analyses.covariance.compute import covariance_similarity
from tl_leadterms.analyses.covariance.figure import plot_covariance, plot_token_maps
from tl_leadterms.analyses.covariance.result import CovarianceSimilarity
from tl_leadterms.analyses.covariance.token_maps import TokenMaps, token_maps

__all__ = [
    "CovarianceSimilarity",
    "TokenMaps",
    "covariance_similarity",
    "plot_covariance",
    "plot_token_maps",
    "token_maps",
]
