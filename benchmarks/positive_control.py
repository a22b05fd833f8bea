"""A positive control on a real architecture: a Llama-style model trained with plain SGD from a
small initialisation, read by ``decompose`` and by the covariance protocol at every checkpoint.

    python benchmarks/positive_control.py [--preset full|small] [--out DIR]

1. Trains, on windows of the embedded stories (word-level tokenizer), a Llama-architecture
   model (RMSNorm, rotary, SwiGLU, grouped-query attention, untied unembedding;
   :func:`~tl_leadterms.loading.series.train_neox_series` with ``family="llama"``) three ways
   from the same corpus and seed: plain SGD (no momentum, no weight decay) from a small
   initialisation (every matrix × ``init_scale`` 0.1: the random products such as
   ``W_E·W_U`` start at 1% of Hugging Face's, so the weights start near the theory's zero), and
   for comparison AdamW from the same initialisation and AdamW from Hugging Face's own.
2. Counts the statistics of the training windows.
3. At every checkpoint: ``decompose(model, stats, schedule=Schedule(lr, step), null=R)`` (the
   cosine of ``W_O`` with B̄ and of each layer's value path ``V·W_O`` with Φ̄ᵀΣ_B̄, their excess
   over the permutation null, the token-specific cosine, the implied s·η against lr·step) and
   ``covariance_similarity(model, stats, null=R)`` (the paper's raw score and the
   token-specific ``_specific`` score, each with its excess over its own null).
4. Prints the table, writes the numbers as JSON (``benchmarks/results/positive_control.json``)
   and draws ``docs/positive_control.png`` (the full preset; ``--preset small`` writes beside
   ``--out`` instead).

It lives in ``benchmarks/`` with the other measured results (its JSON beside theirs); the tests
import its functions (``tests/integration/test_positive_control.py``), and the guide
``docs/guides/reading-real-checkpoints.md`` quotes its table and shows its figure.

Why these settings. The closed forms were checked on the paper's own model up to s·η = 0.8
(docs/math.md): with SGD at lr 0.05 the checkpoints 1, 2, 4, 8, 16 have s·η ≤ 0.8 and the later
ones (32 .. 256, s·η 1.6 .. 12.8) lie beyond it, where the leading terms should fade. (The
theorem's own bound, ``step_bound(lr=0.05, n_layers=2, n_ctx=64)`` = 0.83 steps, is far
tighter than where the forms hold.) AdamW runs at lr 1e-3, the order Pythia used and the
series' default.
"""

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tl_leadterms import (  # noqa: E402
    Schedule,
    corpus_stats,
    covariance_similarity,
    decompose,
    load_model,
)
from tl_leadterms.atomic import write_text  # noqa: E402
from tl_leadterms.loading.series import load_series, load_windows, train_neox_series  # noqa: E402

#: the model, corpus and checkpoints every run shares; the runs differ in optimiser and init
PRESETS = {
    "full": {
        "series": dict(family="llama", n_stories=2000, vocab_size=500, n_ctx=64, d_model=64,
                       n_layers=2, n_heads=(4, 2), batch_size=32, steps=256,
                       checkpoints=[0, 1, 2, 4, 8, 16, 32, 64, 128, 256], seed=0),
        "runs": {
            "sgd": dict(optimizer="sgd", lr=0.05, init_scale=0.1),
            # the same SGD run from a 10× smaller initialisation: what the implied s·η reads
            "sgd_init001": dict(optimizer="sgd", lr=0.05, init_scale=0.01),
            "adamw": dict(optimizer="adamw", lr=1e-3, init_scale=0.1),
            "adamw_init1": dict(optimizer="adamw", lr=1e-3, init_scale=1.0),
        },
        "null": 19,
    },
    # the default suite's version (tests/integration/test_positive_control.py): AdamW is
    # compared over the first 16 steps only (its step 0 is SGD's: same seed, same init)
    "small": {
        "series": dict(family="llama", n_stories=150, vocab_size=100, n_ctx=16, d_model=32,
                       n_layers=2, n_heads=(4, 2), batch_size=16, steps=128,
                       checkpoints=[0, 4, 16, 128], seed=0),
        "runs": {
            "sgd": dict(optimizer="sgd", lr=0.05, init_scale=0.1),
            "adamw": dict(optimizer="adamw", lr=1e-3, init_scale=0.1, steps=16,
                          checkpoints=[4, 16]),
        },
        "null": 9,
    },
}  # fmt: skip
#: the covariance protocol's score read beside each weight of ``decompose``
BESIDE = {"V·W_O": "value_post", "W": "attention"}


def train_runs(out: Path, preset: dict) -> dict[str, Path]:
    """Train every run of ``preset`` into ``out/<run>``; the series folders by run name."""
    folders = {}
    for name, run in preset["runs"].items():
        folders[name] = Path(out) / name
        train_neox_series(folders[name], progress=False, **{**preset["series"], **run})
    return folders


def training_stats(folder: Path):
    """The statistics of a series' training windows (every run has the same windows)."""
    d_vocab = json.loads((Path(folder) / "series.json").read_text())["d_vocab"]
    return corpus_stats(load_windows(folder), d_vocab=d_vocab, progress=False)


def _protocol(model, stats, null: int) -> dict[tuple[str, int], dict]:
    """The covariance protocol's raw score, its null excess, the token-specific score and its
    excess, and the common share, by (score, layer): one call gives both rows, each with its
    own null."""
    sim = covariance_similarity(model, stats, null=null, progress=False)
    rows = {(r["score"], r["layer"]): r for r in sim.rows if r["head"] is None}
    out = {}
    for (score, layer), raw in rows.items():
        tok = rows.get((f"{score}_specific", layer))
        if tok is not None:
            out[score, layer] = {
                "protocol_score": score, "protocol_raw": raw["value"],
                "protocol_excess": raw["excess"], "protocol_specific": tok["value"],
                "protocol_specific_excess": tok["excess"],
                "protocol_common_share": raw["common_share"],
            }  # fmt: skip
    return out


def control_rows(folder: Path, stats, null: int) -> list[dict]:
    """One row per (checkpoint, weight, layer) of a series: ``decompose``'s reading with the
    covariance protocol's beside the value path (``value_post``) and attention (``attention``)."""
    info = json.loads((Path(folder) / "series.json").read_text())
    lr, losses = info["lr"], info["losses"]
    rows = []
    for _, step, path in load_series(folder):
        model = load_model(str(path))
        schedule = Schedule(lr=lr, steps=step) if step else None
        d = decompose(model, stats, schedule=schedule, null=null, progress=False)
        protocol = _protocol(model, stats, null)
        for r in d.rows:
            if r["weight"] == "P":  # indexed by offset: no null, no token-specific part
                continue
            row = {
                "step": step, "s_lr": lr * step, "loss": losses[step - 1] if step else None,
                "weight": r["weight"], "layer": r["layer"], "label": r["label"],
                "cosine": r["cosine"], "null_mean": r["null_mean"], "excess": r["excess"],
                "z": r["z"], "specific": r["specific"], "common_share": r["common_share"],
                "implied_s_lr": r["implied_s_lr"],
            }  # fmt: skip
            row.update(protocol.get((BESIDE.get(r["weight"]), r["layer"]), {}))
            rows.append(row)
    return rows


def _cell(value, width: int, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{'-':>{width}}"
    return f"{value:>{width}.{digits}f}"


def format_table(name: str, run: dict, rows: list[dict]) -> str:
    """The printed table of one run: W_O and value-path rows, the protocol's value score beside."""
    head = (f"{name}: {run['optimizer']} lr={run['lr']} init_scale={run['init_scale']}\n"
            f"{'step':>4} {'lr·s':>6} {'row':<9}{'cosine':>7}{'excess':>8}{'z':>7}"
            f"{'specific':>9}{'impl. sη':>9} | {'protocol':<11}{'raw':>6}{'excess':>8}"
            f"{'specific':>9}{'sp.exc.':>8}")  # fmt: skip
    lines = [head]
    for r in rows:
        if r["weight"] not in ("W_O", "V·W_O"):
            continue
        where = r["label"] if r["weight"] == "W_O" else f"V·W_O {r['label']}"
        protocol = (
            f"{r['protocol_score'] + ' L' + str(r['layer']):<11}{_cell(r['protocol_raw'], 6)}"
            f"{_cell(r['protocol_excess'], 8, 4)}{_cell(r['protocol_specific'], 9)}"
            f"{_cell(r['protocol_specific_excess'], 8)}"
            if "protocol_raw" in r else f"{'-':<11}"
        )  # fmt: skip
        lines.append(
            f"{r['step']:>4} {r['s_lr']:>6.3f} {where:<9}{_cell(r['cosine'], 7)}"
            f"{_cell(r['excess'], 8)}{_cell(r['z'], 7, 1)}{_cell(r['specific'], 9)}"
            f"{_cell(r['implied_s_lr'], 9)} | {protocol}"
        )  # fmt: skip
    return "\n".join(lines)


def draw(results: dict, path: Path) -> None:
    """Excess over the null against step for every run, the implied s·η of the SGD runs against
    lr·step, and the covariance protocol's value score (raw and token-specific excess)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    styles = {"sgd": ("C0", "-"), "sgd_init001": ("C2", "-."), "adamw": ("C1", "--"),
              "adamw_init1": ("C3", ":")}  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    for name, run in runs.items():
        color, dash = styles.get(name, ("C4", "-"))
        for weight, marker in (("W_O", "o"), ("V·W_O", "s")):
            points = _mean_by_step(run["rows"], weight, "excess")
            axes[0].plot(*zip(*points, strict=True), color=color, linestyle=dash, marker=marker,
                         ms=4, label=f"{name} {weight}")  # fmt: skip
        raw = _mean_by_step(run["rows"], "V·W_O", "protocol_raw")
        spec = _mean_by_step(run["rows"], "V·W_O", "protocol_specific_excess")
        axes[2].plot(*zip(*raw, strict=True), color=color, linestyle=dash, marker="^", ms=4,
                     label=f"{name} raw")  # fmt: skip
        axes[2].plot(*zip(*spec, strict=True), color=color, linestyle=dash, marker="v", ms=4,
                     alpha=0.5, label=f"{name} token-specific excess")  # fmt: skip
        if run["optimizer"] != "sgd":
            continue
        for weight, marker in (("W_O", "o"), ("V·W_O", "s")):
            pts = [
                (r["s_lr"], r["implied_s_lr"])
                for r in run["rows"]
                if r["weight"] == weight and r["step"] and _finite(r["implied_s_lr"])
            ]
            if pts:
                axes[1].loglog(*zip(*pts, strict=True), color=color, marker=marker,
                               linestyle="", mfc=color if weight == "W_O" else "none",
                               label=f"{name} {weight}")  # fmt: skip
    span = [r["s_lr"] for run in runs.values() for r in run["rows"]
            if run["optimizer"] == "sgd" and r["step"]]  # fmt: skip
    if span:
        axes[1].loglog([min(span), max(span)], [min(span), max(span)], color="grey", lw=1,
                       label="implied = lr·steps")  # fmt: skip
    axes[0].set(xscale="symlog", xlabel="step", ylabel="cosine − null mean (excess)",
                title="decompose: W_O vs B̄, V·W_O vs Φ̄ᵀΣ_B̄ (layers averaged)")  # fmt: skip
    axes[1].set(xlabel="lr·steps", ylabel="implied s·η (cosine ≥ 0.2)",
                title="decompose: implied s·η of the SGD runs")  # fmt: skip
    axes[2].set(xscale="symlog", xlabel="step", ylim=(-0.05, 1.0),
                title="covariance protocol: value_post (layers averaged)")  # fmt: skip
    for ax in (axes[0], axes[2]):
        ax.axhline(0, color="grey", lw=0.8)
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def _mean_by_step(rows: list[dict], weight: str, key: str) -> list[tuple[int, float]]:
    """``key`` averaged over the layers of ``weight``, per step."""
    found: dict[int, list[float]] = {}
    for r in rows:
        if r["weight"] == weight and r.get(key) is not None:
            found.setdefault(r["step"], []).append(r[key])
    return [(step, sum(v) / len(v)) for step, v in sorted(found.items())]


def run_control(preset_name: str, out: Path) -> dict:
    """Train every run of the preset under ``out``, score every checkpoint; the results."""
    preset = PRESETS[preset_name]
    started = time.perf_counter()
    folders = train_runs(out, preset)
    stats = training_stats(next(iter(folders.values())))
    results = {"preset": preset_name, "series": preset["series"], "null": preset["null"],
               "n_windows": stats.n_sequences, "d_vocab": stats.d_vocab, "runs": {}}  # fmt: skip
    for name, folder in folders.items():
        info = json.loads((folder / "series.json").read_text())
        results["runs"][name] = {**preset["runs"][name], "losses": info["losses"],
                                 "rows": control_rows(folder, stats, preset["null"])}  # fmt: skip
    results["seconds"] = time.perf_counter() - started
    return results


def _no_nan(value):
    """``value`` with NaN as None (valid JSON)."""
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_nan(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--out", type=Path, default=None, help="where the series are trained")
    args = parser.parse_args()
    torch.set_num_threads(1)  # small matrices: on a shared 2-core machine one thread is faster
    out = args.out or Path(tempfile.mkdtemp()) / "positive_control"
    results = run_control(args.preset, out)
    for name, run in results["runs"].items():
        print(format_table(name, run, run["rows"]), end="\n\n", flush=True)
    full = args.preset == "full"
    json_path = (ROOT / "benchmarks" / "results" / "positive_control.json" if full
                 else out / "positive_control.json")  # fmt: skip
    figure = ROOT / "docs" / "positive_control.png" if full else out / "positive_control.png"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    write_text(json_path, json.dumps(_no_nan(results), indent=2) + "\n")
    draw(results, figure)
    print(f"wrote {json_path} and {figure} ({results['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
