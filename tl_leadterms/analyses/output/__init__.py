"""Next-token agreement: how much of a model's next-token behaviour its leading terms explain.

Its computation (:mod:`.compute`; the predictors built from the statistics in
:mod:`.predictors`; scoring and fitting the scalars in :mod:`.fit`), its result
(:class:`OutputAgreement`, :mod:`.result`) and its figure (:func:`plot_output`, :mod:`.figure`).
"""

from typing import Any

from tl_leadterms.analyses.output.compute import output_agreement
from tl_leadterms.analyses.output.figure import plot_output
from tl_leadterms.analyses.output.result import OutputAgreement
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.registry import MonitorContext
from tl_leadterms.results.sections import Section, esc
from tl_leadterms.results.table import EXTRA_COLUMNS

__all__ = [
    "OutputAgreement",
    "monitor_scores",
    "output_agreement",
    "plot_output",
    "report_section",
    "sweep_rows",
]


def report_section(result: OutputAgreement) -> Section:
    """The report section of an output agreement: its table, and its notes as findings (an
    undefined ``explained``, fitted scales at their bound, a null too small)."""
    said = tuple(esc(n) for n in result.notes())
    return Section("output", "Next-token agreement", result._repr_html_(), said)


def sweep_rows(model: Any, stats: Any, **options: Any) -> list[dict[str, Any]]:
    """A sweep's rows of one checkpoint: ``output_*`` (the leading-term model) and ``bigram_*``;
    the scalars are fitted (``fit=True``) unless the run is given (``lr``/``steps``/``s_lr``)."""
    if "tokens" not in options:
        raise LeadTermsError(
            "the 'output' analysis needs held-out windows: sweep(..., analyses=[..., 'output'], "
            "tokens=windows[:, :-1])"
        )
    run = any(options.get(k) is not None for k in ("schedule", "lr", "steps", "s_lr"))
    options.setdefault("fit", not run)
    result = output_agreement(model, stats, **options)
    where = {"layer": None, "head": None}
    lead = result.row("leading")
    extra = {k: lead[k] for k in EXTRA_COLUMNS if k in lead}
    rows = [{**where, "score": "output_explained", "value": lead["explained"], **extra}]
    for prefix, name in (("output", "leading"), ("bigram", "bigram")):
        r = result.row(name)
        rows += [{**where, "score": f"{prefix}_{key}", "value": r[key]}
                 for key in ("kl", "top1", "top5", "explained", "c_O", "c_V", "c_W")
                 if not (prefix == "output" and key == "explained")
                 and not (prefix == "bigram" and key in ("c_V", "c_W"))]  # fmt: skip
    return rows


def monitor_scores(model: Any, stats: Any, context: MonitorContext) -> dict[str, float]:
    """The monitor's ``output_kl`` and ``output_explained`` on its held-out windows (exact
    coefficients from the learning rate and step when the rate is known, else fitted)."""
    known = context.schedule.exact and context.step > 0
    result = output_agreement(model, stats, context.tokens, fit=not known,
                              schedule=context.schedule if known else None,
                              uncertainty=context.uncertainty)  # fmt: skip
    return {"output_kl": result.kl, "output_explained": result.explained}
