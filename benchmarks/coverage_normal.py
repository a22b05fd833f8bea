"""The interval's rules on a score whose noise is exactly normal (``--part normal``).

A sample's score is ``x̂ ~ N(0, σ²)`` (the truth is 0). Its ``B`` blocks estimate the spread
with ``B − 1`` degrees of freedom, so a sample's resamples are ``R`` draws of
``N(x̂, σ̂²)``, ``σ̂² = σ²·χ²_{B−1}/(B − 1)``. That is what a block bootstrap of a mean gives,
without a model or a corpus, so it isolates what the interval makes of ``R`` resample scores:

* ``before``: the linear quantile of :func:`torch.quantile` (Hyndman and Fan's type 7) and the
  expansion ``t_{B−1}/z`` (the library's rule up to December 2026), written out here;
* ``type8_blocks``: the library's median-unbiased quantile with ``t_{B−1}/z`` alone;
* ``library``: :func:`tl_leadterms.results.intervals.interval` as it is (type 8, and the
  expansion's degrees of freedom those of the blocks and the resamples' quantiles together).

Every rule reads the same draws (``"shifted"``, the basic interval on the raw scale; far from
±1 nothing is translated). 20,000 samples per cell, seeded; the standard error of a coverage
is about 0.2 points at 90% and 0.15 at 95%. Written into the ``normal`` key of
``coverage.json``.
"""

import json
import time
from pathlib import Path

import torch

from tl_leadterms.atomic import write_text
from tl_leadterms.results.intervals import expansion, interval

__all__ = ["main_normal"]

BLOCKS = (10, 16, 20, 50)
RESAMPLES = (50, 200, 1000)
LEVELS = (0.9, 0.95)
SAMPLES = 20_000
SIGMA = 0.01  # small against 1: no interval reaches an end of [-1, 1]


def _before(draws: torch.Tensor, estimate: torch.Tensor, level: float, blocks: int):
    """The former rule: type-7 quantiles, each side widened by ``t_{B−1}/z``."""
    tail = (1.0 - level) / 2
    q = torch.tensor([tail, 0.5, 1.0 - tail], dtype=torch.float64)
    q_lo, q_mid, q_hi = torch.quantile(draws, q, dim=0)
    f = expansion(level, blocks)  # without resamples: t_{B−1}/z
    mid = 2 * estimate - q_mid
    return mid - f * (q_hi - q_mid), mid + f * (q_mid - q_lo)


def _type8_blocks(draws, estimate, level, blocks):
    """The library's quantiles with the blocks' expansion alone (the factor undone)."""
    lo, hi, mid = interval(draws, level, "shifted", estimate, blocks=blocks)
    scale = expansion(level, blocks) / expansion(level, blocks, draws.shape[0])
    return mid - scale * (mid - lo), mid + scale * (hi - mid)


def run_normal(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    cells = []
    for blocks in BLOCKS:
        for resamples in RESAMPLES:
            x = SIGMA * torch.randn(SAMPLES, generator=g, dtype=torch.float64)
            chi2 = (torch.randn(SAMPLES, blocks - 1, generator=g, dtype=torch.float64) ** 2).sum(1)
            spread = SIGMA * (chi2 / (blocks - 1)).sqrt()
            noise = torch.randn(resamples, SAMPLES, generator=g, dtype=torch.float64)
            draws = x + spread * noise
            cell = {"blocks": blocks, "resamples": resamples}
            for level in LEVELS:
                rules = {
                    "before": _before(draws, x, level, blocks),
                    "type8_blocks": _type8_blocks(draws, x, level, blocks),
                    "library": interval(draws, level, "shifted", x, blocks=blocks)[:2],
                }
                for name, (lo, hi) in rules.items():
                    cell.setdefault(name, {})[str(level)] = float(
                        ((lo <= 0) & (hi >= 0)).double().mean()
                    )
            cell["expansion"] = {str(lv): expansion(lv, blocks, resamples) for lv in LEVELS}
            cells.append(cell)
    return {"setup": {"samples": SAMPLES, "blocks": BLOCKS, "resamples": RESAMPLES,
                      "levels": LEVELS, "seed": seed}, "cells": cells}  # fmt: skip


def main_normal(args) -> None:
    start = time.perf_counter()
    summary = run_normal()
    summary["setup"]["seconds"] = time.perf_counter() - start
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    result["normal"] = summary
    write_text(out, json.dumps(result, indent=1, default=list) + "\n")
    print(
        "| blocks | resamples | before 90% | 95% | type 8, t_{B-1} 90% | 95% | library 90% | 95% |"
    )
    for c in summary["cells"]:
        print(f"| {c['blocks']} | {c['resamples']} "
              + " ".join(f"| {c[k]['0.9']:.1%} | {c[k]['0.95']:.1%}"
                         for k in ("before", "type8_blocks", "library")) + " |")  # fmt: skip
