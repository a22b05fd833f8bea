"""Training curves: the cosine of each weight with its leading term, and the loss, per step."""

import math

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.figures import COSINE_GAP_FLOOR, new_figure, save_figure

__all__ = ["plot_history"]


def plot_history(history: object, path: object = None):
    """Training curves of :func:`~tl_leadterms.train`: cosines and loss against the step.

    The top panel has one line per recorded weight (``"W_O"``, ``"V.0"``, ``"W.0"``, ...): its
    distance from its leading term as ``1 − cosine`` on a log axis (clipped below at
    :data:`COSINE_GAP_FLOOR`), so that 0.999999 and 0.99 read apart without offset tick labels;
    the bottom panel has the loss. The legend sits beside the curves, not over them.

    Args:
        history: a :class:`~tl_leadterms.training.TrainHistory`.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        An :class:`~tl_leadterms.results.inline_figure.InlineFigure` (shows itself in a
        notebook; ``.savefig`` as any matplotlib figure).
    """
    from tl_leadterms.training import TrainHistory

    if not isinstance(history, TrainHistory):
        raise LeadTermsError(
            f"history must be the TrainHistory returned by tl_leadterms.train, got "
            f"{type(history).__name__}"
        )
    if not history.steps:
        raise LeadTermsError("the history is empty; train for at least one step first")
    fig, (top, bottom) = new_figure(8.0, 6.0, rows=2)
    if history.cosines:
        for name, values in history.cosines.items():
            style = "-" if name == "W_O" else ("--" if name.startswith("V") else "-.")
            gaps = [max(1.0 - v, COSINE_GAP_FLOOR) if math.isfinite(v) else math.nan
                    for v in values]  # fmt: skip
            top.plot(history.steps, gaps, style, marker=".", label=name)
        top.set_yscale("log")
        top.legend(fontsize="small", ncols=max(1, math.ceil(len(history.cosines) / 8)),
                   loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # fmt: skip
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
    from matplotlib.ticker import MaxNLocator

    for ax in (top, bottom):
        ax.set_xlim(min(history.steps), max(max(history.steps), min(history.steps) + 1))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    save_figure(fig, path)
    return fig
