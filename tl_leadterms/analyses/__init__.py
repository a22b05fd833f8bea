"""The analyses a researcher runs, one sub-package each (computation, result, figure).

* :mod:`~tl_leadterms.analyses.decompose`: each weight against its leading term;
* :mod:`~tl_leadterms.analyses.attention`: a model's attention against the predicted one;
* :mod:`~tl_leadterms.analyses.covariance`: the paper's covariance protocol and token maps;
* :mod:`~tl_leadterms.analyses.output`: next-token agreement of the leading-term model;
* :mod:`~tl_leadterms.analyses.atlas`: one row per head, what it is like;
* :mod:`~tl_leadterms.analyses.ablation`: remove a weight's leading-term projection.

What every analysis shares (the result table, nulls, intervals, attribution, figure helpers)
lives in :mod:`tl_leadterms.results`.
"""

from tl_leadterms.analyses.ablation import AblationTable, ablate, evaluate_loss
from tl_leadterms.analyses.atlas import HeadAtlas, head_atlas
from tl_leadterms.analyses.attention import (
    AttentionAgreement,
    attention_agreement,
    predict_attention,
)
from tl_leadterms.analyses.covariance import (
    CovarianceSimilarity,
    TokenMaps,
    covariance_similarity,
    token_maps,
)
from tl_leadterms.analyses.decompose import (
    Decomposition,
    PairDifference,
    decompose,
    leading_cosines,
)
from tl_leadterms.analyses.output import OutputAgreement, output_agreement
from tl_leadterms.results.null import NullSpec, random_reference

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
