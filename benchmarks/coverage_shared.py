"""Coverage at a small standard error, at the demo's and the issue's size (``--part shared``).

:mod:`benchmarks.coverage_population` gives each model its own 8 or 10 held-out samples, so
its cells rest on 64-128 samples, and its truth (16,000 or 32,000 windows of the same stories)
carries noise of its own: a truth built from ten times the windows of other stories moves the
demo-size cosines of ``P`` by 0.3 of a sample's spread (rms over demo16's 16 models), more
than that truth's split halves said.  Here every held-out sample is scored against ALL the
models at once (one sample's blocks and resamples serve every model: the intervals of a sample
differ between models only through the map), so a run of thousands of samples costs what a
few models' samples cost there.  ``--size`` (:data:`SIZES`):

* ``demo``: demo16's 16 models (the demo's quick preset: |V| 500, T 32, three layers trained
  on 64 windows with η = 2 for 8 steps); samples of 1,024 windows in 16 equal blocks from the
  stories of seeds 30 and 31; the ``shared`` key of ``coverage.json``;
* ``issue``: the issue size's 12 models (|V| 300, T 32, one layer trained on 200 windows with
  η = 1 for 24 steps); samples of 200 windows in 20 equal blocks from seeds 32 and 33; the
  ``shared_issue`` key.

Either way the models are trained on the windows ``coverage_population`` trains them on, the
truth is each model's cosine with the statistics of 30,000 stories of another seed
(:func:`_truth`: about 327,000 windows) tokenized by the size's tokenizer, and each sample
gets the library's 50 resamples and the intervals of the default method (``"inverted"``) and
of ``"shifted"`` at 90% and 95%.

The standard error of a cell is taken over samples (each sample's share of covered models and
layers), since the models share the samples; ``by_noise_share`` splits the rows by their own
``noise_share``.  Kept in ``benchmarks/results/coverage_shared_<seed>.pt`` and
``coverage_shared_issue_<seed>.pt`` (resumable; one file per sample seed, so two processes
can each run one: ``--seed``, then ``--samples 0`` to summarize).
"""

import itertools
import json
import math
import os
import statistics
import time
from pathlib import Path

import torch

from benchmarks.coverage_shares import SHARE_BANDS
from benchmarks.coverage_trials import (
    KINDS,
    POPULATION_CONFIGS,
    RESAMPLES,
    RESULTS,
    map_kinds,
    map_names,
    paper_maps,
    story_tokenizer,
    story_windows,
    target_vectors,
)
from tl_leadterms import block_stats, corpus_stats, make_windows, paper_model, train
from tl_leadterms.atomic import atomic_path, write_text
from tl_leadterms.data import generate_stories
from tl_leadterms.results.bootstrap import Bootstrap, BootstrapSpec
from tl_leadterms.results.intervals import DEFAULT_METHOD, interval, noise_share

__all__ = ["main_shared"]

TRUTH_SEED, TRUTH_STORIES = 29, 30_000  # the samples' stories are seed 28
LEVELS = (0.9, 0.95)
#: the sizes run here: ``config`` the models' configuration in POPULATION_CONFIGS (trained on
#: the windows coverage_population trains its ``models`` on, ``held_out`` samples after each),
#: ``seeds`` the sample seeds (one cache each), ``key`` the key of coverage.json
SIZES = {
    "demo": {"config": "demo16", "models": 16, "held_out": 8, "seeds": (30, 31),
             "cache": "coverage_shared_{seed}.pt", "key": "shared"},
    "issue": {"config": "issue", "models": 12, "held_out": 10, "seeds": (32, 33),
              "cache": "coverage_shared_issue_{seed}.pt", "key": "shared_issue"},
}  # fmt: skip


def _windows(cfg: dict, seed: int, stories: int) -> torch.Tensor:
    return make_windows(generate_stories(stories, seed=seed), n_ctx=cfg["n_ctx"],
                        tokenizer=story_tokenizer(cfg))  # fmt: skip


def _truth(cfg: dict, d_vocab: int):
    """The statistics of every window of :data:`TRUTH_STORIES` stories of :data:`TRUTH_SEED`."""
    windows = _windows(cfg, TRUTH_SEED, TRUTH_STORIES)
    return corpus_stats(windows, d_vocab=d_vocab, progress=False), windows.shape[0]


def _models(size: dict) -> tuple[list, int]:
    """The size's models' maps (each model's list, :func:`map_names` order) and ``d_vocab``."""
    cfg = POPULATION_CONFIGS[size["config"]]
    windows, d_vocab = story_windows(cfg)
    per_model = cfg["windows"] + size["held_out"] * cfg["held_windows"]  # as coverage_population
    out = []
    for m in range(size["models"]):
        first = cfg["truth_windows"] + m * per_model
        model = paper_model(d_vocab=d_vocab, n_ctx=cfg["n_ctx"], n_layers=cfg["layers"],
                            dtype=torch.float64)  # fmt: skip
        train(model, windows[first : first + cfg["windows"]], lr=cfg["lr"], steps=cfg["steps"],
              progress=False)  # fmt: skip
        out.append(paper_maps(model, cfg["layers"]))
    return out, d_vocab


class _Scorer:
    """Every model's maps of one target kind stacked and normalized: the cosines of all maps
    with a set of targets in one matrix product per kind."""

    def __init__(self, maps: list, layers: int):
        kinds = map_kinds(layers)
        self.shape = (len(maps), len(kinds))
        self.rows = {}
        for kind in KINDS:
            cols = [i for i, k in enumerate(kinds) if k == kind]
            stack = torch.stack([m[i].double().flatten() for m in maps for i in cols])
            self.rows[kind] = (cols, stack / stack.norm(dim=1, keepdim=True))

    def __call__(self, targets: list) -> torch.Tensor:
        """``[models, maps]`` cosines with ``targets`` (:func:`targets`' order)."""
        out = torch.empty(self.shape, dtype=torch.float64)
        for kind, (cols, rows) in self.rows.items():
            t = targets[KINDS.index(kind)]
            out[:, cols] = (rows @ (t / t.norm())).view(self.shape[0], len(cols))
        return out


def run_shared(size: dict, seed: int, samples: int) -> list:
    """``samples`` held-out samples of the stories of ``seed`` at ``size`` (resumable)."""
    cfg = POPULATION_CONFIGS[size["config"]]
    cache = RESULTS / size["cache"].format(seed=seed)
    done = torch.load(cache) if cache.exists() else {"samples": []}
    start = time.perf_counter()
    maps, d_vocab = _models(size)
    scorer = _Scorer(maps, cfg["layers"])
    if "truth" not in done:
        population, done["truth_windows"] = _truth(cfg, d_vocab)
        done["truth"] = scorer(target_vectors(population))
    h = cfg["held_windows"]
    stories = math.ceil(samples * h / 10.0) + 200  # about 10.9 windows a story
    windows = _windows(cfg, seed, stories)
    if windows.shape[0] < samples * h:
        raise SystemExit(f"seed {seed}: {windows.shape[0]} windows, need {samples * h}")
    print(f"seed {seed}: ready in {time.perf_counter() - start:.0f} s", flush=True)
    for j in range(len(done["samples"]), samples):
        t0 = time.perf_counter()
        blocks = block_stats(windows[j * h : (j + 1) * h], d_vocab=d_vocab,
                             blocks=cfg["held_blocks"], progress=False)  # fmt: skip
        full = target_vectors(blocks.full())
        boot = Bootstrap(blocks, 0.9, BootstrapSpec(RESAMPLES, seed=100_000 * seed + j))
        draws, star_sq, cross = [], [], []
        for stats in boot.resamples():
            targets = target_vectors(stats)
            draws.append(scorer(targets))
            star_sq.append(torch.tensor([float(t @ t) for t in targets]))
            cross.append(torch.tensor([float(f @ t) for t, f in zip(targets, full, strict=True)]))
        done["samples"].append({
            "estimate": scorer(full), "draws": torch.stack(draws),
            "star_sq": torch.stack(star_sq), "cross": torch.stack(cross),
            "norm2": torch.tensor([float(f @ f) for f in full]),
            "seconds": time.perf_counter() - t0,
        })  # fmt: skip
        if (j + 1) % 10 == 0 or j + 1 == samples:
            with atomic_path(cache) as tmp:
                torch.save(done, tmp)
            print(f"  seed {seed}: sample {j + 1}/{samples} "
                  f"({done['samples'][-1]['seconds']:.1f} s)", flush=True)  # fmt: skip
    return done


def summarize_shared(size: dict, runs: list) -> dict:
    """Coverage per weight (layers pooled) by method and level, its standard error over the
    samples, and the z-scores of the estimate and the default's ``corrected`` against the
    truth, in units of the expanded resample spread."""
    cfg = POPULATION_CONFIGS[size["config"]]
    layers, n_blocks = cfg["layers"], cfg["held_blocks"]
    names, kinds = map_names(layers), map_kinds(layers)
    k = [KINDS.index(kind) for kind in kinds]
    truth = runs[0]["truth"]
    for r in runs[1:]:
        assert torch.equal(r["truth"], truth)
    samples = [s for r in runs for s in r["samples"]]
    covered = {(m, lv): [] for m in (DEFAULT_METHOD, "shifted") for lv in LEVELS}
    z_raw, z_corrected, shares = [], [], []
    scale = math.sqrt(n_blocks / (n_blocks - 1))
    n_models, n_maps = truth.shape
    flat_truth = truth.flatten()  # [models·maps]: every model's maps side by side
    for s in samples:
        # the models differ only in the map: one call per sample, the geometry repeated
        geometry = (s["star_sq"][:, k].repeat(1, n_models), s["cross"][:, k].repeat(1, n_models),
                    s["norm2"][k].repeat(n_models))  # fmt: skip
        draws, estimate = s["draws"].flatten(1), s["estimate"].flatten()
        shares.append(noise_share(draws, *geometry, estimate).view(n_models, n_maps))
        for method, level in covered:
            lo, hi, mid = interval(draws, level, method, estimate, blocks=n_blocks,
                                   geometry=geometry)  # fmt: skip
            covered[method, level].append(
                ((lo <= flat_truth) & (flat_truth <= hi)).view(n_models, n_maps)
            )
            if (method, level) == (DEFAULT_METHOD, LEVELS[0]):
                sd = draws.std(0) * scale
                z_raw.append(((estimate - flat_truth) / sd).view(n_models, n_maps))
                z_corrected.append(((mid - flat_truth) / sd).view(n_models, n_maps))
    cells = []
    for weight in ("W_O", "V", "W", "P"):
        idx = [i for i, n in enumerate(names) if n.split(".")[0] == weight]
        cell = {"weight": weight, "samples": len(samples), "models": n_models,
                "mean_truth": float(truth[:, idx].mean())}  # fmt: skip
        for (method, level), hits in covered.items():
            per = torch.stack(hits)[:, :, idx].double()  # [samples, models, maps]
            share = per.mean(dim=(1, 2))  # each sample's share of covered models and layers
            key = "coverage" if method == DEFAULT_METHOD else f"coverage_{method}"
            cell.setdefault(key, {})[str(level)] = float(share.mean())
            cell.setdefault(f"{key}_standard_error", {})[str(level)] = float(
                share.std() / math.sqrt(len(samples)))  # fmt: skip
        for label, z in (("z_raw", z_raw), ("z_corrected", z_corrected)):
            zz = torch.stack(z)[:, :, idx].flatten()
            cell[label] = {"mean": float(zz.mean()), "sd": float(zz.std())}
        cells.append(cell)
    return {
        "by_noise_share": _by_share(torch.stack(shares), covered),
        "setup": {"models_from": size["config"], "models": n_models, "truth_seed": TRUTH_SEED,
                  "truth_stories": TRUTH_STORIES, "truth_windows": runs[0]["truth_windows"],
                  "sample_seeds": [r["seed"] for r in runs], "held_windows": cfg["held_windows"],
                  "held_blocks": n_blocks, "resamples": RESAMPLES, "method": DEFAULT_METHOD},
        "cells": cells,
        "seconds_per_sample": statistics.median(s["seconds"] for s in samples),
    }  # fmt: skip


def _by_share(shares: torch.Tensor, covered: dict) -> list[dict]:
    """Coverage by band of ``noise_share`` (:data:`~benchmarks.coverage_shares.SHARE_BANDS`),
    every model, map and sample a row; its standard error over the samples (a row's share of
    a sample's covered rows in the band, weighted by their number)."""
    out = []
    for lo, hi in itertools.pairwise(SHARE_BANDS):
        band = (shares >= lo) & (shares < hi)  # [samples, models, maps]
        rows = int(band.sum())
        if rows == 0:
            continue
        per_sample = band.flatten(1).sum(1).double()
        row = {"share_from": lo, "share_below": hi, "rows": rows}
        for (method, level), hits in covered.items():
            hit = (torch.stack(hits) & band).flatten(1).sum(1).double()
            c = float(hit.sum() / per_sample.sum())
            # a ratio estimator's standard error over the samples
            resid = hit - c * per_sample
            se = float(resid.std() * math.sqrt(len(hit)) / per_sample.sum())
            key = "coverage" if method == DEFAULT_METHOD else f"coverage_{method}"
            row.setdefault(key, {})[str(level)] = c
            row.setdefault(f"{key}_standard_error", {})[str(level)] = se
        out.append(row)
    return out


def main_shared(args) -> None:
    size = SIZES[args.size]
    seeds = [args.seed] if args.seed is not None else list(size["seeds"])
    runs = []
    for seed in seeds:
        if args.samples > 0:
            run = run_shared(size, seed, args.samples)
        else:
            run = torch.load(RESULTS / size["cache"].format(seed=seed))
        runs.append({**run, "seed": seed})
    if args.seed is not None:  # one process of several: the summary waits for all seeds
        return
    summary = summarize_shared(size, runs)
    summary["run"] = {"load_average": os.getloadavg()}
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    result[size["key"]] = summary
    write_text(out, json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary["setup"]))
    print("| weight | samples | coverage 90% | 95% | shifted 90% | 95% | z raw | z corrected |")
    for c in summary["cells"]:
        cov, sh, se = c["coverage"], c["coverage_shifted"], c["coverage_standard_error"]
        print(f"| {c['weight']} | {c['samples']} | {cov['0.9']:.1%} ± {se['0.9']:.1%} "
              f"| {cov['0.95']:.1%} ± {se['0.95']:.1%} | {sh['0.9']:.1%} | {sh['0.95']:.1%} "
              f"| {c['z_raw']['mean']:+.2f} (sd {c['z_raw']['sd']:.2f}) "
              f"| {c['z_corrected']['mean']:+.2f} (sd {c['z_corrected']['sd']:.2f}) |")  # fmt: skip
    print("| noise share | rows | coverage 90% | 95% | shifted 90% | 95% |")
    for b in summary["by_noise_share"]:
        cov, se, sh = b["coverage"], b["coverage_standard_error"], b["coverage_shifted"]
        print(f"| {b['share_from']:g}-{b['share_below']:g} | {b['rows']} "
              f"| {cov['0.9']:.1%} ± {se['0.9']:.1%} | {cov['0.95']:.1%} ± {se['0.95']:.1%} "
              f"| {sh['0.9']:.1%} | {sh['0.95']:.1%} |")  # fmt: skip
