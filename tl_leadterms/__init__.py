"""tl_leadterms: what a transformer learned from its corpus, as gradient leading terms.

The top level holds what a notebook user imports: the analyses, the corpus statistics, model
loading, sweeps, the explorer, the report, the paper model and the theorem. Result classes
live with their analysis (``tl_leadterms.analyses.decompose.Decomposition``, ...); how a
training run (:class:`Schedule`) and how sure a number should be (:class:`Uncertainty`, with
its :class:`NullSpec` and :class:`BootstrapSpec`) are given is the same for every analysis.
Importing the package is instant: each public name is imported from its subpackage on first use
(torch and TransformerLens load only when a name that needs them is touched), and
``from tl_leadterms import decompose`` works as usual.

>>> from tl_leadterms import corpus_stats, leading_terms, make_windows
"""

import importlib
from typing import TYPE_CHECKING, Any

from tl_leadterms.errors import LeadTermsError

#: where each public name lives (imported on first use by ``__getattr__``)
_HOMES = {
    "__version__": "tl_leadterms.version",  # importlib.metadata is slow to import
    # the analyses
    "decompose": "tl_leadterms.analyses.decompose",
    "attention_agreement": "tl_leadterms.analyses.attention",
    "predict_attention": "tl_leadterms.analyses.attention",
    "covariance_similarity": "tl_leadterms.analyses.covariance",
    "output_agreement": "tl_leadterms.analyses.output",
    "head_atlas": "tl_leadterms.analyses.atlas",
    "ablate": "tl_leadterms.analyses.ablation",
    # the corpus statistics
    "CorpusStats": "tl_leadterms.stats",
    "corpus_stats": "tl_leadterms.stats",
    "block_stats": "tl_leadterms.stats.blocks",
    "make_windows": "tl_leadterms.stats",
    # models, runs and where results go
    "to_paper": "tl_leadterms.adapters",
    "load_model": "tl_leadterms.loading",
    "paper_model": "tl_leadterms.models",
    "train": "tl_leadterms.training",
    "sweep": "tl_leadterms.sweeps",
    "LeadingTermMonitor": "tl_leadterms.sweeps",
    "explore": "tl_leadterms.explorer",
    "report": "tl_leadterms.reports",
    # how a run and how sure a number is are given
    "Schedule": "tl_leadterms.theory",
    "Uncertainty": "tl_leadterms.results.uncertainty",
    "NullSpec": "tl_leadterms.results.null",
    "BootstrapSpec": "tl_leadterms.results.bootstrap",
    # the theorem
    "leading_terms": "tl_leadterms.theory",
    "coefficients": "tl_leadterms.theory",
    "step_bound": "tl_leadterms.theory",
}

__all__ = [
    "BootstrapSpec",
    "CorpusStats",
    "LeadTermsError",
    "LeadingTermMonitor",
    "NullSpec",
    "Schedule",
    "Uncertainty",
    "__version__",
    "ablate",
    "attention_agreement",
    "block_stats",
    "coefficients",
    "corpus_stats",
    "covariance_similarity",
    "decompose",
    "explore",
    "head_atlas",
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
    from tl_leadterms.adapters import to_paper
    from tl_leadterms.analyses.ablation import ablate
    from tl_leadterms.analyses.atlas import head_atlas
    from tl_leadterms.analyses.attention import attention_agreement, predict_attention
    from tl_leadterms.analyses.covariance import covariance_similarity
    from tl_leadterms.analyses.decompose import decompose
    from tl_leadterms.analyses.output import output_agreement
    from tl_leadterms.explorer import explore
    from tl_leadterms.loading import load_model
    from tl_leadterms.models import paper_model
    from tl_leadterms.reports import report
    from tl_leadterms.results.bootstrap import BootstrapSpec
    from tl_leadterms.results.null import NullSpec
    from tl_leadterms.results.uncertainty import Uncertainty
    from tl_leadterms.stats import CorpusStats, corpus_stats, make_windows
    from tl_leadterms.stats.blocks import block_stats
    from tl_leadterms.sweeps import LeadingTermMonitor, sweep
    from tl_leadterms.theory import Schedule, coefficients, leading_terms, step_bound
    from tl_leadterms.training import train
    from tl_leadterms.version import __version__
