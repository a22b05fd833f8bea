"""The paper's covariance protocol (its Pythia experiment), with the token maps it reads.

Its computation (:mod:`.compute`, the exact factored algebra in :mod:`.algebra`, each token's
residual stream in :mod:`.token_maps`), its results (:class:`CovarianceSimilarity`,
:mod:`.result`; :class:`TokenMaps`) and its figures (:mod:`.figure`).
"""

import math
from typing import Any

from tl_leadterms.analyses.covariance.compute import covariance_similarity
from tl_leadterms.analyses.covariance.figure import plot_covariance, plot_token_maps
from tl_leadterms.analyses.covariance.options import Compute, Protocol
from tl_leadterms.analyses.covariance.result import CovarianceSimilarity
from tl_leadterms.analyses.covariance.theory_file import prepare_theory, theory_path
from tl_leadterms.analyses.covariance.token_maps import TokenMaps, token_maps
from tl_leadterms.registry import MonitorContext
from tl_leadterms.results.findings import common, null_and_ci
from tl_leadterms.results.sections import Section

__all__ = [
    "Compute",
    "CovarianceSimilarity",
    "Protocol",
    "TokenMaps",
    "covariance_similarity",
    "monitor_scores",
    "plot_covariance",
    "plot_token_maps",
    "prepare_theory",
    "report_section",
    "sweep_rows",
    "theory_path",
    "token_maps",
]


def sweep_rows(model: Any, stats: Any, **options: Any) -> list[dict[str, Any]]:
    """A sweep's rows of one checkpoint: the protocol's own rows."""
    return covariance_similarity(model, stats, **options).rows


def monitor_scores(model: Any, stats: Any, context: MonitorContext) -> dict[str, float]:
    """The monitor's ``cov_{score}``: each layer-level score's minimum over the layers."""
    out: dict[str, float] = {}
    rows = covariance_similarity(model, stats, uncertainty=context.uncertainty,
                                 **context.options).rows  # fmt: skip
    for r in rows:
        if r["head"] is None:
            key = f"cov_{r['score']}"
            out[key] = min(out.get(key, math.inf), r["value"])
    return out


def report_section(result: CovarianceSimilarity) -> Section:
    """The report section of the covariance protocol: its table, its rows' verdicts and how
    much of its scores is common to all tokens."""
    said = null_and_ci(result.rows, result.metadata) + common(result.rows, "Covariance protocol")
    return Section("covariance", "Covariance protocol", result._repr_html_(), tuple(said))
