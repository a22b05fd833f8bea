"""The memory plan of ``corpus_stats`` against the measured peak resident memory.

Each setting runs in a fresh subprocess: it builds Zipf token windows, records its resident
memory (RSS) just before ``corpus_stats`` (Python, torch, numba and the tokens: what the plan
does not count), computes the statistics, and reports its peak RSS (``ru_maxrss``). The plan's
estimate is compared with the peak minus that baseline. Settings: the full vocabulary and a
restricted one, float32 and float64, all statistics and B̄/Φ̄ only, Φ̄ offloaded to disk
during pass two or not.

    python benchmarks/bench_memory.py            # writes benchmarks/results/memory_plan.json
    python benchmarks/bench_memory.py --k 4000   # smaller tables
"""

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

CHILD = r"""
import json, resource, sys
import numpy as np, torch
sys.path.insert(0, {root!r})
from tl_leadterms import corpus_stats
from tl_leadterms.stats.driver import resolve_want
from tl_leadterms.stats.memory import plan_memory, rss_bytes
d_vocab, k, n, t, dtype, acc, want, offload = {args!r}
import tempfile
folder = tempfile.mkdtemp() if offload else None
rng = np.random.default_rng(0)
p = 1.0 / np.arange(1, d_vocab + 1) ** 1.1
ids = rng.choice(d_vocab, size=(n, t + 1), p=p / p.sum())
tokens = torch.from_numpy(rng.permutation(d_vocab)[ids]).long()
dtype, acc = getattr(torch, dtype), getattr(torch, acc)
want = tuple(want) if want else None
vocab = None if k >= d_vocab else k
corpus_stats(tokens[:4] % 50, 50, dtype=dtype, accumulate_dtype=acc,
             progress=False)  # compile and load the kernels first, with tiny tables
base = rss_bytes()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
stats = corpus_stats(tokens, d_vocab, vocab=vocab, dtype=dtype, accumulate_dtype=acc,
                     want=want, progress=False, check_memory=False, offload=folder)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
plan = plan_memory(d_vocab, k=stats.k, dtype=dtype, accumulate_dtype=acc,
                   want=resolve_want(want), n_positions=n * t, offload=bool(offload))
print(json.dumps({{"base": base, "peak": peak, "peak_before": before,
                   "estimate": plan.peak, "stages": plan.stages}}))
"""


def run(root: Path, args: tuple) -> dict:
    code = CHILD.format(root=str(root), args=args)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"setting {args} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=8000, help="kept tokens / full vocabulary")
    parser.add_argument("--n", type=int, default=2000, help="windows")
    parser.add_argument("--t", type=int, default=64, help="window length T")
    parser.add_argument("--out", default=str(RESULTS / "memory_plan.json"))
    args = parser.parse_args()
    k = args.k
    settings = [
        ("full vocabulary, float64", (k, k, "float64", "float64", None, False)),
        ("full vocabulary, float32", (k, k, "float32", "float64", None, False)),
        ("restricted 50,304 -> k, float64", (50_304, k, "float64", "float64", None, False)),
        ("restricted 50,304 -> k, float32", (50_304, k, "float32", "float64", None, False)),
        ("full vocabulary, float32, B̄ Φ̄ only",
         (k, k, "float32", "float32", ["B_bar", "Phi_bar"], False)),
        ("restricted 50,304 -> k, float32, Φ̄ offloaded",
         (50_304, k, "float32", "float64", None, True)),
        ("full vocabulary, float64, Φ̄ offloaded", (k, k, "float64", "float64", None, True)),
    ]  # fmt: skip
    rows = []
    for name, (d_vocab, kept, dtype, acc, want, offload) in settings:
        found = run(ROOT, (d_vocab, kept, args.n, args.t, dtype, acc, want, offload))
        used = found["peak"] - found["base"]
        rows.append(
            {
                "setting": name,
                "d_vocab": d_vocab,
                "k": kept,
                "dtype": dtype,
                "accumulate_dtype": acc,
                "want": want or "all",
                "offload": offload,
                "estimate_bytes": found["estimate"],
                "measured_peak_above_baseline_bytes": used,
                "baseline_rss_bytes": found["base"],
                "estimate_over_measured": found["estimate"] / used,
                "stages": found["stages"],
            }
        )
        print(f"{name:40s} estimate {found['estimate'] / 2**30:6.2f} GiB  measured "
              f"{used / 2**30:6.2f} GiB  ratio {found['estimate'] / used:5.2f}")  # fmt: skip
    result = {"n_windows": args.n, "n_ctx": args.t, "settings": rows}
    sys.path.insert(0, str(ROOT))
    from tl_leadterms.atomic import write_text

    write_text(args.out, json.dumps(result, indent=1) + "\n", parents=True)
    print(f"wrote {args.out}; peak RSS of this driver {resource.getrusage(0).ru_maxrss} kB")


if __name__ == "__main__":
    main()
