"""``tl-leadterms stats`` at Pythia scale: peak memory must not grow with the number of windows.

Writes Zipf token windows (d_vocab 50,304, T 128) to a ``.npy`` file, runs
``tl-leadterms stats ids.npy --d-vocab 50304 --keep K --dtype float32`` in a fresh subprocess
for each number of windows, and records its peak RSS, wall time and file size; the Python API
(``corpus_stats`` on the same ``.npy``, same options, in a fresh process) on ``--api-windows``
windows, and the ratio CLI(largest)/API (the target: at most 1); then ``tl-leadterms top`` on
the largest file (bigram and context), with its peak RSS (the target: below 1 GiB).

    python benchmarks/bench_cli_scale.py --windows 20000 200000 --keep 20000
"""

import argparse
import json
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


MEASURE = (
    "import resource, subprocess, sys\n"
    "proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "sys.stderr.write(proc.stderr[-2000:]); sys.stdout.write(proc.stdout[-500:])\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
    "sys.exit(proc.returncode)\n"
)
API = """
import sys
import numpy as np, torch
from tl_leadterms import corpus_stats
path, d_vocab, keep = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
stats = corpus_stats(np.load(path, mmap_mode="r"), d_vocab, vocab=keep, dtype=torch.float32,
                     progress=False)
print(repr(stats))
"""


def measured(command: list[str]) -> dict:
    """Run ``command`` in a fresh process (under a fresh parent): its peak RSS and wall time."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", MEASURE, *command], capture_output=True,
                          text=True, cwd=ROOT, check=False)  # fmt: skip
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{command} failed:\n{proc.stderr[-2000:]}")
    *out, peak = proc.stdout.strip().splitlines()
    return {"seconds": seconds, "peak_rss_bytes": int(peak), "stdout": "\n".join(out)[-500:]}


def cli(argv: list[str]) -> dict:
    return measured([sys.executable, "-m", "tl_leadterms.cli", *argv])


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--api-windows", type=int, default=20_000)
    parser.add_argument("--keep", type=int, default=20_000)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cli_scale.json"))
    args = parser.parse_args()
    rows, api = [], None
    with tempfile.TemporaryDirectory() as tmp:
        data = windows(max(*args.windows, args.api_windows))
        for n in sorted({*args.windows, args.api_windows}):
            ids, out = Path(tmp) / f"ids{n}.npy", Path(tmp) / f"s{n}.safetensors"
            np.save(ids, data[:n])
            if n == args.api_windows:  # the Python API on the same file, same options
                api = {"windows": n, **measured([sys.executable, "-c", API, str(ids),
                                                 str(D_VOCAB), str(args.keep)])}  # fmt: skip
                print(f"API corpus_stats {n}: peak {gib(api['peak_rss_bytes'])}, "
                      f"{api['seconds']:.0f} s", flush=True)  # fmt: skip
            if n in args.windows:
                argv = ["stats", str(ids), "--d-vocab", str(D_VOCAB), "--keep", str(args.keep)]
                found = cli([*argv, "--dtype", "float32", "-o", str(out), "--quiet"])
                rows.append({"windows": n, "stats": found, "file_bytes": out.stat().st_size})
                size = gib(out.stat().st_size)
                print(f"CLI stats {n}: peak {gib(found['peak_rss_bytes'])}, "
                      f"{found['seconds']:.0f} s, file {size}", flush=True)  # fmt: skip
                last = out
            ids.unlink()
        from safetensors import safe_open

        with safe_open(last, framework="pt") as f:  # two frequent kept ids
            tokens = [str(i) for i in f.get_tensor("kept")[:2].tolist()]
        top = {}
        for matrix in ("bigram", "context"):
            found = cli(["top", str(last), *tokens, "--matrix", matrix])
            top[matrix] = found["peak_rss_bytes"]
            print(f"CLI top {matrix}: peak {gib(found['peak_rss_bytes'])}", flush=True)
    largest = max(rows, key=lambda r: r["windows"])
    result = {
        "d_vocab": D_VOCAB,
        "n_ctx": N_CTX,
        "keep": args.keep,
        "rows": rows,
        "api": api,
        "cli_largest_over_api": largest["stats"]["peak_rss_bytes"] / api["peak_rss_bytes"],
        "top_peak_rss_bytes": top,
    }
    print(f"CLI({largest['windows']}) / API({api['windows']}) = "
          f"{result['cli_largest_over_api']:.3f}")  # fmt: skip
    write_text(args.out, json.dumps(result, indent=1) + "\n", parents=True)


if __name__ == "__main__":
    main()
