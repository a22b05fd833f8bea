"""tl_leadterms: what a transformer learned from its corpus, as gradient leading terms.

The public API is small; everything else lives in subpackages. Importing the package is
instant: each public name is imported from its subpackage on first use (torch and
TransformerLens load only when a name that needs them is touched), and
``from tl_leadterms import decompose`` works as usual.

>>> from tl_leadterms import corpus_stats, leading_terms, make_windows
"""

import importlib
from typing import TYPE_CHECKING, Any

from tl_leadterms.errors import LeadTermsError

#: where each public name lives (imported on first use by ``__getattr__``)
_HOMES = {
    "__version__": "tl_leadterms.version",  # importlib.metadata is slow to import
    "PaperWeights": "tl_leadterms.adapters",
    "to_paper": "tl_leadterms.adapters",
    "AblationTable": "tl_leadterms.analyses",
    "AttentionAgreement": "tl_leadterms.analyses",
    "CovarianceSimilarity": "tl_leadterms.analyses",
    "Decomposition": "tl_leadterms.analyses",
    "HeadAtlas": "tl_leadterms.analyses",
    "NullSpec": "tl_leadterms.analyses",
    "TokenMaps": "tl_leadterms.analyses",
    "ablate": "tl_leadterms.analyses",
    "attention_agreement": "tl_leadterms.analyses",
    "covariance_similarity": "tl_leadterms.analyses",
    "decompose": "tl_leadterms.analyses",
    "evaluate_loss": "tl_leadterms.analyses",
    "head_atlas": "tl_leadterms.analyses",
    "leading_cosines": "tl_leadterms.analyses",
    "OutputAgreement": "tl_leadterms.analyses",
    "output_agreement": "tl_leadterms.analyses",
    "LeadingTermMonitor": "tl_leadterms.sweeps.monitor",
    "leading_model": "tl_leadterms.models",
    "predict_attention": "tl_leadterms.analyses",
    "token_maps": "tl_leadterms.analyses",
    "BootstrapSpec": "tl_leadterms.results.bootstrap",
    "SweepTable": "tl_leadterms.sweeps",
    "load_model": "tl_leadterms.loading",
    "sweep": "tl_leadterms.sweeps",
    "PaperModel": "tl_leadterms.models",
    "paper_model": "tl_leadterms.models",
    "report": "tl_leadterms.report",
    "Explorer": "tl_leadterms.explorer",
    "explore": "tl_leadterms.explorer",
    "CorpusStats": "tl_leadterms.stats",
    "corpus_stats": "tl_leadterms.stats",
    "make_windows": "tl_leadterms.stats",
    "BlockStats": "tl_leadterms.stats.blocks",
    "block_stats": "tl_leadterms.stats.blocks",
    "LeadingTerms": "tl_leadterms.theory",
    "Schedule": "tl_leadterms.theory",
    "coefficients": "tl_leadterms.theory",
    "leading_terms": "tl_leadterms.theory",
    "step_bound": "tl_leadterms.theory",
    "TrainHistory": "tl_leadterms.training",
    "train": "tl_leadterms.training",
}

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
    "LeadingTermMonitor",
    "LeadingTerms",
    "NullSpec",
    "OutputAgreement",
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
    "leading_model",
    "leading_terms",
    "load_model",
    "make_windows",
    "output_agreement",
    "paper_model",
    "predict_attention",
    "report",
    "step_bound",
    "sweep",
    "to_paper",
    "token_maps",
    "train",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its subpackage the first time it is asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tl_leadterms' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # for type checkers and editors: the same names, imported eagerly
    from tl_leadterms.adapters import PaperWeights, to_paper
    from tl_leadterms.analyses import (
        AblationTable,
        AttentionAgreement,
        CovarianceSimilarity,
        Decomposition,
        HeadAtlas,
        NullSpec,
        OutputAgreement,
        TokenMaps,
        ablate,
        attention_agreement,
        covariance_similarity,
        decompose,
        evaluate_loss,
        head_atlas,
        leading_cosines,
        output_agreement,
        predict_attention,
        token_maps,
    )
    from tl_leadterms.explorer import Explorer, explore
    from tl_leadterms.loading import load_model
    from tl_leadterms.models import PaperModel, leading_model, paper_model
    from tl_leadterms.report import report
    from tl_leadterms.results.bootstrap import BootstrapSpec
    from tl_leadterms.stats import CorpusStats, corpus_stats, make_windows
    from tl_leadterms.stats.blocks import BlockStats, block_stats
    from tl_leadterms.sweeps import SweepTable
    from tl_leadterms.sweeps import run as sweep
    from tl_leadterms.sweeps.monitor import LeadingTermMonitor
    from tl_leadterms.theory import LeadingTerms, Schedule, coefficients, leading_terms, step_bound
    from tl_leadterms.training import TrainHistory, train
    from tl_leadterms.version import __version__
