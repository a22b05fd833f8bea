"""`InlineFigure`: a matplotlib figure that shows itself where it is made, without pyplot.

Its ``_repr_png_`` is its PNG, so a cell whose value it is shows it once, inline, without
pyplot's state or a second copy; ``.savefig`` works as on any figure
(docs/guides/report.md#the-plots-in-a-notebook).

>>> fig = InlineFigure(figsize=(2, 1))
>>> ax = fig.subplots()
>>> _ = ax.plot([0, 1], [0, 1])
>>> fig._repr_png_()[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True
"""

import io

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["NOTEBOOK_DPI", "InlineFigure"]

#: the resolution of the inline PNG (a 7-inch figure is 700 px, a notebook's width)
NOTEBOOK_DPI = 100


class InlineFigure(Figure):
    """A ``matplotlib.figure.Figure`` on the Agg canvas that renders inline as PNG."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        FigureCanvasAgg(self)

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=NOTEBOOK_DPI, bbox_inches="tight")
        return buffer.getvalue()
