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

from benchmarks.coverage_population import (
    CACHE,
    KINDS,
    LEVELS,
    POPULATION_CONFIGS,
    RESULTS,
    _covers,
    _map_names,
)
from tl_leadterms.results.intervals import DEFAULT_METHOD, noise_share
from tl_leadterms.results.marks import WIDE_NOISE_SHARE

__all__ = ["BAND_CONFIGS", "SHARE_BANDS", "coverage_by_share", "print_bands"]

#: the configurations the coverage by ``noise_share`` pools
BAND_CONFIGS = ("issue", "demo")
#: the bands of ``noise_share`` the coverage is split by (the library marks intervals from
#: ``WIDE_NOISE_SHARE`` on)
SHARE_BANDS = (0.0, 0.1, 0.25, WIDE_NOISE_SHARE, 1.0, math.inf)


def _share(t: dict, i: int, kind: str) -> float:
    """The library's ``noise_share`` of row ``i`` of one trial
    (:func:`~tl_leadterms.results.intervals.noise_share` of its resamples' cosines, ‖T*‖² and
    ⟨T̂, T*⟩, with ‖T̂‖² and the sample's cosine)."""
    k = KINDS.index(kind)
    share = noise_share(t["draws"][:, i : i + 1], t["star_sq"][:, k : k + 1],
                        t["cross"][:, k : k + 1], t["norm2"][k : k + 1],
                        t["estimate"][i : i + 1])  # fmt: skip
    return float(share[0])


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
    trials = []
    for name, per_model in _pooled(runs).items():
        cfg = POPULATION_CONFIGS[name]
        names = _map_names(cfg["layers"])
        kinds = ["B"] + ["V", "W", "P"] * cfg["layers"]
        for r in per_model:
            for t in r["trials"]["held_out"]:
                t = t["windows"]
                for i, n in enumerate(names):
                    if n.endswith(tuple(f".{layer}" for layer in range(1, cfg["layers"]))):
                        continue
                    truth, est = float(r["truth"][i]), float(t["estimate"][i])
                    k = KINDS.index(kinds[i])
                    geometry = (t["star_sq"][:, k : k + 1], t["cross"][:, k : k + 1],
                                t["norm2"][k : k + 1])  # fmt: skip
                    hits = [_covers(t["draws"][:, i], lv, est, truth, cfg["held_blocks"],
                                    geometry, method)
                            for method in (DEFAULT_METHOD, "shifted") for lv in LEVELS]  # fmt: skip
                    trials.append((_share(t, i, kinds[i]), hits, f"{name} {n.split('.')[0]}"))
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
