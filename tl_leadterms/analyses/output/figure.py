"""The next-token agreement's figure: each predictor's explained share, and its KL by position."""

from typing import Any

from tl_leadterms.results.figures import as_number, check_result, new_figure, save_figure

__all__ = ["plot_output"]

_COLOURS = {"leading": "tab:blue", "bigram": "tab:orange", "unigram": "tab:grey"}


def plot_output(agreement: Any, *, path: Any = None):
    """The output agreement: one bar per predictor, and the KL at each held-out position.

    Top, each predictor's ``explained`` share of the unigram → model KL gap (the unigram's is
    0 by definition), with the interval ``lo``–``hi`` as a whisker where ``ci=`` gave one;
    bottom, ``KL(model ‖ predictor)`` at each position ``t`` (points joined per predictor:
    the position is an ordered axis).

    Args:
        agreement: an :class:`~tl_leadterms.analyses.output.OutputAgreement`.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        A ``matplotlib.figure.Figure``.

    Example:
        >>> from tl_leadterms.analyses.output import OutputAgreement
        >>> rows = [{"predictor": p, "kl": kl, "explained": e, "kl_per_position": [kl, kl]}
        ...         for p, kl, e in (("leading", 0.1, 0.9), ("unigram", 1.0, 0.0))]
        >>> fig = plot_output(OutputAgreement(rows, {}))
        >>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
        ['leading', 'unigram']
    """
    check_result(agreement, "OutputAgreement", "output_agreement")
    rows = agreement.rows
    fig, (top, bottom) = new_figure(6.0, 5.0, rows=2)
    names = [r["predictor"] for r in rows]
    heights = [as_number(r["explained"]) for r in rows]
    colours = [_COLOURS.get(n, "tab:green") for n in names]
    top.bar(range(len(rows)), heights, color=colours)
    for i, r in enumerate(rows):
        if "lo" in r and "hi" in r:
            mid = heights[i]
            top.errorbar([i], [mid], yerr=[[mid - as_number(r["lo"])], [as_number(r["hi"]) - mid]],
                         fmt="none", ecolor="black", capsize=4)  # fmt: skip
    top.set_xticks(range(len(rows)), names)
    top.set_ylabel("explained share of the KL gap")
    top.axhline(0.0, color="black", lw=0.5)
    top.grid(alpha=0.3, axis="y")
    for r, colour in zip(rows, colours, strict=True):
        values = [as_number(v) for v in r.get("kl_per_position") or []]
        bottom.plot(range(len(values)), values, marker=".", color=colour, label=r["predictor"])
    bottom.set_xlabel("position t")
    bottom.set_ylabel("KL(model ‖ predictor), nats")
    bottom.grid(alpha=0.3)
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    save_figure(fig, path)
    return fig
