"""The single home of the paper's Theorem 4.1 (docs/math.md#leading-terms).

:mod:`~tl_leadterms.theory.table` holds one entry per weight (``W_O``, ``V``, ``W``, ``P`` and
the value→output product ``V·W_O``): its leading term, basis, exact coefficient, gradient-flow
limit, first non-zero step and error bound. :mod:`~tl_leadterms.theory.leading` turns a training
run into coefficients (:class:`Schedule`) and predicted weights (:func:`leading_terms`).
Every analysis, plot and report reads these; nothing else defines a coefficient, a weight name
or a family.
"""

from tl_leadterms.theory.leading import (
    LeadingTerms,
    Schedule,
    ScheduleLike,
    coefficients,
    error_bounds,
    leading_terms,
    run_shorthands,
    step_bound,
    with_shorthands,
)
from tl_leadterms.theory.table import (
    FAMILIES,
    KINDS,
    TERMS,
    WEIGHTS,
    Component,
    Family,
    Kind,
    ScoreNames,
    Term,
    Weight,
    score_name,
    term,
)

__all__ = [
    "FAMILIES",
    "KINDS",
    "TERMS",
    "WEIGHTS",
    "Component",
    "Family",
    "Kind",
    "LeadingTerms",
    "Schedule",
    "ScheduleLike",
    "ScoreNames",
    "Term",
    "Weight",
    "coefficients",
    "error_bounds",
    "leading_terms",
    "run_shorthands",
    "score_name",
    "step_bound",
    "term",
    "with_shorthands",
]
