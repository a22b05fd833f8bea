"""The real-size part of ``benchmarks/bench_coverage.py`` (``--part real``, issue 28).

The model and corpus of ``benchmarks/bench_real_sizes.py``: a Llama-style HookedTransformer
(d_model 576, 9 query heads on 3 key-value heads, rotary, RMS norm, d_vocab 49,152; seeded
random weights) and windows of 128 tokens drawn i.i.d. from a Zipf law over the vocabulary,
restricted to the k most frequent tokens of a large sample. The truth of a row is its score
against the statistics of ``TRUTH`` windows; each sample is ``WINDOWS`` other windows in
``BLOCKS`` blocks, scored by ``decompose(..., ci=)`` as a user would (the default method, 50
resamples); coverage is how often the printed interval holds the truth, pooled over the rows
(``V·W_O`` and ``W`` of every head), at 90% and 95% from the same resamples. This is the
regime of a model far from its leading terms (cosines near 0), where the curvature of a cosine
near 1 (the population part) plays no role. Needs TransformerLens 3.x (``.venv-tl39``).
"""

import json
import math
import os
import statistics
import time
from pathlib import Path

import torch

from tl_leadterms import block_stats, corpus_stats, decompose
from tl_leadterms.atomic import write_text
from tl_leadterms.results.bootstrap import BootstrapSpec

__all__ = ["main_real"]

RESULTS = Path(__file__).resolve().parent / "results"
LEVELS = (0.9, 0.95)
K, LAYERS, N_CTX = 1000, 1, 128
TRUTH, WINDOWS, BLOCKS = 8000, 400, 10


def _windows(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, 49152 + 1, dtype=torch.float64)
    zipf = 1.0 / ranks**1.1
    ids = torch.multinomial(zipf / zipf.sum(), n * (N_CTX + 1), replacement=True, generator=g)
    return ids.reshape(n, N_CTX + 1)


def _model():
    from benchmarks.bench_real_sizes import model_and_stats  # TransformerLens 3.x only

    return model_and_stats(K, LAYERS)[0]


def _key(row: dict) -> tuple:
    return row["weight"], row["layer"], row.get("head")


def main_real(args) -> None:
    start = time.perf_counter()
    model = _model()
    population = corpus_stats(_windows(TRUTH, 1), d_vocab=49152, vocab=K, progress=False,
                              dtype=torch.float64)  # fmt: skip
    kept = population.kept.tolist()
    options = {"weights": ("V", "W"), "per_head": True, "progress": False}
    truth = {_key(r): r["cosine"] for r in decompose(model, population, **options).rows}
    covered = {level: [] for level in LEVELS}
    widths, offsets, seconds = [], [], []
    for sample in range(args.samples):
        t0 = time.perf_counter()
        blocks = block_stats(_windows(WINDOWS, 100 + sample), d_vocab=49152, vocab=kept,
                             blocks=BLOCKS, progress=False)  # fmt: skip
        spec = BootstrapSpec(seed=sample)
        for level in LEVELS:
            rows = decompose(model, blocks, ci=level, bootstrap=spec, **options).rows
            for r in rows:
                t = truth[_key(r)]
                covered[level].append(r["lo"] <= t <= r["hi"])
                if level == LEVELS[0]:
                    widths.append(r["hi"] - r["lo"])
                    offsets.append(r["corrected"] - t)
        seconds.append(time.perf_counter() - t0)
        print(f"  real: sample {sample + 1}/{args.samples} ({seconds[-1]:.0f} s)", flush=True)
    n = args.samples
    summary = {
        "setup": {"k": K, "layers": LAYERS, "n_ctx": N_CTX, "truth_windows": TRUTH,
                  "windows": WINDOWS, "blocks": BLOCKS, "samples": n,
                  "resamples": BootstrapSpec().resamples, "method": BootstrapSpec().method,
                  "rows_per_sample": len(offsets) // n, "weights": list(options["weights"])},
        "mean_abs_truth": statistics.mean(abs(v) for v in truth.values()),
        "coverage": {str(lv): statistics.mean(covered[lv]) for lv in LEVELS},
        # over the samples (the rows of one sample are not independent trials)
        "coverage_standard_error": {
            str(lv): math.sqrt(statistics.mean(covered[lv]) * (1 - statistics.mean(covered[lv]))
                               / n) for lv in LEVELS},
        "mean_corrected_minus_truth": statistics.mean(offsets),
        "median_width_90": statistics.median(widths),
        "seconds_per_sample": statistics.median(seconds),
        "run": {"seconds": time.perf_counter() - start, "load_average": os.getloadavg()},
    }  # fmt: skip
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    result["real"] = summary
    write_text(out, json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "run"}, indent=1))
