"""What ``tl-leadterms demo`` costs after the install, against ``python -c pass`` in the same run.

Each case runs in a fresh interpreter (``--preset`` as asked, quick by default; ``--quiet``, into
a temporary folder); its CPU seconds (user + system of the child process, from ``getrusage``)
and wall seconds are recorded beside those of ``python -c pass``, measured in the same run, with
the machine's load average (other work on a shared machine inflates both). The goal of the
quick preset: at most 60 s of CPU on 2 cores.

    python benchmarks/bench_demo.py [--preset quick] [--out benchmarks/results/demo.json]
"""

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tl_leadterms.atomic import write_text  # noqa: E402

GOAL_CPU_S = 60.0


def run(args: list[str]) -> dict:
    """CPU and wall seconds of one child interpreter, and its standard output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          check=True)  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": cpu, "wall_s": wall, "stdout": done.stdout}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "demo.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    baseline = run(["-c", "pass"])
    with tempfile.TemporaryDirectory() as folder:
        demo = run(["-m", "tl_leadterms.cli", "demo", "--preset", args.preset, "--quiet",
                    "--out", folder])  # fmt: skip
    text = demo.pop("stdout")
    baseline.pop("stdout")
    # the two readings of the decomposition, each its own table: against the training windows
    # (exact) and against the held-out windows (an estimate, with its interval)
    sections = text.split("\nAgainst ")
    training = next(part for part in sections if part.startswith("its own"))
    held_out = next((part for part in sections if "held-out" in part.split("\n")[0]), "")
    row = r"^(?:W_O|V|W|P)\s+\S*\s+\S+\s+([-\d.]+)"
    min_cos = min(float(m) for m in re.findall(row, training, re.M))
    held_cos = [float(m) for m in re.findall(row, held_out, re.M)]
    result = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "preset": args.preset,
        "python -c pass": baseline,
        "tl-leadterms demo": demo,
        "demo_cpu_minus_baseline_s": demo["cpu_s"] - baseline["cpu_s"],
        "cpu_ratio_to_baseline": demo["cpu_s"] / max(baseline["cpu_s"], 1e-9),
        "goal_cpu_s": GOAL_CPU_S,
        "within_goal": demo["cpu_s"] <= GOAL_CPU_S,
        "min_cosine_training_windows": min_cos,
        "min_cosine_held_out": min(held_cos) if held_cos else None,
        "held_out_line": held_out.split("\n")[0],
        "plan_line": text.splitlines()[0],
        "time_line": next(line for line in text.splitlines() if line.startswith("Done in")),
        "output": text.splitlines(),
    }
    write_text(args.out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
