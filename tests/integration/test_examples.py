"""The example scripts run end to end (small settings) and print what they promise."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.models


def test_corpus_statistics_example():
    script = ROOT / "examples" / "corpus_statistics.py"
    args = ["--stories", "300", "--n-ctx", "48", "--vocab", "600"]
    out = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, check=True
    ).stdout
    red = next(line for line in out.splitlines() if line.strip().startswith("red ->"))
    assert all(noun in red for noun in ("ball", "car", "dress", "balloon", "truck"))
    assert "saved and reloaded" in out and "LeadingTerms(lr=0.005, steps=100" in out


def test_reproduce_paper_small_preset(tmp_path):
    """The paper's three toy results, at the small preset of the same script."""
    script = ROOT / "examples" / "reproduce_paper.py"
    args = ["--preset", "small", "--out", str(tmp_path)]
    out = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, check=True
    ).stdout
    assert "Table 1" in out and "Figure 4" in out and "Table 3" in out and "Decomposition" in out
    results = json.loads((tmp_path / "results.json").read_text())
    # Table 1: at small s·η every weight stays aligned with its leading term
    for weight in ("W", "V", "W_O"):
        assert results["table1"]["min_cosine"][weight] >= 0.99
    # Figure 4: at large s·η the cosines start high and decline while the loss falls
    curve = results["figure4"]["curve"]
    first, last = curve[0], curve[-1]
    assert last["loss"] < first["loss"] - 0.5
    for weight in ("W_O", "V", "W"):
        assert first[f"min cos {weight}"] >= 0.9
        assert last[f"min cos {weight}"] < first[f"min cos {weight}"] - 0.05
    # beside them, the leading-term model's next tokens: close early, the gap opens later
    assert first["explained"] > 0.9 and first["KL leading"] >= 0
    assert last["KL leading"] > first["KL leading"]
    assert set(results["figure4"]["crossings"]) == {"min cos W_O", "min cos V", "min cos W",
                                                    "explained"}  # fmt: skip
    # Table 3: removing the output projection hurts most, then value, then attention
    rows = results["table3"]["rows"]
    change = {(r["weight"], r["layer"]): r["loss"] - results["table3"]["original_loss"]
              for r in rows}  # fmt: skip
    output = change[("W_O", None)]
    value = [v for (w, _), v in change.items() if w == "V"]
    attention = [v for (w, _), v in change.items() if w == "W"]
    assert output > max(value) > min(value) > max(attention)


def test_pythia_protocol_small_preset(tmp_path):
    """The whole protocol on a tiny GPT-NeoX series: tables per score, resumable."""
    script = ROOT / "examples" / "pythia_protocol.py"
    args = [sys.executable, str(script), "--preset", "small", "--out", str(tmp_path)]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    tables = json.loads((tmp_path / "tables.json").read_text())
    steps = [f"step{s}" for s in (0, 1, 2, 4, 8, 16, 32)]
    for key in ("paper:attention", "paper:value_post", "both:value_attn", "decompose:cos_W_O"):
        assert set(tables[key]["1" if key != "decompose:cos_W_O" else "-"]) == set(steps)
    # training writes the leading terms into the value maps: from ~0 at init to > 0.6
    value = tables["both:value_post"]["1"]
    assert value["step0"] < 0.2 and max(value.values()) > 0.6
    assert (tmp_path / "both_value_post.csv").is_file()
    # a second run reuses the series and every finished checkpoint of the sweep
    again = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    assert "training the checkpoint series" in out and "training the checkpoint" not in again
    assert json.loads((tmp_path / "tables.json").read_text()) == tables
