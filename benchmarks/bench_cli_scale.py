"""``tl-leadterms stats`` at Pythia scale: peak memory must not grow with the number of windows.

Writes Zipf token windows (d_vocab 50,304, T 128) to a ``.npy`` file, runs
``tl-leadterms stats ids.npy --d-vocab 50304 --keep K --dtype float32`` in a fresh subprocess
for each number of windows, and records its peak RSS, wall time and file size; then
``tl-leadterms top`` on the file (bigram and context), with its peak RSS.

    python benchmarks/bench_cli_scale.py --windows 20000 200000 --keep 20000
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tl_leadterms.atomic import write_text  # noqa: E402

D_VOCAB, N_CTX = 50_304, 128


def windows(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, D_VOCAB + 1) ** 1.1
    ids = rng.choice(D_VOCAB, size=(n, N_CTX + 1), p=p / p.sum())
    return rng.permutation(D_VOCAB).astype(np.uint16)[ids]


def run(argv: list[str]) -> dict:
    """Run the CLI in a fresh process; its peak RSS (the largest child's so far)."""
    start = time.perf_counter()
    command = [sys.executable, "-m", "tl_leadterms.cli", *argv]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{argv} failed:\n{proc.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {"seconds": seconds, "children_peak_rss_bytes": peak, "stdout": proc.stdout[-500:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--keep", type=int, default=20_000)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cli_scale.json"))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = windows(max(args.windows))
        for n in sorted(args.windows):  # ascending: RUSAGE_CHILDREN is a running maximum
            ids, out = Path(tmp) / f"ids{n}.npy", Path(tmp) / f"s{n}.safetensors"
            np.save(ids, data[:n])
            found = run(["stats", str(ids), "--d-vocab", str(D_VOCAB), "--keep", str(args.keep),
                         "--dtype", "float32", "-o", str(out), "--quiet"])  # fmt: skip
            row = {"windows": n, "stats": found, "file_bytes": out.stat().st_size}
            peak, size = found["children_peak_rss_bytes"] / 2**30, row["file_bytes"] / 2**30
            print(f"stats {n}: peak {peak:.2f} GiB, {found['seconds']:.0f} s, file {size:.2f} GiB")
            rows.append(row)
            ids.unlink()
        from safetensors import safe_open

        with safe_open(out, framework="pt") as f:  # two frequent kept ids
            tokens = [str(i) for i in f.get_tensor("kept")[:2].tolist()]
        top = {}
        for matrix in ("bigram", "context"):
            code = [sys.executable, "-c", "import resource,subprocess,sys;"
                    "subprocess.run(sys.argv[1:], check=True, capture_output=True);"
                    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)",
                    sys.executable, "-m", "tl_leadterms.cli", "top", str(out), *tokens,
                    "--matrix", matrix]  # fmt: skip
            peak = int(
                subprocess.run(code, capture_output=True, text=True, check=True, cwd=ROOT).stdout
            )
            top[matrix] = peak
            print(f"top {matrix}: peak {peak / 2**30:.2f} GiB", flush=True)
    result = {
        "d_vocab": D_VOCAB,
        "n_ctx": N_CTX,
        "keep": args.keep,
        "rows": rows,
        "top_peak_rss_bytes": top,
    }
    write_text(args.out, json.dumps(result, indent=1) + "\n", parents=True)


if __name__ == "__main__":
    main()
