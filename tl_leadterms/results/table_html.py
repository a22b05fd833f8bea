"""The HTML of a :class:`~tl_leadterms.results.table.ResultTable` (its ``_repr_html_``).

One self-contained fragment, no network, rendered with pandas' ``Styler`` (formats, per-cell
styles, captions, hover titles): a caption, a heatmap grid per group when the table declares
``GRID`` (e.g. layers × heads), and the table itself, whose score column is an inline SVG (what
no library draws: the score as a bar from 0, the confidence interval as a whisker and the null
band ``null_mean ± 2·null_sd`` shaded behind them). Rows whose ``verdict`` greys them (the one
rule of :func:`~tl_leadterms.results.null.verdict`: negligible, not distinguished) are greyed,
and the table's :meth:`~tl_leadterms.results.table.ResultTable.notes` (e.g. a null too small to
decide) are one line each under it. Clicking a column heading sorts the rows (a few lines of inline
script; without scripts the table still reads). Every string is html-escaped.

Readable in JupyterLab, classic Jupyter, VS Code and nbconvert's pages alike:

* heatmap colours follow the data's range: a sequential colormap (viridis) for scores (never
  narrower than 2% of the values, so digits of noise do not take the two ends of the map), a
  diverging one (RdBu, centred on 0) when the values have both signs; one scale for all groups
  of one score, one per group when the groups are different scores;
* each heatmap number is pure black or pure white, whichever has the larger WCAG contrast on its
  cell (never below 4.58:1; pandas' ``background_gradient`` picks ``#f1f1f1`` at a fixed
  threshold and can fall to about 4.1:1, so the colours are computed here);
* numbers carry the decimals that tell a column's values apart (0.9931 and 0.9938, not 1.00);
* the style is scoped to ``div.tl-table`` and overrides JupyterLab's ``table-layout: fixed``,
  so columns size to their content, never overlap or clip; a wide table scrolls inside its own
  box (``div.tl-scroll``).

Example:
    >>> from tl_leadterms.results.table import ResultTable
    >>> t = ResultTable([{"layer": 0, "head": 0, "score": 0.9, "lo": 0.8, "hi": 0.95,
    ...                   "verdict": "not distinguished", "token": "<b>"}])
    >>> html = table_html(t)
    >>> 'class="tl-row tl-ns"' in html, "&lt;b&gt;" in html, "<b>" in html
    (True, True, False)
"""

import contextlib
import html
import math
import re
from typing import Any

from tl_leadterms.results.figures import colour_scale, decimals, text_colour
from tl_leadterms.results.marks import WIDE_COVERAGE, WIDE_MARK, WIDE_NOISE_SHARE, is_wide
from tl_leadterms.results.null import FAINT

__all__ = ["MAX_ROWS", "cell_colours", "faint", "table_html"]

#: rows written into one HTML table (the rest are counted in a note)
MAX_ROWS = 400
_BAR_WIDTH = 110
#: greyed (non-significant) rows' text: 5.7:1 on white
_FAINT = "#666666"

_STYLE = """<style>
div.tl-table{font:12px system-ui,sans-serif;color:#222;margin:.4em 0;max-width:100%}
div.tl-table div.tl-scroll{overflow-x:auto;max-width:100%}
div.tl-table table{border-collapse:collapse;font-size:inherit;table-layout:auto!important;
width:auto!important;max-width:none;margin:0}
div.tl-table th,div.tl-table td{white-space:nowrap;overflow:visible;max-width:none;
text-overflow:clip;min-width:max-content}
div.tl-table svg{max-width:none!important;height:14px!important;flex:none}
div.tl-table table.tl-main th{cursor:pointer;background:#f3f3f3;padding:2px 6px;
border-bottom:1px solid #bbb;text-align:right}
div.tl-table table.tl-main td{padding:1px 6px;text-align:right;border-bottom:1px solid #eee}
div.tl-table table.tl-main td.tl-str{text-align:left}
div.tl-table table.tl-main td.tl-ns{color:#666666}
div.tl-table table.tl-main td.tl-ns svg{opacity:.4}
div.tl-table table.tl-heat td{min-width:3.2em;height:1.5em;text-align:center;padding:0 4px;
border:1px solid #fff;font-size:11px}
div.tl-table table.tl-heat th{padding:0 4px;font-weight:normal;text-align:right}
div.tl-table table.tl-heat td.tl-ns{outline:2px dashed #fff;outline-offset:-3px}
div.tl-table table.tl-heat caption{caption-side:top;text-align:left;font-weight:bold}
div.tl-table div.tl-grids{display:flex;flex-wrap:wrap;gap:1.5em;margin:.3em 0 .8em}
</style>"""

_SORT = """<script>window.tlltSort=window.tlltSort||function(th){var t=th.closest('table'),
b=t.tBodies[0],i=Array.prototype.indexOf.call(th.parentNode.children,th),
d=th.getAttribute('data-dir')==='asc'?'desc':'asc';th.setAttribute('data-dir',d);
var rs=Array.prototype.slice.call(b.rows);rs.sort(function(x,y){var a=x.cells[i].textContent.
trim(),c=y.cells[i].textContent.trim(),na=parseFloat(a),nc=parseFloat(c),
r=(isNaN(na)||isNaN(nc))?a.localeCompare(c):na-nc;return d==='asc'?r:-r});
rs.forEach(function(r){b.appendChild(r)})};</script>"""


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _shown(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"
    return str(value)


def _column_format(values: list[Any]):
    """A formatter for one column: fixed decimals that tell its floats apart, else ``_shown``."""
    floats = [v for v in values if isinstance(v, float) and math.isfinite(v)]
    if not floats or any(not isinstance(v, (float, type(None))) for v in values):
        return _shown
    big = max(abs(v) for v in floats)
    small = min((abs(v) for v in floats if v != 0), default=1.0)
    if big >= 1e4 or small < 1e-3:
        return _shown
    digits = decimals(floats, least=3 if big < 10 else 1)

    def fmt(value: Any) -> str:
        return f"{value:.{digits}f}" if isinstance(value, float) and math.isfinite(value) else (
            _shown(value))  # fmt: skip

    return fmt


def cell_colours(values: list[float | None], scale: tuple[str, float, float]) -> list[str]:
    """CSS ``background-color``/``color`` of heatmap cells for ``values`` on ``scale`` (a
    :func:`~tl_leadterms.results.figures.colour_scale`); a missing value gets a light grey."""
    import matplotlib
    from matplotlib.colors import Normalize, to_hex

    cmap = matplotlib.colormaps[scale[0]]
    norm = Normalize(scale[1], scale[2], clip=True)
    out = []
    for v in values:
        if v is None:
            out.append("background-color:#eeeeee;color:#000000")
            continue
        rgba = cmap(norm(v))
        ink = "#000000" if text_colour(rgba) == "black" else "#ffffff"
        out.append(f"background-color:{to_hex(rgba)};color:{ink}")
    return out


def _domain(table: Any) -> tuple[float, float]:
    if table.SCORE_RANGE is not None:
        return table.SCORE_RANGE
    values = [0.0]
    for r in table.rows:
        for c in (table.SCORE, *table.INTERVAL):
            v = _num(r.get(c))
            if v is not None and math.isfinite(v):
                values.append(v)
    lo, hi = min(values), max(values)
    return (lo, hi) if hi > lo else (lo - 1.0, hi + 1.0)


def faint(row: dict[str, Any] | None) -> bool:
    """Whether the row is greyed: its ``verdict`` is one of :data:`~.null.FAINT`."""
    return row is not None and row.get("verdict") in FAINT


def _bar(table: Any, row: dict[str, Any], domain: tuple[float, float], fmt) -> str:
    """The score cell's content: null band, bar from 0, CI whisker (SVG) and the number."""
    lo, hi = domain

    def x(v: float) -> float:
        return round(max(0.0, min(1.0, (v - lo) / (hi - lo))) * _BAR_WIDTH, 1)

    score = _num(row.get(table.SCORE))
    parts = []
    mean, sd = (_num(row.get(c)) for c in table.NULL)
    if mean is not None and sd is not None:
        a, b = x(mean - 2 * sd), x(mean + 2 * sd)
        parts.append(f'<rect class="tl-null" x="{a}" y="0" width="{max(round(b - a, 1), 1)}" '
                     'height="14" fill="#ddd"/>')  # fmt: skip
    if score is not None:
        a, b = sorted((x(0.0), x(score)))
        width = max(round(b - a, 1), 1)
        parts.append(f'<rect class="tl-bar" x="{a}" y="3" width="{width}" height="8" '
                     f'fill="{"#4878b8" if score >= 0 else "#c0504d"}"/>')  # fmt: skip
    low, high = (_num(row.get(c)) for c in table.INTERVAL)
    if low is not None and high is not None:
        a, b = x(low), x(high)
        wide = is_wide(row)  # a noisy sample's interval: dashed (tl_leadterms.results.marks)
        dash = ' stroke-dasharray="2 1.5"' if wide else ""
        parts.append(f'<path class="tl-ci{" tl-wide" if wide else ""}" '
                     f'd="M{a} 7H{b}M{a} 3V11M{b} 3V11" stroke="#222" stroke-width="1.2"{dash} '
                     'fill="none"/>')  # fmt: skip
    svg = (f'<svg width="{_BAR_WIDTH}" height="14" '
           f'style="vertical-align:middle;min-width:{_BAR_WIDTH}px">'
           f"{''.join(parts)}</svg>")  # fmt: skip
    mark = WIDE_MARK if low is not None and is_wide(row) else ""
    return f"{svg} {html.escape(fmt(row.get(table.SCORE)))}{mark}"


def _styled(frame: Any, styles: Any = None, classes: Any = None, titles: Any = None):
    """A Styler of ``frame`` (cells already HTML), its index hidden unless it names rows."""
    styler = frame.style.format(escape=None)
    if styles is not None:
        styler = styler.apply(lambda _: styles, axis=None)
    if classes is not None:
        styler = styler.set_td_classes(classes)
    if titles is not None:
        with contextlib.suppress(TypeError):  # pandas < 2.2 has no title attribute: no tips
            styler = styler.set_tooltips(titles, as_title_attribute=True)
    return styler


def _group_scales(table: Any, groups: dict[tuple, list[dict]]) -> dict[tuple, tuple]:
    """One colour scale per group when the groups are different scores, else one for all."""

    def values(rows: list[dict]) -> list[float]:
        return [v for v in (_num(r.get(table.SCORE)) for r in rows) if v is not None]

    if "score" in table.GROUP:
        return {g: colour_scale(values(rows)) for g, rows in groups.items()}
    shared = colour_scale([v for rows in groups.values() for v in values(rows)])
    return dict.fromkeys(groups, shared)


def _grid(table: Any, name: str, mine: list[dict], scale: tuple) -> str:
    import pandas as pd

    across, down = table.GRID
    ys = list(dict.fromkeys(r[across] for r in mine))
    xs = list(dict.fromkeys(r[down] for r in mine))
    cell = {(r[across], r[down]): r for r in mine}
    grid = [[cell.get((y, x)) for x in xs] for y in ys]
    numbers = [[None if r is None else _num(r.get(table.SCORE)) for r in row] for row in grid]
    digits = decimals([v for row in numbers for v in row if v is not None])
    index = [html.escape(f"{across} {_shown(y)}") for y in ys]
    columns = [html.escape(_shown(x)) for x in xs]
    text = [["" if v is None else f"{v:.{digits}f}" for v in row] for row in numbers]
    frame = pd.DataFrame(text, index=index, columns=pd.Index(columns, name=html.escape(down)))
    styles = pd.DataFrame([cell_colours(row, scale) for row in numbers], index=index,
                          columns=columns)  # fmt: skip
    greyed = [["tl-ns" if faint(r) else "" for r in row] for row in grid]
    classes = pd.DataFrame(greyed, index=index, columns=columns)
    tips = [["" if r is None else html.escape(_tip(table, r), quote=True) for r in row]
            for row in grid]  # fmt: skip
    titles = pd.DataFrame(tips, index=index, columns=columns)
    styler = _styled(frame, styles, classes, titles).set_caption(html.escape(name))
    group = html.escape(name, quote=True)
    styler = styler.set_table_attributes(f'class="tl-heat" data-group="{group}"')
    return styler.to_html(cell_ids=False)


def _grids(table: Any) -> str:
    """One heatmap per group: :attr:`GRID` rows × columns coloured by the score."""
    if table.GRID is None or table.SCORE is None:
        return ""
    across, down = table.GRID
    rows = [
        r
        for r in table.select(**table.GRID_WHERE)
        if r.get(across) is not None and r.get(down) is not None
    ]
    if len(rows) < 2:
        return ""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(g) for g in table.GROUP), []).append(r)
    scales = _group_scales(table, groups)
    out = ['<div class="tl-grids">']
    for group, mine in groups.items():
        name = ", ".join(f"{g}={_shown(v)}" for g, v in zip(table.GROUP, group, strict=True))
        out.append(_grid(table, name or table.SCORE, mine, scales[group]))
    out.append("</div>")
    return "".join(out)


def _tip(table: Any, row: dict[str, Any]) -> str:
    names = [c for c in table.columns() if c not in table.NESTED and c not in table.HIDDEN]
    return "\n".join(f"{c}: {_shown(row.get(c))}" for c in names[:16])


def _names(table: Any, flat: list[dict]) -> list[str]:
    hidden = set(table.HIDDEN)
    names = []
    for c in table.columns():
        if c in table.NESTED and c not in hidden:
            names += [k for r in flat for k in r if k.startswith(table.NESTED[c] + ":")]
        elif c not in hidden and c not in table.NESTED:
            names.append(c)
    return list(dict.fromkeys(n for n in names if n not in hidden))


def _main(table: Any) -> str:
    """The rows as a Styler table (escaped text, the score as an SVG bar), headings sortable."""
    import pandas as pd

    flat = table.flat_rows()
    names = _names(table, flat)
    raw, flat = table.rows[:MAX_ROWS], flat[:MAX_ROWS]
    formats = {c: _column_format([r.get(c) for r in flat]) for c in names}
    domain = _domain(table)
    cells, classes = [], []
    for source, r in zip(raw, flat, strict=True):
        grey = faint(source)
        row, kinds = [], []
        for c in names:
            value = r.get(c)
            if c == table.SCORE:
                row.append(_bar(table, r, domain, formats[c]))
            else:
                row.append(html.escape(formats[c](value)))
            kind = "tl-str" if c != table.SCORE and _num(value) is None else ""
            kinds.append(" ".join(k for k in (kind, "tl-ns" if grey else "") if k))
        cells.append(row)
        classes.append(kinds)
    columns = [html.escape(c) for c in names]
    frame = pd.DataFrame(cells, columns=columns)
    styler = _styled(frame, classes=pd.DataFrame(classes, columns=columns)).hide(axis="index")
    text = styler.set_table_attributes('class="tl-main"').to_html(cell_ids=False)
    text = re.sub(r'(<th [^>]*class="col_heading level0 col\d+"[^>]*?)\s*>',
                  r'\1 onclick="tlltSort(this)" title="sort">', text)  # fmt: skip
    head, _, body = text.partition("<tbody>")
    marks = iter(" tl-ns" if faint(r) else "" for r in raw)
    body = re.sub(r"<tr>", lambda _: f'<tr class="tl-row{next(marks)}">', body)
    return head + "<tbody>" + body


def table_html(table: Any) -> str:
    """The HTML fragment of ``table`` (see the module docstring)."""
    more = len(table.rows) - MAX_ROWS
    note = f"<p>… {more} more rows (to_pandas() has them all)</p>" if more > 0 else ""
    return (
        f'<div class="tl-table">{_STYLE}{_SORT}<div><strong>{html.escape(table.title())}</strong>'
        f'</div>{_grids(table)}<div class="tl-scroll">{_main(table)}</div>{note}'
        f"{_legend(table)}</div>"
    )


def _legend(table: Any) -> str:
    have = set(table.columns())
    bits = []
    if table.SCORE in have:
        bits.append(f"bar: {html.escape(table.SCORE)}")
    if set(table.INTERVAL) <= have:
        bits.append("whisker: interval " + "–".join(table.INTERVAL))
        if any(is_wide(r) for r in table.rows):
            bits.append(
                f"dashed whisker and {WIDE_MARK}: noise_share ≥ {WIDE_NOISE_SHARE:g}, the "
                f"sample's noise is at least half of what the score measures and the interval "
                f"is wide ({html.escape(WIDE_COVERAGE)})"
            )
    if set(table.NULL) <= have:
        bits.append("grey band: null mean ± 2 sd")
    if "verdict" in have:
        bits.append(f"greyed (dashed in the grid): verdict {' or '.join(FAINT)}")
    notes = "".join(f"<p><small>{html.escape(n)}</small></p>" for n in table.notes())
    return notes + (f"<p><small>{'; '.join(bits)}; click a heading to sort</small></p>"
                    if bits else "")  # fmt: skip
