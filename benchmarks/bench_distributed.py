"""Corpus statistics on a local Ray (2 workers) against the single-process path, same machine.

Cases (JSON under benchmarks/results/distributed_*.json):

* ``speed``: 50,000 Zipf windows, T 128, d_vocab 50,304 restricted to 5,000 kept ids, float64.
  The single-process ``tl_leadterms.corpus_stats`` (numba, 2 threads; and once with 1 thread)
  against
  ``tl_leadterms.distributed.corpus_stats`` on a local Ray with 2 CPUs (one task per shard,
  1 CPU each). Both timed warm (Ray started and its workers' kernels compiled by a first run),
  best of ``--repeats``; the results are checked equal. Also the per-shard task seconds, merge
  seconds and the bytes each shard puts into the object store (the pickled accumulator).
* ``tiny``: the fixed overhead on a tiny corpus (300 windows, T 16, d_vocab 60).
* a projection (not a measurement) for 8, 32 and 128 nodes at 1B tokens, from the measured
  per-window task cost and per-merge cost (model in ``projection``'s docstring).

    python benchmarks/bench_distributed.py [--repeats 2]
"""

import argparse
import json
import math
import os
import pickle
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tl_leadterms import corpus_stats  # noqa: E402
from tl_leadterms.distributed import corpus_stats as ray_stats  # noqa: E402
from tl_leadterms.stats import (  # noqa: E402
    AttentionAccumulator,
    ContextAccumulator,
    resolve_vocab,
)
from tl_leadterms.stats.tokens import token_counts  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
STATS = ("Phi_bar", "G_bar", "Q_bar", "Delta", "B_bar")


def zipf_windows(n: int, n_ctx: int, d_vocab: int, seed: int = 0, a: float = 1.1) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, d_vocab + 1) ** a
    ids = rng.choice(d_vocab, size=(n, n_ctx + 1), p=p / p.sum())
    return torch.from_numpy(rng.permutation(d_vocab)[ids]).long()


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def best(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, min(times), times


def max_diff(a, b) -> float:
    return max(float((getattr(a, n) - getattr(b, n)).abs().max()) for n in STATS)


def pickled_bytes(value) -> int:
    """Bytes ``value`` puts into the object store: the pickle stream plus the buffers that
    protocol 5 hands over out of band (the accumulators' numpy tables), as Ray stores them."""
    buffers = []
    stream = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return len(stream) + sum(b.raw().nbytes for b in buffers)


def shard_bytes(windows: torch.Tensor, kept, n_shards: int) -> int:
    """Bytes of one shard's pass-one accumulator as it is pickled into the object store."""
    part = windows[: math.ceil(windows.shape[0] / n_shards)]
    return pickled_bytes(ContextAccumulator(kept).update(part))  # pickling compacts the codes


def threads(n: int) -> int:
    """Set numba's and torch's thread counts to ``n``; the previous numba count."""
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(n)
    torch.set_num_threads(n)
    return before


def single_process(windows, d_vocab, vocab, repeats, n_threads):
    """The single-process path with ``n_threads`` numba/torch threads, and its stage times."""
    before = threads(n_threads)
    try:
        out, seconds, runs = best(
            lambda: corpus_stats(windows, d_vocab=d_vocab, vocab=vocab, progress=False), repeats
        )
    finally:
        threads(before)
    return out, {"seconds": seconds, "runs": runs, "threads": n_threads, "stages_s": out.timings}


def shard_bytes_pass2(windows: torch.Tensor, kept) -> int:
    """Bytes of one shard's pass-two accumulator as a task returns it: its Q table and Δ (Ḡ is
    dropped before it is sent back). The table is dense: the size does not depend on the
    windows or on Ḡ's values."""
    g_bar = torch.zeros(kept.k, kept.k, dtype=torch.float64)
    acc = AttentionAccumulator(g_bar, kept).update(windows[:100])
    return pickled_bytes(acc.drop_g_bar())


def run_case(windows, d_vocab, vocab, n_shards, repeats, folder, one_thread=False):
    path = Path(folder) / f"w{windows.shape[0]}.npy"
    np.save(path, windows.numpy().astype(np.int32))
    size = math.ceil(windows.shape[0] / n_shards)
    single, both = single_process(windows, d_vocab, vocab, repeats, 2)
    single_s, single_all = both["seconds"], both["runs"]
    one = single_process(windows, d_vocab, vocab, 1, 1)[1] if one_thread else None
    # warm the workers (numba compiles in each) on a small slice in two shards: same kernels
    warm = Path(folder) / "warm.npy"
    np.save(warm, windows[: min(2000, windows.shape[0])].numpy().astype(np.int32))
    ray_stats([warm], d_vocab=d_vocab, vocab=vocab, shard_size=min(1000, size), progress=False)
    dist, dist_s, dist_all = best(
        lambda: ray_stats([path], d_vocab=d_vocab, vocab=vocab, shard_size=size, progress=False),
        repeats,
    )
    timings = dist.timings
    return {
        "single_process_s": single_s,
        "ray_s": dist_s,
        "speedup": single_s / dist_s,
        "all_runs_s": {"single": single_all, "ray": dist_all},
        "single_process_2_threads": both,
        "single_process_1_thread": one,
        "speedup_vs_1_thread": None if one is None else one["seconds"] / dist_s,
        "max_abs_difference": max_diff(dist, single),
        "stages_s": {k: timings[k] for k in ("vocab", "pass1", "G_bar", "pass2")},
        "shard_task_s": {
            "pass1": [i["seconds"] for i in timings["pass1_shards"]],
            "pass2": [i["seconds"] for i in timings["pass2_shards"]],
        },
        "merge_s": {"pass1": timings["pass1_merges"], "pass2": timings["pass2_merges"]},
    }


def projection(result: dict, k: int, n_ctx: int, windows: int, cores_per_node: int = 16):
    """Wall time at 1B tokens = compute / (nodes·cores) + serial terms (Amdahl).

    Model: every core runs 1-CPU shard tasks at the measured per-window cost (pass one plus
    pass two, this machine's speed per core); a merge tree has ``log2(shards)`` levels and each
    level costs one measured in-memory merge plus moving one accumulator (8·k² bytes) over a
    10 Gb/s link; Ḡ (8·k² bytes) is formed once on the driver (measured) and sent to every
    node, serially from the driver in the worst case. Not measured on a cluster.
    """
    per_window = sum(sum(v) for v in result["shard_task_s"].values()) / windows
    n_windows = 1e9 / (n_ctx + 1)
    merge = max(max(v) for v in result["merge_s"].values() if v)
    table_s = 8 * k * k / 1.25e9
    rows = []
    for nodes in (8, 32, 128):
        shards = nodes * cores_per_node
        compute = per_window * n_windows / shards
        tree = 2 * math.ceil(math.log2(shards)) * (merge + table_s)
        broadcast = nodes * table_s
        serial = tree + broadcast + result["stages_s"]["G_bar"]
        rows.append({
            "nodes": nodes, "cores": shards, "compute_s": compute, "merge_tree_s": tree,
            "G_bar_and_broadcast_s": broadcast + result["stages_s"]["G_bar"],
            "total_s": compute + serial, "serial_fraction": serial / (compute + serial),
        })  # fmt: skip
    return {"model": projection.__doc__.strip(), "per_window_core_s": per_window, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--windows", type=int, default=50_000)
    args = parser.parse_args()
    import ray

    RESULTS.mkdir(exist_ok=True)
    load_before = load()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    d_vocab, k, n_ctx = 50_304, 5_000, 128
    with tempfile.TemporaryDirectory() as folder:
        tiny = run_case(zipf_windows(300, 16, 60, seed=1), 60, None, 2, 3, folder)
        windows = zipf_windows(args.windows, n_ctx, d_vocab)
        kept = resolve_vocab(k, d_vocab, token_counts=lambda: token_counts([windows], d_vocab))
        speed = run_case(
            windows, d_vocab, kept.kept.tolist(), 2, args.repeats, folder, one_thread=True
        )
    ray.shutdown()
    speed["object_store_bytes_per_shard_pass1"] = shard_bytes(windows, kept, 2)
    speed["object_store_bytes_per_shard_pass2"] = shard_bytes_pass2(windows, kept)
    speed["G_bar_broadcast_bytes"] = 8 * k * k
    machine = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": load(),
    }
    setting = {"windows": args.windows, "n_ctx": n_ctx, "d_vocab": d_vocab, "kept": k,
               "dtype": "float64", "ray_cpus": 2, "shards": 2}  # fmt: skip
    out = {
        "machine": machine,
        "setting": setting,
        "speed": speed,
        "tiny": tiny,
        "projection_1B_tokens": projection(speed, k, n_ctx, args.windows),
    }
    path = RESULTS / "distributed_speed.json"
    path.write_text(json.dumps(out, indent=1))
    keys = ("single_process_s", "ray_s", "speedup", "speedup_vs_1_thread", "stages_s")
    print(json.dumps({"speed": {k: speed[k] for k in keys},
                      "single_stages": speed["single_process_2_threads"]["stages_s"],
                      "tiny": {k: tiny[k] for k in ("single_process_s", "ray_s")},
                      "load": [load_before, machine["load_after"]]}, indent=1))  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
