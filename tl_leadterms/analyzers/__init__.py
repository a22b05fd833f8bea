"""Analyzers: decompose weights into corpus statistics, track them in training, ablate them."""

from tl_leadterms.analyzers.ablate import AblationTable, ablate, evaluate_loss
from tl_leadterms.analyzers.attention import (
    AttentionAgreement,
    attention_agreement,
    predict_attention,
)
from tl_leadterms.analyzers.decompose import decompose, leading_cosines
from tl_leadterms.analyzers.result import Decomposition, PairDifference

__all__ = [
    "AblationTable",
    "AttentionAgreement",
    "Decomposition",
    "PairDifference",
    "ablate",
    "attention_agreement",
    "decompose",
    "evaluate_loss",
    "leading_cosines",
    "predict_attention",
]
