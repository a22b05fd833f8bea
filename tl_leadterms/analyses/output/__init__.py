"""Next-token agreement: how much of a model's next-token behaviour its leading terms explain.

Its computation (:mod:`.compute`; the predictors built from the statistics in
:mod:`.predictors`; scoring and fitting the scalars in :mod:`.fit`) and its result
(:class:`OutputAgreement`, :mod:`.result`).
"""

from tl_leadterms.analyses.output.compute import output_agreement
from tl_leadterms.analyses.output.result import OutputAgreement

__all__ = ["OutputAgreement", "output_agreement"]
