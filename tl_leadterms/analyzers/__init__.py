"""Analyzers: decompose weights into corpus statistics, compare attention with them, ablate them."""

from tl_leadterms.analyzers.ablate import AblationTable, ablate, evaluate_loss
from tl_leadterms.analyzers.atlas import HeadAtlas, head_atlas
from tl_leadterms.analyzers.attention import (
    AttentionAgreement,
    attention_agreement,
    predict_attention,
)
from tl_leadterms.analyzers.covariance import CovarianceSimilarity, covariance_similarity
from tl_leadterms.analyzers.decompose import decompose, leading_cosines
from tl_leadterms.analyzers.null import NullSpec, random_reference
from tl_leadterms.analyzers.output import output_agreement
from tl_leadterms.analyzers.output_result import OutputAgreement
from tl_leadterms.analyzers.result import Decomposition, PairDifference
from tl_leadterms.analyzers.token_maps import TokenMaps, token_maps

__all__ = [
    "AblationTable",
    "AttentionAgreement",
    "CovarianceSimilarity",
    "Decomposition",
    "HeadAtlas",
    "NullSpec",
    "OutputAgreement",
    "PairDifference",
    "TokenMaps",
    "ablate",
    "attention_agreement",
    "covariance_similarity",
    "decompose",
    "evaluate_loss",
    "head_atlas",
    "leading_cosines",
    "output_agreement",
    "predict_attention",
    "random_reference",
    "token_maps",
]
