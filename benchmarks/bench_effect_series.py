"""How much of the covariance protocol's score is common to all tokens, on a real-text series.

Trains a tiny GPT-NeoX on the embedded stories (:func:`train_neox_series`: 2 layers,
d_model 16, 2 heads, a 120-word vocabulary, 64 AdamW steps, checkpoints 0, 4, 16, 64), counts
the statistics of its training windows and scores every checkpoint with
``covariance_similarity(..., null=19)`` (raw and token-specific rows). Per (checkpoint, layer,
score): the paper's raw score, its null mean and excess, the token-specific (double-centred) score
with its own null mean and excess, and the common share. Results as JSON in
``benchmarks/results/effect_series.json``; the guide ``docs/guides/effect-sizes.md`` quotes
them.

    python benchmarks/bench_effect_series.py
"""

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tl_leadterms.analyses.covariance.compute import covariance_similarity  # noqa: E402
from tl_leadterms.atomic import write_text  # noqa: E402
from tl_leadterms.loading.checkpoint import load_model  # noqa: E402
from tl_leadterms.loading.series import (  # noqa: E402
    load_series,
    load_windows,
    train_neox_series,
)
from tl_leadterms.stats import corpus_stats  # noqa: E402

SETTING = {"n_stories": 60, "vocab_size": 120, "n_ctx": 16, "d_model": 16, "n_layers": 2,
           "n_heads": 2, "steps": 64, "batch_size": 8, "lr": 3e-3,
           "checkpoints": [0, 4, 16, 64]}  # fmt: skip
NULL = 19


def main() -> None:
    start = time.perf_counter()
    out = Path(tempfile.mkdtemp()) / "series"
    train_neox_series(out, progress=False, **SETTING)
    d_vocab = json.loads((out / "series.json").read_text())["d_vocab"]
    stats = corpus_stats(load_windows(out), d_vocab=d_vocab, progress=False)
    rows = []
    for label, step, path in load_series(out):
        model = load_model(path)
        sim = covariance_similarity(model, stats, null=NULL, progress=False)  # both rows
        for raw in (r for r in sim.rows if "common_share" in r):
            tok = sim.row(raw["score"] + "_specific", raw["layer"], raw["head"])
            rows.append({
                "checkpoint": label, "step": step, "layer": raw["layer"], "score": raw["score"],
                "raw": raw["value"], "raw_null_mean": raw["null_mean"],
                "raw_excess": raw["excess"], "raw_z": raw["z"], "raw_q": raw["q"],
                "common_share": raw["common_share"], "specific": tok["value"],
                "specific_null_mean": tok["null_mean"], "specific_excess": tok["excess"],
                "specific_q": tok["q"],
            })  # fmt: skip
            print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in rows[-1].items()), flush=True)  # fmt: skip
    result = {"case": "effect_series", "setting": {**SETTING, "null": NULL,
              "n_windows": stats.n_sequences, "d_vocab": d_vocab}, "rows": rows,
              "seconds": time.perf_counter() - start}  # fmt: skip
    (ROOT / "benchmarks" / "results").mkdir(parents=True, exist_ok=True)
    write_text(ROOT / "benchmarks" / "results" / "effect_series.json",
               json.dumps(result, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
