"""Training curves: the cosine of each weight with its leading term, and the loss, per step."""

import math
from typing import Any

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.figures import COSINE_GAP_FLOOR, check_result, new_figure, save_figure
from tl_leadterms.results.findings import HOLD_COSINE, explained_text, first_below
from tl_leadterms.results.sections import Section, esc, figure_block

__all__ = ["plot_history", "report_section"]


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
    check_result(history, "TrainHistory", "train")
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


def report_section(history: Any) -> Section:
    """The report section of a training history: its figure, and where the theory stops
    holding (the first step a weight's cosine falls below ``HOLD_COSINE``, or the leading-term
    model's explained share of the KL gap below ``HOLD_EXPLAINED``)."""
    said = []
    if history.cosines:
        broken = {n: hit for n, v in history.cosines.items()
                  if (hit := first_below(history.steps, v)) is not None}  # fmt: skip
        if broken:
            where = "; ".join(f"{n} at step {s} (cosine {v:.3f})" for n, (s, v) in broken.items())
            said.append(f"Training history: the theory stops holding (cosine < {HOLD_COSINE}) "
                        f"for {where}.")  # fmt: skip
        else:
            said.append(f"Training history: every weight keeps cosine ≥ {HOLD_COSINE} with its "
                        f"leading term through step {history.steps[-1]}.")  # fmt: skip
    if history.scores.get("output_explained"):
        said.append(explained_text("Training history", history.steps,
                                   history.scores["output_explained"]))  # fmt: skip
    body = figure_block(lambda: plot_history(history),
                        "Training history: loss and 1 − cosine (log scale)")  # fmt: skip
    return Section("history", "Training history", body, tuple(esc(s) for s in said))
