"""Reproduce the paper's toy experiments (Table 1, Figure 4, Table 3) on the embedded corpus.

    python examples/reproduce_paper.py [--preset full|small] [--out out/reproduce]

Trains the paper's 3-layer one-hot attention-only model (zero init, mini-batch SGD) on windows
of the embedded story corpus with a word-level vocabulary, at a small and a large learning rate,
and tracks the cosine of every weight with its leading term (docs/math.md#leading-terms and
docs/math.md#agreement):

* Table 1 (small η): the minimum cosine over layers and logged steps of W, V and W_O
  (the paper: 0.999496 / 0.999169 / 0.998486);
* Figure 4 (large η): the cosines stay high early and decline while the loss falls; beside
  them, the KL divergence of the leading-term model's next-token distribution from the
  model's on held-out windows and the share of the unigram → model KL gap it explains
  (``output_agreement``, logged by a ``LeadingTermMonitor``), and the first step where each
  curve crosses its threshold (cosine < 0.9, explained < 0.9);
* Table 3 (the large-η model): remove each weight's projection onto its leading term and
  re-measure the loss; the paper's order is output >> value >> attention.

Writes ``results.json`` (every number printed, the histories and the settings) to ``--out``.
The ``full`` preset takes about 10 minutes on 2 CPU cores; ``small`` runs in the test suite.
"""

import argparse
import json
import math
import time
from pathlib import Path

import torch

from tl_leadterms import ablate, corpus_stats, decompose, make_windows, paper_model, train
from tl_leadterms.data import generate_stories, train_word_tokenizer
from tl_leadterms.sweeps.monitor import LeadingTermMonitor

PRESETS = {
    "full": dict(
        stories=6000,
        vocab=600,
        n_ctx=64,
        windows=4096,
        batch=256,
        small=(0.5, 32),
        large=(1.0, 120),
        every=8,
    ),
    "small": dict(
        stories=400,
        vocab=150,
        n_ctx=24,
        windows=256,
        batch=64,
        small=(0.25, 16),
        large=(0.5, 96),
        every=8,
    ),
}
PAPER = {
    "table1": {"W": 0.999496, "V": 0.999169, "W_O": 0.998486},
    "table3": {
        "original": 5.349,
        "W": [5.350, 5.352, 5.361],
        "V": [6.192, 6.526, 6.520],
        "W_O": 8.287,
    },
}
N_LAYERS = 3


def run(model_lr: float, steps: int, windows, stats, cfg: dict, seed: int, monitor=None):
    model = paper_model(d_vocab=len(stats.tokenizer), n_ctx=cfg["n_ctx"], n_layers=N_LAYERS)
    history = train(
        model,
        windows,
        lr=model_lr,
        steps=steps,
        batch_size=cfg["batch"],
        track=stats,
        every=cfg["every"],
        seed=seed,
        callback=None if monitor is None else monitor.train_callback,
    )
    return model, history


def curve_rows(history) -> list[dict]:
    rows = []
    for i, step in enumerate(history.steps):
        row = {"step": step, "loss": history.loss[i]}
        for weight in ("W_O", "V", "W", "P"):
            values = [v[i] for name, v in history.cosines.items() if name.split(".")[0] == weight]
            finite = [v for v in values if not math.isnan(v)]
            row[f"min cos {weight}"] = min(finite) if finite else math.nan
        rows.append(row)
    return rows


def crossing_steps(rows: list[dict], threshold: float = 0.9) -> dict:
    """The first logged step where each cosine curve and the explained share fall below 0.9."""
    out = {}
    for name in ("min cos W_O", "min cos V", "min cos W", "explained"):
        below = [r["step"] for r in rows if r[name] < threshold]  # NaN compares False
        out[name] = below[0] if below else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--out", default="out/reproduce")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = PRESETS[args.preset]
    torch.manual_seed(args.seed)
    start = time.perf_counter()

    stories = generate_stories(cfg["stories"], seed=args.seed)
    tokenizer = train_word_tokenizer(stories, cfg["vocab"])
    all_windows = make_windows(stories, n_ctx=cfg["n_ctx"], tokenizer=tokenizer)
    windows = all_windows[: cfg["windows"]]
    # held-out windows for the next-token comparison (the last 8 training ones if none are left)
    held = all_windows[cfg["windows"] : cfg["windows"] + 8]
    held = (held if len(held) else windows[-8:])[:, :-1]
    stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
    print(
        f"corpus: {len(windows)} windows of T+1 = {cfg['n_ctx'] + 1} tokens, "
        f"|V| = {len(tokenizer)} (word-level), batch {cfg['batch']}, {N_LAYERS} layers"
    )

    results: dict = {
        "preset": args.preset,
        "settings": cfg,
        "d_vocab": len(tokenizer),
        "n_windows": len(windows),
        "paper": PAPER,
    }

    # Table 1: small learning rate
    lr, steps = cfg["small"]
    _, small = run(lr, steps, windows, stats, cfg, args.seed)
    table1 = {w: small.min_cosine(w) for w in ("W", "V", "W_O", "P")}
    print(
        f"\nTable 1 (η = {lr}, {steps} steps, s·η = {lr * steps:g}): minimum cosine over "
        "layers and logged steps"
    )
    print(f"{'':10s} {'ours':>9s} {'paper':>9s}")
    for weight, paper in PAPER["table1"].items():
        print(f"{weight:10s} {table1[weight]:9.6f} {paper:9.6f}")
    print(f"{'P':10s} {table1['P']:9.6f} {'(n/a)':>9s}")
    print(
        "(exact: the statistics are the model's own training windows, so no corpus-sampling "
        "interval applies)"
    )
    results["table1"] = {"lr": lr, "steps": steps, "min_cosine": table1, "history": small.to_dict()}

    # Figure 4: large learning rate
    lr, steps = cfg["large"]
    monitor = LeadingTermMonitor(stats, every=cfg["every"], lr=lr, analyses="output", tokens=held)
    model, large = run(lr, steps, windows, stats, cfg, args.seed, monitor)
    rows = curve_rows(large)
    scores = monitor.history.scores
    for row, kl, explained in zip(
        rows, scores["output_kl"], scores["output_explained"], strict=True
    ):
        row.update({"KL leading": kl, "explained": explained})
    print(f"\nFigure 4 (η = {lr}, {steps} steps): cosines while the loss falls, and the KL of "
          f"the leading-term model's next-token distribution from the model's on {len(held)} "
          "held-out windows (explained: share of the unigram → model KL gap)")  # fmt: skip
    print(f"{'step':>5s} {'loss':>7s} " + " ".join(f"{w:>9s}" for w in ("W_O", "V", "W", "P"))
          + f" {'KL':>9s} {'explained':>9s}")  # fmt: skip
    for row in rows:
        print(
            f"{row['step']:5d} {row['loss']:7.4f} "
            + " ".join(f"{row[f'min cos {w}']:9.4f}" for w in ("W_O", "V", "W", "P"))
            + f" {row['KL leading']:9.5f} {row['explained']:9.4f}"
        )
    crossings = crossing_steps(rows)
    print("first step below 0.9: " + ", ".join(
        f"{name} {'-' if step is None else step}" for name, step in crossings.items()))  # fmt: skip
    results["figure4"] = {"lr": lr, "steps": steps, "curve": rows, "history": large.to_dict(),
                          "crossings": crossings, "monitor": repr(monitor)}  # fmt: skip

    # Table 3: ablation of the large-η model
    table = ablate(model, stats, windows, weights=("W", "V", "W_O"))
    paper = PAPER["table3"]
    print(f"\nTable 3 (ablation of the η = {lr} model)")
    print(f"{'':10s} {'ours':>8s} {'paper':>8s}")
    print(f"{'original':10s} {table.original_loss:8.4f} {paper['original']:8.3f}")
    for weight in ("W", "V"):
        for layer in range(N_LAYERS):
            print(
                f"{weight + f' L{layer}':10s} {table.loss(weight, layer):8.4f} "
                f"{paper[weight][layer]:8.3f}"
            )
    print(f"{'W_O':10s} {table.loss('W_O'):8.4f} {paper['W_O']:8.3f}")
    results["table3"] = table.to_dict()

    decomposition = decompose(model, stats, schedule=(lr, steps), per_head=True)
    print(f"\n{decomposition}")
    print(f"({decomposition.metadata['population']['answers']})")
    results["population"] = decomposition.metadata["population"]
    results["decompose"] = decomposition.to_dict()["rows"]

    results["seconds"] = time.perf_counter() - start
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"\nwrote {out / 'results.json'} ({results['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
