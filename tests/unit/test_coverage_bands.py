"""The coverage benchmark's split by noise share (benchmarks/coverage_shared.py), against a
plain count over its rows."""

import math

import pytest
import torch

coverage_shared = pytest.importorskip("benchmarks.coverage_shared")
from benchmarks.coverage_shares import SHARE_BANDS  # noqa: E402


def _plain_bands(shares: torch.Tensor, hits: torch.Tensor) -> dict:
    """Per band: (rows, share of them covered, the ratio estimator's standard error over
    samples), each row visited once."""
    out = {}
    samples = shares.shape[0]
    for k in range(len(SHARE_BANDS) - 1):
        lo, hi = SHARE_BANDS[k], SHARE_BANDS[k + 1]
        per_n, per_hit = [0] * samples, [0] * samples
        for s in range(samples):
            for value, hit in zip(shares[s].flatten().tolist(), hits[s].flatten().tolist(),
                                  strict=True):  # fmt: skip
                if lo <= value < hi:
                    per_n[s] += 1
                    per_hit[s] += int(hit)
        rows = sum(per_n)
        if rows == 0:
            continue
        c = sum(per_hit) / rows
        resid = [h - c * n for h, n in zip(per_hit, per_n, strict=True)]
        mean = sum(resid) / samples
        sd = math.sqrt(sum((r - mean) ** 2 for r in resid) / (samples - 1))
        out[lo] = (rows, c, sd * math.sqrt(samples) / rows)
    return out


def test_the_noise_share_bands_count_every_row_once():
    g = torch.Generator().manual_seed(0)
    samples, models, maps = 40, 3, 4
    # shares spread over every band, including 0 exactly and values above 1
    shares = torch.rand(samples, models, maps, generator=g, dtype=torch.float64) * 1.6
    shares[0, 0, 0] = 0.0
    hits = torch.rand(samples, models, maps, generator=g) < 0.8
    misses = ~hits
    covered = {("inverted", 0.9): list(hits), ("shifted", 0.9): list(misses)}
    bands = coverage_shared._by_share(shares, covered)
    expected = _plain_bands(shares, hits)
    assert [b["share_from"] for b in bands] == list(expected)
    assert sum(b["rows"] for b in bands) == samples * models * maps
    for b in bands:
        rows, c, se = expected[b["share_from"]]
        assert b["rows"] == rows
        assert b["coverage"]["0.9"] == pytest.approx(c, abs=1e-12)
        assert b["coverage_shifted"]["0.9"] == pytest.approx(1 - c, abs=1e-12)
        assert b["coverage_standard_error"]["0.9"] == pytest.approx(se, rel=1e-9)
