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

__all__ = ["plot_history", "plot_sweep"]


def _figure(width: float, height: float, rows: int = 1) -> tuple[Any, list]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
    return fig, list(axes)


def _save(fig: Any, path: object) -> None:
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
    cosine with its leading term; the bottom panel has the loss.

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
    fig, (top, bottom) = _figure(7.0, 6.0, rows=2)
    if history.cosines:
        for name, values in history.cosines.items():
            style = "-" if name == "W_O" else ("--" if name.startswith("V") else "-.")
            top.plot(history.steps, values, style, marker=".", label=name)
        top.legend(fontsize="small", ncol=max(1, math.ceil(len(history.cosines) / 6)))
    else:
        top.text(0.5, 0.5, "no cosines recorded (train with track=stats)", ha="center",
                 va="center", transform=top.transAxes)  # fmt: skip
    top.set_ylabel("cosine with leading term")
    top.set_title("weights vs. their leading terms")
    top.grid(alpha=0.3)
    bottom.plot(history.steps, history.loss, color="black", marker=".")
    bottom.set_xlabel("step")
    bottom.set_ylabel("loss (cross-entropy)")
    bottom.grid(alpha=0.3)
    for ax in (top, bottom):
        ax.set_xlim(min(history.steps), max(max(history.steps), min(history.steps) + 1))
    _save(fig, path)
    return fig


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

    from tl_leadterms.checkpoints.sweep_table import SweepTable

    if not isinstance(table, SweepTable):
        raise LeadTermsError(
            f"table must be the SweepTable returned by tl_leadterms.sweep, got "
            f"{type(table).__name__}"
        )
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
    rows = [("W_O" if layer == "-" else f"L{layer}") for layer in grid.index]
    cols = [str(c) for c in grid.columns]
    fig, (ax,) = _figure(1.6 + 0.9 * len(cols), 1.4 + 0.45 * len(rows))
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
    _save(fig, path)
    return fig
