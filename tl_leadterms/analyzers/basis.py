"""What each kind of weight is compared with: its leading term and a family of basis maps.

Every map reads tokens on two sides. ``W_O`` and the value→output map of models with embeddings
go from an input token to an output (next-token) logit; the paper model's ``V`` goes from a key
token to the residual stream, which ``W_O ≈ sη·B̄`` then reads as a current token; ``W`` pairs a
query token with a key token; ``P`` is a function of the query−key offset. For each kind the
basis holds its leading term (MATH.md §3) and the three corpus statistics alone and composed,
oriented to that kind's rows and columns:

============  ===================  =====================================================
kind          leading term         basis (component: map)
============  ===================  =====================================================
output        ``B̄``                bigram ``B̄``, interchangeability ``Σ_B̄``, context
                                   ``Φ̄ᵀ``, context∘interchangeability ``Φ̄ᵀΣ_B̄``
value_output  ``Φ̄ᵀΣ_B̄``            the same four
value         ``Φ̄ᵀB̄ᵀ``             context∘bigram ``Φ̄ᵀB̄ᵀ``, bigram ``B̄``,
                                   interchangeability ``Σ_B̄``, context ``Φ̄ᵀ``
attention     ``Q̄``                attention statistic ``Q̄``, bigram∘context ``B̄Φ̄``,
                                   previous token ``B̄ᵀ``, interchangeability ``Σ_B̄``,
                                   context ``Φ̄``
positional    ``Δ``                ``Δ``
============  ===================  =====================================================

Each component belongs to the families of the statistics it is made of (``Q̄ ≈ B̄Σ_B̄Φ̄``
counts for all three); a composed component's share is split equally among its families.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from tl_leadterms.stats.corpus import CorpusStats

__all__ = ["COMPONENTS", "KINDS", "Component", "coefficient", "implied_s_lr", "target"]

FAMILIES = ("bigram", "interchangeability", "context", "positional")


@dataclass(frozen=True)
class Component:
    """One basis map: a name, its formula, the families it belongs to and how to build it."""

    name: str
    formula: str
    families: tuple[str, ...]
    build: Callable[[CorpusStats], Tensor]
    transpose_of: "Component | None" = None  # share memory with this component's map


_BIGRAM = Component("bigram", "B̄", ("bigram",), lambda s: s.B_bar)
_PREVIOUS = Component("previous token", "B̄ᵀ", ("bigram",), lambda s: s.B_bar.T, _BIGRAM)
_INTERCHANGE = Component("interchangeability", "Σ_B̄", ("interchangeability",), lambda s: s.Sigma_B)
_CONTEXT_T = Component("context", "Φ̄ᵀ", ("context",), lambda s: s.Phi_bar.T)
_CONTEXT = Component("context", "Φ̄", ("context",), lambda s: s.Phi_bar)
_CONTEXT_INTERCHANGE = Component(
    "context∘interchangeability", "Φ̄ᵀΣ_B̄", ("context", "interchangeability"), lambda s: s.G_bar.T
)
_CONTEXT_BIGRAM = Component(
    "context∘bigram", "Φ̄ᵀB̄ᵀ", ("context", "bigram"), lambda s: s.B_bar_Phi_bar.T
)
_BIGRAM_CONTEXT = Component(
    "bigram∘context", "B̄Φ̄", ("bigram", "context"), lambda s: s.B_bar_Phi_bar
)
_ATTENTION = Component(
    "attention statistic", "Q̄", ("bigram", "interchangeability", "context"), lambda s: s.Q_bar
)
_POSITIONAL = Component("positional", "Δ", ("positional",), lambda s: s.Delta)

# kind -> (index of the leading term in the basis, basis)
_OUTPUT_BASIS = (_BIGRAM, _INTERCHANGE, _CONTEXT_T, _CONTEXT_INTERCHANGE)
COMPONENTS: dict[str, tuple[int, tuple[Component, ...]]] = {
    "output": (0, _OUTPUT_BASIS),
    "value_output": (3, _OUTPUT_BASIS),
    "value": (0, (_CONTEXT_BIGRAM, _BIGRAM, _INTERCHANGE, _CONTEXT_T)),
    "attention": (0, (_ATTENTION, _BIGRAM_CONTEXT, _PREVIOUS, _INTERCHANGE, _CONTEXT)),
    "positional": (0, (_POSITIONAL,)),
}
KINDS = tuple(COMPONENTS)


def target(kind: str) -> Component:
    """The leading-term component of a kind of weight."""
    index, basis = COMPONENTS[kind]
    return basis[index]


def coefficient(kind: str, lr: float | int, steps: float | int) -> float:
    """The leading-term coefficient ``c(s, η)`` of a kind (MATH.md §3; ``steps`` may be real).

    ``output``: ``sη``; ``value``: ``C(s,2)η²``; ``value_output``: ``C(s,2)η²·sη`` (``V·W_O``);
    ``attention`` and ``positional``: ``(3C(s,4) + 2C(s,3))η⁴ = s(s−1)(s−2)(3s−1)/24·η⁴``.
    """
    s = steps
    if kind == "output":
        return s * lr
    if kind == "value":
        return s * (s - 1) / 2 * lr**2
    if kind == "value_output":
        return s * (s - 1) / 2 * lr**2 * s * lr
    return s * (s - 1) * (s - 2) * (3 * s - 1) / 24 * lr**4


# in the gradient-flow limit (η → 0 at fixed x = sη) c → x^power / divisor
_FLOW = {"output": (1, 1), "value": (2, 2), "value_output": (3, 2), "attention": (4, 8),
         "positional": (4, 8)}  # fmt: skip
# the coefficient is 0 at this many steps and increases after it
_FIRST_STEP = {"output": 0, "value": 1, "value_output": 1, "attention": 2, "positional": 2}


def implied_s_lr(kind: str, projection: float | int, lr: float | int | None = None) -> float:
    """The ``s·η`` at which the leading term's coefficient equals ``projection``.

    With ``lr`` the step count ``s`` solving ``c(s, lr) = projection`` is found by bisection
    and ``s·lr`` returned; without it, the gradient-flow limit ``η → 0`` is used
    (``c = (sη)^p / q``). NaN when ``projection`` is not positive (the weight points away from
    its leading term).
    """
    if not projection > 0 or not math.isfinite(projection):
        return math.nan
    power, divisor = _FLOW[kind]
    if lr is None:
        return (projection * divisor) ** (1.0 / power)
    low = float(_FIRST_STEP[kind])
    high = max(low + 1.0, 2.0 * (projection * divisor) ** (1.0 / power) / lr + 4.0)
    while coefficient(kind, lr, high) < projection:
        high *= 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if coefficient(kind, lr, middle) < projection:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high) * lr
