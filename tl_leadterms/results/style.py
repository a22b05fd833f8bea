"""The one look of every output: theme-aware CSS variables, one colour per value, one number.

**Colours of the page.** :func:`theme_css` writes the variables every HTML output draws with
(``--tl-fg``, ``--tl-bg``, ``--tl-muted``, ``--tl-head``, ``--tl-border``, ``--tl-accent``,
``--tl-pos``, ``--tl-neg``). Each reads the host's own variable where the host gives one
(JupyterLab's ``--jp-*``, VS Code's ``--vscode-*``, as xarray's HTML repr does), else a light
or a dark palette by ``prefers-color-scheme``, or the one a page is told to use
(``data-tl-theme="dark"`` on its root: the explorer inside its frame, which sees no host
variables, is told by its host). An output sets its own text colour and background from them,
so it reads the same on any page; ``--tl-muted`` (dimmed rows, notes) is mixed from the two
and keeps at least 4.5:1 on either palette and on JupyterLab's striped rows.

**Colours of values.** One diverging map, blue for negative, white at 0, red for positive
(:data:`DIVERGING`), and one sequential map for unsigned scores (:data:`SEQUENTIAL`), both
matplotlib's: :func:`colour` is the colour of a value in HTML, and a figure drawn with the same
``(map, vmin, vmax)`` paints it the same (the explorer gets the map's 256 colours,
:func:`ramp`). Text on a coloured cell is black or white, whichever has the larger WCAG
contrast (:func:`ink`).

**Numbers.** :func:`number` prints significant digits, never ``0.00`` for a value that is not
0 and never ``-0``; :func:`column_format` picks, for a column, the fewest significant digits
(3 to 6) that still tell its values apart. The explorer's script mirrors :func:`number`.

>>> number(0.0058), number(-0.00581234), number(-0.0), number(0.9931), number(12)
('0.0058', '-0.00581', '0', '0.993', '12')
>>> [column_format([0.9931, 0.9934])(v) for v in (0.9931, 0.9934)]
['0.9931', '0.9934']
>>> colour(1.0), colour(-1.0), colour(0.0)
('#67001f', '#053061', '#f7f6f6')
>>> ink("#67001f"), ink("#f7f6f6")
('#ffffff', '#000000')
"""

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "DIM_VERDICTS",
    "DIVERGING",
    "SEQUENTIAL",
    "colour",
    "column_format",
    "ink",
    "luminance",
    "number",
    "ramp",
    "theme_css",
]

#: values of both signs: blue (negative), white (0), red (positive)
DIVERGING = "RdBu_r"
#: unsigned scores
SEQUENTIAL = "viridis"
#: the verdicts (of a null) whose rows every view dims; other rows are never dimmed
DIM_VERDICTS = ("negligible", "not distinguished")

#: each variable: the JupyterLab variable, the VS Code variable, the light and the dark fallback
_VARIABLES = {
    "fg": ("--jp-content-font-color1", "--vscode-editor-foreground", "#1f1f1f", "#e6e6e6"),
    "bg": ("--jp-layout-color0", "--vscode-editor-background", "#ffffff", "#1e1e1e"),
    "border": ("--jp-border-color2", "--vscode-editorWidget-border", "#d4d4d4", "#4a4a4a"),
    "accent": ("--jp-brand-color1", "--vscode-textLink-foreground", "#1565c0", "#64b5f6"),
}
_MIXED = ("--tl-muted:color-mix(in srgb,var(--tl-fg) 72%,var(--tl-bg));"
          "--tl-head:color-mix(in srgb,var(--tl-fg) 8%,var(--tl-bg));"
          "--tl-pos:#c0383b;--tl-neg:#3b76b4;")  # fmt: skip


def _palette(which: int) -> str:
    return "".join(f"--tl-{name}:var({jp},var({vs},{pair[which]}));"
                   for name, (jp, vs, *pair) in _VARIABLES.items())  # fmt: skip


def theme_css(selector: str, *, page: bool = False) -> str:
    """The variables, text colour and background of ``selector`` (e.g. ``":root"`` for a page,
    ``"div.tl-out"`` for a notebook output), light unless the reader prefers dark or the root
    says ``data-tl-theme="dark"``; ``page``: also the page's ``color-scheme`` (its form
    controls and scrollbars).

    >>> "prefers-color-scheme:dark" in theme_css("div.x") and "--jp-layout-color0" in theme_css("p")
    True
    """
    light, dark = (_palette(i) + _MIXED for i in (0, 1))
    scheme = ("color-scheme:light;", "color-scheme:dark;") if page else ("", "")
    own = "color:var(--tl-fg);background-color:var(--tl-bg);"
    forced = f"[data-tl-theme=dark] {selector},{selector}[data-tl-theme=dark]"
    if selector == ":root":
        forced = ":root[data-tl-theme=dark]"
    return (f"{selector}{{{light}{own}{scheme[0]}}}"
            f"@media (prefers-color-scheme:dark){{{selector}:not([data-tl-theme=light])"
            f"{{{dark}{scheme[1]}}}}}{forced}{{{dark}{scheme[1]}}}")  # fmt: skip


def _colormap(name: str):
    import matplotlib

    return matplotlib.colormaps[name]


def colour(value: float, scale: tuple[str, float, float] = (DIVERGING, -1.0, 1.0)) -> str:
    """``#rrggbb`` of ``value`` on ``scale`` = ``(colormap, vmin, vmax)`` (clipped to the
    ends): the colour matplotlib paints for it with ``cmap``, ``vmin``, ``vmax``."""
    from matplotlib.colors import Normalize, to_hex

    name, low, high = scale
    return to_hex(_colormap(name)(Normalize(low, high, clip=True)(value)))


def ramp(name: str = DIVERGING) -> list[str]:
    """The colormap's own lookup table (256 colours), for a page that colours values itself:
    value ``t`` in ``[0, 1]`` is entry ``min(255, floor(t · 256))``, as matplotlib picks it."""
    from matplotlib.colors import to_hex

    cmap = _colormap(name)
    return [to_hex(cmap(i)) for i in range(cmap.N)]


def luminance(rgb: Sequence[float] | str) -> float:
    """WCAG 2 relative luminance of ``#rrggbb`` or of RGB(A) channels in [0, 1]."""
    if isinstance(rgb, str):
        rgb = [int(rgb[i : i + 2], 16) / 255 for i in (1, 3, 5)]

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def ink(background: Sequence[float] | str) -> str:
    """``"#000000"`` or ``"#ffffff"``, whichever has the larger WCAG contrast on
    ``background`` (never below 4.58:1)."""
    lum = luminance(background)
    return "#000000" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "#ffffff"


def number(value: Any, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits (``"–"`` for None and NaN, integers whole).

    A value that is not 0 never reads ``0`` or ``0.00`` (``0.0058``, ``-1.2e-07``); 0 (also
    ``-0.0``) reads ``0``.
    """
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    value = float(value)
    if math.isnan(value):
        return "–"
    return "0" if value == 0 else f"{value:.{digits}g}"


def column_format(values: Sequence[Any], least: int = 3, most: int = 6) -> Callable[[Any], str]:
    """:func:`number` with the fewest significant digits, from ``least`` to ``most``, at which
    the column's values that differ (at ``most`` digits) still read differently."""
    finite = [float(v) for v in values if isinstance(v, float) and math.isfinite(v)]
    distinct = len({number(v, most) for v in finite})
    digits = next((d for d in range(least, most) if len({number(v, d) for v in finite})
                   == distinct), most)  # fmt: skip
    return lambda value: number(value, digits)
