"""The attention agreement's figure: per head, rank correlation and divergence as heatmaps."""

from tl_leadterms.results.figures import (
    blank_figure,
    check_result,
    heatmap,
    layer_head_grid,
    save_figure,
)

__all__ = ["plot_agreement"]


def plot_agreement(agreement: object, *, path: object = None):
    """Attention agreement per head: two layers × heads heatmaps, annotated.

    Left, the rank correlation of each head's pattern with the predicted scores (signed: a
    diverging scale centred on 0, as wide as the largest |value|); right, the mean
    Jensen–Shannon divergence (a sequential scale over the values' range). A ``*`` marks a head
    whose fitted scale ``c`` is at the edge of its search (``scale_at_bound``: read "at
    least"/"at most"). Each number is black or white, whichever reads better on its cell.

    Args:
        agreement: an :class:`~tl_leadterms.analyses.attention.AttentionAgreement`.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        An :class:`~tl_leadterms.results.inline_figure.InlineFigure` (a matplotlib figure).
    """
    import numpy as np

    check_result(agreement, "AttentionAgreement", "attention_agreement")
    rank, layers, heads = layer_head_grid(agreement.rows, "rank_correlation")
    js, _, _ = layer_head_grid(agreement.rows, "js_divergence")
    marks = np.zeros(rank.shape, dtype=bool)  # scale_at_bound is a bool: not a grid number
    for r in agreement.rows:
        marks[layers.index(r["layer"]), heads.index(r["head"])] = bool(r.get("scale_at_bound"))
    fig = blank_figure(2.0 + 2 * (0.6 * len(heads) + 1.2), 1.6 + 0.4 * len(layers))
    left, right = fig.subplots(1, 2)
    names = [f"L{layer}" for layer in layers]
    cols = [f"H{h}" for h in heads]
    heatmap(left, fig, rank, names, cols, label="rank correlation", signed=True, marks=marks)
    heatmap(right, fig, js, names, cols, label="JS divergence (nats)", signed=False,
            marks=marks)  # fmt: skip
    left.set_title("rank corr. with predicted attention", fontsize="small")
    right.set_title("JS divergence from predicted attention", fontsize="small")
    for ax in (left, right):
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    meta = agreement.metadata
    fitted = "fitted per head" if meta.get("fitted") else "from the training run"
    fig.suptitle(f"attention vs. leading-term prediction (scale c {fitted}; * at search limit)",
                 fontsize="small")  # fmt: skip
    save_figure(fig, path)
    return fig
