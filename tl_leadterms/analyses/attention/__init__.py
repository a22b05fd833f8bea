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
from tl_leadterms.analyses.attention.views import plot_attention, tv_from_uniform

__all__ = [
    "AttentionAgreement",
    "attention_agreement",
    "attention_scale",
    "plot_agreement",
    "plot_attention",
    "predict_attention",
    "predicted_scores",
    "tv_from_uniform",
]
