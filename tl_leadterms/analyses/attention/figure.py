"""The attention agreement's figure: per head, rank correlation and divergence as heatmaps."""

import math

from tl_leadterms.results.figures import check_result, heatmap, layer_head_grid, save_figure

__all__ = ["plot_agreement"]


def plot_agreement(agreement: object, *, path: object = None):
    """Attention agreement per head: two layers × heads heatmaps, annotated.

    Left, the rank correlation of each head's pattern with the predicted scores (−1 … 1);
    right, the mean Jensen–Shannon divergence (0 … ln 2). A ``*`` marks a head whose fitted
    scale ``c`` is at the edge of its search (``scale_at_bound``: read "at least"/"at most").

    Args:
        agreement: an :class:`~tl_leadterms.analyses.attention.AttentionAgreement`.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        A ``matplotlib.figure.Figure``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    check_result(agreement, "AttentionAgreement", "attention_agreement")
    rank, layers, heads = layer_head_grid(agreement.rows, "rank_correlation")
    js, _, _ = layer_head_grid(agreement.rows, "js_divergence")
    bound, _, _ = layer_head_grid(agreement.rows, "scale_at_bound")
    width = 2.0 + 2 * (0.6 * len(heads) + 1.2)
    fig = Figure(figsize=(width, 1.4 + 0.4 * len(layers)), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    names = [f"L{layer}" for layer in layers]
    cols = [f"H{h}" for h in heads]
    marks = bound == 1.0
    heatmap(left, fig, rank, names, cols, vmin=-1.0, vmax=1.0, cmap="RdBu",
             label="rank correlation", marks=marks)  # fmt: skip
    heatmap(right, fig, js, names, cols, vmin=0.0, vmax=math.log(2), cmap="viridis_r",
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
