"""The paper's Pythia protocol (docs/math.md#pythia-protocol, Figures 6-8) on a checkpoint series
trained here.

    python examples/pythia_protocol.py [--preset full|small] [--out out/pythia_protocol]

1. Trains a tiny Pythia-architecture GPT-NeoX (rotary, parallel attention/MLP, LayerNorm) on the
   embedded story corpus, saving checkpoints at steps 0, 1, 2, 4, 8, ... as local folders
   (loadable offline, like Pythia's revisions); an existing series in ``--out`` is reused.
2. Computes the corpus statistics of its training windows.
3. Sweeps the checkpoints (one model in memory at a time, resumable from ``sweep.jsonl``):
   the covariance similarity of the attention map with Q̄ and of the value maps with Φ̄ᵀB̄ᵀ,
   under the paper's protocol (only theory rows normalised, E_post as is) and with both sides
   normalised and the layer's own write; the per-head attention agreement with the predicted
   pattern on held-out windows; and the weight cosines of ``decompose``.
4. Prints and writes the layer × step tables (``tables.json``, one CSV per score).

For a real Pythia series, pass ``"pythia-160m"`` and ``checkpoint_steps=[1, 2, 4, ...]`` to
``sweep`` (each checkpoint comes from
``HookedTransformer.from_pretrained(name, checkpoint_value=step)``) with statistics of its
tokenizer's corpus.
"""

import argparse
import json
import time
from pathlib import Path

from tl_leadterms import attention_agreement, corpus_stats
from tl_leadterms.loading.series import load_series, load_windows, train_neox_series
from tl_leadterms.sweeps.run import sweep

PRESETS = {
    "full": dict(n_stories=2000, vocab_size=500, n_ctx=64, d_model=64, n_layers=2, n_heads=4,
                 steps=256, agreement_windows=64),
    "small": dict(n_stories=120, vocab_size=150, n_ctx=24, d_model=32, n_layers=2, n_heads=2,
                  steps=32, agreement_windows=16),
}  # fmt: skip
SETTINGS = {
    "paper": {"normalize": "theory", "value_map": "post"},
    "both": {"normalize": "both", "value_map": "write"},
}


def agreement_analysis(windows):
    """A sweep analysis: mean rank correlation of each layer's heads with the prediction."""

    def analyse(model, stats):
        table = attention_agreement(model, stats, windows, progress=False)
        rows = []
        for layer in sorted({r["layer"] for r in table.rows}):
            heads = [r for r in table.rows if r["layer"] == layer]
            value = sum(r["rank_correlation"] for r in heads) / len(heads)
            rows.append({"layer": layer, "head": None, "score": "rank_corr", "value": value})
        return rows

    return analyse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--out", default="out/pythia_protocol")
    args = parser.parse_args()
    cfg = dict(PRESETS[args.preset])
    n_agree = cfg.pop("agreement_windows")
    out = Path(args.out)
    start = time.perf_counter()

    if not (out / "series.json").is_file():
        print(f"training the checkpoint series into {out} ...")
        train_neox_series(out, **cfg)
    series = load_series(out)
    windows = load_windows(out)
    held_out, train_windows = windows[:n_agree], windows[n_agree:]
    stats = corpus_stats(train_windows, d_vocab=cfg["vocab_size"], progress=False)
    print(
        f"{len(series)} checkpoints (steps {[s for _, s, _ in series]}); statistics of "
        f"{train_windows.shape[0]} windows, |V| = {stats.d_vocab}, T = {stats.n_ctx}"
    )

    analyses = [(name, "covariance", kwargs) for name, kwargs in SETTINGS.items()]
    analyses += [("agreement", agreement_analysis(held_out[:, :-1]), {}), "decompose"]
    table = sweep(series, stats, analyses=analyses, results=out / "sweep.jsonl")
    tables = {}
    for analysis, score in table.scores():
        grid = table.pivot(score, analysis=analysis)
        key = f"{analysis}:{score}"
        tables[key] = {str(layer): row.to_dict() for layer, row in grid.iterrows()}
        grid.to_csv(out / f"{analysis}_{score}.csv")
        print(f"\n{key}\n{grid.round(3).to_string()}")
    (out / "tables.json").write_text(json.dumps(tables, indent=1))
    print(
        f"\nwrote {out / 'tables.json'} and one CSV per score ({time.perf_counter() - start:.0f} s)"
    )


if __name__ == "__main__":
    main()
