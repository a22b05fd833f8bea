"""Static matplotlib figures: training curves and checkpoint-sweep heatmaps.

Figures are built with ``matplotlib.figure.Figure`` and the Agg canvas, never through pyplot:
nothing opens a window, no global backend is switched and no figure is left registered.
"""

import math
import os
from pathlib import Path
from typing import Any

from tl_leadterms.atomic import atomic_path
from tl_leadterms.errors import LeadTermsError

__all__ = ["COSINE_GAP_FLOOR", "plot_history", "plot_scores", "plot_sweep", "plot_sweep_null"]

#: 1 − cosine is drawn on a log axis, clipped below at this value (a cosine of exactly 1)
COSINE_GAP_FLOOR = 1e-12


def new_figure(width: float, height: float, rows: int = 1) -> tuple[Any, list]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
    return fig, list(axes)


def save_figure(fig: Any, path: object) -> None:
    if path is None:
        return
    if not isinstance(path, (str, os.PathLike)):
        raise LeadTermsError(f"path must be a str, os.PathLike or None, got {path!r}")
    if Path(path).suffix.lower() not in ("", ".png"):
        raise LeadTermsError(f"figures are saved as PNG; give {path!r} a .png suffix")
    with atomic_path(path, parents=True) as tmp:
        fig.savefig(tmp, format="png", dpi=120)


def plot_history(history: object, path: object = None):
    """Training curves of :func:`~tl_leadterms.train`: cosines and loss against the step.

    The top panel has one line per recorded weight (``"W_O"``, ``"V.0"``, ``"W.0"``, ...): its
    distance from its leading term as ``1 − cosine`` on a log axis (clipped below at
    :data:`COSINE_GAP_FLOOR`), so that 0.999999 and 0.99 read apart without offset tick labels;
    the bottom panel has the loss.

    Args:
        history: a :class:`~tl_leadterms.TrainHistory`.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        A ``matplotlib.figure.Figure``.
    """
    from tl_leadterms.training import TrainHistory

    if not isinstance(history, TrainHistory):
        raise LeadTermsError(
            f"history must be the TrainHistory returned by tl_leadterms.train, got "
            f"{type(history).__name__}"
        )
    if not history.steps:
        raise LeadTermsError("the history is empty; train for at least one step first")
    fig, (top, bottom) = new_figure(7.0, 6.0, rows=2)
    if history.cosines:
        for name, values in history.cosines.items():
            style = "-" if name == "W_O" else ("--" if name.startswith("V") else "-.")
            gaps = [max(1.0 - v, COSINE_GAP_FLOOR) if math.isfinite(v) else math.nan
                    for v in values]  # fmt: skip
            top.plot(history.steps, gaps, style, marker=".", label=name)
        top.set_yscale("log")
        top.legend(fontsize="small", ncol=max(1, math.ceil(len(history.cosines) / 6)))
    else:
        top.text(0.5, 0.5, "no cosines recorded (train with track=stats)", ha="center",
                 va="center", transform=top.transAxes)  # fmt: skip
    top.set_ylabel("1 − cosine with leading term")
    top.set_title("weights vs. their leading terms")
    top.grid(alpha=0.3)
    bottom.plot(history.steps, history.loss, color="black", marker=".")
    bottom.set_xlabel("step")
    bottom.set_ylabel("loss (cross-entropy)")
    bottom.grid(alpha=0.3)
    for ax in (top, bottom):
        ax.set_xlim(min(history.steps), max(max(history.steps), min(history.steps) + 1))
    save_figure(fig, path)
    return fig


def _check_sweep_table(table: object) -> None:
    from tl_leadterms.checkpoints.sweep_table import SweepTable

    if not isinstance(table, SweepTable):
        raise LeadTermsError(
            f"table must be the SweepTable returned by tl_leadterms.sweep, got "
            f"{type(table).__name__}"
        )


def plot_sweep(table: object, score: object, *, analysis: object = None, path: object = None):
    """Heatmap of one score of a checkpoint sweep: layers × checkpoints, annotated.

    Args:
        table: a :class:`~tl_leadterms.SweepTable` (from :func:`~tl_leadterms.sweep`).
        score: the score's name (see ``table.scores()``).
        analysis: which analysis, when several report a score of that name.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        A ``matplotlib.figure.Figure``.
    """
    import numpy as np

    _check_sweep_table(table)
    if not isinstance(score, str) or (analysis is not None and not isinstance(analysis, str)):
        raise LeadTermsError(
            f"score and analysis must be strings (got {score!r}, {analysis!r}); scores: "
            f"{table.scores()}"
        )
    grid = table.pivot(score, analysis=analysis)
    if grid.empty:
        raise LeadTermsError(
            f"score {score!r} has no layer-level rows (only per-head ones); scores: "
            f"{table.scores()}"
        )
    values = grid.to_numpy(dtype=float)
    whole = "W_O" if "W_O" in score else "model"  # a layer-free row: W_O or a whole-model score
    rows = [(whole if layer == "-" else f"L{layer}") for layer in grid.index]
    cols = [str(c) for c in grid.columns]
    fig, (ax,) = new_figure(1.6 + 0.9 * len(cols), 1.4 + 0.45 * len(rows))
    finite = values[np.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    image = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap="viridis",
                      vmin=low, vmax=high if high > low else low + 1e-12)  # fmt: skip
    middle = (low + high) / 2
    for (i, j), v in np.ndenumerate(values):
        text = "–" if not math.isfinite(v) else f"{v:.3f}"
        colour = "black" if math.isfinite(v) and v > middle else "white"
        ax.text(j, i, text, ha="center", va="center", fontsize="small", color=colour)
    ax.set_xticks(range(len(cols)), cols, rotation=45 if len(cols) > 6 else 0, ha="right"
                  if len(cols) > 6 else "center")  # fmt: skip
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("checkpoint")
    ax.set_ylabel("layer")
    label = score if analysis is None else f"{analysis}: {score}"
    ax.set_title(label)
    fig.colorbar(image, ax=ax, label=score)
    save_figure(fig, path)
    return fig


def plot_scores(decomposition: object, *, score: str | None = None, path: object = None):
    """Each weight's scores over its rows, with the CI band and the null band when present.

    One panel per weight (rows with a layer, in table order). The line is ``score`` (default:
    the rows' ``"score"`` column when they have one, else ``"cosine"``); the shaded band is the
    confidence interval ``lo``–``hi`` (with its bias-corrected estimate ``corrected``, dashed)
    and the grey band ``null_mean ± 2·null_sd``, each drawn only where the rows have those
    columns; with a null, the excess ``score − null_mean`` on the right axis.

    Args:
        decomposition: a :class:`~tl_leadterms.Decomposition` (or anything with ``.rows``).
        score: the column to draw.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        A ``matplotlib.figure.Figure``.
    """
    rows = getattr(decomposition, "rows", None)
    if not isinstance(rows, list):
        raise LeadTermsError(
            "decomposition must be a Decomposition (with .rows), got "
            f"{type(decomposition).__name__}"
        )
    rows = [r for r in rows if r.get("layer") is not None]
    if not rows:
        raise LeadTermsError("the decomposition has no per-layer or per-head rows to plot")
    column = score or ("score" if any("score" in r for r in rows) else "cosine")
    weights = list(dict.fromkeys(r["weight"] for r in rows))
    fig, axes = new_figure(7.0, 1.2 + 1.8 * len(weights), rows=len(weights))
    for ax, weight in zip(axes, weights, strict=True):
        mine = [r for r in rows if r["weight"] == weight]
        x = list(range(len(mine)))

        def get(key: str, mine: list[dict] = mine) -> list[float]:
            return [float(r.get(key, math.nan)) for r in mine]

        if any("null_mean" in r and "null_sd" in r for r in mine):
            mean, sd = get("null_mean"), get("null_sd")
            ax.fill_between(x, [m - 2 * s for m, s in zip(mean, sd, strict=True)],
                            [m + 2 * s for m, s in zip(mean, sd, strict=True)], color="0.8",
                            alpha=0.7, label="null mean ± 2 sd")  # fmt: skip
        if any("lo" in r and "hi" in r for r in mine):
            ax.fill_between(x, get("lo"), get("hi"), color="tab:blue", alpha=0.25, label="CI")
            if any("corrected" in r for r in mine):  # the estimate the interval is built around
                ax.plot(x, get("corrected"), ls="--", color="tab:blue", label="bias-corrected")
        ax.plot(x, get(column), marker=".", color="tab:blue", label=column)
        handles, labels = ax.get_legend_handles_labels()
        if any("null_mean" in r for r in mine):  # the effect size on its own axis
            right = ax.twinx()
            excess = [s - m for s, m in zip(get(column), get("null_mean"), strict=True)]
            right.plot(x, excess, ":", marker="x", color="tab:red", label="excess")
            right.set_ylabel("excess", color="tab:red")
            more = right.get_legend_handles_labels()
            handles, labels = handles + more[0], labels + more[1]
        ticks = x if len(x) <= 24 else x[:: math.ceil(len(x) / 24)]
        ax.set_xticks(ticks, [mine[i]["label"] for i in ticks], rotation=90, fontsize="x-small")
        ax.set_ylabel(f"{weight}: {column}")
        ax.grid(alpha=0.3)
        ax.legend(handles, labels, fontsize="small")
    save_figure(fig, path)
    return fig


def plot_sweep_null(table: object, score: object, *, analysis: object = None, path: object = None):
    """One score of a sweep with ``null=`` across checkpoints: raw score, null band, excess.

    One panel per layer (layer-level rows): the score (``value``), the grey band
    ``null_mean ± 2·null_sd`` and, on the right axis, ``excess = value − null_mean``; with a
    ``specific`` column (the covariance protocol's token-specific score, or decompose's) that
    too, dashed. A score that sits on the top of its null band has an excess near 0 whatever
    its height.

    Args:
        table: a :class:`~tl_leadterms.SweepTable` whose rows have ``null_mean`` (a sweep
            with ``null=``).
        score: the score's name (see ``table.scores()``).
        analysis: which analysis, when several report a score of that name.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        A ``matplotlib.figure.Figure``.
    """
    _check_sweep_table(table)
    rows = [r for r in table.rows if r["score"] == score and r["head"] is None
            and (analysis is None or r["analysis"] == analysis)]  # fmt: skip
    if not any(r.get("null_mean") is not None for r in rows):
        raise LeadTermsError(
            f"score {score!r} has no layer-level rows with a null (sweep with null=R); "
            f"scores: {table.scores()}"
        )
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    fig, axes = new_figure(1.8 + 0.6 * len(table.checkpoints), 1.2 + 1.9 * len(layers), len(layers))
    x = list(range(len(table.checkpoints)))
    for ax, layer in zip(axes, layers, strict=True):
        found = {r["checkpoint"]: r for r in rows if r["layer"] == layer}

        def get(key: str, found: dict = found) -> list[float]:
            values = [found.get(c, {}).get(key) for c in table.checkpoints]
            return [math.nan if v is None else float(v) for v in values]

        mean, sd, value = get("null_mean"), get("null_sd"), get("value")
        ax.fill_between(x, [m - 2 * s for m, s in zip(mean, sd, strict=True)],
                        [m + 2 * s for m, s in zip(mean, sd, strict=True)], color="0.8",
                        alpha=0.8, label="null mean ± 2 sd")  # fmt: skip
        ax.plot(x, value, marker=".", color="tab:blue", label=f"{score} (raw)")
        if any(r.get("specific") is not None for r in found.values()):
            ax.plot(x, get("specific"), "--", marker=".", color="tab:green", label="specific")
        right = ax.twinx()
        right.plot(x, [v - m for v, m in zip(value, mean, strict=True)], ":", marker="x",
                   color="tab:red", label="excess")  # fmt: skip
        right.axhline(0.0, color="tab:red", lw=0.5, alpha=0.5)
        right.set_ylabel("excess", color="tab:red")
        ax.set_ylabel("W_O" if layer is None else f"L{layer}")
        ax.set_xticks(x, table.checkpoints, rotation=45 if len(x) > 6 else 0, fontsize="small")
        ax.grid(alpha=0.3)
        handles = ax.get_legend_handles_labels()
        extra = right.get_legend_handles_labels()
        ax.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize="x-small")
    axes[0].set_title(score if analysis is None else f"{analysis}: {score}")
    axes[-1].set_xlabel("checkpoint")
    save_figure(fig, path)
    return fig
