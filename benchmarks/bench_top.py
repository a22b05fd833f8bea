"""``tl-leadterms top`` against ``tl-leadterms --help``, and the statistics file size, k = 3,000.

The statistics: d_vocab 3,000 Zipf-distributed token ids (exponent 1.1), T = 200, 2,984 windows,
as many positions as the 2.4 MB story corpus of ``write_corpus(1700)`` (whose word vocabulary
stops near 2,100 words, so it cannot reach k = 3,000), float64. Also the story corpus itself
(BPE vocabulary, k ≈ 2,160). Each file is written in the previous layout (format 2: every
table dense; ``tests/factories.save_format2``) and in the current one, and each command runs in
a fresh process, interleaved, ``--repeats`` times (the minimum counts; every run is listed):

* ``--help`` (the baseline: Python, argparse, the package's CLI modules);
* ``top`` on the current file (the standard library: one row and the recorded column totals,
  each tensor read verified against its checksum; no numpy, no torch);
* ``top`` on the format-2 file through ``CorpusStats.top`` (torch, the table: the old path);
* with ``--main DIR``, main's own ``tl-leadterms top`` on the format-2 file.

    nice python benchmarks/bench_top.py --repeats 5 --main /work/main

The 1-minute load average is recorded before and after the timed runs (other work on the
machine slows ``--help`` and ``top`` alike; the ratio is what the goal is about).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def seconds(argv: list[str], cwd: Path, root: Path = ROOT, bytecode: bool = False) -> float:
    """Wall seconds of ``tl-leadterms argv`` in a fresh process. ``bytecode``: with the
    modules' cached bytecode (what an install has; this machine sets PYTHONDONTWRITEBYTECODE,
    so without it every run compiles the package's modules again)."""
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tl_leadterms.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed:\n{done.stderr[-2000:]}")
    return took


OLD_TOP = """
import sys
from tl_leadterms import CorpusStats
path, matrix, *tokens = sys.argv[1:]
stats = CorpusStats.load(path, want=[{"Sigma_B": "B_bar"}.get(matrix, matrix)])
for t in tokens:
    print(t, [n.token for n in stats.top(matrix, int(t), n=10, scoring="raw", exclude=())])
"""


def old_seconds(path: Path, matrix: str, tokens: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", OLD_TOP, str(path), matrix, *tokens], env=env,
                   check=True, capture_output=True)  # fmt: skip
    return time.perf_counter() - start


def make_files(folder: Path) -> dict:
    import torch

    from tests.factories import save_format2
    from tl_leadterms import corpus_stats

    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, 3001) ** 1.1
    ids = rng.choice(3000, size=(2984, 201), p=p / p.sum())
    windows = torch.from_numpy(rng.permutation(3000)[ids].astype(np.int64))
    stats = corpus_stats(windows, d_vocab=3000, progress=False)
    new, old = folder / "k3000.safetensors", folder / "k3000_format2.safetensors"
    stats.save(new)
    save_format2(stats, old)
    start = time.perf_counter()
    from tl_leadterms import CorpusStats

    loaded = CorpusStats.load(new)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    equal = all(torch.equal(getattr(loaded, n), getattr(stats, n))
                for n in ("Phi_bar", "G_bar", "Q_bar", "Delta", "B_bar", "Sigma_B"))  # fmt: skip
    rebuild_s = time.perf_counter() - start
    return {"new": new, "old": old, "k": stats.k, "equal_on_load": equal,
            "load_s": load_s, "load_and_compare_with_G_rebuild_s": rebuild_s,
            "bytes_format2": old.stat().st_size, "bytes_format3": new.stat().st_size}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--main", help="a checkout of main: its tl-leadterms top is timed too")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/top.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = make_files(folder)
        load_before = os.getloadavg()
        queries = {"bigram": ["5", "7"], "context": ["5", "7"], "attention": ["5"],
                   "interchangeability": ["5"]}  # fmt: skip
        runs: dict[str, list[float]] = {"help": []}
        # with cached bytecode: one warm-up run of each writes it, then the timed runs
        warm = [["--help"]] + [["top", str(files["new"]), *t, "--matrix", m]
                               for m, t in queries.items()]  # fmt: skip
        for argv in warm:
            seconds(argv, folder, bytecode=True)
        for _ in range(args.repeats):
            for argv in warm:
                name = "help" if argv == ["--help"] else f"top {argv[-1]}"
                runs.setdefault(f"{name} (cached bytecode)", []).append(
                    seconds(argv, folder, bytecode=True)
                )
            runs["help"].append(seconds(["--help"], folder))
            for matrix, tokens in queries.items():
                runs.setdefault(f"top {matrix}", []).append(
                    seconds(["top", str(files["new"]), *tokens, "--matrix", matrix], folder)
                )
                key = {"bigram": "B_bar", "context": "Phi_bar", "attention": "Q_bar",
                       "interchangeability": "Sigma_B"}[matrix]  # fmt: skip
                runs.setdefault(f"old top {matrix}", []).append(
                    old_seconds(files["old"], key, tokens)
                )
                if args.main:  # main's own command on the file main writes
                    runs.setdefault(f"main top {matrix}", []).append(
                        seconds(
                            ["top", str(files["old"]), *tokens, "--matrix", matrix],
                            folder,
                            Path(args.main),
                        )
                    )
        load_after = os.getloadavg()
    best = {name: min(v) for name, v in runs.items()}
    result = {
        "k": files["k"],
        "seconds_min": best,
        "runs": runs,
        "top_over_help": {m: best[f"top {m}"] / best["help"] for m in queries},
        "top_over_help_cached_bytecode": {
            m: best[f"top {m} (cached bytecode)"] / best["help (cached bytecode)"] for m in queries
        },
        "old_top_over_help": {m: best[f"old top {m}"] / best["help"] for m in queries},
        "speedup_over_old": {m: best[f"old top {m}"] / best[f"top {m}"] for m in queries},
        "main_top_over_help": {
            m: best[f"main top {m}"] / best["help"] for m in queries if f"main top {m}" in best
        },
        "goal": "top within 3x --help",
        "file_bytes": {
            "format2": files["bytes_format2"],
            "format3": files["bytes_format3"],
            "ratio": files["bytes_format3"] / files["bytes_format2"],
        },
        "every_statistic_equal_on_load": files["equal_on_load"],
        "load_s": files["load_s"],
        "compare_all_with_G_rebuild_s": files["load_and_compare_with_G_rebuild_s"],
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": load_after,
            "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE"),
        },
        "timing": "wall seconds of a fresh process each, minimum over --repeats interleaved runs",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("seconds_min", "top_over_help",
                                             "top_over_help_cached_bytecode", "old_top_over_help",
                                             "file_bytes", "every_statistic_equal_on_load")},
                     indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
