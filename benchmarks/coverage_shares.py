"""The coverage of the population part split by the rows' ``noise_share`` (issue 28).

:func:`coverage_by_share` pools the held-out trials of the issue's and the demo's sizes
(:data:`BAND_CONFIGS`; a size not run this time is read from its cache) and reports, per band
of the library's :func:`~tl_leadterms.results.intervals.noise_share`, how often the default
interval (and ``"shifted"``, the former default) on equal blocks held the truth: the
measurement behind the mark of
:mod:`tl_leadterms.results.marks`. Written into ``coverage.json`` → ``population`` →
``by_noise_share`` by :func:`~benchmarks.coverage_population.main_population`.
"""

import itertools
import math
import statistics

import torch

from benchmarks.coverage_trials import (
    CACHE,
    LEVELS,
    POPULATION_CONFIGS,
    RESULTS,
    bounds,
    geometry,
    map_names,
)
from tl_leadterms.results.intervals import DEFAULT_METHOD, noise_share
from tl_leadterms.results.marks import WIDE_NOISE_SHARE

__all__ = ["BAND_CONFIGS", "SHARE_BANDS", "coverage_by_share", "print_bands"]

#: the configurations the coverage by ``noise_share`` pools
BAND_CONFIGS = ("issue", "demo")
#: the bands of ``noise_share`` the coverage is split by (the library marks intervals from
#: ``WIDE_NOISE_SHARE`` on)
SHARE_BANDS = (0.0, 0.1, 0.25, WIDE_NOISE_SHARE, 1.0, math.inf)


def _pooled(runs: dict) -> dict:
    """The trials of every configuration of :data:`BAND_CONFIGS`: this run's, else its cache's."""
    out = {name: run for name, run in runs.items() if name in BAND_CONFIGS}
    for name in BAND_CONFIGS:
        cache = RESULTS / CACHE.format(name=name)
        if name not in out and cache.exists():
            done = torch.load(cache)
            out[name] = [done[key] for key in sorted(done) if key[0] == name]
    return out


def coverage_by_share(runs: dict) -> list[dict]:
    """Coverage of the truth by the default method (equal blocks) on the held-out samples of
    :data:`BAND_CONFIGS` (``runs``, else their caches), split by each row's ``noise_share``:
    one row per sample and weight (``W_O`` and layer 0's maps: the layers of one sample are
    nearly the same trial)."""
    methods = (DEFAULT_METHOD, "shifted")
    trials = []
    for name, per_model in _pooled(runs).items():
        cfg = POPULATION_CONFIGS[name]
        names, layers = map_names(cfg["layers"]), cfg["layers"]
        first = [i for i, n in enumerate(names) if not n.endswith(
            tuple(f".{layer}" for layer in range(1, layers)))]  # fmt: skip
        for r in per_model:
            for t in r["trials"]["held_out"]:
                t = t["windows"]
                shares = noise_share(t["draws"], *geometry(t, layers), t["estimate"])
                bounds = [bounds(t, layers, lv, cfg["held_blocks"], m)
                          for m in methods for lv in LEVELS]  # fmt: skip
                for i in first:
                    truth = float(r["truth"][i])
                    hits = [bool(lo[i] <= truth <= hi[i]) for lo, hi, _ in bounds]
                    trials.append((float(shares[i]), hits, f"{name} {names[i].split('.')[0]}"))
    out = []
    for lo, hi in itertools.pairwise(SHARE_BANDS):
        band = [t for t in trials if lo <= t[0] < hi]
        if not band:
            continue
        cover = {str(lv): statistics.mean(t[1][j] for t in band) for j, lv in enumerate(LEVELS)}
        shifted = {str(lv): statistics.mean(t[1][len(LEVELS) + j] for t in band)
                   for j, lv in enumerate(LEVELS)}  # fmt: skip
        out.append({"share_from": lo, "share_below": hi, "rows": len(band), "coverage": cover,
                    "coverage_standard_error": {
                        lv: math.sqrt(max(c, 1e-12) * (1 - c) / len(band))
                        for lv, c in cover.items()},
                    "coverage_shifted": shifted,
                    "cells": sorted({t[2] for t in band})})  # fmt: skip
    return out


def print_bands(bands: list[dict]) -> None:
    """The band table as markdown rows."""
    print("| noise share | rows | coverage 90% | 95% | shifted 90% | 95% | cells |")
    for b in bands:
        print(f"| {b['share_from']:g}-{b['share_below']:g} | {b['rows']} "
              f"| {b['coverage']['0.9']:.1%} | {b['coverage']['0.95']:.1%} "
              f"| {b['coverage_shifted']['0.9']:.1%} | {b['coverage_shifted']['0.95']:.1%} "
              f"| {', '.join(b['cells'])} |")  # fmt: skip
