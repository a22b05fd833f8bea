"""decompose and attention_agreement at a real model's size, against the previous algorithms.

The model is a randomly initialised HookedTransformer shaped like a 135M-parameter Llama-style
model (30 layers, d_model 576, 9 query heads sharing 3 key/value heads, d_head 64, rotary,
RMSNorm, gated MLP, d_vocab 49,152); the statistics are of random Zipf windows restricted to
the k most frequent tokens. Both sides run in this process, one after the other:

* ``decompose`` (per head, every layer, V·W_O and W): the shared-factor path (each basis map
  projected once through the outer factors ``L``/``R`` of the model, every head then costs
  ``O(d_model²·d_head)``) against the per-head factored path (``⟨A_h B_h, T⟩`` as
  ``Σ (A_hᵀT) ⊙ B_h``, ``O(k²·d_head)`` per head and basis map), which is what ``decompose``
  did before. The rows are checked equal.
* ``attention_agreement`` on ``n_windows`` windows of 128 tokens, scale fitted per head: the
  layer-at-once scorer (:mod:`tl_leadterms.analyses.attention.fit`: a scan a decade apart,
  then Newton steps on the closed-form slope of the divergence in ``log c``) against the
  previous per-head loop (a log grid of 37 points, a golden-section search, ``O(n²)`` rank
  comparisons per row; kept below as the baseline). The rank correlations are checked equal,
  and the fitted divergences no worse than the baseline's (``max_js_excess_over_baseline``).

    python benchmarks/bench_real_sizes.py [--k 5000] [--layers 30] [--windows 8] [--out FILE]
"""

import argparse
import json
import math
import platform
import resource
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformer_lens import HookedTransformer, HookedTransformerConfig  # noqa: E402
from transformer_lens.utilities import get_act_name  # noqa: E402

from tl_leadterms import attention_agreement, corpus_stats, decompose, to_paper  # noqa: E402
from tl_leadterms.adapters import factored  # noqa: E402
from tl_leadterms.analyses.attention.compute import predicted_scores, scaled_softmax  # noqa: E402
from tl_leadterms.analyses.decompose.fit import BasisCache, fit_map  # noqa: E402
from tl_leadterms.theory import term  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def model_and_stats(k: int, n_layers: int, seed: int = 0):
    cfg = HookedTransformerConfig(
        d_model=576, d_head=64, n_heads=9, n_key_value_heads=3, n_layers=n_layers, n_ctx=128,
        d_vocab=49152, d_mlp=1536, act_fn="silu", gated_mlp=True, normalization_type="RMS",
        positional_embedding_type="rotary", rotary_dim=64, seed=seed,
    )  # fmt: skip
    model = HookedTransformer(cfg)
    model.eval()
    g = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, cfg.d_vocab + 1, dtype=torch.float64)
    zipf = 1.0 / ranks**1.1
    windows = torch.multinomial(zipf / zipf.sum(), 2000 * 129, replacement=True, generator=g)
    windows = windows.reshape(2000, 129)
    stats = corpus_stats(windows, d_vocab=cfg.d_vocab, vocab=k, progress=False, dtype=torch.float64)
    return model, stats, windows


def old_decompose(pw, stats, layers):
    """The per-head factored path: fit_map on each layer's [h, k, k] FactoredMatrix."""
    cache, kept, rows = BasisCache.of(stats), stats.kept, []
    for weight, maps in (("V·W_O", pw.V), ("W", pw.W)):
        t = term(weight)
        for layer in layers:
            M = factored.restrict(maps[layer], kept, kept)
            rows += [(weight, layer, h, f.cosine) for h, f in enumerate(fit_map(M, t, cache))]
    return rows


# ---- the previous attention_agreement scorer (per head), kept as the baseline --------------
_GRID = torch.logspace(-3, 6, 37)


def _old_js_divergence(p, q):
    m = 0.5 * (p + q)

    def kl(a, b):
        return torch.where(a > 0, a * (a.clamp(min=1e-300).log() - b.clamp(min=1e-300).log()), 0.0)

    return 0.5 * (kl(p, m) + kl(q, m)).sum(-1)


def _old_ranks(x, valid):
    out = torch.empty(x.shape, dtype=torch.float64)
    rx, rv, flat = (
        x.reshape(-1, x.shape[-1]),
        valid.reshape(-1, x.shape[-1]),
        out.view(-1, x.shape[-1]),
    )
    for start in range(0, rx.shape[0], 256):
        a, v = rx[start : start + 256], rv[start : start + 256]
        other = v[:, None, :]
        below = ((a[:, None, :] < a[:, :, None]) & other).sum(-1)
        equal = ((a[:, None, :] == a[:, :, None]) & other).sum(-1)
        flat[start : start + 256] = below + (equal - 1) / 2
    return out


def _old_rank(actual, scores):
    a, s = actual[..., 1:, :], scores[..., 1:, :]
    valid = torch.isfinite(s)
    n = valid.sum(-1, keepdim=True).to(torch.float64)
    ra = torch.where(valid, _old_ranks(a, valid) - (n - 1) / 2, 0.0)
    rs = torch.where(valid, _old_ranks(s, valid) - (n - 1) / 2, 0.0)
    num, den = (ra * rs).sum(-1), (ra.square().sum(-1) * rs.square().sum(-1)).sqrt()
    rho = torch.where(
        (n.squeeze(-1) >= 3) & (den > 0), num / torch.where(den > 0, den, 1.0), math.nan
    )
    return float(rho[~rho.isnan()].mean())


def _old_js(actual, scores, c):
    predicted = scaled_softmax(c, scores)
    return float(_old_js_divergence(actual[..., 1:, :], predicted[..., 1:, :]).mean())


def _old_fit(actual, scores):
    losses = [_old_js(actual, scores, float(c)) for c in _GRID]
    best = int(torch.tensor(losses).argmin())
    low = math.log(float(_GRID[max(best - 1, 0)]))
    high = math.log(float(_GRID[min(best + 1, len(_GRID) - 1)]))
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(30):
        a, b = high - golden * (high - low), low + golden * (high - low)
        if _old_js(actual, scores, math.exp(a)) < _old_js(actual, scores, math.exp(b)):
            high = b
        else:
            low = a
    return math.exp(0.5 * (low + high))


@torch.no_grad()
def old_agreement(model, stats, tokens, layers):
    names = {get_act_name("pattern", layer) for layer in layers}
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
    scores = predicted_scores(stats, tokens).to(torch.float64)
    rows = []
    for layer in layers:
        pattern = cache[get_act_name("pattern", layer)].to(torch.float64)
        for head in range(pattern.shape[1]):
            actual = pattern[:, head]
            c = _old_fit(actual, scores)
            rows.append((layer, head, _old_js(actual, scores, c), _old_rank(actual, scores)))
    return rows


CPU_S: dict[str, float] = {}  # process CPU time per timed call: steadier on a shared machine


def timed(fn, name: str = ""):
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    CPU_S[name] = time.process_time() - cpu
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=5000)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument(
        "--skip-baseline-layers",
        type=int,
        default=0,
        help="time the baselines on only this many layers (0 = all) and scale",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "real_sizes.json")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    args = parser.parse_args()
    torch.manual_seed(0)
    (model, stats, windows), t_setup = timed(lambda: model_and_stats(args.k, args.layers))
    if args.threads:  # after the statistics, which set their own
        torch.set_num_threads(args.threads)
    layers = list(range(args.layers))
    base_layers = layers[: args.skip_baseline_layers] if args.skip_baseline_layers else layers
    scale = len(layers) / len(base_layers)

    new, t_new = timed(lambda: decompose(model, stats, weights=("V", "W"), per_head=True))
    pw = to_paper(model)
    old, t_old = timed(lambda: old_decompose(pw, stats, base_layers))
    by_key = {(r["weight"], r["layer"], r["head"]): r["cosine"] for r in new.rows}
    worst = max(abs(by_key[(w, lay, h)] - c) / max(abs(c), 1e-12) for w, lay, h, c in old)
    tokens = windows[: args.windows, :128]
    agree, t_agree = timed(
        lambda: attention_agreement(model, stats, tokens, progress=False), "agree"
    )
    baseline, t_base = timed(lambda: old_agreement(model, stats, tokens, base_layers), "base")
    rho = {(r["layer"], r["head"]): r["rank_correlation"] for r in agree.rows}
    rho_diff = max(abs(rho[(lay, h)] - r) for lay, h, _, r in baseline)
    js = {(r["layer"], r["head"]): r["js_divergence"] for r in agree.rows}
    js_excess = max(js[(lay, h)] - old_js for lay, h, old_js, _ in baseline)
    result = {
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "threads": torch.get_num_threads()},
        "model": "random Llama-style: 30 layers, d_model 576, 9 heads / 3 kv heads, d_vocab 49152",
        "k": args.k, "layers": args.layers, "baseline_layers": len(base_layers),
        "setup_s": t_setup,
        "decompose": {"shared_factor_s": t_new, "per_head_factored_s": t_old * scale,
                      "speedup": t_old * scale / t_new, "max_relative_cosine_difference": worst},
        "attention_agreement": {"windows": args.windows, "positions": 128,
                                "layer_at_once_s": t_agree, "per_head_loop_s": t_base * scale,
                                "speedup": t_base * scale / t_agree,
                                "cpu_speedup": CPU_S["base"] * scale / CPU_S["agree"],
                                "max_rank_correlation_difference": rho_diff,
                                "max_js_excess_over_baseline": js_excess,
                                "scales_at_bound": sum(r["scale_at_bound"] for r in agree.rows)},
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
