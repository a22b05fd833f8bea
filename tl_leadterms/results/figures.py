"""Figure helpers every analysis's figure uses: a matplotlib figure off pyplot, saving, heatmaps.

Figures are built with ``matplotlib.figure.Figure`` and the Agg canvas, never through pyplot:
nothing opens a window, no global backend is switched and no figure is left registered.
"""

import math
import os
from pathlib import Path
from typing import Any

from tl_leadterms.atomic import atomic_path
from tl_leadterms.errors import LeadTermsError

__all__ = [
    "COSINE_GAP_FLOOR",
    "as_number",
    "check_result",
    "heatmap",
    "layer_head_grid",
    "new_figure",
    "save_figure",
]

#: 1 − cosine is drawn on a log axis, clipped below at this value (a cosine of exactly 1)
COSINE_GAP_FLOOR = 1e-12


def new_figure(width: float, height: float, rows: int = 1) -> tuple[Any, list]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
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


def heatmap(ax: Any, fig: Any, values: Any, rows: list[str], cols: list[str], *, vmin: float,
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


def layer_head_grid(rows: list[dict], column: str) -> tuple[Any, list[int], list[int]]:
    """``[layers, heads]`` values of ``column`` (NaN where a head has no row)."""
    import numpy as np

    layers = sorted({r["layer"] for r in rows})
    heads = sorted({r["head"] for r in rows})
    grid = np.full((len(layers), len(heads)), np.nan)
    for r in rows:
        grid[layers.index(r["layer"]), heads.index(r["head"])] = as_number(r.get(column))
    return grid, layers, heads
