"""Confidence intervals from bootstrap resample scores: one formula per method.

:func:`interval` turns the scores of ``R`` resamples (and, for some methods, of more) into
``(lo, hi, corrected)`` per column; :mod:`tl_leadterms.results.bootstrap` draws the resamples
and writes the columns into the rows.

Methods (``BootstrapSpec(method=...)``, the first of :data:`METHODS` the default; each one's
interval and ``corrected``: docs/guides/intervals.md#the-method-and-why): ``"inverted"`` inverts
the distribution of a cosine's squared tangent for rows that record each resample's target
geometry (others get ``"shifted"``); ``"shifted"`` is the basic bootstrap moved back into
``[−1, 1]`` with its width kept; ``"calibrated"`` rescales the resamples by a second level
(``BootstrapSpec(calibration=(F, S))``); ``"atanh"``, ``"log1m"``, ``"angle"`` are the basic
bootstrap on those scales; ``"bca"``, ``"percentile"`` and ``"basic"`` are the textbook ones.
Quantiles are Hyndman and Fan's type 8 (:func:`_positions`), and each side of the interval is
widened about ``corrected`` by :func:`expansion` (``BootstrapSpec(expand=False)`` leaves it out,
``"bca"`` never has it); ``benchmarks/bench_coverage.py`` measures how often each covers.

>>> draws = torch.linspace(0.0, 0.5, 101, dtype=torch.float64)[:, None]
>>> lo, hi, mid = interval(draws, 0.9, "percentile")
>>> round(float(lo[0]), 3), round(float(mid[0]), 3), round(float(hi[0]), 3)
(0.022, 0.25, 0.478)
>>> estimate = torch.tensor([0.3], dtype=torch.float64)
>>> [round(float(x[0]), 3) for x in interval(draws, 0.9, "shifted", estimate)]
[0.122, 0.578, 0.35]
>>> [round(float(x[0]), 3) for x in interval(draws + 0.5, 0.9, "shifted", estimate + 0.6)]
[0.544, 1.0, 1.0]
"""

import math

import torch
from torch import Tensor

from tl_leadterms.errors import LeadTermsError

__all__ = ["DEFAULT_METHOD", "METHODS", "expansion", "interval", "noise_share"]

#: the interval methods (see the module docstring); the first is the default
METHODS = ("inverted", "shifted", "calibrated", "atanh", "log1m", "angle", "bca", "percentile",
           "basic")  # fmt: skip
DEFAULT_METHOD = METHODS[0]
_EDGE = 1.0 - 1e-15  # |s| is clamped to this before atanh or log(1 − s)


def noise_share(draws: Tensor, star_sq: Tensor, cross: Tensor, target_sq: Tensor,
                estimate: Tensor) -> Tensor:  # fmt: skip
    """``[n]``: how large the sample's noise is against what a cosine measures, per column.

    A cosine ``ŝ = cos(M, T̂)`` is moved by the part of the target ``T̂`` off the map's
    direction, ``‖T̂‖²(1 − ŝ²)``, and the sample's noise adds to that part. With ``d = T* − T̂``
    the move of a resample's target and ``d_⊥`` its part off the plane of ``M`` and ``T̂`` (a
    common rescaling of the statistics moves no cosine, so scale and the component along ``M``
    are left out),

        ``noise_share = mean over the resamples of ‖d_⊥‖² / (‖T̂‖²(1 − ŝ²))``.

    Inputs per resample and column: ``draws`` ``[R, n]`` the cosines ``s*``, ``star_sq`` the
    ``‖T*‖²``, ``cross`` the ``⟨T̂, T*⟩``; per column ``target_sq`` ``‖T̂‖²`` and ``estimate``
    ``ŝ``. ``+inf`` where ``ŝ = ±1``, NaN where a score is NaN.

    Near 1 much of the distance from 1 is the sample's own noise and the resamples spread wider than
    the samples do around the truth (docs/guides/intervals.md#the-noise-share); from
    :data:`~tl_leadterms.results.marks.WIDE_NOISE_SHARE` on, tables mark the interval
    (:mod:`tl_leadterms.results.marks`).

    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> # T̂ = (1, 0, 0), M ∝ (0.8, 0.6, 0): T* = (1, 0, 0.3) moves 0.3 off their plane
    >>> share = noise_share(one * 0.8 / 1.09**0.5, one * 1.09, one, one[0], one[0] * 0.8)
    >>> round(float(share[0]), 6)  # 0.09 / (1 − 0.64)
    0.25
    """
    draws, star_sq, cross = draws.double(), star_sq.double(), cross.double()
    t2, s = target_sq.double(), estimate.double()
    sine2 = (1.0 - s**2).clamp(min=0.0)
    norm = t2.sqrt()
    along_target = (cross - t2) / norm  # d's component along T̂
    along_map = star_sq.sqrt() * draws - norm * s  # along M (a unit vector)
    across = (along_map - s * along_target) / sine2.sqrt()  # along M's part off T̂
    moved = (star_sq + t2 - 2.0 * cross - along_target**2 - across**2).clamp(min=0.0)
    off = t2 * sine2
    share = moved.mean(0) / off.clamp(min=1e-300)
    inf, nan = torch.full_like(share, math.inf), torch.full_like(share, math.nan)
    share = torch.where(off > 0, share, inf)
    return torch.where(torch.isnan(s) | torch.isnan(draws).any(0), nan, share)


def _to_scale(s: Tensor, method: str) -> Tensor:
    s = s.clamp(-_EDGE, _EDGE)
    if method == "atanh":
        return torch.atanh(s)
    if method == "log1m":
        return torch.log1p(-s)
    if method == "angle":
        return torch.arccos(s)
    return s  # "basic": the raw scale


def _from_scale(z: Tensor, method: str) -> Tensor:
    if method == "atanh":
        return torch.tanh(z)
    if method == "log1m":
        return -torch.expm1(z.clamp(max=math.log(2.0)))
    if method == "angle":
        return torch.cos(z.clamp(0.0, math.pi))
    return z.clamp(-1.0, 1.0)


def _bca(draws: Tensor, level: float, estimate: Tensor, jackknife: Tensor | None):
    """BCa ``(lo, hi, level-0 point)`` per column (acceleration 0 without leave-one-outs)."""
    R = draws.shape[0]
    below = (draws < estimate).sum(0).double() + 0.5 * (draws == estimate).sum(0).double()
    z0 = torch.special.ndtri((below / R).clamp(0.5 / R, 1 - 0.5 / R))
    a = torch.zeros_like(z0)
    if jackknife is not None and jackknife.shape[0] > 1:
        d = jackknife.double().mean(0) - jackknife.double()
        spread = (d**2).sum(0)
        a = torch.where(spread > 0, (d**3).sum(0) / (6 * spread.clamp(min=1e-300) ** 1.5), a)
    ordered = draws.sort(0).values
    tail = torch.tensor((1.0 - level) / 2, dtype=torch.float64)
    out = []
    for zq in (torch.special.ndtri(tail), 0.0, -torch.special.ndtri(tail)):
        shifted = z0 + zq
        alpha = torch.special.ndtr(z0 + shifted / (1 - a * shifted)).clamp(0.0, 1.0)
        # each column its own quantile, linear (type 7) as BCa's percentiles are defined
        out.append(_interpolate(ordered, alpha.nan_to_num(0.5) * (R - 1)))
    return out[0], out[2], out[1]


def expansion(level: float, blocks: int, resamples: int | None = None) -> float:
    """``t_ν(1 − α/2) / z(1 − α/2)``: how much wider a ``level`` interval is when the spread
    it is built from is estimated from ``B`` blocks and read off ``R`` resamples' quantiles.

    ``1/ν = 1/(B − 1) + 1/ν_R`` (Satterthwaite): the blocks give ``B − 1`` degrees of freedom, and a
    normal quantile ``z`` read from ``R`` draws varies as a spread of ``ν_R = R·z²·φ(z)²/(p(1 −
    p))`` would (``p = (1 − level)/2``; 30 at 90% and 27 at 95% for ``R = 50``). ``resamples=None``
    leaves the second out (``ν = B − 1``). Values and their measured effect:
    docs/guides/intervals.md#the-method-and-why.

    Raises:
        LeadTermsError: fewer than 2 blocks or 2 resamples.

    >>> round(expansion(0.9, 10), 3), round(expansion(0.95, 20), 3)
    (1.114, 1.068)
    >>> round(expansion(0.9, 16, 50), 3), round(expansion(0.95, 16, 50), 3)
    (1.102, 1.143)
    """
    from scipy import special  # a light import (scipy.stats is not)

    if blocks < 2:
        raise LeadTermsError(f"the expansion needs at least 2 blocks, got blocks={blocks}")
    if resamples is not None and resamples < 2:
        raise LeadTermsError(f"the expansion needs at least 2 resamples, got resamples={resamples}")
    upper = 1.0 - (1.0 - level) / 2
    z = float(special.ndtri(upper))
    inverse_df = 1.0 / (blocks - 1)
    if resamples is not None:
        p, density = 1.0 - upper, math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
        inverse_df += p * (1.0 - p) / (resamples * z * z * density * density)
    return float(special.stdtrit(1.0 / inverse_df, upper) / z)


def _positions(p: Tensor, R: int) -> Tensor:
    """0-based positions in ``R`` sorted draws of the quantiles ``p``: Hyndman and Fan's type 8,
    ``(R + 1/3)·p + 1/3`` counted from 1, approximately median-unbiased for any continuous
    distribution (:func:`torch.quantile`'s linear type 7 reads the tails of few resamples too close
    to the median: docs/guides/intervals.md#the-method-and-why, ``benchmarks/coverage_normal.py``).
    """
    return ((R + 1.0 / 3.0) * p - 2.0 / 3.0).clamp(0.0, R - 1.0)


def _at(ordered: Tensor, p: Tensor) -> Tensor:
    """``[n]``: the ``p[j]`` quantile of column ``j`` of the sorted ``ordered`` ``[R, n]``
    (type 8, linear between order statistics; :func:`_positions`)."""
    return _interpolate(ordered, _positions(p, ordered.shape[0]))


def _interpolate(ordered: Tensor, pos: Tensor) -> Tensor:
    """``[n]``: column ``j`` of the sorted ``ordered`` ``[R, n]`` read at the 0-based position
    ``pos[j]``, linear between its neighbouring order statistics."""
    R = ordered.shape[0]
    low = pos.floor().long().clamp(0, R - 1)
    frac = pos - low
    lower = ordered.gather(0, low[None])[0]
    upper = ordered.gather(0, (low + 1).clamp(max=R - 1)[None])[0]
    return lower + frac * (upper - lower)


def _quantile(d: Tensor, q: Tensor) -> Tensor:
    """``[len(q), n]``: the quantiles ``q`` (the same for every column) of each column of ``d``
    ``[R, n]``, as :func:`torch.quantile` gives them but of type 8 (:func:`_positions`)."""
    ordered = d.sort(0).values
    return torch.stack([_at(ordered, p.expand(d.shape[1])) for p in q])


def _widen(lo: Tensor, mid: Tensor, hi: Tensor, factor: float) -> tuple[Tensor, Tensor]:
    """Each side's distance from ``mid`` scaled by ``factor`` (the interval's asymmetry kept)."""
    if factor == 1.0:
        return lo, hi
    return mid - (mid - lo) * factor, mid + (hi - mid) * factor


def _shifted(draws: Tensor, q: Tensor, estimate: Tensor,
             factor: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """The raw-scale basic interval (widened by ``factor``) translated back into ``[−1, 1]``,
    its width kept."""
    bounds = _quantile(draws, q)
    lo, mid, hi = 2 * estimate - bounds[2], 2 * estimate - bounds[1], 2 * estimate - bounds[0]
    lo, hi = _widen(lo, mid, hi, factor)
    shift = (hi - 1.0).clamp(min=0.0) - (-1.0 - lo).clamp(min=0.0)  # only one end can be out
    lo, hi = (lo - shift).clamp(min=-1.0), (hi - shift).clamp(max=1.0)
    return lo, hi, torch.minimum(torch.maximum(mid, lo), hi)  # the estimate stays at the edge


def _tangent_frame(draws: Tensor, estimate: Tensor,
                   geometry: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, ...]:  # fmt: skip
    """The scale-free frame of ``"inverted"``: ``(L, u, e2, usable)`` per column.

    With ``m`` the map's direction and ``x = T/⟨m, T⟩`` a target scaled to a unit component
    along it, a cosine is ``1/sqrt(1 + |x_⊥|²)`` (``x_⊥`` the part of ``x`` off ``m``):
    ``L = |x̂_⊥|² = 1/ŝ² − 1`` for the sample. A resample moves ``x̂`` by ``e = x* − x̂``:
    ``e2 = |e_⊥|²`` and ``u`` is its component along ``x̂_⊥`` (all from the cosines, ``‖T*‖²``,
    ``⟨T̂, T*⟩`` and ``‖T̂‖²``; a negative ``ŝ`` is read as the cosine of ``−M``). ``usable``:
    where the frame holds (every resample's cosine has the estimate's sign, ``‖T̂‖² > 0``)."""
    star_sq, cross, target_sq = (x.double() for x in geometry)
    sign = torch.where(estimate < 0, -1.0, 1.0)
    e, s = estimate * sign, draws * sign
    usable = (e > 0) & (s > 0).all(0) & (target_sq > 0) & (star_sq > 0).all(0)
    e, s = e.clamp(min=1e-300), s.clamp(min=1e-300)
    p_hat, p_star = e * target_sq.clamp(min=0).sqrt(), s * star_sq.clamp(min=0).sqrt()
    L = (1.0 / e**2 - 1.0).clamp(min=0.0)
    inner = (cross - p_hat * p_star) / (p_hat * p_star).clamp(min=1e-300)  # ⟨x̂_⊥, x*_⊥⟩
    e2 = ((1.0 / s**2 - 1.0).clamp(min=0.0) + L - 2.0 * inner).clamp(min=0.0)
    u = torch.where(L > 0, (inner - L) / L.sqrt().clamp(min=1e-300), torch.zeros_like(inner))
    return L, u, e2, usable & torch.isfinite(u).all(0) & torch.isfinite(e2).all(0)


def _quantiles(d: Tensor, q: Tensor, factor: float) -> Tensor:
    """``[n]``: the ``q[j]`` quantile (type 8, :func:`_positions`) of column ``j`` of ``d``
    ``[R, n]``, its spread about its median widened by ``factor``."""
    ordered = d.sort(0).values
    value = _at(ordered, q)
    if factor == 1.0:
        return value
    mid = _at(ordered, torch.full_like(q, 0.5))
    return mid + factor * (value - mid)  # a widening about the median keeps the order


def _solve(L: Tensor, u: Tensor, e2: Tensor, q: Tensor, factor: float) -> Tensor:
    """``[n]``: the ``λ ≥ 0`` at which the ``q[j]`` quantile of column ``j`` of
    ``D_λ = λ + 2√λ·u + e2`` (its spread about its median widened by ``factor``) equals
    ``L[j]`` (0 where it is above ``L`` already at ``λ = 0``); by bisection, all columns at
    once."""

    def excess(lam: Tensor) -> Tensor:
        return _quantiles(lam + 2.0 * lam.sqrt() * u + e2, q, factor) - L

    lo = torch.zeros_like(L)
    hi = 2.0 * (L + e2.amax(0) + 4.0 * (u**2).amax(0)) + 1e-12
    for _ in range(64):  # D_λ grows like λ: a few doublings reach the root
        short = excess(hi) < 0
        if not bool(short.any()):
            break
        hi = torch.where(short, 2.0 * hi, hi)
    for _ in range(56):  # to a relative 2⁻⁵⁶ of the bracket
        mid = 0.5 * (lo + hi)
        below = excess(mid) < 0
        lo, hi = torch.where(below, mid, lo), torch.where(below, hi, mid)
    return torch.where(excess(torch.zeros_like(L)) >= 0, torch.zeros_like(L), 0.5 * (lo + hi))


def _inverted(draws: Tensor, level: float, estimate: Tensor, geometry: tuple[Tensor, ...],
              factor: float) -> tuple[Tensor, ...]:  # fmt: skip
    """``(lo, hi, mid, usable)`` of ``"inverted"``: the cosines ``1/sqrt(1 + λ)`` of the
    ``λ`` whose ``D_λ`` puts the sample's ``L`` between its ``(1 − level)/2`` and
    ``(1 + level)/2`` quantiles (``mid``: at its median), with the estimate's sign;
    ``usable`` false where the frame does not hold or no ``λ`` does."""
    L, u, e2, usable = _tangent_frame(draws, estimate, geometry)
    tail = (1.0 - level) / 2
    n = L.shape[0]  # the three ends of every column solved at once
    q = torch.tensor([1.0 - tail, 0.5, tail], dtype=torch.float64).repeat_interleave(n)
    lam = _solve(L.repeat(3), u.repeat(1, 3), e2.repeat(1, 3), q, factor)
    lam_lo, lam_mid, lam_hi = lam[:n], lam[n : 2 * n], lam[2 * n :]
    # λ_hi = 0: the sample's tangent is below what the resamples' noise alone gives at a
    # truth of 1 in all but the tail; no λ is consistent with it, and the frame is left
    usable = usable & (lam_hi > 0)
    sign = torch.where(estimate < 0, -1.0, 1.0)
    hi, mid, lo = ((1.0 + lam).rsqrt() for lam in (lam_lo, lam_mid, lam_hi))
    lo, hi = torch.where(sign < 0, -hi, lo), torch.where(sign < 0, -lo, hi)
    mid = sign * mid
    return lo, hi, torch.minimum(torch.maximum(mid, lo), hi), usable


def _calibrated(draws: Tensor, estimate: Tensor, jackknife: Tensor | None,
                second: Tensor | None) -> Tensor:  # fmt: skip
    """The draws of ``"calibrated"``: their spread about their mean scaled by
    ``sqrt(var₁/var₂)`` (``var₁`` the draws' variance, ``var₂`` the mean variance of the
    second level's resamples about each first-level draw; the ratio kept within [1/4, 4]),
    then moved so that their median is ``estimate + bias``, ``bias = (B − 1)(mean of the
    leave-one-block-out scores − estimate)`` (the jackknife's), which puts the shifted
    interval's ``corrected`` at ``estimate − bias``."""
    if jackknife is None or second is None:
        raise LeadTermsError(
            "interval method 'calibrated' needs the leave-one-block-out scores (jackknife=) "
            "and the second level's scores (second=, [F, S, n]) of Bootstrap.split"
        )
    blocks = jackknife.shape[0]
    bias = (blocks - 1) * (jackknife.double().mean(0) - estimate)
    var1, var2 = draws.var(0), second.double().var(1).mean(0)
    ratio = torch.where(var1 > 0, var2 / var1.clamp(min=1e-300), torch.ones_like(var1))
    mean = draws.mean(0)
    out = mean + ratio.clamp(0.25, 4.0).rsqrt() * (draws - mean)
    return out - (_quantile(out, torch.tensor([0.5], dtype=torch.float64))[0] - estimate - bias)


def interval(
    draws: Tensor,
    level: float,
    method: str = DEFAULT_METHOD,
    estimate: Tensor | None = None,
    jackknife: Tensor | None = None,
    *,
    blocks: int | None = None,
    second: Tensor | None = None,
    geometry: tuple[Tensor, Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(lo, hi, corrected)`` per column of the resample scores ``draws`` ``[R, n]`` (NaN where
    a draw or the estimate is NaN); ``estimate`` ``[n]`` is the full-corpus score (all methods
    but ``"percentile"``), ``jackknife`` ``[B, n]`` the leave-one-block-out scores (``"bca"``,
    ``"calibrated"``), ``second`` ``[F, S, n]`` the second level's scores (``"calibrated"``),
    ``geometry`` the resamples' ``(‖T*‖² [R, n], ⟨T̂, T*⟩ [R, n], ‖T̂‖² [n])`` for a cosine
    with a resampled target (``"inverted"``; without it, and in a column where the frame does
    not hold or the sign is unknown, that method is ``"shifted"``).

    ``blocks``: the number of blocks the resamples drew from; each side of the interval is then
    widened about ``corrected`` by :func:`expansion` (on the method's scale, before the interval
    is mapped back or translated into ``[−1, 1]``; ``"bca"`` is left as it is). ``None``: no
    expansion.
    """
    draws = draws.double()
    nan = torch.isnan(draws).any(0)
    if method != "percentile":
        if estimate is None:
            raise LeadTermsError(f"interval method {method!r} needs the estimate")
        estimate = estimate.double()
        nan |= torch.isnan(estimate)
    factor = (1.0 if blocks is None or method == "bca"
              else expansion(level, blocks, draws.shape[0]))  # fmt: skip
    tail = (1.0 - level) / 2
    q = torch.tensor([tail, 0.5, 1.0 - tail], dtype=torch.float64)
    if method == "percentile":
        lo, mid, hi = _quantile(draws, q)
        lo, hi = _widen(lo, mid, hi, factor)
    elif method == "bca":
        lo, hi, mid = _bca(draws, level, estimate, jackknife)
    elif method in ("shifted", "inverted"):
        lo, hi, mid = _shifted(draws, q, estimate, factor)
        if method == "inverted" and geometry is not None:
            found = _inverted(draws, level, estimate, geometry, factor)
            usable = found[3] & ~((lo <= 0) & (hi >= 0))  # and the sign is known
            lo, hi, mid = (
                torch.where(usable, a, b) for a, b in zip(found[:3], (lo, hi, mid), strict=True)
            )
    elif method == "calibrated":
        moved = _calibrated(draws, estimate, jackknife, second)
        nan |= torch.isnan(moved).any(0)
        lo, hi, mid = _shifted(moved, q, estimate, factor)
    else:
        z_hat = _to_scale(estimate, method)
        bounds = 2 * z_hat - _quantile(_to_scale(draws, method), q)
        bounds[0], bounds[2] = _widen(bounds[0], bounds[1], bounds[2], factor)
        ends = _from_scale(bounds, method)  # decreasing in s for log1m and angle
        lo, hi = torch.minimum(ends[0], ends[2]), torch.maximum(ends[0], ends[2])
        mid = ends[1]
    fill = torch.full_like(lo, math.nan)
    return tuple(torch.where(nan, fill, x.clamp(-1.0, 1.0)) for x in (lo, hi, mid))
