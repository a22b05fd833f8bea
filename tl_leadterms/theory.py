"""Leading terms of the weights gradient descent writes (MATH.md §3, paper Theorem 4.1).

From zero initialisation, after ``s`` full-batch GD steps with learning rate ``η``, every layer
``l`` of the paper's attention-only model has, to leading order,

    W_O    ≈ s·η · B̄
    V^(l)  ≈ C(s,2)·η² · Φ̄ᵀB̄ᵀ
    W^(l)  ≈ (3C(s,4) + 2C(s,3))·η⁴ · Q̄
    P^(l)  ≈ (3C(s,4) + 2C(s,3))·η⁴ · Δ

with Frobenius error bounds ``3s²η²``, ``12s³η³``, ``13s⁵η⁵T``, ``13s⁵η⁵T`` inside the step bound
``s ≤ η⁻¹·min(1/(12L), 5/(8√T))`` (and ``L ≤ √T/4``, ``T ≥ 60``, ``|V| ≥ 500``).
"""

import math
from dataclasses import dataclass, field
from functools import cached_property

from jaxtyping import Float
from torch import Tensor

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.corpus import CorpusStats

__all__ = ["LeadingTerms", "coefficients", "leading_terms", "step_bound"]


def _check(lr: object, steps: object, n_layers: object = 1) -> None:
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise LeadTermsError(f"lr must be a positive finite number, got {lr!r}.")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise LeadTermsError(f"steps must be an int >= 0 (GD steps from zero init), got {steps!r}.")
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
        raise LeadTermsError(f"n_layers must be an int >= 1, got {n_layers!r}.")


def coefficients(lr: float, steps: int) -> dict[str, float]:
    """The scalar in front of each leading term: ``{"W_O", "V", "W", "P"}``.

    Example:
        >>> coefficients(0.1, 4)["W"]  # (3·C(4,4) + 2·C(4,3))·η⁴ = 11·1e-4
        0.0011000000000000003
    """
    _check(lr, steps)
    s = steps
    attn = (3 * math.comb(s, 4) + 2 * math.comb(s, 3)) * lr**4
    return {"W_O": s * lr, "V": math.comb(s, 2) * lr**2, "W": attn, "P": attn}


def step_bound(lr: float, n_layers: int, n_ctx: int) -> float:
    """The theorem's largest step count ``η⁻¹·min(1/(12L), 5/(8√T))`` (a real number)."""
    _check(lr, 0, n_layers)
    return min(1 / (12 * n_layers), 5 / (8 * math.sqrt(n_ctx))) / lr


def error_bounds(lr: float, steps: int, n_ctx: int) -> dict[str, float]:
    """The theorem's Frobenius error bounds on each weight."""
    x = steps * lr
    return {"W_O": 3 * x**2, "V": 12 * x**3, "W": 13 * x**5 * n_ctx, "P": 13 * x**5 * n_ctx}


@dataclass
class LeadingTerms:
    """Predicted weights and the theorem's conditions for one (lr, steps, n_layers).

    The predicted weights are built on first access and then kept (each ``[k, k]`` matrix is
    as large as a statistic). ``V``, ``W`` and ``P`` are lists with one entry per layer; the
    theorem predicts the same term in every layer, so the entries are the same tensor object.

    Attributes:
        W_O: ``[k, k]`` output matrix [current token, next token].
        V: per layer ``[k, k]`` value matrix ``c·Φ̄ᵀB̄ᵀ`` [context token, current token].
        W: per layer ``[k, k]`` query-key matrix ``c·Q̄`` [query token, key token].
        P: per layer ``[T]`` relative positional bias ``c·Δ`` [offset].
        stats: the statistics they are built from.
        coefficients: the scalars ``s·η``, ``C(s,2)·η²``, ``(3C(s,4)+2C(s,3))·η⁴``.
        step_bound: the theorem's largest ``s`` for this ``η``, ``L`` and ``T``.
        within_bound: ``steps <= step_bound``.
        conditions: the theorem's other hypotheses, each True or False for these statistics.
        error_bounds: the Frobenius error bounds (meaningful inside the step bound).
    """

    stats: CorpusStats = field(repr=False)
    lr: float
    steps: int
    n_layers: int
    coefficients: dict[str, float]
    step_bound: float
    within_bound: bool
    conditions: dict[str, bool] = field(default_factory=dict)
    error_bounds: dict[str, float] = field(default_factory=dict)

    @cached_property
    def W_O(self) -> Float[Tensor, "k k"]:
        return self.coefficients["W_O"] * self.stats.B_bar

    @cached_property
    def V(self) -> list[Tensor]:
        return [self.coefficients["V"] * self.stats.B_bar_Phi_bar.T] * self.n_layers

    @cached_property
    def W(self) -> list[Tensor]:
        return [self.coefficients["W"] * self.stats.Q_bar] * self.n_layers

    @cached_property
    def P(self) -> list[Tensor]:
        return [self.coefficients["P"] * self.stats.Delta] * self.n_layers

    def __repr__(self) -> str:
        coef = ", ".join(f"{k}={v:.4g}" for k, v in self.coefficients.items())
        unmet = [name for name, ok in self.conditions.items() if not ok]
        return (
            f"LeadingTerms(lr={self.lr}, steps={self.steps}, n_layers={self.n_layers}, "
            f"k={self.stats.k}, coefficients: {coef}; step bound {self.step_bound:.4g} "
            f"({'inside' if self.within_bound else 'OUTSIDE'})"
            + (f"; unmet conditions: {unmet}" if unmet else "")
            + ")"
        )


def leading_terms(stats: CorpusStats, lr: float, steps: int, n_layers: int = 1) -> LeadingTerms:
    """The weights the theory predicts after ``steps`` GD steps at learning rate ``lr``.

    Args:
        stats: corpus statistics from :func:`tl_leadterms.corpus_stats`.
        lr: constant learning rate ``η``.
        steps: number of full-batch GD steps ``s`` from zero initialisation.
        n_layers: ``L``, for the per-layer lists and the step bound.

    Example:
        >>> import torch
        >>> from tl_leadterms import corpus_stats, leading_terms
        >>> stats = corpus_stats(torch.randint(0, 20, (32, 9)), d_vocab=20, progress=False)
        >>> lt = leading_terms(stats, lr=0.1, steps=5, n_layers=2)
        >>> torch.allclose(lt.W_O, 0.5 * stats.B_bar), len(lt.V)
        (True, 2)
    """
    if not isinstance(stats, CorpusStats):
        raise LeadTermsError(
            f"stats must be a CorpusStats (from tl_leadterms.corpus_stats), got "
            f"{type(stats).__name__}."
        )
    _check(lr, steps, n_layers)
    coef = coefficients(lr, steps)
    bound = step_bound(lr, n_layers, stats.n_ctx)
    conditions = {
        "L <= sqrt(T)/4": n_layers <= math.sqrt(stats.n_ctx) / 4,
        "T >= 60": stats.n_ctx >= 60,
        "|V| >= 500": stats.d_vocab >= 500,
    }
    return LeadingTerms(
        stats=stats,
        lr=float(lr),
        steps=steps,
        n_layers=n_layers,
        coefficients=coef,
        step_bound=bound,
        within_bound=steps <= bound,
        conditions=conditions,
        error_bounds=error_bounds(lr, steps, stats.n_ctx),
    )
