"""Theorem 4.1 as one table: every weight, its leading term, coefficient, limits and basis.

One :class:`Term` per weight (``W_O``, ``V``, ``W``, ``P`` and the value→output product
``V·W_O``, paper Eqs. 12-13, the only one models with token embeddings expose in vocabulary
space): its leading term, exact coefficient ``c(s, η)`` (a polynomial in a real ``s``), its
gradient-flow limit, first step and error bound (docs/math.md#leading-terms), and its *basis*:
the leading term first, then the three corpus statistics alone and composed, which
:func:`tl_leadterms.decompose` fits it onto; each component belongs to the families (bigram,
interchangeability, context, positional) of the statistics it is built from.

Nothing outside this module defines a weight name, a coefficient or a family.

>>> TERMS["W"].coefficient(0.1, 4)  # (3·C(4,4) + 2·C(4,3))·η⁴ = 11·1e-4
0.0011000000000000003
>>> [t.weight for t in TERMS.values()]
['W_O', 'V', 'W', 'P', 'V·W_O']
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.corpus import CorpusStats

__all__ = [
    "FAMILIES",
    "KINDS",
    "TERMS",
    "WEIGHTS",
    "Component",
    "Family",
    "Kind",
    "ScoreNames",
    "Term",
    "Weight",
    "score_name",
    "term",
]

Weight = Literal["W_O", "V", "W", "P", "V·W_O"]
Kind = Literal["output", "value", "attention", "positional", "value_output"]
Family = Literal["bigram", "interchangeability", "context", "positional"]
FAMILIES: tuple[str, ...] = ("bigram", "interchangeability", "context", "positional")


@dataclass(frozen=True)
class Component:
    """One basis map: a name, its formula, the families it belongs to and how to build it."""

    name: str
    formula: str
    families: tuple[str, ...]
    build: Callable[[CorpusStats], Tensor]
    transpose_of: "Component | None" = None  # shares memory with this component's map


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


def _quartic(s: float | int) -> float:
    """``3C(s,4) + 2C(s,3) = s(s−1)(s−2)(3s−1)/24``."""
    return s * (s - 1) * (s - 2) * (3 * s - 1) / 24


@dataclass(frozen=True)
class Term:
    """One row of Theorem 4.1.

    Attributes:
        weight: the weight's name in every public result.
        kind: what sort of map it is (a column of every result).
        description: its rows and columns in words.
        basis: the maps it is fitted onto; ``basis[0]`` is its leading term.
        first_step: the first GD step after which the leading term is non-zero.
        flow: ``(p, q)`` of the gradient-flow limit ``c → (s·η)^p / q``.
        vector: a function of the offset (``P``) rather than a token-token map.
        statistic: the statistic (a ``CorpusStats`` table) the leading term is built from that
            can vanish on a degenerate corpus; a score against a vanished one means nothing.
    """

    weight: str
    kind: str
    description: str
    basis: tuple[Component, ...]
    polynomial: Callable[[float], float]  # c(s, η) / η^degree, as a polynomial in s
    degree: int  # power of η in the coefficient
    first_step: int
    flow: tuple[int, int]
    error: Callable[[float, int], float] | None  # (s·η, T) -> Frobenius bound
    vector: bool = False
    statistic: str | None = None  # the CorpusStats table whose degeneracy voids the comparison

    @property
    def target(self) -> Component:
        """The leading-term component (``basis[0]``)."""
        return self.basis[0]

    def coefficient(self, lr: float | int, steps: float | int) -> float:
        """The exact ``c(s, η)``; ``steps`` may be real (the polynomial in ``s``)."""
        return self.polynomial(steps) * lr**self.degree

    def flow_coefficient(self, s_lr: float | int) -> float:
        """The gradient-flow limit of ``c`` at ``s·η = s_lr``."""
        power, divisor = self.flow
        return s_lr**power / divisor

    def error_bound(self, lr: float | int, steps: int, n_ctx: int) -> float:
        """The theorem's Frobenius error bound; NaN where the theorem states none."""
        return math.nan if self.error is None else self.error(steps * lr, n_ctx)

    def implied_s_lr(self, projection: float | int, lr: float | int | None = None) -> float:
        """The ``s·η`` at which ``c`` equals ``projection`` (NaN when it is not positive).

        With ``lr`` the real ``s`` solving ``c(s, lr) = projection`` past :attr:`first_step`
        is found by bisection and ``s·lr`` returned; without it, the gradient-flow limit.
        """
        if not projection > 0 or not math.isfinite(projection):
            return math.nan
        power, divisor = self.flow
        if lr is None:
            return (projection * divisor) ** (1.0 / power)
        low = float(self.first_step - 1)  # c is 0 here and increases after it
        high = max(low + 1.0, 2.0 * (projection * divisor) ** (1.0 / power) / lr + 4.0)
        while self.coefficient(lr, high) < projection:
            high *= 2.0
        for _ in range(200):
            middle = 0.5 * (low + high)
            if self.coefficient(lr, middle) < projection:
                low = middle
            else:
                high = middle
        return 0.5 * (low + high) * lr


_OUTPUT_BASIS = (_BIGRAM, _INTERCHANGE, _CONTEXT_T, _CONTEXT_INTERCHANGE)
_TERMS = (
    Term("W_O", "output", "direct path [current token, next token]", _OUTPUT_BASIS,
         lambda s: s, 1, 1, (1, 1), lambda x, T: 3 * x**2),
    Term("V", "value", "value [context token, current token]",
         (_CONTEXT_BIGRAM, _BIGRAM, _INTERCHANGE, _CONTEXT_T),
         lambda s: s * (s - 1) / 2, 2, 2, (2, 2), lambda x, T: 12 * x**3, statistic="Phi_bar"),
    Term("W", "attention", "query-key [query token, key token]",
         (_ATTENTION, _BIGRAM_CONTEXT, _PREVIOUS, _INTERCHANGE, _CONTEXT),
         _quartic, 4, 3, (4, 8), lambda x, T: 13 * x**5 * T, statistic="Q_bar"),
    Term("P", "positional", "relative position [offset query − key]", (_POSITIONAL,),
         _quartic, 4, 3, (4, 8), lambda x, T: 13 * x**5 * T, vector=True, statistic="Delta"),
    Term("V·W_O", "value_output", "value→output [context token, next token]",
         (_CONTEXT_INTERCHANGE, _BIGRAM, _INTERCHANGE, _CONTEXT_T),
         lambda s: s * s * (s - 1) / 2, 3, 2, (3, 2), None, statistic="G_bar"),
)  # fmt: skip
TERMS: dict[str, Term] = {t.weight: t for t in _TERMS}
WEIGHTS: tuple[str, ...] = tuple(TERMS)
KINDS: tuple[str, ...] = tuple(t.kind for t in _TERMS)
_BY_KIND = {t.kind: t for t in _TERMS}


def term(name: str) -> Term:
    """The table entry of a weight (``"W_O"``, ``"V"``, ``"W"``, ``"P"``, ``"V·W_O"``) or kind."""
    if name in TERMS:
        return TERMS[name]
    if name in _BY_KIND:
        return _BY_KIND[name]
    raise LeadTermsError(
        f"unknown weight {name!r}: the theorem's weights are {', '.join(WEIGHTS)} "
        f"(kinds {', '.join(KINDS)})"
    )


def score_name(name: object) -> object:
    """``name`` as scores are named on every model: the value path is ``V`` (the paper model's
    ``V``, a model with embeddings' ``V·W_O``), so ``cos_V``, ``explained_V``, ``V.0`` and
    ``excess_V.0`` mean the same path everywhere. Sweeps, the monitor, training histories and
    their plots use these names; a decomposition's ``weight`` column keeps the model's own.
    The earlier spelling with ``V·W_O`` is read as the same name wherever a score is passed.

    >>> score_name("cos_V·W_O"), score_name("excess_V·W_O.1"), score_name("cos_W_O")
    ('cos_V', 'excess_V.1', 'cos_W_O')
    """
    return name.replace("V·W_O", "V") if isinstance(name, str) else name


class ScoreNames(dict):
    """Values by score name (:func:`score_name`) that also answer an earlier spelling:
    ``history.cosines["V·W_O.0"]`` is ``history.cosines["V.0"]``.

    >>> ScoreNames({"V.0": 1.0})["V·W_O.0"], "V·W_O.0" in ScoreNames({"V.0": 1.0})
    (1.0, True)
    """

    def __missing__(self, key: object) -> object:
        if score_name(key) == key:
            raise KeyError(key)
        return self[score_name(key)]

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or dict.__contains__(self, score_name(key))
