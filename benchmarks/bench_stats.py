"""Speed and memory of the corpus statistics, each against a baseline run in the same process.

Cases (all write JSON under benchmarks/results/):

* ``toy``: the paper's toy setting (d_vocab 3000, T 200, 256 sequences, float64). The fast
  two-pass statistics against the dense one-hot formulation of the paper's code
  (benchmarks/dense_baseline.py), stage by stage and in total; results are checked equal.
* ``throughput``: the Φ̄ and Q̄ accumulation against a bare ``index_add_`` of the same number
  of random updates into a table of the same size and dtype (the memory-bound limit).
* ``float32``: the summation error of float32 statistics against float64 (d_vocab 2000, T 128,
  20,000 sequences), accumulating in float32 and in float64.
* ``pythia``: d_vocab 50,304 restricted to the 20,000 most frequent ids, T 128, 20,000
  sequences, float32: wall time and peak resident memory, each accumulation dtype in a fresh
  subprocess.

Token windows are drawn from a Zipf law over the vocabulary (as word frequencies are).

    python benchmarks/bench_stats.py              # all cases
    python benchmarks/bench_stats.py --case toy   # one case
"""

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.dense_baseline import dense_baseline_stats  # noqa: E402
from tl_leadterms import corpus_stats  # noqa: E402
from tl_leadterms.stats.tokens import default_batch_size  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
STATS = ("B_bar", "Sigma_B", "Phi_bar", "G_bar", "Q_bar", "Delta")


def zipf_windows(n: int, n_ctx: int, d_vocab: int, seed: int = 0, a: float = 1.1) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, d_vocab + 1) ** a
    ids = rng.choice(d_vocab, size=(n, n_ctx + 1), p=p / p.sum())
    perm = rng.permutation(d_vocab)  # frequent ids are not the small ids
    return torch.from_numpy(perm[ids]).long()


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def machine() -> dict:
    return {
        "kernel_load_or_compile_s": warm_up(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "processor": platform.processor() or platform.machine(),
    }


def warm_up() -> float:
    """Load (or compile) the fused kernels once, outside every timing; returns the seconds."""
    start = time.perf_counter()
    for dtype in (torch.float64, torch.float32):
        corpus_stats(
            torch.randint(0, 7, (2, 5)), d_vocab=7, vocab=[1, 2], dtype=dtype, progress=False
        )
    return time.perf_counter() - start


def fast_stages(
    tokens: torch.Tensor, d_vocab: int, dtype=torch.float64, vocab=None, accumulate_dtype=None
) -> dict:
    """Stage timings of corpus_stats, plus the lazily built B̄ and Σ_B̄."""
    stats = corpus_stats(
        tokens,
        d_vocab=d_vocab,
        vocab=vocab,
        dtype=dtype,
        accumulate_dtype=accumulate_dtype,
        progress=False,
    )
    t: dict[str, float] = dict(stats.timings)
    _, t["B_bar"] = timed(lambda: stats.B_bar.shape)  # built, timed, then freed
    _, t["Sigma_B"] = timed(lambda: stats.Sigma_B)
    n_pairs = stats.n_sequences * stats.n_ctx * (stats.n_ctx + 1) // 2
    return {"stats": stats, "seconds": t, "n_pair_updates": n_pairs}


def bare_scatter_seconds(n_updates: int, table_size: int, batch: int, dtype) -> float:
    """Time ``index_add_`` of random (index, value) updates in batches of ``batch``."""
    g = torch.Generator().manual_seed(1)
    table = torch.zeros(table_size, dtype=dtype)
    idx = torch.randint(0, table_size, (batch,), generator=g)
    val = torch.rand(batch, generator=g, dtype=torch.float64).to(dtype)
    table.index_add_(0, idx, val)  # warm-up
    reps, rest = divmod(n_updates, batch)
    start = time.perf_counter()
    for _ in range(reps):
        table.index_add_(0, idx, val)
    if rest:
        table.index_add_(0, idx[:rest], val[:rest])
    return time.perf_counter() - start


def case_toy(args) -> dict:
    d_vocab, n_ctx, n = 3000, 200, 256
    tokens = zipf_windows(n, n_ctx, d_vocab)
    dense_t: dict[str, float] = {}
    dense, dense_total = timed(dense_baseline_stats, tokens, d_vocab, timings=dense_t)
    fast = fast_stages(tokens, d_vocab)
    stats, ft = fast["stats"], fast["seconds"]
    # end to end, as a user calls it (B̄ and Σ_B̄ are lazy: touch them)
    start = time.perf_counter()
    s2 = corpus_stats(tokens, d_vocab=d_vocab, progress=False)
    s2.B_bar, s2.Sigma_B  # noqa: B018
    fast_total = time.perf_counter() - start
    max_rel = {
        name: float((getattr(stats, name) - dense[name]).abs().max() / dense[name].abs().max())
        for name in STATS
    }
    stages = {
        "B_bar+Phi_bar (pass 1)": (
            dense_t["B_bar"] + dense_t["Phi_bar"],
            ft["pass1"] + ft["B_bar"],
        ),
        "Sigma_B": (dense_t["Sigma_B"], ft["Sigma_B"]),
        "G_bar": (dense_t["G_bar"], ft["G_bar"]),
        "Q_bar+Delta (pass 2)": (dense_t["Q_bar+Delta"], ft["pass2"]),
        "all six, end to end": (dense_total, fast_total),
    }
    return {
        "setting": {"d_vocab": d_vocab, "n_ctx": n_ctx, "n_sequences": n, "dtype": "float64"},
        "baseline": "dense one-hot formulation (benchmarks/dense_baseline.py), same process",
        "stages": {
            name: {"baseline_s": b, "fast_s": f, "speedup": b / f}
            for name, (b, f) in stages.items()
        },
        "max_rel_diff_vs_baseline": max_rel,
    }


def throughput(fast: dict, k: int, dtype) -> dict:
    n_up, n_ctx = fast["n_pair_updates"], fast["stats"].n_ctx
    pairs_per_batch = default_batch_size(n_ctx) * (n_ctx * (n_ctx + 1) // 2)
    bare = bare_scatter_seconds(n_up, k * k + 1, pairs_per_batch, dtype)
    out = {"n_updates": n_up, "table_entries": k * k + 1, "bare_index_add_s": bare}
    for name, key in (("Phi_bar (pass 1)", "pass1"), ("Q_bar (pass 2)", "pass2")):
        secs = fast["seconds"][key]
        out[name] = {
            "seconds": secs,
            "updates_per_s": n_up / secs,
            "fraction_of_bare_scatter": bare / secs,
        }
    out["bare_updates_per_s"] = n_up / bare
    return out


def case_throughput(args) -> dict:
    d_vocab, n_ctx, n = 3000, 200, 256
    fast = fast_stages(zipf_windows(n, n_ctx, d_vocab, seed=2), d_vocab)
    return {
        "setting": {"d_vocab": d_vocab, "n_ctx": n_ctx, "n_sequences": n, "dtype": "float64"},
        "baseline": "bare index_add_ of the same number of random updates, same table and batch",
        **throughput(fast, d_vocab, torch.float64),
    }


def case_pythia_child(args) -> dict:
    d_vocab, kept, n_ctx, n = 50_304, 20_000, 128, args.pythia_sequences
    tokens = zipf_windows(n, n_ctx, d_vocab, seed=3)
    warm = warm_up()
    acc = torch.float64 if args.accumulate == "float64" else torch.float32
    fast = fast_stages(tokens, d_vocab, dtype=torch.float32, vocab=kept, accumulate_dtype=acc)
    t = fast["seconds"]
    result = {
        "setting": {
            "d_vocab": d_vocab,
            "kept": kept,
            "n_ctx": n_ctx,
            "n_sequences": n,
            "dtype": "float32",
            "accumulate_dtype": args.accumulate,
        },
        "seconds": {**t, "total_six": sum(t.values())},
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "kernel_load_or_compile_s": warm,
        "bigram_nnz": int(fast["stats"].pair_codes.numel()),
    }
    if args.accumulate == "float32":
        result["throughput"] = throughput(fast, kept, torch.float32)
    return result


def case_pythia(args) -> dict:
    """Both accumulation dtypes, each in a fresh process (peak memory is per process)."""
    runs = {}
    for acc in ("float32", "float64"):
        cmd = [sys.executable, __file__, "--case", "pythia-child", "--accumulate", acc]
        cmd += ["--pythia-sequences", str(args.pythia_sequences)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        runs[f"accumulate_{acc}"] = json.loads(out.stdout)
    return runs


def rel_fro(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b).norm() / b.norm())


def case_float32(args) -> dict:
    """Summation error of float32 statistics against float64, both accumulation dtypes."""
    d_vocab, n_ctx, n = 2000, 128, 20_000
    tokens = zipf_windows(n, n_ctx, d_vocab, seed=4)
    exact = corpus_stats(tokens, d_vocab=d_vocab, progress=False)
    out = {"setting": {"d_vocab": d_vocab, "n_ctx": n_ctx, "n_sequences": n}}
    for acc in (torch.float32, torch.float64):
        s = corpus_stats(
            tokens, d_vocab=d_vocab, dtype=torch.float32, accumulate_dtype=acc, progress=False
        )
        t = s.timings
        out[f"accumulate_{str(acc)[6:]}"] = {
            "rel_frobenius_error_vs_float64": {
                name: rel_fro(getattr(s, name), getattr(exact, name))
                for name in ("Phi_bar", "G_bar", "Q_bar", "Delta")
            },
            "seconds": t,
        }
    return out


CASES = {
    "toy": case_toy,
    "throughput": case_throughput,
    "float32": case_float32,
    "pythia": case_pythia,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=[*CASES, "pythia-child", "all"], default="all")
    parser.add_argument("--pythia-sequences", type=int, default=20_000)
    parser.add_argument("--accumulate", choices=["float32", "float64"], default="float32")
    args = parser.parse_args()
    if args.case == "pythia-child":
        print(json.dumps(case_pythia_child(args)))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in CASES if args.case == "all" else [args.case]:
        result = {"case": name, "machine": machine(), **CASES[name](args)}
        path = RESULTS / f"stats_{name}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
