"""The one look of every output: theme-aware CSS variables, one colour per value, one number.

* :func:`theme_css`: the variables every HTML output draws with (``--tl-fg``, ``--tl-bg``,
  ``--tl-muted``, ``--tl-head``, ``--tl-border``, ``--tl-accent``, ``--tl-pos``, ``--tl-neg``),
  each the host's own where it has one (JupyterLab's ``--jp-*``, VS Code's ``--vscode-*``, as
  xarray's HTML repr does), else a light or dark palette by ``prefers-color-scheme`` or by
  ``data-tl-theme="dark"`` on the root (the explorer's frame, told by its host); an output sets
  its own text colour and background from them, and ``--tl-muted`` keeps 4.5:1 on both.
* :func:`colour`: one diverging map, blue negative, white 0, red positive (:data:`DIVERGING`),
  one sequential map (:data:`SEQUENTIAL`), both matplotlib's, so a figure drawn with the same
  ``(map, vmin, vmax)`` paints a value the same colour (pages that colour values themselves
  get the map's table, :func:`ramp`); :func:`ink`: black or white text by WCAG contrast.
* :func:`number`: significant digits, never ``0.00`` for a value that is not 0, never ``-0``;
  :func:`column_format`: the fewest (3 to 6) that tell a column's values apart. The explorer's
  script mirrors :func:`number`.

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
    "DIVERGING",
    "SEQUENTIAL",
    "colour",
    "column_format",
    "ink",
    "number",
    "ramp",
    "theme_css",
]

#: values of both signs: blue (negative), white (0), red (positive)
DIVERGING = "RdBu_r"
#: unsigned scores
SEQUENTIAL = "viridis"
#: each variable: the JupyterLab variable, the VS Code variable, the light and the dark fallback
#: (``--tl-pos`` and ``--tl-neg`` are :func:`colour` of ±0.75)
_VARIABLES = {
    "fg": ("--jp-content-font-color1", "--vscode-editor-foreground", "#1f1f1f", "#e6e6e6"),
    "bg": ("--jp-layout-color0", "--vscode-editor-background", "#ffffff", "#1e1e1e"),
    "border": ("--jp-border-color2", "--vscode-editorWidget-border", "#d4d4d4", "#4a4a4a"),
    "accent": ("--jp-brand-color1", "--vscode-textLink-foreground", "#1565c0", "#64b5f6"),
}
_MIXED = ("--tl-muted:color-mix(in srgb,var(--tl-fg) 72%,var(--tl-bg));"
          "--tl-head:color-mix(in srgb,var(--tl-fg) 8%,var(--tl-bg));"
          "--tl-pos:#ba2832;--tl-neg:#2a71b2;")  # fmt: skip


def _palette(which: int) -> str:
    return "".join(f"--tl-{name}:var({jp},var({vs},{pair[which]}));"
                   for name, (jp, vs, *pair) in _VARIABLES.items())  # fmt: skip


def theme_css(selector: str, *, page: bool = False) -> str:
    """The variables, text colour and background of ``selector`` (``":root"`` for a page);
    ``page``: also its ``color-scheme`` (form controls, scrollbars).

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


def colour(value: Any, scale: tuple = (DIVERGING, -1.0, 1.0)) -> str:
    """``#rrggbb`` of ``value`` on ``scale = (colormap, vmin, vmax)``, as matplotlib paints it."""
    import matplotlib
    from matplotlib.colors import Normalize, to_hex

    name, low, high = scale
    return to_hex(matplotlib.colormaps[name](Normalize(low, high, clip=True)(value)))


def ramp(name: str = DIVERGING) -> list[str]:
    """The colormap's 256 colours: ``t`` in ``[0, 1]`` is entry ``min(255, floor(256 t))``."""
    import matplotlib

    return [colour(i / 255, (name, 0.0, 1.0)) for i in range(matplotlib.colormaps[name].N)]


def ink(background: Sequence[float] | str) -> str:
    """Black or white, whichever has the larger WCAG contrast on ``background`` (≥ 4.58:1)."""
    from matplotlib.colors import to_rgb

    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
               for c in to_rgb(background))  # fmt: skip
    lum = 0.2126 * r + 0.7152 * g + 0.0722 * b  # WCAG 2's relative luminance
    return "#000000" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "#ffffff"


def number(value: Any, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits; ``"–"`` for None and NaN, 0 (and -0) ``0``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return "–" if value is None else str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return "–" if math.isnan(value) else "0" if value == 0 else f"{float(value):.{digits}g}"


def column_format(values: Sequence[Any], least: int = 3, most: int = 6) -> Callable[[Any], str]:
    """:func:`number` with the fewest digits (``least`` to ``most``) that tell values apart."""
    finite = [float(v) for v in values if isinstance(v, float) and math.isfinite(v)]
    distinct = len({number(v, most) for v in finite})
    digits = next((d for d in range(least, most) if len({number(v, d) for v in finite})
                   == distinct), most)  # fmt: skip
    return lambda value: number(value, digits)
