"""Scoring predicted next-token distributions against a model's, and fitting the scalars.

``fit=True`` of :func:`~tl_leadterms.output_agreement` fits ``c_O``, ``c_V``, ``c_W`` (shared by
every layer) on a calibration split: a scan of ``s·η`` with the three tied to their
gradient-flow limits, then L-BFGS on each (docs/guides/next-token.md); the fitted bigram
``(c_O, 0, 0)`` joins the scan, so the fit is never worse than the bigram on calibration.

A fitted coefficient the calibration cannot vouch for is flagged (:func:`at_bound`, the table's
``c_at_bound``): one whose implied ``s·η`` (its gradient-flow limit inverted: ``c_O``,
``√(2·c_V)``, ``(8·c_W)^¼``) is negative or outside the scan's range ``[1e-2, 1e3]`` (the
theory's coefficients are positive; beyond the range the fit extrapolates), or one the KL does
not pin (multiplying or dividing it by 10 changes the calibration KL by less than
``1e-6`` of itself: a saturated or vanishing term, whose value reads "at least" or "at most").

>>> lp = torch.log_softmax(torch.tensor([[[2.0, 0.0, -1.0]]]), -1)
>>> kl, top1, top5 = scores(lp, lp)
>>> float(kl.abs().max()) < 1e-7, float(top1), float(top5)
(True, 1.0, 1.0)
"""

import math
from collections.abc import Callable

import torch
from torch import Tensor

from tl_leadterms.theory import term

__all__ = ["at_bound", "fit_bigram", "fit_leading", "mean_kl", "scores"]

_GRID = torch.logspace(-2, 3, 31, dtype=torch.float64).tolist()  # s·η candidates
_PINNED = 1e-6  # relative change of the calibration KL, ×10 or ÷10, below which c is not pinned


def scores(model_lp: Tensor, pred_lp: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(KL [n, T], top-1 agreement, top-5 agreement)`` of two ``[n, T, outcomes]`` log-probs.

    KL is ``KL(model ‖ predictor)``; top-5 asks whether the model's top outcome is among the
    predictor's five most likely. Rounding can make a KL of two equal distributions a little
    negative; it is clamped at 0.
    """
    p = model_lp.exp()
    kl = torch.where(p > 0, p * (model_lp - pred_lp), torch.zeros_like(p)).sum(-1).clamp(min=0)
    top = model_lp.argmax(-1)
    top1 = (pred_lp.argmax(-1) == top).double().mean()
    five = pred_lp.topk(min(5, pred_lp.shape[-1]), dim=-1).indices
    top5 = (five == top[..., None]).any(-1).double().mean()
    return kl, top1, top5


def mean_kl(model_lp: Tensor, pred_lp: Tensor) -> Tensor:
    """Mean ``KL(model ‖ predictor)`` over positions (differentiable in ``pred_lp``)."""
    p = model_lp.exp()
    return torch.where(p > 0, p * (model_lp - pred_lp), torch.zeros_like(p)).sum(-1).mean()


def _flow(s_lr: float) -> tuple[float, float, float]:
    return tuple(term(w).flow_coefficient(s_lr) for w in ("W_O", "V", "W"))


def _lbfgs(loss: Callable[[Tensor], Tensor], theta: Tensor, iterations: int) -> Tensor:
    """Minimise ``loss(theta)`` by L-BFGS from ``theta``; the start if nothing improves."""
    theta0 = theta.detach().clone()
    start = float(loss(theta0).detach())
    if not math.isfinite(start) or start <= 0:
        return theta0
    theta = theta0.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([theta], max_iter=iterations, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        value = loss(theta) / start  # relative: L-BFGS' tolerances are absolute
        value.backward()
        return value

    try:
        opt.step(closure)
    except RuntimeError:  # a non-finite step; keep the start
        return theta0
    final = theta.detach()
    value = float(loss(final).detach())
    return final if math.isfinite(value) and value <= start else theta0


def fit_leading(
    kl_of: Callable[[Tensor, Tensor, Tensor], Tensor],
    starts: list[tuple[float, float, float]] = (),
    iterations: int = 30,
) -> dict[str, float]:
    """Fit ``(c_O, c_V, c_W)`` minimising ``kl_of(c_O, c_V, c_W)`` (the calibration KL).

    Args:
        kl_of: the calibration KL as a differentiable function of the three coefficients.
        starts: extra candidates for the scan (the coefficients of a known run; the fitted
            bigram ``(c_O, 0, 0)``, so the fit is never worse than the bigram on calibration).
        iterations: L-BFGS iterations.

    Returns:
        ``{"c_O", "c_V", "c_W", "s_lr_scan", "calibration_kl"}`` (``s_lr_scan`` NaN when an
        extra start won the scan).
    """
    candidates = [(_flow(x), x) for x in _GRID] + [(tuple(c), math.nan) for c in starts]
    with torch.no_grad():
        values = [float(kl_of(*map(torch.tensor, c))) for c, _ in candidates]
    finite = [i for i, v in enumerate(values) if math.isfinite(v)]
    best = min(finite, key=values.__getitem__)
    c0 = torch.tensor(candidates[best][0], dtype=torch.float64)
    natural = torch.tensor(_flow(max(abs(float(c0[0])), 1e-3)), dtype=torch.float64)
    scale = torch.where(c0 != 0, c0, natural)  # a zero start moves in its flow units

    def loss(theta: Tensor) -> Tensor:
        c = theta * scale
        return kl_of(c[0], c[1], c[2])

    theta = _lbfgs(loss, c0 / scale, iterations)
    c = (theta * scale).tolist()
    with torch.no_grad():
        final = float(kl_of(*map(torch.tensor, c)))
    return {"c_O": c[0], "c_V": c[1], "c_W": c[2], "s_lr_scan": candidates[best][1],
            "calibration_kl": final}  # fmt: skip


def fit_bigram(kl_of: Callable[[Tensor], Tensor], iterations: int = 30) -> float:
    """Fit the bigram baseline's ``c_O`` alone (scan, then L-BFGS on ``log c_O``)."""
    with torch.no_grad():
        values = [float(kl_of(torch.tensor(x))) for x in _GRID]
    best = min((i for i, v in enumerate(values) if math.isfinite(v)), key=values.__getitem__)
    theta = torch.tensor([math.log(_GRID[best])], dtype=torch.float64)
    theta = _lbfgs(lambda t: kl_of(t[0].exp()), theta, iterations)
    return float(theta[0].exp())


def at_bound(kl_of: Callable[..., Tensor], c: tuple[float, ...], names=("c_O", "c_V", "c_W")
             ) -> str | None:  # fmt: skip
    """The fitted coefficients ``c`` (named ``names``) the calibration cannot vouch for, joined
    by ", " (None when none; the module docstring); zero coefficients (not fitted) are never
    flagged. ``kl_of`` takes them as tensors."""

    def kl(values) -> float:
        with torch.no_grad():
            return float(kl_of(*(torch.tensor(v, dtype=torch.float64) for v in values)))

    base, out = kl(c), []
    for i, (name, value) in enumerate(zip(names, c, strict=False)):
        implied = term(("W_O", "V", "W")[i]).implied_s_lr(value)
        if value != 0 and (not _GRID[0] <= implied <= _GRID[-1] or all(
                abs(kl([v * f if j == i else v for j, v in enumerate(c)]) - base)
                <= _PINNED * abs(base) for f in (10.0, 0.1))):  # fmt: skip
            out.append(name)
    return ", ".join(out) or None
