"""The example scripts run end to end (small settings) and print what they promise."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_corpus_statistics_example():
    script = ROOT / "examples" / "corpus_statistics.py"
    args = ["--stories", "300", "--n-ctx", "48", "--vocab", "600"]
    out = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, check=True
    ).stdout
    red = next(line for line in out.splitlines() if line.strip().startswith("red ->"))
    assert all(noun in red for noun in ("ball", "car", "dress", "balloon", "truck"))
    assert "saved and reloaded" in out and "LeadingTerms(lr=0.005, steps=100" in out
