"""tl_leadterms: what a transformer learned from its corpus, as gradient leading terms.

The public API is small; everything else lives in subpackages.

>>> from tl_leadterms import corpus_stats, leading_terms, make_windows
"""

from tl_leadterms.adapters import PaperWeights, to_paper
from tl_leadterms.analyzers import (
    AblationTable,
    AttentionAgreement,
    CovarianceSimilarity,
    Decomposition,
    HeadAtlas,
    NullSpec,
    TokenMaps,
    ablate,
    attention_agreement,
    covariance_similarity,
    decompose,
    evaluate_loss,
    head_atlas,
    leading_cosines,
    predict_attention,
    token_maps,
)
from tl_leadterms.analyzers.bootstrap import BootstrapSpec
from tl_leadterms.checkpoints import SweepTable, load_model, sweep
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.models import PaperModel, paper_model
from tl_leadterms.plot import Explorer, explore
from tl_leadterms.report import report
from tl_leadterms.stats import CorpusStats, corpus_stats, make_windows
from tl_leadterms.stats.blocks import BlockStats, block_stats
from tl_leadterms.theory import LeadingTerms, Schedule, coefficients, leading_terms, step_bound
from tl_leadterms.training import TrainHistory, train
from tl_leadterms.version import __version__

__all__ = [
    "AblationTable",
    "AttentionAgreement",
    "BlockStats",
    "BootstrapSpec",
    "CorpusStats",
    "CovarianceSimilarity",
    "Decomposition",
    "Explorer",
    "HeadAtlas",
    "LeadTermsError",
    "LeadingTerms",
    "NullSpec",
    "PaperModel",
    "PaperWeights",
    "Schedule",
    "SweepTable",
    "TokenMaps",
    "TrainHistory",
    "__version__",
    "ablate",
    "attention_agreement",
    "block_stats",
    "coefficients",
    "corpus_stats",
    "covariance_similarity",
    "decompose",
    "evaluate_loss",
    "explore",
    "head_atlas",
    "leading_cosines",
    "leading_terms",
    "load_model",
    "make_windows",
    "paper_model",
    "predict_attention",
    "report",
    "step_bound",
    "sweep",
    "to_paper",
    "token_maps",
    "train",
]
