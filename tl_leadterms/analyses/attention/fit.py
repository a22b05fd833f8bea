"""Scoring a layer's heads against the predicted attention, all heads at once.

For one layer, ``actual`` holds every head's pattern ``[H, B, q, k]`` and ``scores`` the
predicted scores ``X Q̄ Xᵀ + DM(Δ)`` ``[B, q, k]`` (``−inf`` above the diagonal). Per head: the
mean Jensen-Shannon divergence between its rows and ``S(c·scores)``, with ``c`` fixed or fitted
by a scan and Newton's method on the closed-form slope (a head whose best is a limit is reported
at the bound, :func:`scale_text`), and the mean Spearman correlation of its rows with the
scores. Only query rows ``2..T`` count. The method: docs/math.md#fast-algebra.
"""

import itertools
import math
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "Evaluation",
    "LayerScores",
    "ScaleFit",
    "average_ranks",
    "scale_text",
    "score_layer",
    "score_ranks",
]

GRID_SPAN = (-4, 3)  # decades of c·σ in the first scan, σ the scores' spread within rows
GRID_LIMIT = (-12.0, 15.0)  # log10 c: the furthest the scan widens
WIDEN = 3.0  # decades added per widening step
_FLAT = 1e-9  # relative change of the loss over a decade below which a limit is reached
_COARSE_TOL, _TOL = 1e-5, 1e-6  # Newton steps in log c below which a head has converged
_COARSE_STEPS, _STEPS = 12, 8  # the most Newton evaluations per phase
_ROUNDED = 1e-12  # a limit whose divergence is within this of the minimum's fits as well


def average_ranks(x: Tensor, valid: Tensor) -> Tensor:
    """0-based average ranks of ``x`` along the last axis among the ``valid`` entries.

    Example:
        >>> import torch
        >>> average_ranks(torch.tensor([3.0, 1.0, 3.0, 0.0]), torch.tensor([True] * 3 + [False]))
        tensor([1.5000, 0.0000, 1.5000, 3.0000], dtype=torch.float64)
    """
    filled = x.detach().masked_fill(~valid, math.inf).cpu()
    index = torch.from_numpy(np.argsort(filled.numpy(), axis=-1))  # numpy's: ~5x torch's sort
    ordered = filled.gather(-1, index)
    position = torch.arange(ordered.shape[-1], dtype=torch.float64).expand(ordered.shape)
    ranks = torch.empty(ordered.shape, dtype=torch.float64).scatter_(-1, index, position)
    among_valid = position[..., 1:] < valid.sum(-1, keepdim=True)  # valid keys sort first
    tied = ((ordered[..., 1:] == ordered[..., :-1]) & among_valid).any(-1)
    if bool(tied.any()):  # rows with ties among valid keys (masked keys tie last, unread)
        ranks[tied] = _tied_ranks(ordered[tied], index[tied])
    return ranks


def _tied_ranks(ordered: Tensor, index: Tensor) -> Tensor:
    """Average ranks ``[rows, n]`` from each row's sorted values and sorting permutation."""
    n = ordered.shape[-1]
    position = torch.arange(n).expand(ordered.shape)
    differs = ordered[..., 1:] != ordered[..., :-1]  # a tie group ends between these
    edge = torch.ones((*ordered.shape[:-1], 1), dtype=torch.bool)
    first = torch.where(torch.cat([edge, differs], -1), position, 0).cummax(-1).values
    ends = torch.cat([differs, edge], -1)
    last = torch.where(ends, position, n - 1).flip(-1).cummin(-1).values.flip(-1)
    mean = (first + last).to(torch.float64) / 2
    return torch.empty_like(mean).scatter_(-1, index, mean)


def _centred_ranks(x: Tensor, valid: Tensor, n: Tensor) -> Tensor:
    return torch.where(valid, average_ranks(x, valid) - (n - 1) / 2, 0.0)


def score_ranks(scores: Tensor) -> Tensor:
    """Centred average ranks of predicted scores ``[B, q, k]`` over each row's valid keys, for
    :meth:`LayerScores.rank_correlation` (query rows ``2..T``, as the layer keeps them)."""
    scores = scores[..., 1:, :]
    valid = torch.isfinite(scores)
    return _centred_ranks(scores, valid, valid.sum(-1, keepdim=True).to(torch.float64))


def _row_blocks(valid: Tensor, n_blocks: int = 4) -> list[tuple[slice, int]]:
    """Contiguous blocks of query rows, each with the number of keys its rows can reach."""
    reach = valid.flatten(0, -3).any(0)  # [rows, keys]: any sequence has this key valid
    last = torch.where(reach, torch.arange(reach.shape[-1]), -1).amax(-1) + 1  # per row
    n = reach.shape[0]
    edges = sorted({round(i * n / n_blocks) for i in range(n_blocks + 1)})
    return [
        (slice(a, b), max(1, int(last[a:b].max()))) for a, b in itertools.pairwise(edges) if b > a
    ]


def _spread(scores: Tensor, valid: Tensor) -> float:
    """Root-mean-square deviation of the scores from their row means (0 when none vary)."""
    count = valid.sum(-1, keepdim=True)
    finite = scores.masked_fill(~valid, 0.0).to(torch.float64)
    mean = finite.sum(-1, keepdim=True) / count.clamp(min=1)
    deviation = torch.where(valid, finite - mean, 0.0)
    return float((deviation.square().sum() / valid.sum().clamp(min=1)).sqrt())


class Evaluation(NamedTuple):
    """Per head ``[H]``: mean JS divergence, its slope and curvature in ``u = log c``."""

    js: Tensor
    slope: Tensor | None = None
    curvature: Tensor | None = None


class ScaleFit(NamedTuple):
    """Per head ``[H]``: the fitted scale ``c``, whether it is at a bound (−1: the search's
    lower edge, +1: its upper edge, 0: a bracketed minimum), and the mean JS divergence
    there."""

    scale: Tensor
    at_bound: Tensor
    js: Tensor


class LayerScores:
    """The per-head agreement of one layer; see the module docstring."""

    def __init__(self, actual: Tensor, scores: Tensor, dtype: torch.dtype = torch.float64) -> None:
        self.pattern = actual[..., 1:, :]  # its own dtype, for ranks
        self.actual = self.pattern.to(dtype)  # [H, B, q-1, k]
        self.scores = scores[..., 1:, :].to(dtype)  # [B, q-1, k]
        self.valid = torch.isfinite(self.scores)
        finite = self.scores.masked_fill(~self.valid, -math.inf)
        # scores less their row maximum (0 at masked keys): c·shifted ≤ 0 needs no max pass
        shifted = (finite - finite.amax(-1, keepdim=True)).masked_fill(~self.valid, 0.0)
        bias = torch.zeros_like(finite).masked_fill(~self.valid, torch.finfo(dtype).min / 4)
        self._blocks = [
            (shifted[..., rows, :width], bias[..., rows, :width], self.actual[..., rows, :width])
            for rows, width in _row_blocks(self.valid)
        ]
        self._tiny = torch.finfo(dtype).tiny
        self._n_rows = self.scores.shape[-3] * self.scores.shape[-2]  # B · (q − 1)
        p_log_p = self.actual * self.actual.clamp(min=self._tiny).log()
        self._p_log_p = p_log_p.sum(-1).mean((-2, -1))  # [H], mean over rows
        self.spread = _spread(self.scores, self.valid)
        self._actual_ranks: Tensor | None = None

    def js(self, scale: Tensor | float) -> Tensor:
        """Mean JS divergence per head at per-head scales ``scale`` ``[H]`` (or one scalar)."""
        scale = torch.as_tensor(scale, dtype=torch.float64).expand(self.actual.shape[0])
        return self._evaluate(scale, order=0).js

    def evaluate(
        self, log_scale: Tensor, order: int = 2, heads: Tensor | None = None
    ) -> Evaluation:
        """JS divergence per head at ``c = exp(log_scale)`` ``[H]``, with its slope
        (``order ≥ 1``) and curvature (``order = 2``) in ``log c``; ``heads``: only these
        (``log_scale`` then has one entry per listed head)."""
        return self._evaluate(log_scale.exp(), order, heads)

    def _evaluate(self, scale: Tensor, order: int, heads: Tensor | None = None) -> Evaluation:
        c = scale.to(self.scores.dtype).reshape(-1, 1, 1, 1)
        sums = torch.zeros(4, c.shape[0], dtype=torch.float64)  # q log q, m log m, slope, curv
        for s, bias, p in self._blocks:
            p = p if heads is None else p.index_select(0, heads)
            z = torch.addcmul(bias, s, c)  # masked keys: a finite, hugely negative logit
            q = z.exp()
            total = q.sum(-1, keepdim=True)
            q = q.div_(total)  # q = 0 exactly at masked keys
            log_q = z.sub_(total.log_())
            m = torch.add(p, q).mul_(0.5)
            log_m = m.clamp(min=self._tiny).log_()
            sums[0] += (q * log_q).sum((-3, -2, -1))
            sums[1] += (m * log_m).sum((-3, -2, -1))
            if order >= 1:
                d = s.sub((q * s).sum(-1, keepdim=True))  # s − ⟨s⟩_q
                q_d = q * d
                ell = log_q.sub_(log_m)
                sums[2] += (q_d * ell).sum((-3, -2, -1))
            if order >= 2:
                q_d2 = q_d.mul_(d)
                variance = q_d2.sum(-1, keepdim=True)
                sums[3] += (q_d2 * ell).sum((-3, -2, -1))
                sums[3] -= (variance * (q * ell).sum(-1, keepdim=True)).sum((-3, -2, -1))
                sums[3] += 0.5 * (q_d2 * p / m.clamp(min=self._tiny)).sum((-3, -2, -1))
        sums /= self._n_rows
        p_log_p = self._p_log_p if heads is None else self._p_log_p[heads]
        js = (0.5 * p_log_p + 0.5 * sums[0] - sums[1]).clamp(min=0.0)
        c = c.reshape(-1).to(torch.float64)
        slope = 0.5 * c * sums[2]  # d/du = c d/dc
        curvature = slope + 0.5 * c.square() * sums[3]  # d²/du² = c d/dc + c² d²/dc²
        return Evaluation(js, slope if order >= 1 else None, curvature if order >= 2 else None)

    def rank_correlation(self, ranks: Tensor | None = None) -> Tensor:
        """Mean Spearman correlation per head over rows with at least 3 keys ``[H]``.

        ``ranks``: :func:`score_ranks` of these or other predicted scores with the same causal
        mask (a permutation null's draw); the pattern's ranks are computed once and reused.
        """
        n = self.valid.sum(-1, keepdim=True).to(torch.float64)
        rs = _centred_ranks(self.scores, self.valid, n) if ranks is None else ranks
        if self._actual_ranks is None:
            self._actual_ranks = _centred_ranks(self.pattern, self.valid.expand_as(self.pattern), n)
        ra = self._actual_ranks
        num = (ra * rs).sum(-1)
        den = (ra.square().sum(-1) * rs.square().sum(-1)).sqrt()
        rho = torch.where((n.squeeze(-1) >= 3) & (den > 0), num / den.clamp(min=1e-300), math.nan)
        counted = ~rho.isnan()
        total = torch.where(counted, rho, 0.0).sum((-2, -1))
        count = counted.sum((-2, -1))
        return torch.where(count > 0, total / count.clamp(min=1), math.nan)

    def fit_scale(self, coarse: "LayerScores | None" = None) -> tuple[Tensor, Tensor]:
        """Per head the ``c`` minimising the mean JS divergence, and whether it is at a bound
        (see :meth:`fit`)."""
        fitted = self.fit(coarse)
        return fitted.scale, fitted.at_bound

    def fit(self, coarse: "LayerScores | None" = None) -> ScaleFit:
        """Per head the ``c`` minimising the mean JS divergence (docs/math.md#fast-algebra).

        ``coarse`` (the same layer in a cheaper dtype) runs the scan and the first Newton
        steps; the last steps and the reported divergence always use this one.
        """
        first = coarse or self
        u, low, high, active, side = _scan(first.evaluate, first.actual.shape[0], first.spread)
        if coarse is not None and bool(active.any()):
            u, _ = coarse.refine(u, low, high, active, _COARSE_TOL, _COARSE_STEPS)
        u, js = self.refine(u, low, high, active, _TOL, _STEPS)
        bound = (~active).nonzero().squeeze(-1)
        if len(bound):  # the divergence at the scan's end
            js[bound] = self.evaluate(u[bound], order=0, heads=bound).js
        edge = torch.where(active, 0, side)
        for limit, at in ((-1, GRID_LIMIT[0]), (1, GRID_LIMIT[1])):  # a limit fitting as well
            there = self.evaluate(torch.full_like(u, at * math.log(10)), order=0).js
            edge = torch.where(active & (there <= js + _ROUNDED), limit, edge)
        return ScaleFit(u.exp(), edge, js)

    def refine(
        self, u: Tensor, low: Tensor, high: Tensor, active: Tensor, tol: float, steps: int
    ) -> tuple[Tensor, Tensor]:
        """Safeguarded Newton steps on the slope in ``[low, high]`` (``log c``), until each
        ``active`` head's step is below ``tol``; each evaluation covers only the heads still
        moving. Returns ``u`` and the JS divergence there (0 for the heads not ``active``)."""
        u, low, high, js = u.clone(), low.clone(), high.clone(), torch.zeros_like(u)
        heads = active.nonzero().squeeze(-1)
        for i in range(steps):
            if len(heads) == 0:
                break
            at = self.evaluate(u[heads], order=2, heads=heads)
            js[heads] = at.js
            x, slope, curvature = u[heads], at.slope, at.curvature
            low[heads] = lo = torch.where(slope < 0, x, low[heads])
            high[heads] = hi = torch.where(slope > 0, x, high[heads])
            step = x - slope / curvature
            bisect = ~(curvature > 0) | ~(step > lo) | ~(step < hi)
            step = torch.where(bisect, 0.5 * (lo + hi), step)
            moving = ((step - x).abs() > tol) & (slope != 0)
            if i == steps - 1:
                break
            heads = heads[moving]
            u[heads] = step[moving]
        return u, js


class _Brackets(NamedTuple):
    """Per head ``[H]``, in ``log c``: a start and the bracket ``[low, high]`` of a minimum;
    ``active`` False where the best is a limit (``start = low = high`` = the scan's end, on
    ``side`` −1 or +1)."""

    start: Tensor
    low: Tensor
    high: Tensor
    active: Tensor
    side: Tensor


def _first_scan(spread: float) -> list[float]:
    """Decades of ``c`` of the first scan, centred on ``1/spread``, inside the limits."""
    centre = round(-math.log10(spread)) if spread > 0 and math.isfinite(spread) else 0
    width = GRID_SPAN[1] - GRID_SPAN[0]
    low = min(max(centre + GRID_SPAN[0], GRID_LIMIT[0]), GRID_LIMIT[1] - width)
    return [float(low + i) for i in range(width + 1)]


def _choose(js: Tensor, slope: Tensor) -> tuple[Tensor, Tensor]:
    """Per head the best candidate of a scan ``[H, n]``: 0 = the low limit, ``j + 1`` = the
    minimum between points ``j`` and ``j + 1`` (the slope turns from − to +), ``n`` = the
    high limit; and whether the divergence is flat at each point."""
    flat = slope.abs() * math.log(10) <= _FLAT * js + 1e-15
    inf = torch.full_like(js[:, :1], math.inf)
    pair = torch.minimum(js[:, :-1], js[:, 1:])
    between = torch.where((slope[:, :-1] < 0) & (slope[:, 1:] > 0), pair, math.inf)
    low = torch.where((slope[:, :1] >= 0) | flat[:, :1], js[:, :1], inf)
    high = torch.where((slope[:, -1:] <= 0) | flat[:, -1:], js[:, -1:], inf)
    candidates = torch.cat([low, between, high], -1)
    # none (a slope exactly 0 where it turns): the turn from − to 0
    loose = torch.where((slope[:, :-1] < 0) & (slope[:, 1:] >= 0), pair, math.inf)
    none = candidates.isinf().all(-1, keepdim=True)
    candidates = torch.where(none, torch.cat([inf, loose, inf], -1), candidates)
    return candidates.argmin(-1), flat


def _scan(evaluate, n_heads: int, spread: float) -> _Brackets:
    """Scan ``c`` a decade at a time, widening where a head's best is a limit the slope says
    lies further out (and not flat), then bracket each head's best (docs/math.md#fast-algebra)."""
    points: dict[float, Evaluation] = {}

    def add(exponent: float) -> None:
        log_c = torch.full((n_heads,), exponent * math.log(10), dtype=torch.float64)
        points[exponent] = evaluate(log_c, order=1)

    for exponent in _first_scan(spread):
        add(exponent)
    while True:
        grid = sorted(points)
        js = torch.stack([points[e].js for e in grid], -1).double()  # [H, n]
        slope = torch.stack([points[e].slope for e in grid], -1).double()
        pick, flat = _choose(js, slope)
        n = len(grid)
        if bool(((pick == 0) & ~flat[:, 0]).any()) and grid[0] > GRID_LIMIT[0]:
            add(max(grid[0] - WIDEN, GRID_LIMIT[0]))
        elif bool(((pick == n) & ~flat[:, -1]).any()) and grid[-1] < GRID_LIMIT[1]:
            add(min(grid[-1] + WIDEN, GRID_LIMIT[1]))
        else:
            break
    u = torch.tensor(grid, dtype=torch.float64) * math.log(10)
    active = (pick > 0) & (pick < n)
    j = (pick - 1).clamp(0, n - 2)
    low, high = u[j], u[j + 1]
    rows = torch.arange(n_heads)
    s_low, s_high = slope[rows, j], slope[rows, j + 1]
    start = low - s_low * (high - low) / torch.where(active, s_high - s_low, 1.0)  # secant
    end = torch.where(pick == 0, u[0], u[-1])
    side = torch.where(pick == 0, -1, 1)
    return _Brackets(*(torch.where(active, x, end) for x in (start, low, high)), active, side)


def score_layer(
    actual: Tensor,
    scores: Tensor,
    scale: float | None,
    layer: LayerScores | None = None,
    ranks: Tensor | None = None,
) -> list[dict]:
    """Per head: JS divergence, rank correlation and the scale used (fixed or fitted).

    ``layer``: the :class:`LayerScores` of ``actual`` and ``scores`` when already built;
    ``ranks``: :func:`score_ranks` of ``scores`` when already computed (shared by layers).
    """
    layer = LayerScores(actual, scores) if layer is None else layer
    n_heads = layer.actual.shape[0]
    if scale is None:  # the scan and first steps in float32, the last steps in float64
        fitted = layer.fit(coarse=LayerScores(actual, scores, torch.float32))
        scales, at_bound, js = fitted
    else:
        scales = torch.full((n_heads,), float(scale), dtype=torch.float64)
        at_bound = torch.zeros(n_heads, dtype=torch.long)
        js = layer.js(scales)
    rho = layer.rank_correlation(ranks)
    edge = {-1: "lower", 0: None, 1: "upper"}
    return [
        {"js_divergence": float(js[h]), "rank_correlation": float(rho[h]),
         "scale": float(scales[h]), "scale_at_bound": edge[int(at_bound[h])]}
        for h in range(n_heads)
    ]  # fmt: skip


def scale_text(scale: float, at_bound: str | None) -> str:
    """How every table and view prints a scale ``c``: its value, or the search's edge it is at.

    >>> scale_text(0.25, None), scale_text(0.01, "lower")[:40]
    ('c = 0.25', "c at the search's lower edge (≤ 0.01): a")
    """
    if at_bound is None:
        return f"c = {scale:.4g}"
    if at_bound == "lower":
        return (f"c at the search's lower edge (≤ {scale:.3g}): attention as uniform as the "
                "prediction can make it")  # fmt: skip
    return (f"c at the search's upper edge (≥ {scale:.3g}): attention as sharp as the "
            "prediction can make it")  # fmt: skip
