"""Checkpoint-sweep heatmaps: a score over checkpoints × layers (or heads), and its null excess."""

import math

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.figures import new_figure, save_figure

__all__ = ["plot_sweep", "plot_sweep_null"]


def _check_sweep_table(table: object) -> None:
    if "SweepTable" not in {cls.__name__ for cls in type(table).__mro__}:
        raise LeadTermsError(
            f"table must be the SweepTable returned by tl_leadterms.sweep, got "
            f"{type(table).__name__}"
        )


def plot_sweep(table: object, score: object, *, analysis: object = None, path: object = None):
    """Heatmap of one score of a checkpoint sweep: layers × checkpoints, annotated.

    Args:
        table: a :class:`~tl_leadterms.sweeps.SweepTable` (from :func:`~tl_leadterms.sweep`).
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


def plot_sweep_null(table: object, score: object, *, analysis: object = None, path: object = None):
    """One score of a sweep with ``null=`` across checkpoints: raw score, null band, excess.

    One panel per layer (layer-level rows): the score (``value``), the grey band
    ``null_mean ± 2·null_sd`` and, on the right axis, ``excess = value − null_mean``; with a
    ``specific`` column (the covariance protocol's token-specific score, or decompose's) that
    too, dashed. A score that sits on the top of its null band has an excess near 0 whatever
    its height.

    Args:
        table: a :class:`~tl_leadterms.sweeps.SweepTable` whose rows have ``null_mean`` (a sweep
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
