"""Attention agreement: a model's attention on real text against the attention the theory predicts.

Its computation (:mod:`.compute`, the per-head fit in :mod:`.fit`), its result
(:class:`AttentionAgreement`) and its figures (:func:`plot_agreement`, :mod:`.figure`; the
circuitsvis views of :func:`plot_attention`, :mod:`.views`).
"""

from tl_leadterms.analyses.attention.compute import (
    AttentionAgreement,
    attention_agreement,
    attention_scale,
    predict_attention,
    predicted_scores,
)
from tl_leadterms.analyses.attention.figure import plot_agreement
from tl_leadterms.analyses.attention.fit import scale_text
from tl_leadterms.analyses.attention.views import (
    ATTENTION_VIEWS,
    AttentionView,
    agreement_section,
    plot_attention,
    tv_from_uniform,
)

__all__ = [
    "ATTENTION_VIEWS",
    "AttentionAgreement",
    "AttentionView",
    "attention_agreement",
    "attention_scale",
    "plot_agreement",
    "plot_attention",
    "predict_attention",
    "predicted_scores",
    "report_section",
    "scale_text",
    "tv_from_uniform",
]


def report_section(result: "AttentionAgreement | AttentionView"):
    """The report section of an agreement table or of :func:`plot_attention`'s views."""
    if isinstance(result, AttentionView):
        return result.report_section()
    return agreement_section(result)
