"""Analyzers: decompose weights into corpus statistics, track them in training, ablate them."""

from tl_leadterms.analyzers.ablate import AblationTable, ablate, evaluate_loss
from tl_leadterms.analyzers.decompose import decompose, leading_cosines
from tl_leadterms.analyzers.result import Decomposition, PairDifference

__all__ = [
    "AblationTable",
    "Decomposition",
    "PairDifference",
    "ablate",
    "decompose",
    "evaluate_loss",
    "leading_cosines",
]
