"""The decomposition's figure: each weight's scores over its rows, with CI and null bands."""

import math

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.figures import new_figure, save_figure

__all__ = ["plot_scores"]


def plot_scores(decomposition: object, *, score: str | None = None, path: object = None):
    """Each weight's scores over its rows, with the CI band and the null band when present.

    One panel per weight (rows with a layer, in table order). The line is ``score`` (default:
    the rows' ``"score"`` column when they have one, else ``"cosine"``); the shaded band is the
    confidence interval ``lo``–``hi`` (with ``corrected``, its estimate of the
    distribution-level cosine, dashed) and the grey band ``null_mean ± 2·null_sd``, each
    drawn only where the rows have those columns; with a null, the excess
    ``score − null_mean`` on the right axis.

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
                label = "distribution-level estimate"
                ax.plot(x, get("corrected"), ls="--", color="tab:blue", label=label)
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
