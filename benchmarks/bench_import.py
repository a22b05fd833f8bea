"""How long ``tl-leadterms --help`` takes to start, against Python itself and TransformerLens.

Each case runs in a fresh interpreter, ``--repeats`` times (the median wall time is reported),
with ``python -X importtime`` once more to record the import time of the slowest top-level
modules and which heavy libraries the case imported:

* ``python -c pass``: the interpreter's own start (the floor);
* ``tl-leadterms --help`` and ``tl-leadterms top --help`` (the target: under 0.5 s);
* ``import tl_leadterms`` (lazy: no torch until a name is used);
* ``import transformer_lens`` (what ``--help`` cost before the imports became lazy).

    python benchmarks/bench_import.py [--repeats 5]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tl_leadterms.atomic import write_text  # noqa: E402

CASES = {
    "python -c pass": ["-c", "pass"],
    "tl-leadterms --help": ["-m", "tl_leadterms.cli", "--help"],
    "tl-leadterms top --help": ["-m", "tl_leadterms.cli", "top", "--help"],
    "import tl_leadterms": ["-c", "import tl_leadterms"],
    "import transformer_lens": ["-c", "import transformer_lens"],
}
HEAVY = ("torch", "transformer_lens", "transformers", "numpy")
TARGET_S = 0.5


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


def wall_time(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], env=_env(), capture_output=True, check=True)
    return time.perf_counter() - start


def import_profile(args: list[str]) -> dict:
    """``-X importtime``: total microseconds per top-level package, and the heavy ones seen."""
    done = subprocess.run([sys.executable, "-X", "importtime", *args], env=_env(),
                          capture_output=True, text=True, check=True)  # fmt: skip
    packages: dict[str, int] = {}
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        if match and len(match.group(2)) == 1:  # a top-level import (its cumulative time)
            top = match.group(3).split(".")[0]
            packages[top] = packages.get(top, 0) + int(match.group(1))
    slowest = sorted(packages.items(), key=lambda kv: -kv[1])[:5]
    return {
        "import_time_s": sum(packages.values()) / 1e6,
        "slowest_imports_s": {name: us / 1e6 for name, us in slowest},
        "heavy_imported": [m for m in HEAVY if m in packages],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "import_time.json"))
    args = parser.parse_args()
    cases = {}
    for name, argv in CASES.items():
        wall_time(argv)  # warm the file cache first
        times = [wall_time(argv) for _ in range(args.repeats)]
        cases[name] = {"wall_s_median": statistics.median(times), "wall_s": times,
                       **import_profile(argv)}  # fmt: skip
        print(f"{name:28s} {cases[name]['wall_s_median']:.3f} s  "
              f"imports {cases[name]['heavy_imported']}")  # fmt: skip
    floor = cases["python -c pass"]["wall_s_median"]
    help_s = cases["tl-leadterms --help"]["wall_s_median"]
    result = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
        "repeats": args.repeats,
        "cases": cases,
        "help_over_python": help_s / floor,
        "transformer_lens_over_help": cases["import transformer_lens"]["wall_s_median"] / help_s,
        "target_s": TARGET_S,
        "help_under_target": help_s < TARGET_S,
    }
    ratio = result["transformer_lens_over_help"]
    print(f"--help: {help_s:.3f} s ({result['help_over_python']:.1f}x python -c pass; "
          f"import transformer_lens is {ratio:.1f}x --help)")  # fmt: skip
    write_text(args.out, json.dumps(result, indent=1) + "\n", parents=True)


if __name__ == "__main__":
    main()
