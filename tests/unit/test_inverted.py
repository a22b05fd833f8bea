"""The default interval of a cosine, ``"inverted"``, against a plain geometric reference.

The reference works with the vectors themselves: the map ``M``, the sample's target ``T̂`` and
each resample's ``T*``, each target scaled to a unit component along ``M`` and split into its
part along ``M`` and the rest (docs/guides/intervals.md). It finds the interval by scanning a
fine grid of the squared tangent ``λ`` of the truth's angle, where the library solves for the
ends by bisection from the cosines and the two inner products a resample records.
"""

import math

import numpy as np
import pytest
import torch

from tests.reference import expansion_factor, resample_quantile
from tl_leadterms.results.intervals import _quantile, interval


def _sample(seed: int, dim: int, cosine: float, noise: float, resamples: int):
    """``(M, T̂, T* [R, dim])``: a truth at ``cosine`` to ``M``, a sample of it and its
    resamples, with independent Gaussian noise of scale ``noise`` per coordinate."""
    g = np.random.default_rng(seed)
    M = np.zeros(dim)
    M[0] = 3.0
    truth = np.zeros(dim)
    truth[0], truth[1] = cosine, math.sqrt(1 - cosine**2)
    t_hat = 10 * truth + noise * g.standard_normal(dim)
    t_star = t_hat + noise * g.standard_normal((resamples, dim))
    return M, t_hat, t_star


def _library(M, t_hat, t_star, level, blocks):
    """The library's interval from what decompose records: cosines, ‖T*‖², ⟨T̂, T*⟩, ‖T̂‖²."""
    cos = lambda a, b: (a @ b) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b))  # noqa: E731
    col = lambda x: torch.tensor(np.asarray(x, dtype=np.float64)).reshape(-1, 1)  # noqa: E731
    geometry = (col((t_star**2).sum(1)), col(t_star @ t_hat), col([t_hat @ t_hat])[0])
    draws, estimate = col(cos(t_star, M)), col([cos(t_hat, M)])[0]
    return [float(x[0]) for x in interval(draws, level, "inverted", estimate, blocks=blocks,
                                          geometry=geometry)]  # fmt: skip


def _reference(M, t_hat, t_star, level, factor, points=400_001):
    """``(lo, hi)``: the cosines ``1/sqrt(1 + λ)`` of the ``λ`` on a grid for which the
    sample's squared tangent lies between the ``(1 ∓ level)/2`` quantiles of
    ``λ + 2√λ·u + |e|²`` over the resamples (``e`` a resample's move of the scaled target off
    ``M``, ``u`` its component along the sample's), that spread widened by ``factor`` about its
    median."""
    m = M / np.linalg.norm(M)
    off = lambda v: v - np.outer(v @ m, m) if v.ndim == 2 else v - (v @ m) * m  # noqa: E731
    x_hat = off(t_hat / (t_hat @ m))
    x_star = off(t_star / (t_star @ m)[:, None])
    L = float(x_hat @ x_hat)
    e = x_star - x_hat
    u, e2 = e @ x_hat / math.sqrt(L), (e**2).sum(1)
    grid = np.linspace(0.0, 4 * (L + e2.max()), points)
    d = grid[:, None] + 2 * np.sqrt(grid)[:, None] * u + e2
    mid = resample_quantile(d, 0.5)[:, None]
    d = mid + factor * (d - mid)
    tail = (1 - level) / 2
    low, high = resample_quantile(d, tail), resample_quantile(d, 1 - tail)
    inside = grid[(low <= L) & (high >= L)]
    step = grid[1]
    return 1 / math.sqrt(1 + inside.max()), 1 / math.sqrt(1 + inside.min()), step


CASES = [(0, 0.98, 0.15), (1, 0.9, 0.3), (2, 0.995, 0.05), (3, 0.6, 0.5)]


@pytest.mark.parametrize(("seed", "cosine", "noise"), CASES)
@pytest.mark.parametrize("level", [0.9, 0.95])
def test_inverted_against_a_plain_reference(seed, cosine, noise, level):
    M, t_hat, t_star = _sample(seed, 40, cosine, noise, 50)
    lo, hi, mid = _library(M, t_hat, t_star, level, blocks=16)
    want_lo, want_hi, step = _reference(M, t_hat, t_star, level, expansion_factor(level, 16, 50))
    assert lo == pytest.approx(want_lo, abs=step) and hi == pytest.approx(want_hi, abs=step)
    assert lo <= mid <= hi
    # the cosine of −M: the same interval, mirrored
    got = _library(-M, t_hat, t_star, level, blocks=16)
    assert got == pytest.approx([-hi, -lo, -mid], abs=1e-12)


def test_inverted_is_shifted_where_the_sign_is_unknown():
    """A truth at 0.05 with noise that crosses 0: the tangent frame cannot hold both signs,
    and the interval is ``"shifted"``'s."""
    M, t_hat, t_star = _sample(5, 40, 0.05, 0.6, 50)
    cos = lambda a, b: (a @ b) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b))  # noqa: E731
    draws = torch.tensor(cos(t_star, M))[:, None]
    assert bool((draws > 0).any() and (draws < 0).any())
    estimate = torch.tensor([cos(t_hat, M)], dtype=torch.float64)
    want = interval(draws, 0.9, "shifted", estimate, blocks=16)
    assert _library(M, t_hat, t_star, 0.9, blocks=16) == [float(x[0]) for x in want]


def test_inverted_covers_where_the_noise_is_as_large_as_the_angle():
    """Gaussian noise whose off-map share is about 1 (the issue-size regime of the population
    benchmark): 1,000 samples of a truth at 0.98, 50 ideal resamples each. ``"inverted"`` covers
    near its level (measured: 88.8% at 90%, 92.1% at 95%); ``"shifted"``, whose resamples
    spread wider around the noisy sample than the samples spread around the truth, over-covers
    (96.1%, 98.0%)."""
    dim, R, n = 40, 50, 1000
    g = torch.Generator().manual_seed(7)
    truth = torch.zeros(dim, dtype=torch.float64)
    truth[0], truth[1] = 0.98 * 10, math.sqrt(1 - 0.98**2) * 10
    noise = 0.3
    t_hat = truth + noise * torch.randn(n, dim, generator=g, dtype=torch.float64)
    t_star = t_hat[None] + noise * torch.randn(R, n, dim, generator=g, dtype=torch.float64)
    draws = t_star[..., 0] / t_star.norm(dim=-1)  # M along the first axis
    estimate = t_hat[:, 0] / t_hat.norm(dim=-1)
    geometry = ((t_star**2).sum(-1), (t_star * t_hat[None]).sum(-1), (t_hat**2).sum(-1))
    share = (dim - 2) * noise**2 / (100 * (1 - 0.98**2))
    assert 0.8 < share < 1.2
    for level in (0.9, 0.95):
        inv = interval(draws, level, "inverted", estimate, geometry=geometry)
        shifted = interval(draws, level, "shifted", estimate)
        covered = [float(((x[0] <= 0.98) & (x[1] >= 0.98)).double().mean())
                   for x in (inv, shifted)]  # fmt: skip
        # the binomial standard error of 1,000 trials: 0.9 points at 90%, 0.7 at 95%
        assert abs(covered[0] - level) < 0.035, (level, covered)
        assert covered[1] >= level + 0.025, (level, covered)


def test_reference_quantiles_match_the_library():
    """The reference's numpy quantiles ("median_unbiased", type 8) are the library's."""
    x = np.random.default_rng(0).standard_normal((50, 3))
    q = torch.tensor([0.0, 0.025, 0.05, 0.5, 0.975, 1.0], dtype=torch.float64)
    want = resample_quantile(x.T, q.numpy())  # [len(q), 3]
    got = _quantile(torch.tensor(x), q)
    assert got.numpy() == pytest.approx(want, abs=1e-12)
