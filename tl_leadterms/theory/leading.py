"""The weights the theorem predicts for one training run, and the run's description.

:class:`Schedule` is how every entry point takes a training run (``lr`` and ``steps``, or only
the product ``s_lr``); :func:`leading_terms` builds the predicted weights from the table of
:mod:`tl_leadterms.theory.table`.
"""

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from torch import Tensor

from tl_leadterms.checks import check_lr, check_s_lr, check_stats, check_steps, positive_int
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory.table import TERMS, term

#: the plain keywords of a training run that ``schedule=`` replaces (:func:`run_shorthands`)
RUN_KEYWORDS = ("lr", "steps", "s_lr")
F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "RUN_KEYWORDS",
    "LeadingTerms",
    "Schedule",
    "ScheduleLike",
    "coefficients",
    "error_bounds",
    "leading_terms",
    "run_shorthands",
    "step_bound",
    "with_shorthands",
]


@dataclass(frozen=True)
class Schedule:
    """A training run as the theory sees it: ``lr`` and ``steps``, or only ``s·η``.

    Every analysis takes one as ``schedule=``: ``Schedule(lr=1.0, steps=4)``, the pair
    ``(1.0, 4)``, or a :class:`~tl_leadterms.training.TrainHistory`. With ``lr`` and ``steps``
    the coefficients are exact; with only ``s_lr`` they are the gradient-flow limits; with only
    ``lr`` implied step counts are solved with the exact coefficient. Checked when built.

    >>> Schedule(lr=0.5, steps=4).s_lr, Schedule(s_lr=2.0).coefficient("W_O")
    (2.0, 2.0)
    >>> Schedule.of((0.5, 4)) == Schedule(0.5, 4), Schedule.of(None).known
    (True, False)
    """

    lr: float | None = None
    steps: int | None = None
    s_lr: float | None = None

    def __post_init__(self) -> None:
        lr = None if self.lr is None else check_lr(self.lr)
        steps = None if self.steps is None else check_steps(self.steps)
        s_lr = None if self.s_lr is None else check_s_lr(self.s_lr)
        if steps is not None and lr is None:
            raise LeadTermsError(
                f"steps={steps} needs lr (the coefficients depend on both); or pass s_lr= (s·η) "
                "for the gradient-flow limit"
            )
        if lr is not None and steps is not None:
            if s_lr is not None and not math.isclose(s_lr, lr * steps, rel_tol=1e-9):
                raise LeadTermsError(
                    f"s_lr={s_lr} disagrees with lr·steps = {lr * steps}; pass one or the other"
                )
            s_lr = lr * steps
        for name, value in (("lr", lr), ("steps", steps), ("s_lr", s_lr)):
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, schedule: Any = None) -> "Schedule":
        """A :class:`Schedule` from what ``schedule=`` takes: None (the run is unknown), a
        Schedule, an ``(lr, steps)`` pair, or a training record with a ``schedule``."""
        if schedule is None:
            return cls()
        if isinstance(schedule, Schedule):
            return schedule
        if isinstance(getattr(schedule, "schedule", None), Schedule):
            return schedule.schedule
        if isinstance(schedule, tuple) and len(schedule) == 2:
            return cls(*schedule)
        raise LeadTermsError(
            f"schedule must be None, a Schedule(lr=..., steps=...) (or s_lr=...), an (lr, steps) "
            f"pair or the TrainHistory of the run, got {schedule!r}"
        )

    @property
    def known(self) -> bool:
        """Whether anything of the run is known."""
        return self.lr is not None or self.s_lr is not None

    @property
    def exact(self) -> bool:
        """Whether the coefficients are exact (``lr`` and ``steps`` known)."""
        return self.lr is not None and self.steps is not None

    def coefficient(self, weight: str) -> float | None:
        """``c(s, η)`` of a weight: exact, its flow limit, or None when the run is unknown."""
        t = term(weight)
        if self.exact:
            return t.coefficient(self.lr, self.steps)
        return None if self.s_lr is None else t.flow_coefficient(self.s_lr)

    def to_dict(self) -> dict[str, float | int | None]:
        return {"lr": self.lr, "steps": self.steps, "s_lr": self.s_lr}


def run_shorthands(fn: F) -> F:
    """Let ``fn`` (which takes ``schedule=``) also take the plain keywords of earlier releases,
    ``lr=``, ``steps=`` and ``s_lr=``, which build its ``Schedule(lr, steps, s_lr)``; giving
    both forms is refused. The wrapped function lists them in ``shorthands``."""
    if "schedule" not in inspect.signature(fn).parameters:
        return fn

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        run = {k: kwargs.pop(k) for k in RUN_KEYWORDS if k in kwargs}
        if run:
            if kwargs.get("schedule") is not None:
                raise LeadTermsError(
                    f"give the training run once: schedule= or {', '.join(run)}=, not both"
                )
            kwargs["schedule"] = Schedule(**run)
        return fn(*args, **kwargs)

    return with_shorthands(call, fn, RUN_KEYWORDS)


def with_shorthands(call: Any, fn: Any, names: tuple[str, ...]) -> Any:
    """``call`` (a wrapper of ``fn`` that takes the plain keywords ``names`` besides ``fn``'s
    own) with ``shorthands`` listing every such keyword and ``fn``'s signature plus
    ``**shorthands``, so that tools which bind arguments to the signature accept them too."""
    known = tuple(getattr(fn, "shorthands", ()))
    call.shorthands = (*known, *names)
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())
    if all(p.kind != p.VAR_KEYWORD for p in params):
        params.append(inspect.Parameter("shorthands", inspect.Parameter.VAR_KEYWORD))
    call.__signature__ = signature.replace(parameters=params)
    return call


#: what ``schedule=`` takes: a :class:`Schedule`, an ``(lr, steps)`` pair, a training record
#: with a ``schedule`` (a :class:`~tl_leadterms.training.TrainHistory`) or None (unknown)
ScheduleLike = Any


def coefficients(*, lr: float, steps: int) -> dict[str, float]:
    """The exact coefficient of every weight of the table.

    Args:
        lr: the learning rate η.
        steps: the number of gradient steps s.

    >>> coefficients(lr=0.1, steps=4)["W"]  # (3·C(4,4) + 2·C(4,3))·η⁴ = 11·1e-4
    0.0011000000000000003
    """
    lr, steps = check_lr(lr), check_steps(steps)
    return {name: t.coefficient(lr, steps) for name, t in TERMS.items()}


def step_bound(*, lr: float, n_layers: int, n_ctx: int) -> float:
    """The theorem's largest step count ``η⁻¹·min(1/(12L), 5/(8√T))`` (a real number).

    Args:
        lr: the learning rate η.
        n_layers: the number of attention layers L.
        n_ctx: the window length T."""
    lr = check_lr(lr)
    n_layers, n_ctx = positive_int("n_layers", n_layers), positive_int("n_ctx", n_ctx)
    return min(1 / (12 * n_layers), 5 / (8 * math.sqrt(n_ctx))) / lr


def error_bounds(lr: float, steps: int, n_ctx: int) -> dict[str, float]:
    """The theorem's Frobenius error bound of every weight (NaN where it states none)."""
    lr, steps = check_lr(lr), check_steps(steps)
    return {name: t.error_bound(lr, steps, n_ctx) for name, t in TERMS.items()}


@dataclass
class LeadingTerms:
    """Predicted weights and the theorem's conditions for one (lr, steps, n_layers).

    Predicted maps are built on first access and kept; ``V``, ``W`` and ``P`` hold one entry per
    layer, all one tensor object. :meth:`predicted` gives any weight of the table by name.

    Attributes:
        W_O: ``[k, k]`` ``sη·B̄`` [current token, next token].
        V: per layer ``[k, k]`` ``C(s,2)η²·Φ̄ᵀB̄ᵀ`` [context token, current token].
        W: per layer ``[k, k]`` ``c·Q̄`` [query token, key token].
        P: per layer ``[T]`` ``c·Δ`` [offset].
        coefficients: ``c(s, η)`` of every weight of the table.
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

    def predicted(self, weight: str) -> Tensor:
        """``c(s, η)`` times the leading term of ``weight`` (one map, valid in every layer)."""
        t = term(weight)
        return self.coefficients[t.weight] * t.target.build(self.stats)

    W_O = cached_property(lambda self: self.predicted("W_O"))
    V = cached_property(lambda self: [self.predicted("V")] * self.n_layers)
    W = cached_property(lambda self: [self.predicted("W")] * self.n_layers)
    P = cached_property(lambda self: [self.predicted("P")] * self.n_layers)

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


def leading_terms(stats: CorpusStats, *, lr: float, steps: int, n_layers: int = 1) -> LeadingTerms:
    """The weights the theory predicts after ``steps`` GD steps at learning rate ``lr``.

    Args:
        stats: corpus statistics from :func:`tl_leadterms.corpus_stats`.
        lr: constant learning rate ``η`` (finite, > 0).
        steps: full-batch GD steps ``s`` from zero initialisation (an integer >= 0).
        n_layers: ``L``, for the per-layer lists and the step bound.

    Example:
        >>> import torch
        >>> from tl_leadterms import corpus_stats, leading_terms
        >>> stats = corpus_stats(torch.randint(0, 20, (32, 9)), d_vocab=20, progress=False)
        >>> lt = leading_terms(stats, lr=0.1, steps=5, n_layers=2)
        >>> torch.allclose(lt.W_O, 0.5 * stats.B_bar), len(lt.V)
        (True, 2)
    """
    stats = check_stats(stats)
    lr, steps = check_lr(lr), check_steps(steps)
    n_layers = positive_int("n_layers", n_layers)
    bound = step_bound(lr=lr, n_layers=n_layers, n_ctx=stats.n_ctx)
    conditions = {
        "L <= sqrt(T)/4": n_layers <= math.sqrt(stats.n_ctx) / 4,
        "T >= 60": stats.n_ctx >= 60,
        "|V| >= 500": stats.d_vocab >= 500,
    }
    return LeadingTerms(
        stats=stats,
        lr=lr,
        steps=steps,
        n_layers=n_layers,
        coefficients=coefficients(lr=lr, steps=steps),
        step_bound=bound,
        within_bound=steps <= bound,
        conditions=conditions,
        error_bounds=error_bounds(lr, steps, stats.n_ctx),
    )


def expansion_error(order: int, *, n_layers: int, rate: float, score_scale: float) -> float:
    """A bound on the residual-stream rows' error when the leading-term model keeps the powers
    ``R⁰ … R^order`` of its value map in every layer
    (:mod:`tl_leadterms.analyses.output.predictors`).

    With ``rate = |c_V|·‖R‖``, ``score_scale = |c_W|·‖Q̄‖``, ``ρ_l = (1 + rate)^(l−1)`` a bound
    on the kept rows' norm and ``δ_l = C(l−1, order)·rate^(order+1)`` the term dropped in layer
    ``l``: ``ε_l = ε_{l−1} + rate·(ε_{l−1} + 2·score_scale·ε_{l−1}(2ρ_l + ε_{l−1})ρ_l) + δ_l``,
    ``ε_0 = 0``; returns ``ε_L`` (``inf`` when it overflows).

    Args:
        order: the highest power of ``R`` kept.
        n_layers: the number of layers ``L``.
        rate: ``|c_V|·‖R‖``.
        score_scale: ``|c_W|·‖Q̄‖``.

    >>> expansion_error(0, n_layers=1, rate=0.1, score_scale=1.0)  # one layer: C(0, 0)·0.1
    0.1
    >>> expansion_error(1, n_layers=1, rate=0.1, score_scale=1.0)  # nothing dropped
    0.0
    """
    eps = 0.0
    try:
        for layer in range(1, n_layers + 1):
            rho = (1.0 + rate) ** (layer - 1)
            delta = math.comb(layer - 1, order) * rate ** (order + 1)
            eps += rate * (eps + 2.0 * score_scale * eps * (2.0 * rho + eps) * rho) + delta
    except OverflowError:
        return math.inf
    return eps
