"""The population part of ``benchmarks/bench_coverage.py`` (``--part population``, issue 28).

The two cases of where statistics come from, on the library's own generator (the embedded
stories, a word-level tokenizer). Each model is the paper's, trained full-batch from zero on a
sample A of windows; the truth is its cosine with the statistics of many other windows of the
generator (16,000 or 32,000, far more than a sample).
Case "training": the statistics are A itself (the library prints no interval there; the bias
of the exact score against the truth, and how often the interval it no longer prints would have
covered the truth, are recorded). Case "held_out": statistics of other samples B (several per
model, disjoint): the printed interval's coverage of the truth at 90% and 95%, by the default
method, with its binomial standard error over the samples. Two sizes (``POPULATION_CONFIGS``):
the issue's (|V| 300, T 32, A and B of 200 windows in 20 blocks, one layer) and the demo's (its
quick preset: |V| 500, T 32, three layers trained on 64 windows; B of 1,024 windows in 16
blocks, the held-out sample the demo reads). The library's own decision is checked in every
configuration: ``decompose(..., ci=)`` prints an interval for B and none for A.
Kept in ``benchmarks/results/coverage_population_<size>_draws.pt``; written into the
``population`` key of ``coverage.json`` (the chain's cells are kept as they are; run one size
at a time with ``--configs``, each run adds its own).
"""

import json
import math
import os
import statistics
import time
from pathlib import Path

import torch

from tl_leadterms import block_stats, corpus_stats, paper_model, to_paper, train
from tl_leadterms.analyses.decompose.compute import leading_cosines
from tl_leadterms.atomic import atomic_path, write_text
from tl_leadterms.results.bootstrap import DEFAULT_METHOD, Bootstrap, BootstrapSpec, interval

__all__ = ["POPULATION_CONFIGS", "main_population"]

RESULTS = Path(__file__).resolve().parent / "results"
LEVELS = (0.9, 0.95)
RESAMPLES = BootstrapSpec().resamples  # the library's default, as the demo uses it

#: issue 28's configurations: the issue's size, and the demo's (``tl-leadterms demo``'s quick
#: preset: |V| 500, T 32, the paper's 3-layer model trained on 64 windows with η = 2 for 8 steps,
#: read against held-out samples of 1,024 windows in 16 blocks, as the demo does). ``windows``/
#: ``blocks``: the training sample; ``held_windows``/``held_blocks``: each held-out sample.
POPULATION_CONFIGS = {
    "issue": {"stories": 6500, "vocab": 300, "n_ctx": 32, "windows": 200, "blocks": 20,
              "held_windows": 200, "held_blocks": 20, "layers": 1, "lr": 1.0, "steps": 24,
              "truth_windows": 16_000},
    "demo": {"stories": 10000, "vocab": 500, "n_ctx": 32, "windows": 64, "blocks": 8,
             "held_windows": 1024, "held_blocks": 16, "layers": 3, "lr": 2.0, "steps": 8,
             "truth_windows": 32_000},
}  # fmt: skip


def _story_windows(cfg: dict):
    from tl_leadterms import make_windows
    from tl_leadterms.data import generate_stories, train_word_tokenizer

    stories = generate_stories(cfg["stories"], seed=28)
    tokenizer = train_word_tokenizer(stories, cfg["vocab"])
    return make_windows(stories, n_ctx=cfg["n_ctx"], tokenizer=tokenizer), len(tokenizer)


def _paper_maps(model, layers: int) -> list:
    """W_O, then V, W, P of each layer, dense (names in :func:`_map_names`)."""
    pw = to_paper(model)
    return [pw.W_O.detach()] + [pw.layer_map(w, layer).detach() for layer in range(layers)
                                for w in ("V", "W", "P")]  # fmt: skip


def _map_names(layers: int) -> list[str]:
    return ["W_O"] + [f"{w}.{layer}" for layer in range(layers) for w in ("V", "W", "P")]


def _scores(maps: list, stats) -> torch.Tensor:
    """``[maps]``: the cosine of each map with its leading term, written out plainly."""
    targets = {"B": stats.B_bar, "V": stats.B_bar_Phi_bar.T, "W": stats.Q_bar, "P": stats.Delta}
    kinds = ["B"] + ["V", "W", "P"] * ((len(maps) - 1) // 3)
    out = torch.empty(len(maps), dtype=torch.float64)
    for i, (M, kind) in enumerate(zip(maps, kinds, strict=True)):
        M, target = M.double().flatten(), targets[kind].double().flatten()
        out[i] = (M @ target) / (M.norm() * target.norm())
    return out


def _trial(maps: list, windows, d_vocab: int, n_blocks: int, seed: int) -> dict:
    blocks = block_stats(windows, d_vocab=d_vocab, blocks=n_blocks, progress=False)
    boot = Bootstrap(blocks, 0.9, BootstrapSpec(RESAMPLES, seed=seed))
    draws = torch.stack([_scores(maps, stats) for stats in boot.resamples()])
    # the former draw, B blocks of B (the library draws B − 1: BlockStats.draw), for comparison
    generator = torch.Generator().manual_seed(seed)
    picks = [torch.randint(n_blocks, (n_blocks,), generator=generator) for _ in range(RESAMPLES)]
    draws_b = torch.stack([_scores(maps, blocks.weighted(torch.bincount(p, minlength=n_blocks)))
                           for p in picks])  # fmt: skip
    return {"estimate": _scores(maps, blocks.full()), "draws": draws, "draws_b": draws_b,
            "blocks": blocks}  # fmt: skip


def run_population(models: int, held_out: int, configs: list[str]) -> dict:
    """Every configuration's trials: ``models`` models, each with its training sample's trial
    and ``held_out`` held-out samples' trials (resumable: one cache file per configuration)."""
    from tl_leadterms import decompose

    out, computed = {}, {}
    for name in configs:
        computed[name] = 0
        cache = RESULTS / f"coverage_population_{name}_draws.pt"
        done = torch.load(cache) if cache.exists() else {}
        cfg = POPULATION_CONFIGS[name]
        windows, d_vocab = _story_windows(cfg)
        truth_n, n, h = cfg["truth_windows"], cfg["windows"], cfg["held_windows"]
        population = corpus_stats(windows[:truth_n], d_vocab=d_vocab, progress=False)
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
            maps = _paper_maps(model, cfg["layers"])
            truth = _scores(maps, population)
            library = leading_cosines(model, population)
            library = torch.tensor([library[n] for n in _map_names(cfg["layers"])])
            assert torch.allclose(truth, library.double(), atol=1e-9), (truth, library)
            trials = {"training": [_trial(maps, sample, d_vocab, cfg["blocks"], 1000 * m)]}
            trials["held_out"] = [
                _trial(maps, part, d_vocab, cfg["held_blocks"], 1000 * m + 1 + j)
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
    """Per configuration, case and weight (layers pooled): bias, corrected = 1, coverage."""
    result = {}
    for name, per_model in runs.items():
        cfg = POPULATION_CONFIGS[name]
        names = _map_names(cfg["layers"])
        cells = []
        for case in ("training", "held_out"):
            printed = all(all(r["printed"][case]["interval"]) for r in per_model)
            none = not any(any(r["printed"][case]["interval"]) for r in per_model)
            for weight in ("W_O", "V", "W", "P"):
                idx = [i for i, n in enumerate(names) if n.split(".")[0] == weight]
                raw, corr, at_one, cover, width = [], [], [], {lv: [] for lv in LEVELS}, []
                cover_b = {lv: [] for lv in LEVELS}
                cover_plain = {lv: [] for lv in LEVELS}  # the same draws, not expanded
                n_blocks = cfg["blocks" if case == "training" else "held_blocks"]
                for r in per_model:
                    for t in r["trials"][case]:
                        for i in idx:
                            truth, est = float(r["truth"][i]), float(t["estimate"][i])
                            raw.append(est - truth)
                            for level in LEVELS:
                                lo, hi, mid = (float(x[0]) for x in interval(
                                    t["draws"][:, i : i + 1], level, DEFAULT_METHOD,
                                    torch.tensor([est]), blocks=n_blocks))  # fmt: skip
                                cover[level].append(lo <= truth <= hi)
                                lo_p, hi_p, _ = (float(x[0]) for x in interval(
                                    t["draws"][:, i : i + 1], level, DEFAULT_METHOD,
                                    torch.tensor([est])))  # fmt: skip
                                cover_plain[level].append(lo_p <= truth <= hi_p)
                                lo_b, hi_b, _ = (float(x[0]) for x in interval(
                                    t["draws_b"][:, i : i + 1], level, DEFAULT_METHOD,
                                    torch.tensor([est])))  # fmt: skip
                                cover_b[level].append(lo_b <= truth <= hi_b)
                                if level == LEVELS[0]:
                                    corr.append(mid - truth)
                                    at_one.append(mid >= 1.0 - 1e-12)
                                    width.append(hi - lo)
                cells.append({
                    "case": case, "weight": weight, "trials": len(raw),
                    "mean_truth": statistics.mean(float(r["truth"][i]) for r in per_model
                                                  for i in idx),
                    "raw_minus_truth": statistics.mean(raw),
                    "corrected_minus_truth": statistics.mean(corr),
                    "corrected_at_1": statistics.mean(at_one),
                    "median_width_90": statistics.median(width),
                    "interval_printed": printed, "no_interval_printed": none,
                    "coverage": {str(lv): statistics.mean(cover[lv]) for lv in LEVELS},
                    "coverage_without_expansion": {str(lv): statistics.mean(cover_plain[lv])
                                                   for lv in LEVELS},
                    # the former draw of B blocks of B, without the expansion either
                    "coverage_drawing_B_blocks": {str(lv): statistics.mean(cover_b[lv])
                                                  for lv in LEVELS},
                    # over the samples (the layers of one sample are not independent trials)
                    "samples": len(per_model) * len(per_model[0]["trials"][case]),
                    "coverage_standard_error": {
                        str(lv): math.sqrt(max(statistics.mean(cover[lv]), 1e-12)
                                           * (1 - statistics.mean(cover[lv]))
                                           / (len(per_model) * len(per_model[0]["trials"][case])))
                        for lv in LEVELS},
                })  # fmt: skip
        result[name] = {
            "setup": {**cfg, "d_vocab": per_model[0].get("d_vocab", _story_windows(cfg)[1]),
                      "models": models,
                      "held_out_per_model": held_out, "resamples": RESAMPLES,
                      "method": DEFAULT_METHOD, "expanded": True},
            "cells": cells,
            "printed": per_model[0]["printed"],
            "seconds_per_model": statistics.median(r["seconds"] for r in per_model),
        }  # fmt: skip
    return result


def main_population(args) -> None:
    start = time.perf_counter()
    runs, computed = run_population(args.models, args.held_out, args.configs)
    summary = summarize_population(runs, args.models, args.held_out)
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    before = result.get("population", {})
    result["population"] = {**before, **summary}
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
            "| case | weight | trials | raw − truth | corrected − truth | corrected = 1 "
            "| interval printed | coverage 90% | coverage 95% | not expanded: 90% | 95% "
            "| drawing B: 90% | 95% |"
        )
        for c in s["cells"]:
            shown = "yes" if c["interval_printed"] else ("no" if c["no_interval_printed"]
                                                        else "mixed")  # fmt: skip
            print(
                f"| {c['case']} | {c['weight']} | {c['trials']} | {c['raw_minus_truth']:+.4f} "
                f"| {c['corrected_minus_truth']:+.4f} | {c['corrected_at_1']:.0%} | {shown} "
                f"| {c['coverage']['0.9']:.0%} | {c['coverage']['0.95']:.0%} "
                f"| {c['coverage_without_expansion']['0.9']:.0%} "
                f"| {c['coverage_without_expansion']['0.95']:.0%} "
                f"| {c['coverage_drawing_B_blocks']['0.9']:.0%} "
                f"| {c['coverage_drawing_B_blocks']['0.95']:.0%} |"
            )
