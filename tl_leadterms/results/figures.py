"""Figure helpers every analysis's figure uses: an inline figure off pyplot, saving, heatmaps.

Figures are :class:`~tl_leadterms.results.inline_figure.InlineFigure` objects (a
``matplotlib.figure.Figure`` on the Agg canvas, never pyplot): nothing opens a window, no global
backend is switched, no figure is left registered, and a figure that is a notebook cell's value
shows itself there, once. matplotlib is imported when the first figure is made.

Conventions the figures keep: categorical axes (heads, layers, weights) as points or bars, never
joined by lines; panels that compare one quantity share their y-scale; legends sit outside the
axes; a heatmap's colour scale follows its data (sequential for scores, diverging and centred
on 0 for values of both signs: :mod:`~tl_leadterms.results.style`'s maps, the HTML tables'
own) and each annotation is black or white, whichever reads better on its cell, with the
digits :func:`~tl_leadterms.results.style.column_format` gives the HTML tables.
"""

import math
import os
from pathlib import Path
from typing import Any

from tl_leadterms.atomic import atomic_path
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.style import DIVERGING, SEQUENTIAL, column_format, ink

__all__ = [
    "COSINE_GAP_FLOOR",
    "MAX_WIDTH",
    "MIN_SPAN",
    "as_number",
    "blank_figure",
    "check_result",
    "colour_scale",
    "heatmap",
    "layer_head_grid",
    "legend_outside",
    "new_figure",
    "save_figure",
]

#: 1 − cosine is drawn on a log axis, clipped below at this value (a cosine of exactly 1)
COSINE_GAP_FLOOR = 1e-12
#: a sequential colour scale spans at least this share of its values' largest |value|
MIN_SPAN = 0.02
#: inches: wider figures are drawn at this width (a notebook column is about 9 inches)
MAX_WIDTH = 10.0


def blank_figure(width: float, height: float) -> Any:
    """An empty :class:`InlineFigure` ``width`` × ``height`` inches (width capped at
    :data:`MAX_WIDTH`), laid out by matplotlib's constrained layout."""
    from tl_leadterms.results.inline_figure import InlineFigure

    return InlineFigure(figsize=(min(width, MAX_WIDTH), height), layout="constrained")


def new_figure(width: float, height: float, rows: int = 1, *, sharey: bool = False):
    """A figure with ``rows`` stacked axes: ``(figure, [axes, ...])``."""
    fig = blank_figure(width, height)
    axes = fig.subplots(rows, 1, squeeze=False, sharey=sharey)[:, 0]
    return fig, list(axes)


def save_figure(fig: Any, path: object) -> None:
    if path is None:
        return
    if not isinstance(path, (str, os.PathLike)):
        raise LeadTermsError(f"path must be a str, os.PathLike or None, got {path!r}")
    if Path(path).suffix.lower() not in ("", ".png"):
        raise LeadTermsError(f"figures are saved as PNG; give {path!r} a .png suffix")
    with atomic_path(path, parents=True) as tmp:
        fig.savefig(tmp, format="png", dpi=120)


def check_result(result: object, name: str, made_by: str) -> None:
    """Refuse anything but a result of class ``name`` (or a subclass) with rows to draw.

    The class is matched by name along ``result``'s MRO, so a figure module never imports the
    result class whose ``.plot()`` imports it.
    """
    if name not in {cls.__name__ for cls in type(result).__mro__}:
        raise LeadTermsError(
            f"expected the {name} returned by tl_leadterms.{made_by}, got {type(result).__name__}"
        )
    if not result.rows:
        raise LeadTermsError(f"the {name} has no rows to plot")


def as_number(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return math.nan
    return float(value)


def colour_scale(values: Any, *, signed: bool | None = None) -> tuple[str, float, float]:
    """``(colormap, vmin, vmax)`` for ``values``: a diverging map centred on 0 (``±max|v|``)
    when they have both signs (or ``signed=True``), else a sequential one over their range.

    A sequential range narrower than :data:`MIN_SPAN` of the values' size is widened about its
    middle to that span, so that values equal to five digits (0.99577 and 0.99576) share a
    colour instead of taking the two ends of the map.

    >>> colour_scale([0.2, 0.5])
    ('viridis', 0.2, 0.5)
    >>> colour_scale([-0.1, 0.4])
    ('RdBu_r', -0.4, 0.4)
    >>> name, low, high = colour_scale([0.995767, 0.995765])
    >>> round(high - low, 4)
    0.0199
    """
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if signed is None:
        signed = low < 0 < high
    if signed:
        edge = max(abs(low), abs(high)) or 1.0
        return DIVERGING, -edge, edge
    span = MIN_SPAN * max(abs(low), abs(high)) or 1.0
    if high - low < span:
        middle = (low + high) / 2
        return SEQUENTIAL, middle - span / 2, middle + span / 2
    return SEQUENTIAL, low, high


def heatmap(ax: Any, fig: Any, values: Any, rows: list[str], cols: list[str], *, label: str,
            signed: bool | None = None, marks: Any = None,
            fontsize: str = "x-small") -> None:  # fmt: skip
    """An annotated heatmap of ``values`` ``[rows, cols]`` (NaN: masked, shown as "–").

    The colour scale comes from :func:`colour_scale`, the digits from
    :func:`~tl_leadterms.results.style.column_format`, each annotation's colour from
    :func:`~tl_leadterms.results.style.ink`; ``marks`` (a boolean array) adds ``*`` to its
    cells.
    """
    import numpy as np

    values = np.asarray(values, dtype=float)
    cmap, vmin, vmax = colour_scale(values.ravel().tolist(), signed=signed)
    image = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap=cmap, vmin=vmin,
                      vmax=vmax)  # fmt: skip
    fmt = column_format(values.ravel().tolist())
    for (i, j), v in np.ndenumerate(values):
        if not math.isfinite(v):
            ax.text(j, i, "–", ha="center", va="center", fontsize=fontsize)
            continue
        text = fmt(float(v)) + ("*" if marks is not None and marks[i, j] else "")
        colour = ink(image.cmap(image.norm(v)))
        ax.text(j, i, text, ha="center", va="center", fontsize=fontsize, color=colour)
    ax.set_xticks(range(len(cols)), cols, rotation=45 if len(cols) > 8 else 0,
                  ha="right" if len(cols) > 8 else "center")  # fmt: skip
    ax.set_yticks(range(len(rows)), rows)
    fig.colorbar(image, ax=ax, label=label)


def legend_outside(fig: Any, axes: list, *, ncols: int | None = None) -> None:
    """One legend for ``axes`` (their labelled artists, each label once) above the panels."""
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="outside upper center", fontsize="small",
                   ncols=ncols or min(len(labels), 4), frameon=False)  # fmt: skip


def layer_head_grid(rows: list[dict], column: str) -> tuple[Any, list[int], list[int]]:
    """``[layers, heads]`` values of ``column`` (NaN where a head has no row)."""
    import numpy as np

    layers = sorted({r["layer"] for r in rows})
    heads = sorted({r["head"] for r in rows})
    grid = np.full((len(layers), len(heads)), np.nan)
    for r in rows:
        grid[layers.index(r["layer"]), heads.index(r["head"])] = as_number(r.get(column))
    return grid, layers, heads
