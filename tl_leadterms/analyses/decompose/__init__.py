"""`decompose`: each weight of a model against its leading term (bigram, interchangeability,
context).

Its computation (:mod:`.compute`, the fit onto the basis in :mod:`.fit`, the common component in
:mod:`.common`), its result (:class:`Decomposition`, :mod:`.result`), its figure
(:func:`plot_scores`, :mod:`.figure`) and its report section with its findings
(:func:`report_section`, :mod:`.report`).
"""

from typing import Any

from tl_leadterms.analyses.decompose.compute import decompose, leading_cosines, leading_map
from tl_leadterms.analyses.decompose.figure import plot_scores
from tl_leadterms.analyses.decompose.report import report_section
from tl_leadterms.analyses.decompose.result import Decomposition, PairDifference
from tl_leadterms.registry import MonitorContext
from tl_leadterms.results.table import EXTRA_COLUMNS
from tl_leadterms.theory import score_name

__all__ = [
    "Decomposition",
    "PairDifference",
    "decompose",
    "leading_cosines",
    "leading_map",
    "monitor_scores",
    "plot_scores",
    "report_section",
    "sweep_rows",
]


def sweep_rows(model: Any, stats: Any, **options: Any) -> list[dict[str, Any]]:
    """A sweep's rows of one checkpoint: ``cos_{weight}`` (with its null and interval columns)
    and ``explained_{weight}`` per layer (and head), the value path named ``V`` on every model
    (:func:`~tl_leadterms.theory.score_name`)."""
    rows = []
    for r in decompose(model, stats, **options).rows:
        where = {"layer": r["layer"], "head": r["head"]}
        extra = {k: r[k] for k in EXTRA_COLUMNS if k in r}  # the null and CI of the cosine
        weight = score_name(r["weight"])
        rows.append({**where, "score": f"cos_{weight}", "value": r["cosine"], **extra})
        rows.append({**where, "score": f"explained_{weight}", "value": r["explained"]})
    return rows


def monitor_scores(model: Any, stats: Any, context: MonitorContext) -> dict[str, float]:
    """The monitor's ``cos_{weight}``: each weight's cosine with its own leading term (keys as
    :func:`leading_cosines`, the value path named ``V`` on every model:
    :func:`~tl_leadterms.theory.score_name`); with a null in ``context.uncertainty`` also
    ``excess_{weight}``, each cosine's excess over its permutation null."""
    out = {score_name(f"cos_{k}"): v for k, v in leading_cosines(model, stats).items()}
    if context.uncertainty is not None and context.uncertainty.null is not None:
        rows = decompose(model, stats, uncertainty=context.uncertainty, progress=False).rows
        for r in rows:
            key = r["weight"] if r["layer"] is None else f"{r['weight']}.{r['layer']}"
            out[score_name(f"excess_{key}")] = r.get("excess", float("nan"))
    return out
