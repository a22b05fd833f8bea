"""Coverage of the bootstrap intervals against a known truth (seeded) -> results/coverage.json.

A Markov chain over 8 tokens generates the windows (T = 8). The truth of a score is the cosine of
a fixed model with its leading term computed from 100,000 windows of the chain; the estimate is
the same cosine from a small sample of windows (200 or 1,000, in 10 blocks), and the interval
comes from ``R = 50`` bootstrap resamples of the blocks (the library's default). Four paper
models (one layer) trained on other windows of the chain put the true cosines of ``W_O``,
``V``, ``W`` and ``P`` near 0.999, 0.99, 0.9 and 0.3. Every method of
:mod:`tl_leadterms.results.bootstrap` is computed from the same draws, at 90% and 95%, over
60 repetitions (new sample, new resamples); the default method is also computed from
first-order resamples (pass two with the full-corpus Ḡ) to measure what exact resamples change
and what they cost.

Resumable: every finished repetition is kept in ``benchmarks/results/coverage_draws.pt`` (not
committed); rerunning skips them. Run it niced: ``nice python benchmarks/bench_coverage.py``
(``--reps 3`` for a quick look).

``--part population`` (issue 28): the two cases of where statistics come from, on the
library's own generator; :mod:`benchmarks.coverage_population` says how. ``--part real``:
the real-size model of ``bench_real_sizes.py`` against held-out samples
(:mod:`benchmarks.coverage_real`). ``--part shared``: the demo size's held-out samples at a
small standard error (:mod:`benchmarks.coverage_shared`). ``--part normal``: the interval's
quantile and expansion on an exactly normal score (:mod:`benchmarks.coverage_normal`).
``--part direction``: which direction the default interval reads a resample's noise along
(:mod:`benchmarks.coverage_direction`).
"""

import argparse
import importlib
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

# tiny kernels: one numba thread (12x faster here than a thread pool's start-up per call)
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.coverage_trials import POPULATION_CONFIGS, target_vectors  # noqa: E402
from tl_leadterms import block_stats, corpus_stats, paper_model, to_paper, train  # noqa: E402
from tl_leadterms.analyses.decompose.compute import leading_cosines  # noqa: E402
from tl_leadterms.atomic import atomic_path, write_text  # noqa: E402
from tl_leadterms.results.bootstrap import Bootstrap, BootstrapSpec  # noqa: E402
from tl_leadterms.results.intervals import DEFAULT_METHOD, METHODS, interval  # noqa: E402

K, T, BLOCKS, RESAMPLES = 8, 8, 10, 50
SIZES = (200, 1000)
LEVELS = (0.9, 0.95)
POPULATION = 100_000
#: training runs that put the true cosines near 0.999, 0.99, 0.9 and 0.3
MODELS = {
    "near_0.999": {"windows": 2000, "steps": 6, "lr": 0.5, "chain": 0},
    "near_0.99": {"windows": 50, "steps": 6, "lr": 0.5, "chain": 0},
    "near_0.9": {"windows": 200, "steps": 100, "lr": 0.5, "chain": 0},
    "near_0.3": {"windows": 200, "steps": 6, "lr": 0.5, "chain": 1},
}
RESULTS = ROOT / "benchmarks" / "results"


def transition(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2.0 * torch.randn(K, K, generator=g, dtype=torch.float64), 1)


def chain(matrix: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """``n`` windows of ``T + 1`` tokens of the chain ``matrix`` (first token uniform)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n, T + 1, dtype=torch.long)
    x[:, 0] = torch.randint(0, K, (n,), generator=g)
    for t in range(1, T + 1):
        x[:, t] = torch.multinomial(matrix[x[:, t - 1]], 1, generator=g)[:, 0]
    return x


def models() -> dict:
    out = {}
    for i, (name, run) in enumerate(MODELS.items()):
        model = paper_model(d_vocab=K, n_ctx=T, n_layers=1, dtype=torch.float64)
        train(model, chain(transition(run["chain"]), run["windows"], 10 + i), lr=run["lr"],
              steps=run["steps"], progress=False)  # fmt: skip
        out[name] = model
    return out


def dense_maps(trained: dict) -> torch.Tensor:
    """``[models, 4]`` lists of each model's W_O, V, W (``[k, k]``) and P (``[T]``), dense."""
    out = []
    for model in trained.values():
        pw = to_paper(model)
        out.append([pw.W_O.detach()] + [pw.layer_map(w, 0).detach() for w in ("V", "W", "P")])
    return out


def scores(maps: list, stats) -> torch.Tensor:
    """``[models, 4]``: the cosine of W_O, V, W, P of each model with its leading term
    (``B̄``, ``Φ̄ᵀB̄ᵀ``, ``Q̄``, ``Δ``), written out plainly."""
    targets = (stats.B_bar, stats.B_bar_Phi_bar.T, stats.Q_bar, stats.Delta)
    out = torch.empty(len(maps), 4, dtype=torch.float64)
    for m, weights in enumerate(maps):
        for w, (M, target) in enumerate(zip(weights, targets, strict=True)):
            M, target = M.double().flatten(), target.double().flatten()
            out[m, w] = (M @ target) / (M.norm() * target.norm())
    return out


def _sample_blocks(size: int, rep: int):
    sample = chain(transition(0), size, 100_000 + 1000 * size + rep)
    return block_stats(sample, d_vocab=K, blocks=BLOCKS, progress=False)


def calibrated_draws(maps: list, size: int, rep: int) -> torch.Tensor:
    """``[R + B + F·S, models, 4]``: the scores of ``"calibrated"``'s resamples (the ``R``
    draws and ``B`` leave-one-outs are those of the ``"bca"`` draws: the same seed)."""
    blocks = _sample_blocks(size, rep)
    boot = Bootstrap(blocks, 0.9, BootstrapSpec(RESAMPLES, seed=rep, method="calibrated"))
    return torch.stack([scores(maps, stats) for stats in boot.resamples()])


def geometry_draws(size: int, rep: int) -> dict:
    """Per pass two (``exact``, ``first_order``): ``(‖T*‖² [R, 4], ⟨T̂, T*⟩ [R, 4], ‖T̂‖² [4])``
    of the ``R`` resamples of :func:`repetition` (the same seed and draws) for each leading
    term (``B̄``, ``Φ̄ᵀB̄ᵀ``, ``Q̄``, ``Δ``): what the default method (``"inverted"``) reads."""
    blocks = _sample_blocks(size, rep)
    full = target_vectors(blocks.full())
    out = {}
    for key, exact in (("exact", True), ("first_order", False)):
        boot = Bootstrap(blocks, 0.9, BootstrapSpec(RESAMPLES, seed=rep, exact=exact,
                                                    method="shifted"))  # fmt: skip
        star, cross = [], []
        for stats in boot.resamples():
            t = target_vectors(stats)
            star.append(torch.stack([a @ a for a in t]))
            cross.append(torch.stack([a @ f for a, f in zip(t, full, strict=True)]))
        out[key] = (torch.stack(star), torch.stack(cross), torch.stack([f @ f for f in full]))
    return out


def repetition(maps: list, size: int, rep: int) -> dict:
    """One sample of ``size`` windows: its scores, exact and first-order resample scores."""
    blocks = _sample_blocks(size, rep)
    out = {"estimate": scores(maps, blocks.full())}
    for key, exact, method in (("exact", True, "bca"), ("first_order", False, "percentile")):
        boot = Bootstrap(blocks, 0.9, BootstrapSpec(RESAMPLES, seed=rep, method=method,
                                                    exact=exact))  # fmt: skip
        start, seconds, draws = time.perf_counter(), 0.0, []
        for stats in boot.resamples():
            seconds -= time.perf_counter()
            draws.append(scores(maps, stats))
            seconds += time.perf_counter()
        out[key] = torch.stack(draws)  # [R (+ B), models, 4]
        out[f"{key}_resample_s"] = (time.perf_counter() - start - seconds) / len(draws)
    out["calibrated"] = calibrated_draws(maps, size, rep)
    out["geometry"] = geometry_draws(size, rep)
    return out


def run(reps: int, cache: Path) -> tuple[dict, dict]:
    trained = models()
    maps = dense_maps(trained)
    population = corpus_stats(chain(transition(0), POPULATION, 1), d_vocab=K, progress=False)
    truth = scores(maps, population)
    library = torch.tensor(
        [list(leading_cosines(m, population).values()) for m in trained.values()]
    )
    assert torch.allclose(truth, library.double(), atol=1e-12), (truth, library)
    done = torch.load(cache) if cache.exists() else {}
    for size in SIZES:
        for rep in range(reps):
            if (size, rep) not in done or "geometry" not in done[(size, rep)]:
                if (size, rep) not in done:
                    done[(size, rep)] = repetition(maps, size, rep)
                else:  # drawn before the resamples' geometry was recorded: only it is new
                    done[(size, rep)]["geometry"] = geometry_draws(size, rep)
                with atomic_path(cache) as tmp:
                    torch.save(done, tmp)
                print(f"  {size} windows, repetition {rep + 1}/{reps}", flush=True)
    return truth, {key: v for key, v in done.items() if key[1] < reps}


def _cell(truth: float, estimates, draws_list, jack_list, level: float, method: str,
          blocks: int | None = BLOCKS, seconds: list | None = None,
          geometry: list | None = None) -> dict:  # fmt: skip
    """One method's coverage, as the library builds it: expanded for ``blocks`` blocks
    (``BootstrapSpec(expand=True)``, the default; ``None``: the unexpanded interval);
    ``seconds``: the second level's scores ``[F, S]`` of each sample (``"calibrated"``);
    ``geometry``: each sample's resamples' ``(‖T*‖², ⟨T̂, T*⟩, ‖T̂‖²)`` (``"inverted"``)."""
    covered, widths, contains, zero = 0, [], 0, 0
    seconds = seconds or [None] * len(estimates)
    geometry = geometry or [None] * len(estimates)
    for est, draws, jack, second, geo in zip(estimates, draws_list, jack_list, seconds,
                                             geometry, strict=True):  # fmt: skip
        found = interval(
            draws[:, None],
            level,
            method,
            torch.tensor([est]),
            jack[:, None],
            blocks=blocks,
            second=None if second is None else second[..., None],
            geometry=geo,
        )
        lo, hi, mid = (float(x[0]) for x in found)
        covered += lo <= truth <= hi
        widths.append(hi - lo)
        contains += lo <= mid <= hi
        zero += hi - lo == 0.0 and float(draws.max() - draws.min()) > 0
    n = len(estimates)
    return {"coverage": covered / n, "median_width": statistics.median(widths),
            "contains_corrected": contains / n, "zero_width": zero}  # fmt: skip


def summarize(truth: torch.Tensor, done: dict, reps: int) -> dict:
    weights = ("W_O", "V", "W", "P")
    cells = []
    for size in SIZES:
        runs = [done[(size, rep)] for rep in range(reps)]
        for m, name in enumerate(MODELS):
            for w, weight in enumerate(weights):
                est = [float(r["estimate"][m, w]) for r in runs]
                exact = [r["exact"][:RESAMPLES, m, w] for r in runs]
                jack = [r["exact"][RESAMPLES:, m, w] for r in runs]
                first = [r["first_order"][:, m, w] for r in runs]
                cell = {"model": name, "weight": weight, "windows": size,
                        "truth": float(truth[m, w]), "mean_estimate": statistics.mean(est),
                        "levels": {}}  # fmt: skip
                f, size2 = BootstrapSpec().calibration
                second = [r["calibrated"][RESAMPLES + BLOCKS :, m, w].reshape(f, size2)
                          for r in runs]  # fmt: skip
                geo = {key: [_column(r["geometry"][key], w) for r in runs]
                       for key in ("exact", "first_order")}  # fmt: skip
                for level in LEVELS:
                    per = {me: _cell(cell["truth"], est, exact, jack, level, me,
                                     seconds=second if me == "calibrated" else None,
                                     geometry=geo["exact"])
                           for me in METHODS}  # fmt: skip
                    per[f"{DEFAULT_METHOD}_unexpanded"] = _cell(
                        cell["truth"],
                        est,
                        exact,
                        jack,
                        level,
                        DEFAULT_METHOD,
                        blocks=None,
                        geometry=geo["exact"],
                    )
                    per[f"{DEFAULT_METHOD}_first_order"] = _cell(
                        cell["truth"],
                        est,
                        first,
                        jack,
                        level,
                        DEFAULT_METHOD,
                        geometry=geo["first_order"],
                    )
                    per["exact_vs_first_order"] = _shift(est, exact, first, level, geo)
                    cell["levels"][str(level)] = per
                cells.append(cell)
    return {"cells": cells, "worst": _worst(cells)}


def _column(geometry: tuple, w: int) -> tuple:
    """One leading term's ``(‖T*‖² [R, 1], ⟨T̂, T*⟩ [R, 1], ‖T̂‖² [1])`` of a geometry."""
    star, cross, norm2 = geometry
    return star[:, w : w + 1], cross[:, w : w + 1], norm2[w : w + 1]


def _shift(est, exact, first, level, geometry: dict) -> dict:
    """How far the first-order shortcut moves the default interval's ends, in widths."""
    moved = []
    pairs = zip(est, exact, first, geometry["exact"], geometry["first_order"], strict=True)
    for e, a, b, geo_a, geo_b in pairs:
        x = [interval(d[:, None], level, DEFAULT_METHOD, torch.tensor([e]), blocks=BLOCKS,
                      geometry=g)
             for d, g in ((a, geo_a), (b, geo_b))]  # fmt: skip
        width = float(x[0][1][0] - x[0][0][0])
        if width > 0:
            moved.append(max(abs(float(x[0][i][0] - x[1][i][0])) for i in (0, 1)) / width)
    if not moved:
        return {"median_shift_in_widths": math.nan, "max_shift_in_widths": math.nan}
    return {"median_shift_in_widths": statistics.median(moved), "max_shift_in_widths": max(moved)}


def _worst(cells: list[dict]) -> dict:
    """Per method and level: the largest shortfall of coverage below nominal, and where."""
    out = {}
    for level in map(str, LEVELS):
        for method in cells[0]["levels"][level]:
            if method == "exact_vs_first_order":
                continue
            gaps = [(float(level) - c["levels"][level][method]["coverage"], c) for c in cells]
            gap, cell = max(gaps, key=lambda g: g[0])
            within = sum(abs(g) <= 0.05 for g, _ in gaps)
            out[f"{method}@{level}"] = {
                "largest_shortfall": gap, "at": f"{cell['model']} {cell['weight']} "
                f"{cell['windows']} windows (truth {cell['truth']:.4f})",
                "cells_within_5_points": within, "cells": len(gaps),
            }  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--out", default=str(RESULTS / "coverage.json"))
    parser.add_argument(
        "--part",
        choices=("chain", "population", "shared", "real", "normal", "direction"),
        default="chain",
        help="chain: the Markov chain's methods; population: issue 28's cases; shared: "
        "held-out samples at the demo's or the issue's size (--size), each scored against "
        "every model; real: the real-size model of bench_real_sizes (TransformerLens 3.x); "
        "normal: the interval's rules on an exactly normal score; direction: which direction "
        "'inverted' reads a resample's noise along (issue size)",
    )
    parser.add_argument(
        "--samples", type=int, default=30,
        help="real, direction: held-out samples; shared: samples per seed (0: summarize the "
        "caches)",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=int, default=None,
        help="shared: run only this sample seed's samples (one process per seed; no summary)",
    )  # fmt: skip
    parser.add_argument(
        "--size", choices=("demo", "issue"), default="demo",
        help="shared: the demo's size (16 models) or the issue's (12 models)",
    )  # fmt: skip
    parser.add_argument("--models", type=int, default=6, help="population: models per size")
    parser.add_argument(
        "--held-out", type=int, default=10, help="population: held-out samples per model"
    )
    parser.add_argument(
        "--configs", nargs="+", default=list(POPULATION_CONFIGS), choices=list(POPULATION_CONFIGS)
    )
    args = parser.parse_args()
    if args.part != "chain":  # each other part is benchmarks/coverage_<part>.py's main_<part>
        module = importlib.import_module(f"benchmarks.coverage_{args.part}")
        getattr(module, f"main_{args.part}")(args)
        return
    cache = RESULTS / "coverage_draws.pt"
    start = time.perf_counter()
    truth, done = run(args.reps, cache)
    print(
        "truth [W_O, V, W, P]:",
        {n: [round(x, 4) for x in t] for n, t in zip(MODELS, truth.tolist(), strict=True)},
    )
    result = summarize(truth, done, args.reps)
    timing = {size: [done[(size, r)] for r in range(args.reps)] for size in SIZES}
    result["resample_seconds"] = {
        str(size): {kind: statistics.median(r[f"{kind}_resample_s"] for r in runs)
                    for kind in ("exact", "first_order")}
        for size, runs in timing.items()
    }  # fmt: skip
    result["setup"] = {"k": K, "T": T, "blocks": BLOCKS, "resamples": RESAMPLES, "sizes": SIZES,
                       "levels": LEVELS, "population_windows": POPULATION, "reps": args.reps,
                       "models": MODELS, "truth": truth.tolist(), "default": DEFAULT_METHOD,
                       "seconds": time.perf_counter() - start}  # fmt: skip
    before = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    result.update({k: v for k, v in before.items() if k not in result})  # the other parts
    write_text(args.out, json.dumps(result, indent=1, default=list) + "\n")
    for key, w in result["worst"].items():
        print(
            f"{key:28} worst shortfall {w['largest_shortfall']:+.3f} at {w['at']}; "
            f"{w['cells_within_5_points']}/{w['cells']} cells within 5 points"
        )


if __name__ == "__main__":
    main()
