"""Which direction ``"inverted"`` reads a resample's noise along (``--part direction``).

``"inverted"`` (:mod:`tl_leadterms.results.intervals`) models the sample's squared tangent
for a candidate truth ``λ`` as ``D_λ = λ + 2√λ·u + |e|²``, where ``e`` is the move a resample
makes in the frame of the map and ``u`` is its component along the sample's own off-map
direction ``x̂_⊥``. The sample's noise about the truth acts along the truth's direction ``a``
instead. Where the noise has the same variance in every direction the two agree. Where it
does not, ``x̂_⊥ = a + ε`` leans towards the noisiest directions, ``u`` varies more than the
noise along ``a`` does, and the interval is wider than it need be.

This probe builds every resample's targets densely at the issue size (the models, truth and
sample layout of :mod:`benchmarks.coverage_shared`, samples from a seed of their own) and
solves the library's ``D_λ`` three ways, at 90% and 95% with the library's expansion:

* ``library``: ``u`` along ``x̂_⊥``, as :func:`~tl_leadterms.results.intervals.interval`
  reads it from the rows' geometry (checked to agree with it);
* ``truth_direction``: ``u`` along ``a`` (only a benchmark knows ``a``);
* ``gram``: ``u`` along ``x̂_⊥`` scaled by ``κ``, where ``κ²`` is the noise's variance along
  ``a`` estimated without ``a`` over its variance along ``x̂_⊥``: with ``Σ`` the resamples'
  noise covariance, ``E⟨e, x̂_⊥⟩² = aᵀΣa + tr Σ²`` and ``E|x̂_⊥|² = |a|² + tr Σ``, so
  ``κ² = ((x̂ᵀΣx̂ − tr Σ²)/(L − tr Σ)) / (x̂ᵀΣx̂/L)`` (``tr Σ²`` from the off-diagonal of the
  resamples' Gram matrix ``⟨e_r, e_s⟩``; ``κ`` kept in ``[0, 1]``).

The library keeps only ``‖T*‖²`` and ``⟨T̂, T*⟩`` per resample, not the Gram matrix, so the
third is not available to it. Written into the ``direction`` key of ``coverage.json``.
"""

import json
import math
import time
from pathlib import Path

import torch

from benchmarks.coverage_shared import SIZES, _models, _truth, _windows
from benchmarks.coverage_trials import KINDS, POPULATION_CONFIGS, map_kinds, target_vectors
from tl_leadterms import block_stats
from tl_leadterms.atomic import write_text
from tl_leadterms.results import intervals
from tl_leadterms.results.bootstrap import Bootstrap, BootstrapSpec

__all__ = ["main_direction"]

SIZE, SEED, RESAMPLES = "issue", 34, 50
LEVELS = (0.9, 0.95)
VARIANTS = ("library", "truth_direction", "gram")


def _frame(m: torch.Tensor, full: torch.Tensor, stars: torch.Tensor, truth: torch.Tensor):
    """``(L, {variant: u [R]}, e2 [R], truth cosine)`` of one map ``m`` (unit) and target, in the
    frame where every target has a unit component along ``m``."""
    if float(m @ full) < 0:
        m = -m
    x = full / (m @ full)  # the sample's target with a unit component along m
    x_hat = x - m  # x̂_⊥
    e = stars / (stars @ m)[:, None] - x  # each resample's move, off m already
    a = truth / (m @ truth) - m
    L = float(x_hat @ x_hat)
    u = (e @ x_hat) / math.sqrt(L)
    e2 = (e * e).sum(1)
    R = e.shape[0]
    gram = e @ e.T
    tr_s = float(e2.mean())
    tr_s2 = float(((gram**2).sum() - (gram.diagonal() ** 2).sum()) / (R * (R - 1)))
    along = float((u**2).mean()) * L  # x̂ᵀΣx̂
    kappa = 1.0
    if tr_s < L and tr_s2 < along:
        kappa = math.sqrt(min(max((along - tr_s2) / (L - tr_s) / (along / L), 0.0), 1.0))
    us = {"library": u, "truth_direction": (e @ a) / a.norm(), "gram": kappa * u}
    return L, us, e2, 1.0 / math.sqrt(1.0 + float(a @ a))


def _covered(L: torch.Tensor, u: torch.Tensor, e2: torch.Tensor, truth: torch.Tensor,
             level: float, blocks: int) -> torch.Tensor:  # fmt: skip
    """Whether the interval of the library's ``D_λ`` (its bisection and expansion) holds the
    truth, per column."""
    factor = intervals.expansion(level, blocks, u.shape[0])
    tail, n = (1.0 - level) / 2, L.shape[0]
    q = torch.tensor([1.0 - tail, 0.5, tail], dtype=torch.float64).repeat_interleave(n)
    lam = intervals._solve(L.repeat(3), u.repeat(1, 3), e2.repeat(1, 3), q, factor)
    hi, lo = (1.0 + lam[:n]).rsqrt(), (1.0 + lam[2 * n :]).rsqrt()
    return (lo <= truth) & (truth <= hi)


def _columns(maps: list, kinds: list[str]):
    """Every model's maps as ``(unit map, index of its target in KINDS)``, the columns' order."""
    for model_maps in maps:
        for i, kind in enumerate(kinds):
            m = model_maps[i].double().flatten()
            yield m / m.norm(), KINDS.index(kind)


def _sample(columns: list, full: list, stars: list, truth_targets: list) -> tuple:
    """``(L [n], {variant: u [R, n]}, e2 [R, n], truth cosines [n])`` of one sample."""
    frames = [_frame(m, full[k], stars[k], truth_targets[k]) for m, k in columns]
    L = torch.tensor([f[0] for f in frames], dtype=torch.float64)
    us = {v: torch.stack([f[1][v] for f in frames], 1) for v in VARIANTS}
    e2 = torch.stack([f[2] for f in frames], 1)
    return L, us, e2, torch.tensor([f[3] for f in frames], dtype=torch.float64)


def _check_library_frame(columns: list, full: list, stars: list, L, u, e2) -> None:
    """That the dense frame is the library's, read from the rows' geometry (cosines,
    ``‖T*‖²``, ``⟨T̂, T*⟩``, ``‖T̂‖²``) by :func:`~tl_leadterms.results.intervals._tangent_frame`."""
    draws = torch.stack([stars[k] @ m / stars[k].norm(dim=1) for m, k in columns], 1)
    estimate = torch.tensor([float(m @ full[k] / full[k].norm()) for m, k in columns],
                            dtype=torch.float64)  # fmt: skip
    geometry = (torch.stack([(stars[k] ** 2).sum(1) for _, k in columns], 1),
                torch.stack([stars[k] @ full[k] for _, k in columns], 1),
                torch.tensor([float(full[k] @ full[k]) for _, k in columns],
                             dtype=torch.float64))  # fmt: skip
    frame = intervals._tangent_frame(draws, estimate, geometry)
    assert torch.allclose(frame[0], L, rtol=1e-6), "L differs from the library's frame"
    assert torch.allclose(frame[1], u, rtol=1e-4, atol=1e-6), "u differs"
    assert torch.allclose(frame[2], e2, rtol=1e-4, atol=1e-9), "e2 differs"


def _cells(hits: dict, columns: list, samples: int) -> list[dict]:
    """Coverage per weight and variant, its standard error over the samples."""
    cells = []
    for weight, kind in {"W_O": "B", "V": "V", "W": "W", "P": "P"}.items():
        idx = [c for c, (_, k) in enumerate(columns) if KINDS[k] == kind]
        cell = {"weight": weight}
        for (v, level), h_list in hits.items():
            share = torch.stack(h_list)[:, idx].double().mean(1)  # per sample
            cell.setdefault(v, {})[str(level)] = float(share.mean())
            cell.setdefault(f"{v}_standard_error", {})[str(level)] = float(
                share.std() / math.sqrt(samples))  # fmt: skip
        cells.append(cell)
    return cells


def main_direction(args) -> None:
    size = SIZES[SIZE]
    cfg = POPULATION_CONFIGS[size["config"]]
    start = time.perf_counter()
    maps, d_vocab = _models(size)
    population, truth_windows = _truth(cfg, d_vocab)
    truth_targets = target_vectors(population)
    columns = list(_columns(maps, map_kinds(cfg["layers"])))
    h, n_blocks, samples = cfg["held_windows"], cfg["held_blocks"], args.samples
    windows = _windows(cfg, SEED, math.ceil(samples * h / 10.0) + 200)
    hits = {(v, lv): [] for v in VARIANTS for lv in LEVELS}
    for j in range(samples):
        blocks = block_stats(windows[j * h : (j + 1) * h], d_vocab=d_vocab, blocks=n_blocks,
                             progress=False)  # fmt: skip
        full = target_vectors(blocks.full())
        resamples = Bootstrap(blocks, 0.9, BootstrapSpec(RESAMPLES, seed=1_000_000 * SEED + j))
        drawn = map(target_vectors, resamples.resamples())
        stars = [torch.stack(t) for t in zip(*drawn, strict=True)]
        L, us, e2, truth = _sample(columns, full, stars, truth_targets)
        if j == 0:
            _check_library_frame(columns, full, stars, L, us["library"], e2)
        for (v, level), out in hits.items():
            out.append(_covered(L, us[v], e2, truth, level, n_blocks))
        if (j + 1) % 50 == 0 or j + 1 == samples:
            print(f"  sample {j + 1}/{samples} ({time.perf_counter() - start:.0f} s)", flush=True)
    cells = _cells(hits, columns, samples)
    summary = {"setup": {"size": SIZE, "models": len(maps), "samples": samples, "seed": SEED,
                         "held_windows": h, "held_blocks": n_blocks, "resamples": RESAMPLES,
                         "truth_windows": truth_windows},
               "cells": cells, "seconds": time.perf_counter() - start}  # fmt: skip
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    result["direction"] = summary
    write_text(out, json.dumps(result, indent=1) + "\n")
    print("| weight | library 90% | 95% | truth's direction 90% | 95% | Gram 90% | 95% |")
    for c in cells:
        print(f"| {c['weight']} " + " ".join(
            f"| {c[v][str(lv)]:.1%}" for v in VARIANTS for lv in LEVELS) + " |")  # fmt: skip
