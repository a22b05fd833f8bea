"""The decomposition's figure: each weight's scores over its rows, with CI and null bands."""

import math

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.figures import legend_outside, new_figure, save_figure

__all__ = ["plot_scores"]


def _draw_weight(ax, mine: list[dict], column: str) -> None:
    """One weight's rows as categories: null band as a grey bar, score as a point with its
    interval as an error bar, the distribution-level estimate as a hollow diamond."""
    x = list(range(len(mine)))

    def get(key: str) -> list[float]:
        return [float(r.get(key, math.nan)) if r.get(key) is not None else math.nan
                for r in mine]  # fmt: skip

    if any("null_mean" in r and "null_sd" in r for r in mine):
        mean, sd = get("null_mean"), get("null_sd")
        ax.bar(x, [4 * s for s in sd], bottom=[m - 2 * s for m, s in zip(mean, sd, strict=True)],
               width=0.7, color="0.85", label="null mean ± 2 sd", zorder=1)  # fmt: skip
    value = get(column)
    if any("lo" in r and "hi" in r for r in mine):
        lo, hi = get("lo"), get("hi")
        below = [v - a if math.isfinite(v - a) else 0.0 for v, a in zip(value, lo, strict=True)]
        above = [b - v if math.isfinite(b - v) else 0.0 for v, b in zip(value, hi, strict=True)]
        ax.errorbar(x, value, yerr=[below, above], fmt="none", ecolor="tab:blue", capsize=3,
                    lw=1, label="CI", zorder=2)  # fmt: skip
        if any("corrected" in r for r in mine):  # the estimate the interval is built around
            ax.scatter(x, get("corrected"), marker="D", s=18, facecolors="none",
                       edgecolors="tab:blue", label="distribution-level estimate",
                       zorder=3)  # fmt: skip
    ax.scatter(x, value, s=22, color="tab:blue", label=column, zorder=4)
    step = 1 if len(x) <= 32 else math.ceil(len(x) / 32)
    ax.set_xticks(x[::step], [mine[i]["label"] for i in x[::step]], rotation=90,
                  fontsize="x-small")  # fmt: skip
    ax.set_xlim(-0.6, len(x) - 0.4)
    ax.grid(alpha=0.3, axis="y")


def plot_scores(decomposition: object, *, score: str | None = None, path: object = None):
    """Each weight's scores over its rows, with the CI and the null band when present.

    One panel per weight (rows with a layer, in table order), all on one y-scale. Each row (a
    layer or a head: categories, so points, not lines) has its ``score`` as a point (default:
    the rows' ``"score"`` column when they have one, else ``"cosine"``), the confidence interval
    ``lo``–``hi`` as an error bar with ``corrected``, its estimate of the distribution-level
    cosine, as a hollow diamond, and the null band ``null_mean ± 2·null_sd`` as a grey bar
    behind it, each drawn only where the rows have those columns. The legend sits above the panels.

    Args:
        decomposition: a :class:`~tl_leadterms.analyses.decompose.Decomposition` (or anything
            with ``.rows``).
        score: the column to draw.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        An :class:`~tl_leadterms.results.inline_figure.InlineFigure` (a matplotlib figure).
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
    if not any(column in r for r in rows):
        raise LeadTermsError(
            f"no row has a {column!r} column; columns: {sorted({k for r in rows for k in r})}"
        )
    weights = list(dict.fromkeys(r["weight"] for r in rows))
    most = max(sum(r["weight"] == w for r in rows) for w in weights)
    fig, axes = new_figure(max(6.0, 2.5 + 0.22 * most), 1.0 + 1.9 * len(weights), len(weights),
                           sharey=True)  # fmt: skip
    for ax, weight in zip(axes, weights, strict=True):
        _draw_weight(ax, [r for r in rows if r["weight"] == weight], column)
        ax.set_ylabel(f"{weight}: {column}")
    legend_outside(fig, axes)
    save_figure(fig, path)
    return fig
