"""The permutation null and the bootstrap of ``decompose`` against their floor, in the same run.

The floor of one null draw is the bare fused gather-dot: one ``k × k`` float64 map relabelled by
a permutation (an index computed beforehand) and met by one dot product, ``⟨M[π][:, π], T⟩``; no
analysis can score a relabelled map for less. For each model:

* ``null_draw_s``: ``decompose``'s extra cost with ``null=R`` over the same call without it, per
  draw and per scored map (``W_O``, every ``V``/``V·W_O`` and ``W``; ``P`` has no token null);
* ``resample_s``: the extra cost with ``ci=0.95, bootstrap=R``, per resample and per scored map
  (a resample recounts pass two with its own Ḡ and rebuilds the targets, then scores every map);
* ``resample_statistics_s``: one resample's statistics alone, as an analysis computes them
  (``Bootstrap.resamples``: one thread, nothing kept; pass one's counts combined, Ḡ, pass two
  rerun with that Ḡ), per resample, and its share of the above;
* ``atlas_reuse_s``: ``head_atlas`` on the same blocks and spec right after ``decompose`` (its
  resamples are read, not recomputed: it pays for its own null and the fits only);
* the demo's call ``decompose(per_head=True, null=99, ci=0.95)`` in CPU seconds;
* ``reuse``: on the real-size model, three analyses of the same draws (:func:`reuse_case`):
  what keeping the resamples' pass two costs the second and saves the third, against the
  same three with the resample cache off; the third calls' intervals must be equal.

Models: the demo's (the paper's 3-layer model on the quick preset's corpus: |V| = 500 words,
T = 32, 64 windows, 8 GD steps at η = 2; scored, as the demo's interval is, against 1,024
held-out windows in 16 blocks) and the real-size model of
``benchmarks/bench_real_sizes.py`` (random Llama-style, d_model 576, 9 heads / 3 KV heads; its
own Zipf windows in blocks), with ``--k`` kept tokens and ``--layers`` layers (a null draw of a
model with embeddings projects the relabelled target through the model's outer factors, an
``O(k²·d_model)`` product, so it is not a gather; the ratio says how far it is from one).

    python benchmarks/bench_null_boot.py [--k 1000] [--layers 2] [--draws 4] [--out FILE]
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_real_sizes import model_and_stats  # noqa: E402
from tl_leadterms import decompose, head_atlas, make_windows, paper_model, train  # noqa: E402
from tl_leadterms.atomic import write_text  # noqa: E402
from tl_leadterms.data import generate_stories, train_word_tokenizer  # noqa: E402
from tl_leadterms.results.bootstrap import Bootstrap, BootstrapSpec  # noqa: E402
from tl_leadterms.stats.blocks import block_stats  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
GOAL_RATIO = 2.0


def cpu(fn, repeats: int = 1):
    """``(result, CPU seconds)``: the least of ``repeats`` runs (other load only adds time)."""
    best = None
    for _ in range(repeats):
        start = time.process_time()
        out = fn()
        seconds = time.process_time() - start
        best = seconds if best is None else min(best, seconds)
    return out, best


def floor_draw_s(k: int, draws: int, repeats: int = 5) -> float:
    """CPU seconds of one bare fused gather-dot on a ``k × k`` float64 map: ``draws`` draws
    (their flat indices computed beforehand) timed together, the least of ``repeats`` loops,
    per draw (a single sub-millisecond draw is too short to time alone)."""
    g = torch.Generator().manual_seed(0)
    M = torch.randn(k * k, dtype=torch.float64, generator=g)
    T = torch.randn(k * k, dtype=torch.float64, generator=g)
    indices = []
    for _ in range(draws):
        p = torch.randperm(k, generator=g)
        indices.append((p[:, None] * k + p[None, :]).reshape(-1))

    def loop():
        for index in indices:
            torch.dot(M.take(index), T)

    return cpu(loop, repeats=repeats)[1] / draws


def floor_projection_s(k: int, d: int, draws: int) -> float:
    """CPU seconds of one bare relabelled projection ``L[π]ᵀ·T·R[:, π]`` (float64, ``[k, d]``
    outer factors): what a null draw of a model with embeddings must form at least once (one
    ``O(k²·d)`` product), whatever it then scores against it (the median draw)."""
    g = torch.Generator().manual_seed(1)
    T = torch.randn(k, k, dtype=torch.float64, generator=g)
    left = torch.randn(k, d, dtype=torch.float64, generator=g)
    right = torch.randn(d, k, dtype=torch.float64, generator=g)
    times = []
    for _ in range(draws):
        p = torch.randperm(k, generator=g)
        _, seconds = cpu(lambda p=p: left[p].T @ (T @ right[:, p].T))
        times.append(seconds)
    return sorted(times)[len(times) // 2]


def demo_case():
    stories = generate_stories(1500, seed=0)  # the quick preset of tl-leadterms demo
    tokenizer = train_word_tokenizer(stories, 500)
    every = make_windows(stories, n_ctx=32, tokenizer=tokenizer)
    windows = every[:64]
    # the demo's held-out reading (1,024 windows in 16 blocks): intervals are for statistics
    # other than the training windows (on those, ci= resamples nothing: the score is exact)
    blocks = block_stats(every[64:][-1024:], d_vocab=len(tokenizer), blocks=16, progress=False)
    model = paper_model(d_vocab=len(tokenizer), n_ctx=32, n_layers=3)
    train(model, windows, lr=2.0, steps=8, progress=False)
    return model, blocks, {"weights": None}, windows[:8, :32]


def real_case(k: int, layers: int):
    model, _, windows = model_and_stats(k, layers)
    blocks = block_stats(windows[:400], d_vocab=model.cfg.d_vocab, blocks=4, vocab=k,
                         progress=False)  # fmt: skip
    return model, blocks, {"weights": ("V", "W")}, None


def measure(model, blocks, options: dict, tokens, draws: int, demo_call: bool) -> dict:
    kw = {"per_head": True, "progress": False, **options}
    plain, t_plain = cpu(lambda: decompose(model, blocks, **kw), repeats=3)
    maps = len({(r["weight"], r["layer"]) for r in plain.rows if r["weight"] != "P"})
    _, t_null = cpu(lambda: decompose(model, blocks, null=draws, **kw), repeats=2)
    _, t_ci = cpu(lambda: decompose(model, blocks, ci=0.95, bootstrap=draws, **kw))
    _, t_atlas = cpu(lambda: head_atlas(model, blocks, tokens, null=None, bootstrap=draws))
    k = blocks.full().k
    floor = floor_draw_s(k, 20)
    null_draw = (t_null - t_plain) / (draws * maps)
    resample = (t_ci - t_plain) / (draws * maps)
    # as an analysis computes them (one thread, nothing kept), other draws than the ones above
    spec = BootstrapSpec(resamples=draws, seed=1)
    _, t_recount = cpu(lambda: [None for _ in Bootstrap(blocks, 0.95, spec).resamples()])
    out = {
        "k": k, "scored_maps": maps, "draws": draws, "floor_gather_dot_s": floor,
        "decompose_plain_s": t_plain, "null_draw_s": null_draw, "resample_s": resample,
        "null_ratio_to_floor": null_draw / floor, "resample_ratio_to_floor": resample / floor,
        "resample_statistics_s": t_recount / draws,
        "resample_statistics_share": t_recount / (t_ci - t_plain),
        "atlas_after_decompose_s": t_atlas, "goal_ratio": GOAL_RATIO,
    }  # fmt: skip
    if hasattr(model.cfg, "d_model") and options["weights"] is not None:  # embeddings: a GEMM
        projection = floor_projection_s(k, model.cfg.d_model, 5)
        out["floor_projection_s"] = projection
        out["null_ratio_to_projection_floor"] = null_draw / projection
        out["resample_ratio_to_projection_floor"] = resample / projection
    if demo_call:
        _, t_demo = cpu(lambda: decompose(model, blocks, null=99, ci=0.95, **kw))
        out["demo_call_null99_ci95_s"] = t_demo
    return out


def reuse_case(k: int, layers: int, draws: int) -> dict:
    """Three analyses on the same blocks and draws: ``decompose(weights=["V"])`` (asks first:
    nothing kept), ``weights=["W"]`` (asks second: keeps the resamples' pass two) and
    ``weights=["W"]`` again with the score memo dropped (reads the kept pass two), against the
    same three with the resample cache off (``RESAMPLE_CACHE_BYTES = 0``); the third calls'
    intervals must be equal."""
    from tl_leadterms.results import bootstrap

    out, rows = {}, {}
    default = bootstrap.RESAMPLE_CACHE_BYTES
    for label, budget in (("kept", default), ("recomputed", 0)):
        bootstrap.RESAMPLE_CACHE_BYTES = budget
        model, blocks, _, _ = real_case(k, layers)
        kw = {"per_head": True, "progress": False, "ci": 0.95, "bootstrap": draws}
        cpu(lambda: decompose(model, blocks, weights=["V"], **kw))  # noqa: B023
        _, out[f"second_analysis_{label}_s"] = cpu(
            lambda: decompose(model, blocks, weights=["W"], **kw)  # noqa: B023
        )
        bootstrap._MEMOS.pop(blocks, None)  # the scores forgotten: only the resamples can help
        third, out[f"third_analysis_{label}_s"] = cpu(
            lambda: decompose(model, blocks, weights=["W"], **kw)  # noqa: B023
        )
        rows[label] = [(r.get("lo"), r.get("hi"), r.get("corrected")) for r in third.rows]
    bootstrap.RESAMPLE_CACHE_BYTES = default
    out["intervals_equal"] = str(rows["kept"]) == str(rows["recomputed"])  # NaN reads equal
    out["keeping_cost_per_resample_s"] = (
        out["second_analysis_kept_s"] - out["second_analysis_recomputed_s"]
    ) / draws
    out["saved_per_resample_s"] = (
        out["third_analysis_recomputed_s"] - out["third_analysis_kept_s"]
    ) / draws
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--draws", type=int, default=4, help="null draws / resamples (real size)")
    parser.add_argument("--demo-draws", type=int, default=99)
    parser.add_argument("--out", type=Path, default=RESULTS / "null_boot.json")
    args = parser.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    load = os.getloadavg()
    model, blocks, options, tokens = demo_case()
    demo = measure(model, blocks, options, tokens, args.demo_draws, demo_call=True)
    model, blocks, options, tokens = real_case(args.k, args.layers)
    real = measure(model, blocks, options, tokens, args.draws, demo_call=False)
    reuse = reuse_case(args.k, args.layers, args.draws)
    result = {
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "threads": torch.get_num_threads(), "load_average_before": load,
                    "load_average_after": os.getloadavg()},
        "demo_model": demo,
        "real_size_model": {"layers": args.layers, **real},
        "reuse": reuse,
    }  # fmt: skip
    write_text(args.out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
