"""Figures of the covariance protocol: its scores per layer, and the token maps' summaries."""

from tl_leadterms.results.figures import (
    as_number,
    check_result,
    heatmap,
    layer_head_grid,
    legend_outside,
    new_figure,
    save_figure,
)

__all__ = ["plot_covariance", "plot_token_maps"]


def plot_covariance(similarity: object, *, path: object = None):
    """The covariance protocol's scores: per layer, one bar per score, with its interval.

    The top panel has a group of bars per layer, one per score (``attention``,
    ``value_post``, ``value_attn``), height the score (``value``); the confidence interval
    ``lo``–``hi`` as a whisker and the null band ``null_mean ± 2·null_sd`` as a grey span
    behind the bar, each where the rows have them; the legend sits above the panels. With
    per-head rows (``per_head=True``) a second panel draws the per-head attention scores as a
    layers × heads heatmap (its colour scale follows the values: diverging around 0 when they
    have both signs).

    Args:
        similarity: a :class:`~tl_leadterms.analyses.covariance.CovarianceSimilarity`.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        An :class:`~tl_leadterms.results.inline_figure.InlineFigure` (a matplotlib figure).
    """
    check_result(similarity, "CovarianceSimilarity", "covariance_similarity")
    layer_rows = [r for r in similarity.rows if r["head"] is None]
    head_rows = [r for r in similarity.rows if r["head"] is not None]
    panels = int(bool(layer_rows)) + int(bool(head_rows))
    layers = sorted({r["layer"] for r in layer_rows})
    fig, axes = new_figure(2.5 + 0.9 * max(len(layers), 3), 0.6 + 2.8 * panels, rows=panels)
    if layer_rows:
        ax = axes[0]
        scores = [s for s in similarity.SCORES if any(r["score"] == s for r in layer_rows)]
        width = 0.8 / len(scores)
        for i, score in enumerate(scores):
            found = {r["layer"]: r for r in layer_rows if r["score"] == score}
            x = [layers.index(layer) + (i - (len(scores) - 1) / 2) * width for layer in found]
            rows = list(found.values())
            height = [as_number(r["value"]) for r in rows]
            ax.bar(x, height, width=width * 0.9, label=score, color=f"C{i}")
            for xi, r in zip(x, rows, strict=True):
                if r.get("null_mean") is not None and r.get("null_sd") is not None:
                    m, s = as_number(r["null_mean"]), as_number(r["null_sd"])
                    ax.fill_between([xi - width / 2, xi + width / 2], m - 2 * s, m + 2 * s,
                                    color="0.6", alpha=0.5, lw=0, zorder=0)  # fmt: skip
            with_ci = [(xi, r) for xi, r in zip(x, rows, strict=True) if "lo" in r]
            if with_ci:
                xs = [xi for xi, _ in with_ci]
                mid = [as_number(r["value"]) for _, r in with_ci]
                err = [
                    [v - as_number(r["lo"]) for v, (_, r) in zip(mid, with_ci, strict=True)],
                    [as_number(r["hi"]) - v for v, (_, r) in zip(mid, with_ci, strict=True)],
                ]
                ax.errorbar(xs, mid, yerr=err, fmt="none", ecolor="black", capsize=2, lw=1)
        ax.axhline(0.0, color="black", lw=0.5)
        ax.set_xticks(range(len(layers)), [f"L{layer}" for layer in layers])
        ax.set_xlabel("layer")
        ax.set_ylabel("cosine with the leading term")
        ax.grid(alpha=0.3, axis="y")
        meta = similarity.metadata
        ax.set_title(f"covariance similarity of {meta.get('model_name')!r} "
                     f"(normalize={meta.get('normalize')!r})", fontsize="small")  # fmt: skip
    if head_rows:
        grid, hl, hh = layer_head_grid([r for r in head_rows if r["score"] == "attention"],
                                        "value")  # fmt: skip
        heatmap(axes[-1], fig, grid, [f"L{layer}" for layer in hl], [f"H{h}" for h in hh],
                 label="attention score")  # fmt: skip
        axes[-1].set_xlabel("head")
        axes[-1].set_ylabel("layer")
        axes[-1].set_title("attention score per head", fontsize="small")
    if layer_rows:
        legend_outside(fig, axes[:1])
    save_figure(fig, path)
    return fig


def plot_token_maps(maps: object, *, path: object = None):
    """The token maps' summaries per layer: one series of points per map (pre, post, attn).

    The top panel has the mean L2 norm of the tokens' rows (``mean_norm``), the bottom one the
    mean cosine between two different tokens' rows (``mean_cosine``: near 1 when every token
    points one common way).

    Args:
        maps: a :class:`~tl_leadterms.analyses.covariance.TokenMaps`.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        An :class:`~tl_leadterms.results.inline_figure.InlineFigure` (a matplotlib figure).
    """
    check_result(maps, "TokenMaps", "token_maps")
    fig, (top, bottom) = new_figure(7.0, 5.5, rows=2)
    names = list(dict.fromkeys(r["map"] for r in maps.rows))
    for i, name in enumerate(names):  # layers are categories: points, dodged per map
        mine = [r for r in maps.rows if r["map"] == name]
        x = [r["layer"] + 0.12 * (i - (len(names) - 1) / 2) for r in mine]
        top.scatter(x, [r["mean_norm"] for r in mine], s=22, label=f"E_{name}", color=f"C{i}")
        bottom.scatter(x, [r["mean_cosine"] for r in mine], s=22, color=f"C{i}")
    top.set_ylabel("mean row norm")
    bottom.set_ylabel("mean cosine of two tokens")
    bottom.set_xlabel("layer")
    top.set_title(f"token maps of {maps.metadata.get('model_name')!r} ({maps.n} tokens)",
                  fontsize="small")  # fmt: skip
    for ax in (top, bottom):
        ax.set_xticks(maps.layers, [f"L{layer}" for layer in maps.layers])
        ax.grid(alpha=0.3, axis="y")
    legend_outside(fig, [top])
    save_figure(fig, path)
    return fig
