"""Token-specific (double-centred) covariance scores: factored form against a dense baseline.

One layer of the covariance protocol at ``n`` kept tokens (default 5,000), ``d_model`` 256,
8 heads of 32: the attention map ``E_pre·mean_h(W_Q^h W_K^hᵀ)·E_preᵀ`` against a dense
``Q̄``-like theory and two value maps against a dense ``Φ̄ᵀB̄ᵀ``-like one, each scored raw
(rows centred over features, the paper), token-specific (both covariances double-centred,
``H·C·H``) and with the common share. Inputs carry a component every token shares (a common
mean row on the model side and on the theory side), as real models and statistics do.

* ``factored``: :func:`~tl_leadterms.analyses.covariance.algebra.theory_terms` (once per
  statistics) and ``attention_scores``/``value_scores``: no ``n × n`` model matrix, the theory's
  ``‖H·C·H‖²`` in the same blockwise pass as today's ``‖C‖²``.
* ``dense``: written straight from the definition: the ``n × n`` attention map, both ``n × n``
  covariances per map, ``H·C·H`` as two products with ``H``, Frobenius cosines.

Both run in this process, alternating, best of ``--reps``; the scores are checked equal. The
same factored call is also timed in float32 (the ``dtype=`` option of
``covariance_similarity``), against float64, to measure what that option buys.

    python benchmarks/bench_token_centred.py [--n 5000] [--reps 2]
"""

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tl_leadterms.analyses.covariance import algebra  # noqa: E402
from tl_leadterms.atomic import write_text  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
D, H, D_HEAD = 256, 8, 32


def inputs(n: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    shared = 3.0 * randn(1, D)  # every token's embedding shares this direction
    E_pre = randn(n, D) + shared
    return {
        "E_pre": E_pre,
        "E_post": E_pre + 0.3 * randn(n, D),
        "E_attn": E_pre + 0.2 * randn(n, D),
        "W_Q": randn(H, D, D_HEAD) / D**0.5,
        "W_K": randn(H, D, D_HEAD) / D**0.5,
        "T_att": randn(n, n) + 2.0 * randn(1, n),  # a common row on the theory side
        "T_val": randn(n, n) * torch.rand(n, 1, generator=g, dtype=torch.float64) + randn(1, n),
    }


def _centre(C: torch.Tensor) -> torch.Tensor:
    n = C.shape[0]
    Hm = torch.eye(n, dtype=C.dtype) - 1.0 / n
    return Hm @ C @ Hm


def _cov(M: torch.Tensor, scale_rows: bool) -> torch.Tensor:
    if scale_rows:
        norms = M.norm(dim=1, keepdim=True)
        M = torch.where(norms > 0, M / norms, 0.0)
    Mc = M - M.mean(dim=1, keepdim=True)
    return Mc @ Mc.T


def _three(C_M: torch.Tensor, C_T: torch.Tensor, C_Tc: torch.Tensor) -> list[float]:
    C_Mc = _centre(C_M)
    raw = float((C_M * C_T).sum() / (C_M.norm() * C_T.norm()))
    specific = float((C_Mc * C_Tc).sum() / (C_Mc.norm() * C_Tc.norm()))
    share = 1.0 - float((C_Mc * C_Tc).sum() / (C_M * C_T).sum())
    return [raw, specific, share]


def dense(x: dict) -> tuple[dict, list[float]]:
    start = time.perf_counter()
    C_att, C_val = _cov(x["T_att"], True), _cov(x["T_val"], True)
    C_att_c, C_val_c = _centre(C_att), _centre(C_val)
    times = {"theory_s": time.perf_counter() - start}
    start = time.perf_counter()
    W = torch.einsum("hdk,hek->de", x["W_Q"], x["W_K"]) / H
    A = x["E_pre"] @ W @ x["E_pre"].T  # the k × k product
    scores = _three(_cov(A, False), C_att, C_att_c)
    del A
    for name in ("E_post", "E_attn"):
        scores += _three(_cov(x[name], False), C_val, C_val_c)
    times["layer_s"] = time.perf_counter() - start
    return times, scores


def factored(x: dict, dtype: torch.dtype = torch.float64) -> tuple[dict, list[float]]:
    x = {k: v.to(dtype) for k, v in x.items()}
    start = time.perf_counter()
    att_terms = algebra.theory_terms(x["T_att"], dtype)
    val_terms = algebra.theory_terms(x["T_val"], dtype)
    times = {"theory_s": time.perf_counter() - start}
    start = time.perf_counter()
    att = algebra.attention_scores(x["E_pre"], x["W_Q"], x["W_K"], x["T_att"], att_terms,
                                   False, False, dtype)  # fmt: skip
    val = algebra.value_scores([x["E_post"], x["E_attn"]], x["T_val"], val_terms, False, dtype)
    times["layer_s"] = time.perf_counter() - start
    scores = [v for s in att + val for v in (s.raw, s.specific, s.common_share)]
    return times, scores


def _best(runs: list[dict]) -> dict:
    return {k: min(r[k] for r in runs) for k in runs[0] if k.endswith("_s")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    x = inputs(args.n)
    runs: dict[str, list[dict]] = {"factored": [], "dense": [], "factored_float32": []}
    scores: dict[str, list[float]] = {}
    methods = [("factored", factored), ("dense", dense),
               ("factored_float32", lambda x: factored(x, torch.float32))]  # fmt: skip
    with torch.no_grad():
        for _ in range(args.reps):  # alternate: the machine is shared
            for name, fn in methods:
                times, scores[name] = fn(x)
                runs[name].append(times)
                print(name, times, flush=True)
    best = {name: _best(r) for name, r in runs.items()}
    diff = max(abs(a - b) for a, b in zip(scores["factored"], scores["dense"], strict=True))
    diff32 = max(abs(a - b) for a, b in zip(scores["factored_float32"], scores["dense"],
                                            strict=True))  # fmt: skip
    names = [f"{m}.{s}" for m in ("attention", "value_post", "value_attn")
             for s in ("raw", "specific", "common_share")]  # fmt: skip
    result = {
        "case": "token_centred",
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "processor": platform.processor() or platform.machine(),
        },
        "setting": {
            "n_tokens": args.n,
            "d_model": D,
            "n_heads": H,
            "d_head": D_HEAD,
            "normalize": "theory",
            "value_map": "post",
            "reps": args.reps,
        },
        "best_seconds": best,
        "speedup_layer (dense / factored, float64)": best["dense"]["layer_s"]
        / best["factored"]["layer_s"],
        "speedup_theory (dense / factored, once per statistics)": best["dense"]["theory_s"]
        / best["factored"]["theory_s"],
        "float32_over_float64_time": {
            k: best["factored_float32"][k] / best["factored"][k] for k in ("theory_s", "layer_s")
        },
        "scores_factored": dict(zip(names, scores["factored"], strict=True)),
        "max_abs_difference_factored_vs_dense": diff,
        "max_abs_difference_float32_vs_dense": diff32,
        "note": "Best of the alternating in-process runs on a shared 2-core machine. Both forms "
        "compute raw, token-specific and common share of one layer's three maps; the dense "
        "form builds the k × k attention map and every k × k covariance, the factored form "
        "neither (the theory's terms are computed once per statistics in both).",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_text(RESULTS / "token_centred.json", json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
