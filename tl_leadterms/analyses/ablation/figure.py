"""The ablation table's figure (what each result's ``.plot()`` returns)."""

from tl_leadterms.results.figures import as_number, blank_figure, check_result, save_figure

__all__ = ["plot_ablation"]


def plot_ablation(table: object, *, path: object = None):
    """The ablation table: per (weight, layer), the share removed and what it did to the loss.

    Left, the fraction of each map removed with its leading-term projection
    (``removed_fraction``, 0 … 1); right, the loss change ``loss − original_loss`` (red: the
    loss rose). One horizontal bar per row, labelled ``"W_O"``, ``"V L0"``, ...

    Args:
        table: an :class:`~tl_leadterms.analyses.ablation.AblationTable`.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        An :class:`~tl_leadterms.results.inline_figure.InlineFigure` (a matplotlib figure).
    """
    check_result(table, "AblationTable", "ablate")
    rows = table.rows
    labels = [r["weight"] if r["layer"] is None else f"{r['weight']} L{r['layer']}" for r in rows]
    y = list(range(len(rows)))
    fig = blank_figure(8.0, 1.2 + 0.35 * len(rows))
    left, right = fig.subplots(1, 2, sharey=True)
    left.barh(y, [as_number(r["removed_fraction"]) for r in rows], color="tab:blue")
    left.set_xlim(0.0, 1.0)
    left.set_xlabel("fraction removed (cos² with the leading term)")
    change = [as_number(r["loss"]) - table.original_loss for r in rows]
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
