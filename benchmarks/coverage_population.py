"""The population part of ``benchmarks/bench_coverage.py`` (``--part population``, issue 28).

The two cases of where statistics come from, on the library's own generator (the embedded
stories, a word-level tokenizer). Each model is the paper's, trained full-batch from zero on a
sample A of windows; the truth is its cosine with the statistics of many other windows of the
generator (16,000 or 32,000, far more than a sample).
Case "training": the statistics are A itself (the library prints no interval there; the bias
of the exact score against the truth, and how often the interval it no longer prints would have
covered the truth, are recorded). Case "held_out": statistics of other samples B (several per
model, disjoint): the printed interval's coverage of the truth at 90% and 95%, by the default
method (``"inverted"``, from each resample's ‖T*‖² and ⟨T̂, T*⟩) and by ``"shifted"``, with its
binomial standard error over the samples. Two sizes (``POPULATION_CONFIGS``):
the issue's (|V| 300, T 32, A and B of 200 windows in 20 blocks, one layer) and the demo's (its
quick preset: |V| 500, T 32, three layers trained on 64 windows; B of 1,024 windows in 16
blocks, the held-out sample the demo reads). The library's own decision is checked in every
configuration: ``decompose(..., ci=)`` prints an interval for B and none for A.
Kept in ``benchmarks/results/coverage_population_<size>_shares_draws.pt`` (:data:`CACHE`);
written into the ``population`` key of ``coverage.json`` (the chain's cells are kept as they
are; run one size at a time with ``--configs``, each run adds its own), with the coverage of
the issue's and the demo's sizes split by the rows' ``noise_share`` (``by_noise_share``,
:mod:`benchmarks.coverage_shares`).
"""

import json
import math
import os
import statistics
import time
from pathlib import Path

import torch

from benchmarks.coverage_trials import (
    CACHE,
    CUTS,
    KINDS,
    LEVELS,
    POPULATION_CONFIGS,
    RESAMPLES,
    RESULTS,
    bounds,
    map_kinds,
    map_names,
    paper_maps,
    story_tokenizer,
    story_windows,
    target_vectors,
)
from tl_leadterms import block_stats, corpus_stats, paper_model, train
from tl_leadterms.analyses.decompose.compute import leading_cosines
from tl_leadterms.atomic import atomic_path, write_text
from tl_leadterms.results.bootstrap import Bootstrap, BootstrapSpec
from tl_leadterms.results.intervals import DEFAULT_METHOD, interval

__all__ = ["main_population", "run_population", "summarize_population"]


def _scores(maps: list, stats) -> torch.Tensor:
    """``[maps]``: the cosine of each map with its leading term, written out plainly."""
    targets = {"B": stats.B_bar, "V": stats.B_bar_Phi_bar.T, "W": stats.Q_bar, "P": stats.Delta}
    kinds = map_kinds((len(maps) - 1) // 3)
    out = torch.empty(len(maps), dtype=torch.float64)
    for i, (M, kind) in enumerate(zip(maps, kinds, strict=True)):
        M, target = M.double().flatten(), targets[kind].double().flatten()
        out[i] = (M @ target) / (M.norm() * target.norm())
    return out


def _target_scores(maps: list, kinds: list[str], targets: list) -> torch.Tensor:
    """``[maps]``: each map's cosine with its target among ``targets`` (``targets``' order)."""
    out = torch.empty(len(maps), dtype=torch.float64)
    for i, (M, kind) in enumerate(zip(maps, kinds, strict=True)):
        M, target = M.double().flatten(), targets[KINDS.index(kind)]
        out[i] = (M @ target) / (M.norm() * target.norm())
    return out


FIRST, SECOND = 10, 20  # the double bootstrap's draws: first-level samples, resamples of each


def _second_level(maps: list, blocks, seed: int) -> dict:
    """The bootstrap world's own bootstrap: ``FIRST`` resamples of the blocks (``B − 1`` of
    ``B``), and of each, ``SECOND`` resamples of its drawn blocks (``B − 2`` of its ``B − 1``):
    how much a resample's spread and bias differ from the spread and bias of a sample there."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    firsts, seconds = [], []
    n = blocks.n_blocks
    for _ in range(FIRST):
        w = blocks.draw(generator)
        firsts.append(_scores(maps, blocks.weighted(w)))
        drawn = torch.repeat_interleave(torch.arange(n), w)
        level = []
        for _ in range(SECOND):
            pick = drawn[torch.randint(len(drawn), (len(drawn) - 1,), generator=generator)]
            level.append(_scores(maps, blocks.weighted(torch.bincount(pick, minlength=n))))
        seconds.append(torch.stack(level))
    return {"first": torch.stack(firsts), "second": torch.stack(seconds)}


def _trial(maps: list, windows, d_vocab: int, n_blocks: int, seed: int, eos: int,
           population: list) -> dict:  # fmt: skip
    """Per cut: the estimate, the resamples' scores, the noise of the targets (the sample's
    ‖T̂ − T‖² against the truth's T, and its resamples' mean ‖T* − T̂‖²), the resamples'
    ‖T*‖² and ⟨T̂, T*⟩ (what the default interval and ``noise_share`` read); ``blocks``: the
    cut at documents' BlockStats (for the printed check)."""
    kinds = map_kinds((len(maps) - 1) // 3)
    out = {}
    for cut in CUTS:
        blocks = block_stats(windows, d_vocab=d_vocab, blocks=n_blocks, progress=False,
                             eos_id=eos if cut == "documents" else None)  # fmt: skip
        full = target_vectors(blocks.full())
        boot = Bootstrap(blocks, 0.9, BootstrapSpec(RESAMPLES, seed=seed))
        draws, noise = [], torch.zeros(len(KINDS), dtype=torch.float64)
        star_sq, cross = [], []
        for stats in boot.resamples():
            draws.append(_scores(maps, stats))
            pairs = list(zip(target_vectors(stats), full, strict=True))
            noise += torch.tensor([float(((t - f) ** 2).sum()) for t, f in pairs])
            star_sq.append(torch.tensor([float(t @ t) for t, _ in pairs]))
            cross.append(torch.tensor([float(f @ t) for t, f in pairs]))
        ones = torch.ones(n_blocks, dtype=torch.long)
        jack = [target_vectors(blocks.weighted(ones - torch.eye(n_blocks, dtype=torch.long)[b]))
                for b in range(n_blocks)]  # fmt: skip
        out[cut] = {
            "estimate": _scores(maps, blocks.full()), "draws": torch.stack(draws),
            "star_sq": torch.stack(star_sq), "cross": torch.stack(cross),
            "noise_resamples": noise / RESAMPLES,
            "noise_sample": torch.tensor([float(((f - t) ** 2).sum())
                                          for f, t in zip(full, population, strict=True)]),
            "norm2": torch.tensor([float(f @ f) for f in full]),
            "jack_scores": torch.stack([_target_scores(maps, kinds, j) for j in jack]),
            "bounds": blocks.bounds,
        }  # fmt: skip
        if cut == "documents":
            out["blocks"] = blocks
            out[cut].update(_second_level(maps, blocks, seed))
    return out


def run_population(models: int, held_out: int, configs: list[str]) -> dict:
    """Every configuration's trials: ``models`` models, each with its training sample's trial
    and ``held_out`` held-out samples' trials (resumable: one cache file per configuration)."""
    from tl_leadterms import decompose

    out, computed = {}, {}
    for name in configs:
        computed[name] = 0
        cache = RESULTS / CACHE.format(name=name)
        done = torch.load(cache) if cache.exists() else {}
        cfg = POPULATION_CONFIGS[name]
        windows, d_vocab = story_windows(cfg)
        truth_n, n, h = cfg["truth_windows"], cfg["windows"], cfg["held_windows"]
        population = corpus_stats(windows[:truth_n], d_vocab=d_vocab, progress=False)
        targets = target_vectors(population)
        eos = story_tokenizer(cfg).eos_token_id
        # disjoint samples after the truth's windows: each model's training sample, then its
        # held-out samples
        per_model = n + held_out * h
        if truth_n + models * per_model > windows.shape[0]:
            raise SystemExit(f"{name}: {windows.shape[0]} windows, need "
                             f"{truth_n + models * per_model}: raise 'stories'")  # fmt: skip
        for m in range(models):
            if (name, m) in done:
                continue
            start = time.perf_counter()
            first = truth_n + m * per_model
            sample = windows[first : first + n]
            held = [windows[first + n + j * h : first + n + (j + 1) * h] for j in range(held_out)]
            model = paper_model(d_vocab=d_vocab, n_ctx=cfg["n_ctx"], n_layers=cfg["layers"],
                                dtype=torch.float64)  # fmt: skip
            train(model, sample, lr=cfg["lr"], steps=cfg["steps"], progress=False)
            maps = paper_maps(model, cfg["layers"])
            truth = _scores(maps, population)
            library = leading_cosines(model, population)
            library = torch.tensor([library[n] for n in map_names(cfg["layers"])])
            assert torch.allclose(truth, library.double(), atol=1e-9), (truth, library)
            trials = {"training": [_trial(maps, sample, d_vocab, cfg["blocks"], 1000 * m, eos,
                                          targets)]}  # fmt: skip
            trials["held_out"] = [
                _trial(maps, part, d_vocab, cfg["held_blocks"], 1000 * m + 1 + j, eos, targets)
                for j, part in enumerate(held)
            ]
            printed = {}
            for case in ("training", "held_out"):
                d = decompose(model, trials[case][0]["blocks"], ci=0.9, bootstrap=2,
                              progress=False)  # fmt: skip
                printed[case] = {"interval": [("lo" in r) for r in d.rows],
                                 "reading": d.metadata["population"],
                                 "line": repr(d).split("\n")[1]}  # fmt: skip
            for case in trials.values():
                for t in case:
                    del t["blocks"]
            done[(name, m)] = {"truth": truth, "trials": trials, "printed": printed,
                               "seconds": time.perf_counter() - start,
                               "d_vocab": d_vocab}  # fmt: skip
            computed[name] += 1
            with atomic_path(cache) as tmp:
                torch.save(done, tmp)
            print(f"  {name}: model {m + 1}/{models} ({done[(name, m)]['seconds']:.0f} s)",
                  flush=True)  # fmt: skip
        out[name] = [done[(name, m)] for m in range(models)]
    return out, computed


def summarize_population(runs: dict, models: int, held_out: int) -> dict:
    """Per configuration, case, cut and weight (layers pooled): bias, corrected = 1, coverage
    (as printed, by the default method; by ``"shifted"``, the former default; by
    ``"calibrated"`` where the trial has the second level), the resamples' spread against the
    samples' spread, and per target the noise of a resample against a sample's."""
    result = {}
    for name, per_model in runs.items():
        cfg = POPULATION_CONFIGS[name]
        names = map_names(cfg["layers"])
        cells, noise = [], []
        for case in ("training", "held_out"):
            printed = all(all(r["printed"][case]["interval"]) for r in per_model)
            none = not any(any(r["printed"][case]["interval"]) for r in per_model)
            n_blocks = cfg["blocks" if case == "training" else "held_blocks"]
            for cut in CUTS:
                trials = [(r, t[cut]) for r in per_model for t in r["trials"][case]]
                noise.append({"case": case, "cut": cut, **{
                    kind: statistics.mean(float(t["noise_resamples"][i]) for _, t in trials)
                    / statistics.mean(float(t["noise_sample"][i]) for _, t in trials)
                    for i, kind in enumerate(KINDS)}})  # fmt: skip
                bounds = [{(lv, m): bounds(t, cfg["layers"], lv, n_blocks, m)
                           for lv in LEVELS for m in (DEFAULT_METHOD, "shifted")}
                          for _, t in trials]  # fmt: skip
                for weight in ("W_O", "V", "W", "P"):
                    idx = [i for i, n in enumerate(names) if n.split(".")[0] == weight]
                    raw, corr, at_one, width = [], [], [], []
                    cover = {lv: [] for lv in LEVELS}
                    cover_shifted = {lv: [] for lv in LEVELS}
                    cover_calibrated = {lv: [] for lv in LEVELS}
                    sd_boot, sd_sample = [], []
                    for (r, t), bound in zip(trials, bounds, strict=True):
                        for i in idx:
                            truth, est = float(r["truth"][i]), float(t["estimate"][i])
                            draws = t["draws"][:, i]
                            raw.append(est - truth)
                            sd_boot.append(float(draws.std()))
                            for level in LEVELS:
                                for out, method in ((cover, DEFAULT_METHOD),
                                                    (cover_shifted, "shifted")):  # fmt: skip
                                    lo, hi, _ = bound[level, method]
                                    out[level].append(bool(lo[i] <= truth <= hi[i]))
                                if "second" in t:  # the library's "calibrated", its default F, S
                                    f, size = BootstrapSpec().calibration
                                    found = interval(
                                        draws[:, None], level, "calibrated", torch.tensor([est]),
                                        t["jack_scores"][:, i : i + 1], blocks=n_blocks,
                                        second=t["second"][:f, :size, i : i + 1],
                                    )  # fmt: skip
                                    lo_c, hi_c, _ = (float(x[0]) for x in found)
                                    cover_calibrated[level].append(lo_c <= truth <= hi_c)
                            lo, hi, mid = (float(x[i]) for x in bound[LEVELS[0], DEFAULT_METHOD])
                            corr.append(mid - truth)
                            at_one.append(mid >= 1.0 - 1e-12)
                            width.append(hi - lo)
                    sd_cv = []  # how much the resamples' own spread varies over the samples
                    for r in per_model:  # the spread of the estimate over a model's samples
                        if len(r["trials"][case]) > 1:
                            for i in idx:
                                sd_sample.append(float(torch.tensor(
                                    [float(t[cut]["estimate"][i]) for t in r["trials"][case]]
                                ).std()))  # fmt: skip
                                sds = torch.tensor([float(t[cut]["draws"][:, i].std())
                                                    for t in r["trials"][case]])  # fmt: skip
                                sd_cv.append(float(sds.std() / sds.mean()))
                    samples = len(trials)
                    calibrated = None  # the documents cut has the second level
                    if cover_calibrated[LEVELS[0]]:
                        calibrated = {str(lv): statistics.mean(cover_calibrated[lv])
                                      for lv in LEVELS}  # fmt: skip
                    cells.append(
                        {
                            "case": case,
                            "cut": cut,
                            "weight": weight,
                            "trials": len(raw),
                            "samples": samples,
                            "mean_truth": statistics.mean(
                                float(r["truth"][i]) for r in per_model for i in idx
                            ),
                            "raw_minus_truth": statistics.mean(raw),
                            "corrected_minus_truth": statistics.mean(corr),
                            "corrected_at_1": statistics.mean(at_one),
                            "median_width_90": statistics.median(width),
                            "interval_printed": printed,
                            "no_interval_printed": none,
                            "coverage": {str(lv): statistics.mean(cover[lv]) for lv in LEVELS},
                            "coverage_shifted": {
                                str(lv): statistics.mean(cover_shifted[lv]) for lv in LEVELS
                            },
                            "coverage_calibrated": calibrated,
                            "resample_sd_over_sample_sd": (
                                statistics.mean(sd_boot) / statistics.mean(sd_sample)
                                if sd_sample
                                else None
                            ),
                            # the coefficient of variation of a sample's resample SD over
                            # a model's samples (mean over models and layers): near
                            # sqrt(1/(2(B−1)) + 1/(2R)) for a score whose block noise is Gaussian
                            "resample_sd_cv": statistics.mean(sd_cv) if sd_cv else None,
                            # over the samples (the layers of one sample are not independent)
                            "coverage_standard_error": {
                                str(lv): math.sqrt(
                                    max(statistics.mean(cover[lv]), 1e-12)
                                    * (1 - statistics.mean(cover[lv]))
                                    / samples
                                )
                                for lv in LEVELS
                            },
                        }
                    )
        result[name] = {
            "setup": {**cfg, "d_vocab": per_model[0].get("d_vocab", story_windows(cfg)[1]),
                      "models": models, "held_out_per_model": held_out,
                      "resamples": RESAMPLES, "method": DEFAULT_METHOD, "expanded": True,
                      "cuts": list(CUTS)},
            "cells": cells,
            # per target: a resample's mean ‖T* − T̂‖² over a sample's mean ‖T̂ − T‖²
            "noise_ratio": noise,
            "printed": per_model[0]["printed"],
            "seconds_per_model": statistics.median(r["seconds"] for r in per_model),
        }  # fmt: skip
    return result


def _pct(cell: dict | None, level: str) -> str:
    return "-" if cell is None else f"{cell[level]:.0%}"


def main_population(args) -> None:
    start = time.perf_counter()
    runs, computed = run_population(args.models, args.held_out, args.configs)
    summary = summarize_population(runs, args.models, args.held_out)
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    before = result.get("population", {})
    result["population"] = {**before, **summary}
    # a module of its own that reads this one's trials: imported here, where both are loaded
    from benchmarks.coverage_shares import coverage_by_share, print_bands

    result["population"]["by_noise_share"] = coverage_by_share(runs)
    for name in summary:
        if computed[name] == 0 and "run" in before.get(name, {}):  # summarized from the cache:
            result["population"][name]["run"] = before[name]["run"]  # the run that drew them
        else:
            result["population"][name]["run"] = {"seconds": time.perf_counter() - start,
                                                 "load_average": os.getloadavg(),
                                                 "models_computed": computed[name]}  # fmt: skip
    write_text(out, json.dumps(result, indent=1, default=list) + "\n")
    for name, s in summary.items():
        print(f"{name}: {s['setup']}")
        print(
            "| case | cut | weight | trials | raw − truth | corrected − truth | interval "
            "printed | coverage 90% | 95% | shifted 90% | 95% | calibrated 90% | 95% "
            "| resample SD / sample SD |"
        )
        for c in s["cells"]:
            shown = "yes" if c["interval_printed"] else ("no" if c["no_interval_printed"]
                                                        else "mixed")  # fmt: skip
            ratio = c["resample_sd_over_sample_sd"]
            print(f"| {c['case']} | {c['cut']} | {c['weight']} | {c['trials']} "
                  f"| {c['raw_minus_truth']:+.4f} | {c['corrected_minus_truth']:+.4f} | {shown} "
                  f"| {c['coverage']['0.9']:.0%} | {c['coverage']['0.95']:.0%} "
                  f"| {c['coverage_shifted']['0.9']:.0%} | {c['coverage_shifted']['0.95']:.0%} "
                  f"| {_pct(c['coverage_calibrated'], '0.9')} "
                  f"| {_pct(c['coverage_calibrated'], '0.95')} "
                  f"| {'-' if ratio is None else f'{ratio:.2f}'} |")  # fmt: skip
        for row in s["noise_ratio"]:
            print("noise of a resample / of a sample:", row)
    print_bands(result["population"]["by_noise_share"])
