"""`InlineFigure`: a matplotlib figure that shows itself where it is made, without pyplot.

A figure built with ``matplotlib.figure.Figure`` (never pyplot: no window, no backend switch, no
figure left registered in pyplot's state) does not display in a notebook by itself. This one
does: its ``_repr_png_`` is its PNG, so when it is a cell's value Jupyter (Lab, classic) and
VS Code show it once, inline; nbconvert keeps it as an ``image/png`` output. Where IPython has a
matplotlib formatter registered (after ``%matplotlib inline``), that formatter draws it instead:
either way one image, and pyplot's inline flush never sees it, so never a second copy.
``.savefig`` works as on any figure (the Agg canvas is attached at construction).

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
