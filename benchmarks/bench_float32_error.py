"""How the float32 summation error grows with the corpus: relative Frobenius error of Φ̄, Ḡ, Q̄, Δ
against float64, summing in float32 (``accumulate_dtype=torch.float32``) and in float64 (the
default for float32 statistics), over a growing number of windows.

Setting: d_vocab 2000, T 128, Zipf token windows (benchmarks/bench_stats.py's corpus).

    python benchmarks/bench_float32_error.py     # writes benchmarks/results/float32_error.json
"""

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_stats import machine, zipf_windows  # noqa: E402
from tl_leadterms import corpus_stats  # noqa: E402
from tl_leadterms.atomic import write_text  # noqa: E402

NAMES = ("Phi_bar", "G_bar", "Q_bar", "Delta")


def errors(stats, ref) -> dict[str, float]:
    return {
        n: float((getattr(stats, n).double() - getattr(ref, n)).norm() / getattr(ref, n).norm())
        for n in NAMES
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--windows", type=int, nargs="+", default=[2500, 5000, 10000, 20000, 50000, 100000]
    )
    parser.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results" / "float32_error.json")
    )
    args = parser.parse_args()
    d_vocab, n_ctx = 2000, 128
    tokens = zipf_windows(max(args.windows), n_ctx, d_vocab, seed=0)
    rows = []
    for n in args.windows:
        part = tokens[:n]
        ref = corpus_stats(part, d_vocab=d_vocab, progress=False)
        f32 = dict(dtype=torch.float32, progress=False)
        summed32 = corpus_stats(part, d_vocab=d_vocab, accumulate_dtype=torch.float32, **f32)
        summed64 = corpus_stats(part, d_vocab=d_vocab, **f32)
        row = {"windows": n, "accumulate_float32": errors(summed32, ref),
               "accumulate_float64": errors(summed64, ref)}  # fmt: skip
        rows.append(row)
        worst32 = max(row["accumulate_float32"].values())
        worst64 = max(row["accumulate_float64"].values())
        print(f"{n:7d} windows: float32 sums {worst32:.2e}, float64 sums {worst64:.2e}", flush=True)
    result = {"machine": machine(), "d_vocab": d_vocab, "n_ctx": n_ctx, "rows": rows}
    write_text(args.out, json.dumps(result, indent=1) + "\n", parents=True)


if __name__ == "__main__":
    main()
