"""Static matplotlib figures of the per-head, per-layer and per-map results.

:func:`plot_agreement` (an :class:`~tl_leadterms.AttentionAgreement`), :func:`plot_covariance`
(a :class:`~tl_leadterms.CovarianceSimilarity`), :func:`plot_ablation` (an
:class:`~tl_leadterms.AblationTable`) and :func:`plot_token_maps` (a
:class:`~tl_leadterms.TokenMaps`); each is also what the result's ``.plot()`` returns. Like
:mod:`tl_leadterms.plot.figures` they build a ``matplotlib.figure.Figure`` on the Agg canvas,
never through pyplot.
"""

import math
from typing import Any

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.plot.figures import new_figure, save_figure

__all__ = ["plot_ablation", "plot_agreement", "plot_covariance", "plot_token_maps"]


def _check(result: object, name: str, made_by: str) -> None:
    import tl_leadterms

    if not isinstance(result, getattr(tl_leadterms, name)):
        raise LeadTermsError(
            f"expected the {name} returned by tl_leadterms.{made_by}, got {type(result).__name__}"
        )
    if not result.rows:
        raise LeadTermsError(f"the {name} has no rows to plot")


def _num(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return math.nan
    return float(value)


def _heatmap(ax: Any, fig: Any, values: Any, rows: list[str], cols: list[str], *, vmin: float,
             vmax: float, cmap: str, label: str, marks: Any = None) -> None:  # fmt: skip
    """An annotated heatmap of ``values`` ``[rows, cols]`` (NaN: masked, shown as "–")."""
    import numpy as np

    image = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap=cmap, vmin=vmin,
                      vmax=vmax)  # fmt: skip
    for (i, j), v in np.ndenumerate(values):
        text = "–" if not math.isfinite(v) else f"{v:.2f}"
        if marks is not None and marks[i, j]:
            text += "*"
        ax.text(j, i, text, ha="center", va="center", fontsize="x-small")
    ax.set_xticks(range(len(cols)), cols)
    ax.set_yticks(range(len(rows)), rows)
    fig.colorbar(image, ax=ax, label=label)


def _layer_head_grid(rows: list[dict], column: str) -> tuple[Any, list[int], list[int]]:
    """``[layers, heads]`` values of ``column`` (NaN where a head has no row)."""
    import numpy as np

    layers = sorted({r["layer"] for r in rows})
    heads = sorted({r["head"] for r in rows})
    grid = np.full((len(layers), len(heads)), np.nan)
    for r in rows:
        grid[layers.index(r["layer"]), heads.index(r["head"])] = _num(r.get(column))
    return grid, layers, heads


def plot_agreement(agreement: object, *, path: object = None):
    """Attention agreement per head: two layers × heads heatmaps, annotated.

    Left, the rank correlation of each head's pattern with the predicted scores (−1 … 1);
    right, the mean Jensen–Shannon divergence (0 … ln 2). A ``*`` marks a head whose fitted
    scale ``c`` is at the edge of its search (``scale_at_bound``: read "at least"/"at most").

    Args:
        agreement: an :class:`~tl_leadterms.AttentionAgreement`.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        A ``matplotlib.figure.Figure``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    _check(agreement, "AttentionAgreement", "attention_agreement")
    rank, layers, heads = _layer_head_grid(agreement.rows, "rank_correlation")
    js, _, _ = _layer_head_grid(agreement.rows, "js_divergence")
    bound, _, _ = _layer_head_grid(agreement.rows, "scale_at_bound")
    width = 2.0 + 2 * (0.6 * len(heads) + 1.2)
    fig = Figure(figsize=(width, 1.4 + 0.4 * len(layers)), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    names = [f"L{layer}" for layer in layers]
    cols = [f"H{h}" for h in heads]
    marks = bound == 1.0
    _heatmap(left, fig, rank, names, cols, vmin=-1.0, vmax=1.0, cmap="RdBu",
             label="rank correlation", marks=marks)  # fmt: skip
    _heatmap(right, fig, js, names, cols, vmin=0.0, vmax=math.log(2), cmap="viridis_r",
             label="JS divergence (nats)", marks=marks)  # fmt: skip
    left.set_title("rank corr. with predicted attention")
    right.set_title("JS divergence from predicted attention")
    for ax in (left, right):
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    meta = agreement.metadata
    fitted = "fitted per head" if meta.get("fitted") else "from the training run"
    fig.suptitle(f"attention vs. leading-term prediction (scale c {fitted}; * at search limit)",
                 fontsize="small")  # fmt: skip
    save_figure(fig, path)
    return fig


def plot_covariance(similarity: object, *, path: object = None):
    """The covariance protocol's scores: per layer, one bar per score, with its interval.

    The top panel has a group of bars per layer, one per score (``attention``,
    ``value_post``, ``value_attn``), height the score (``value``); the confidence interval
    ``lo``–``hi`` as a whisker and the null band ``null_mean ± 2·null_sd`` as a grey span
    behind the bar, each where the rows have them. With per-head rows (``per_head=True``) a
    second panel draws the per-head attention scores as a layers × heads heatmap.

    Args:
        similarity: a :class:`~tl_leadterms.CovarianceSimilarity`.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        A ``matplotlib.figure.Figure``.
    """
    from tl_leadterms.analyzers.covariance_result import SCORES

    _check(similarity, "CovarianceSimilarity", "covariance_similarity")
    layer_rows = [r for r in similarity.rows if r["head"] is None]
    head_rows = [r for r in similarity.rows if r["head"] is not None]
    panels = int(bool(layer_rows)) + int(bool(head_rows))
    layers = sorted({r["layer"] for r in layer_rows})
    fig, axes = new_figure(2.5 + 0.9 * max(len(layers), 3), 0.6 + 2.8 * panels, rows=panels)
    if layer_rows:
        ax = axes[0]
        scores = [s for s in SCORES if any(r["score"] == s for r in layer_rows)]
        width = 0.8 / len(scores)
        for i, score in enumerate(scores):
            found = {r["layer"]: r for r in layer_rows if r["score"] == score}
            x = [layers.index(layer) + (i - (len(scores) - 1) / 2) * width for layer in found]
            rows = list(found.values())
            height = [_num(r["value"]) for r in rows]
            ax.bar(x, height, width=width * 0.9, label=score, color=f"C{i}")
            for xi, r in zip(x, rows, strict=True):
                if r.get("null_mean") is not None and r.get("null_sd") is not None:
                    m, s = _num(r["null_mean"]), _num(r["null_sd"])
                    ax.fill_between([xi - width / 2, xi + width / 2], m - 2 * s, m + 2 * s,
                                    color="0.6", alpha=0.5, lw=0, zorder=0)  # fmt: skip
            with_ci = [(xi, r) for xi, r in zip(x, rows, strict=True) if "lo" in r]
            if with_ci:
                xs = [xi for xi, _ in with_ci]
                mid = [_num(r["value"]) for _, r in with_ci]
                err = [
                    [v - _num(r["lo"]) for v, (_, r) in zip(mid, with_ci, strict=True)],
                    [_num(r["hi"]) - v for v, (_, r) in zip(mid, with_ci, strict=True)],
                ]
                ax.errorbar(xs, mid, yerr=err, fmt="none", ecolor="black", capsize=2, lw=1)
        ax.axhline(0.0, color="black", lw=0.5)
        ax.set_xticks(range(len(layers)), [f"L{layer}" for layer in layers])
        ax.set_xlabel("layer")
        ax.set_ylabel("cosine with the leading term")
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3, axis="y")
        meta = similarity.metadata
        ax.set_title(f"covariance similarity of {meta.get('model_name')!r} "
                     f"(normalize={meta.get('normalize')!r})", fontsize="small")  # fmt: skip
    if head_rows:
        grid, hl, hh = _layer_head_grid([r for r in head_rows if r["score"] == "attention"],
                                        "value")  # fmt: skip
        _heatmap(axes[-1], fig, grid, [f"L{layer}" for layer in hl], [f"H{h}" for h in hh],
                 vmin=-1.0, vmax=1.0, cmap="RdBu", label="attention score")  # fmt: skip
        axes[-1].set_xlabel("head")
        axes[-1].set_ylabel("layer")
        axes[-1].set_title("attention score per head")
    save_figure(fig, path)
    return fig


def plot_ablation(table: object, *, path: object = None):
    """The ablation table: per (weight, layer), the share removed and what it did to the loss.

    Left, the fraction of each map removed with its leading-term projection
    (``removed_fraction``, 0 … 1); right, the loss change ``loss − original_loss`` (red: the
    loss rose). One horizontal bar per row, labelled ``"W_O"``, ``"V L0"``, ...

    Args:
        table: an :class:`~tl_leadterms.AblationTable`.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        A ``matplotlib.figure.Figure``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    _check(table, "AblationTable", "ablate")
    rows = table.rows
    labels = [r["weight"] if r["layer"] is None else f"{r['weight']} L{r['layer']}" for r in rows]
    y = list(range(len(rows)))
    fig = Figure(figsize=(8.0, 1.2 + 0.35 * len(rows)), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, sharey=True)
    left.barh(y, [_num(r["removed_fraction"]) for r in rows], color="tab:blue")
    left.set_xlim(0.0, 1.0)
    left.set_xlabel("fraction removed (cos² with the leading term)")
    change = [_num(r["loss"]) - table.original_loss for r in rows]
    right.barh(y, change, color=["tab:red" if c > 0 else "tab:green" for c in change])
    right.axvline(0.0, color="black", lw=0.5)
    right.set_xlabel("loss change")
    left.set_yticks(y, labels)
    left.invert_yaxis()
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle(f"ablating each leading term (original loss {table.original_loss:.4f})",
                 fontsize="small")  # fmt: skip
    save_figure(fig, path)
    return fig


def plot_token_maps(maps: object, *, path: object = None):
    """The token maps' summaries against the layer: one line per map (pre, post, attn).

    The top panel has the mean L2 norm of the tokens' rows (``mean_norm``), the bottom one the
    mean cosine between two different tokens' rows (``mean_cosine``: near 1 when every token
    points one common way).

    Args:
        maps: a :class:`~tl_leadterms.TokenMaps`.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        A ``matplotlib.figure.Figure``.
    """
    _check(maps, "TokenMaps", "token_maps")
    fig, (top, bottom) = new_figure(7.0, 5.5, rows=2)
    for name in dict.fromkeys(r["map"] for r in maps.rows):
        mine = [r for r in maps.rows if r["map"] == name]
        x = [r["layer"] for r in mine]
        top.plot(x, [r["mean_norm"] for r in mine], marker=".", label=f"E_{name}")
        bottom.plot(x, [r["mean_cosine"] for r in mine], marker=".", label=f"E_{name}")
    top.set_ylabel("mean row norm")
    bottom.set_ylabel("mean cosine of two tokens")
    bottom.set_xlabel("layer")
    top.set_title(f"token maps of {maps.metadata.get('model_name')!r} ({maps.n} tokens)",
                  fontsize="small")  # fmt: skip
    for ax in (top, bottom):
        ax.set_xticks(maps.layers)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    save_figure(fig, path)
    return fig
