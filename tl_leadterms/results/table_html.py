"""The HTML of a :class:`~tl_leadterms.results.table.ResultTable` (its ``_repr_html_``).

One self-contained fragment, no network, rendered with pandas' ``Styler``: a caption, a heatmap
grid per group when the table declares ``GRID``, and the table, its score column an inline SVG
beside the number (the score as a bar from 0, red positive and blue negative, the interval as a
whisker, the null band ``null_mean ± 2·null_sd`` behind them). Headings sort the rows on click.
Every string is html-escaped. The same in JupyterLab (light, dark), VS Code and plain pages:

* colours are the theme's (:func:`~tl_leadterms.results.style.theme_css`); heatmap cells take
  the one sequential or diverging map (:mod:`~tl_leadterms.results.style`), their numbers
  black or white by contrast;
* the key columns come first (:meth:`~tl_leadterms.results.table.ResultTable.key_columns`),
  then others while the table stays within :data:`WIDTH` px; the rest fold into ``<details>``;
* a row whose ``verdict`` is "negligible" or "not distinguished" is dimmed (a heatmap cell is
  paler with a dashed edge, never a mark across its digits); "unreachable" rows get one line
  above the table instead;
* numbers carry the significant digits that tell a column's values apart (never ``0.00``);
* the style is scoped to ``div.tl-table``, overrides JupyterLab's ``table-layout: fixed`` and
  lets a wide table scroll inside its own box, so cells never overlap or clip.

Example:
    >>> from tl_leadterms.results.table import ResultTable
    >>> t = ResultTable([{"layer": 0, "head": 0, "score": 0.9, "lo": 0.8, "hi": 0.95,
    ...                   "verdict": "negligible", "token": "<b>"}])
    >>> html = table_html(t)
    >>> 'class="tl-row tl-dim"' in html, "&lt;b&gt;" in html, "<b>" in html
    (True, True, False)
"""

import contextlib
import html
import math
import re
from typing import Any

from tl_leadterms.results.figures import colour_scale
from tl_leadterms.results.marks import WIDE_COVERAGE, WIDE_MARK, WIDE_NOISE_SHARE, is_wide
from tl_leadterms.results.null import FAINT, dimmed
from tl_leadterms.results.style import (
    colour,
    column_format,
    ink,
    number,
    theme_css,
)

__all__ = ["MAX_ROWS", "WIDTH", "cell_colours", "dimmed", "table_html"]

#: rows written into one HTML table (the rest are counted in a note)
MAX_ROWS = 400
#: pixels the main table may take (a notebook's output box is about 900 px); columns beyond
#: the key ones that would widen it further fold under it
WIDTH = 860
_BAR_WIDTH = 110

_STYLE = ("<style>" + theme_css("div.tl-table") + """
div.tl-table{font:12px system-ui,sans-serif;margin:.4em 0;padding:.3em .4em;max-width:100%;
box-sizing:border-box}
div.tl-table div.tl-scroll{overflow-x:auto;max-width:100%}
div.tl-table table{border-collapse:collapse;font-size:inherit;table-layout:auto!important;
width:auto!important;max-width:none;margin:0;color:inherit}
div.tl-table th,div.tl-table td{white-space:nowrap;overflow:visible;max-width:none;
text-overflow:clip;min-width:max-content;color:inherit}
div.tl-table svg{max-width:none!important;height:14px!important;flex:none;vertical-align:middle}
div.tl-table table.tl-main th{cursor:pointer;background:var(--tl-head);padding:2px 6px;
border-bottom:1px solid var(--tl-border);text-align:right}
div.tl-table table.tl-main td{padding:1px 6px;text-align:right;font-variant-numeric:tabular-nums;
border-bottom:1px solid var(--tl-border)}
div.tl-table table.tl-main td.tl-str{text-align:left}
div.tl-table table.tl-main tr.tl-dim td{color:var(--tl-muted)}
div.tl-table table.tl-main tr.tl-dim svg{opacity:.45}
div.tl-table table.tl-heat{border-collapse:separate;border-spacing:1px}
div.tl-table table.tl-heat td{min-width:3.2em;height:1.5em;text-align:center;padding:0 4px;
border:1px solid transparent;font-size:11px;font-variant-numeric:tabular-nums}
div.tl-table table.tl-heat td.tl-dim{border:1px dashed var(--tl-fg)}
div.tl-table table.tl-heat th{padding:0 4px;font-weight:normal;text-align:right;background:none}
div.tl-table table.tl-heat caption{caption-side:top;text-align:left;font-weight:bold}
div.tl-table div.tl-grids{display:flex;flex-wrap:wrap;gap:1.5em;margin:.3em 0 .8em}
div.tl-table .tl-note{color:var(--tl-muted);margin:.3em 0}
div.tl-table details>summary{cursor:pointer;margin:.3em 0;color:var(--tl-accent)}
</style>""")  # fmt: skip

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


def cell_colours(values: list[float | None], scale: tuple[str, float, float],
                 dim: list[bool] | None = None) -> list[str]:  # fmt: skip
    """CSS ``background-color``/``color`` of heatmap cells for ``values`` on ``scale`` (a
    :func:`~tl_leadterms.results.figures.colour_scale`); a dimmed cell's colour is paler; a
    missing value's cell is left blank."""
    out = []
    for i, v in enumerate(values):
        if v is None:
            out.append("")
            continue
        fill = colour(v, scale)
        if dim is not None and dim[i]:
            fill = "#" + "".join(f"{round(int(fill[k:k + 2], 16) * .4 + 255 * .6):02x}"
                                 for k in (1, 3, 5))  # fmt: skip
        out.append(f"background-color:{fill};color:{ink(fill)}")
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


def _bar(
    table: Any, row: dict[str, Any], domain: tuple[float, float], text: str, chars: int
) -> str:
    """The score cell's content: null band, bar from 0, CI whisker (an SVG beside the number,
    never over it) and the number."""
    lo, hi = domain

    def x(v: float) -> float:
        return round(max(0.0, min(1.0, (v - lo) / (hi - lo))) * _BAR_WIDTH, 1)

    score = _num(row.get(table.SCORE))
    parts = []
    mean, sd = (_num(row.get(c)) for c in table.NULL)
    if mean is not None and sd is not None:
        a, b = x(mean - 2 * sd), x(mean + 2 * sd)
        parts.append(f'<rect class="tl-null" x="{a}" y="0" width="{max(round(b - a, 1), 1)}" '
                     'height="14" style="fill:var(--tl-border)"/>')  # fmt: skip
    if score is not None:
        a, b = sorted((x(0.0), x(score)))
        width = max(round(b - a, 1), 1)
        parts.append(f'<rect class="tl-bar" x="{a}" y="3" width="{width}" height="8" '
                     f'style="fill:var(--tl-{"pos" if score >= 0 else "neg"})"/>')  # fmt: skip
    low, high = (_num(row.get(c)) for c in table.INTERVAL)
    if low is not None and high is not None:
        a, b = x(low), x(high)
        wide = is_wide(row)  # a noisy sample's interval: dashed (tl_leadterms.results.marks)
        dash = ' stroke-dasharray="2 1.5"' if wide else ""
        parts.append(f'<path class="tl-ci{" tl-wide" if wide else ""}" '
                     f'd="M{a} 7H{b}M{a} 3V11M{b} 3V11" style="stroke:var(--tl-fg)" '
                     f'stroke-width="1.2"{dash} fill="none"/>')  # fmt: skip
    svg = (f'<svg width="{_BAR_WIDTH}" height="14" style="min-width:{_BAR_WIDTH}px">'
           f"{''.join(parts)}</svg>")  # fmt: skip
    mark = WIDE_MARK if low is not None and is_wide(row) else ""
    return (f'{svg} <span style="display:inline-block;min-width:{chars}ch">'
            f"{html.escape(text)}{mark}</span>")  # fmt: skip


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
    fmt = column_format([v for row in numbers for v in row if v is not None])
    index = [html.escape(f"{across} {number(y)}") for y in ys]
    columns = [html.escape(number(x)) for x in xs]
    text = [["" if v is None else fmt(v) for v in row] for row in numbers]
    frame = pd.DataFrame(text, index=index, columns=pd.Index(columns, name=html.escape(down)))
    dims = [[dimmed(r) for r in row] for row in grid]
    styles = pd.DataFrame([cell_colours(v, scale, d) for v, d in zip(numbers, dims, strict=True)],
                          index=index, columns=columns)  # fmt: skip
    classes = pd.DataFrame([["tl-dim" if d else "" for d in row] for row in dims], index=index,
                           columns=columns)  # fmt: skip
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
        name = ", ".join(f"{g}={number(v)}" for g, v in zip(table.GROUP, group, strict=True))
        out.append(_grid(table, name or table.SCORE, mine, scales[group]))
    out.append("</div>")
    return "".join(out)


def _tip(table: Any, row: dict[str, Any]) -> str:
    names = table.key_columns() + [c for c in table.columns() if c not in table.NESTED
                                   and c not in table.HIDDEN]  # fmt: skip
    return "\n".join(f"{c}: {number(table.cell(row, c))}" for c in list(dict.fromkeys(names))[:16])


def _names(table: Any, flat: list[dict]) -> list[str]:
    """Every column shown, the key ones first (NESTED ones spread)."""
    names = list(table.key_columns())
    for c in table.shown_columns():
        prefix = table.NESTED.get(c)
        names += [k for r in flat for k in r if k.startswith(f"{prefix}:")] if prefix else [c]
    return list(dict.fromkeys(names))


def _width(name: str, texts: list[str], bar: bool) -> float:
    """About the pixels a column takes (12 px system-ui digits are about 7 px wide)."""
    return 7.2 * max([len(name), *(len(t) for t in texts)]) + 14 + (_BAR_WIDTH + 6) * bar


def _split(table: Any, names: list[str], texts: dict[str, list[str]]) -> tuple[list, list]:
    """The main table's columns (the key ones, then the others in order while the table stays
    within :data:`WIDTH`) and the folded ones: what the row is, then the null's parts, the
    interval's ends, the shares and what does not fit."""
    key = table.key_columns()
    used = sum(_width(c, texts[c], c == table.SCORE) for c in key)
    main, folded, full = list(key), [], False
    for c in (c for c in names if c not in key):
        said = c in table.INTERVAL or (c in ("layer", "head") and "label" in key)
        detail = said or c in table.DETAIL or ":" in c
        full = full or (not detail and used + _width(c, texts[c], False) > WIDTH)
        if detail or full:
            folded.append(c)
        else:
            main.append(c)
            used += _width(c, texts[c], False)
    ident = [c for c in key if c in table.KEYS or c == "label"]
    return main, folded and ident + folded


def _table(table: Any, names: list[str], raw: list[dict], texts: dict[str, list[str]],
           css: str) -> str:  # fmt: skip
    """Rows of ``names`` as a Styler table (escaped text, the score with its SVG bar), headings
    sortable, rows dimmed by their verdict."""
    import pandas as pd

    domain = _domain(table)
    cells, classes = [], []
    for i, r in enumerate(raw):
        row, kinds = [], []
        for c in names:
            text = texts[c][i]
            if c == table.SCORE:
                row.append(_bar(table, r, domain, text, max(map(len, texts[c])) + 1))
            else:
                row.append(html.escape(text))
            value = table.cell(r, c)
            numeric = _num(value) is not None or c == "interval"
            kinds.append("" if c == table.SCORE or numeric else "tl-str")
        cells.append(row)
        classes.append(kinds)
    columns = [html.escape(c) for c in names]
    frame = pd.DataFrame(cells, columns=columns)
    styler = _styled(frame, classes=pd.DataFrame(classes, columns=columns)).hide(axis="index")
    keys = html.escape(",".join(c for c in table.key_columns() if c in names), quote=True)
    text = styler.set_table_attributes(f'class="{css}" data-key="{keys}"').to_html(cell_ids=False)
    text = re.sub(r'(<th [^>]*class="col_heading level0 col\d+"[^>]*?)\s*>',
                  r'\1 onclick="tlltSort(this)" title="sort">', text)  # fmt: skip
    head, _, body = text.partition("<tbody>")
    marks = iter(" tl-dim" if dimmed(r) else "" for r in raw)
    body = re.sub(r"<tr>", lambda _: f'<tr class="tl-row{next(marks)}">', body)
    return head + "<tbody>" + body


def _tables(table: Any) -> str:
    """The main table and, folded under it, the other columns."""
    flat = table.flat_rows()[:MAX_ROWS]
    names = _names(table, flat)
    values = {c: [table.cell(r, c) for r in flat] for c in names}
    texts = {c: list(map(column_format(v), v)) for c, v in values.items()}
    if "interval" in names:  # both ends with the digits that tell the ends apart
        ends = [[r.get(c) for r in flat] for c in table.INTERVAL]
        fmt = column_format(ends[0] + ends[1])
        texts["interval"] = [
            "–" if a is None else f"{fmt(a)} – {fmt(b)}" for a, b in zip(*ends, strict=True)
        ]
    main, folded = _split(table, names, texts)
    out = f'<div class="tl-scroll">{_table(table, main, flat, texts, "tl-main")}</div>'
    if folded:
        count = len([c for c in folded if c not in main])
        inner = _table(table, folded, flat, texts, "tl-main tl-detail")
        out += (f'<details class="tl-more"><summary>{count} more columns</summary>'
                f'<div class="tl-scroll">{inner}</div></details>')  # fmt: skip
    return out


def _notes(table: Any) -> str:
    """The table's :meth:`~tl_leadterms.results.table.ResultTable.notes` (a null too small to
    reach its level: those rows are not dimmed), one line each above it."""
    return "".join(f'<p class="tl-note">{html.escape(n)}</p>' for n in table.notes())


def table_html(table: Any) -> str:
    """The HTML fragment of ``table`` (see the module docstring)."""
    more = len(table.rows) - MAX_ROWS
    note = (f'<p class="tl-note">… {more} more rows (to_pandas() has them all)</p>'
            if more > 0 else "")  # fmt: skip
    return (
        f'<div class="tl-table">{_STYLE}{_SORT}<div><strong>{html.escape(table.title())}</strong>'
        f"</div>{_notes(table)}{_grids(table)}{_tables(table)}{note}{_legend(table)}</div>"
    )


def _legend(table: Any) -> str:
    have = set(table.columns())
    bits = []
    if table.SCORE in have:
        bits.append(f"bar: {html.escape(table.SCORE)} (red positive, blue negative)")
    if set(table.INTERVAL) <= have:
        bits.append("whisker: interval " + "–".join(table.INTERVAL))
        if any(is_wide(r) for r in table.rows):
            bits.append(
                f"dashed whisker and {WIDE_MARK}: noise_share ≥ {WIDE_NOISE_SHARE:g}, the "
                f"sample's noise is at least half of what the score measures and the interval "
                f"is wide ({html.escape(WIDE_COVERAGE)})"
            )
    if set(table.NULL) <= have:
        bits.append("shaded band: null mean ± 2 sd")
    if any(dimmed(r) for r in table.rows):
        bits.append(f"dimmed (dashed in the grid): verdict {' or '.join(FAINT)}")
    text = "; ".join([*bits, "click a heading to sort"])
    return f'<p class="tl-note"><small>{text}</small></p>' if bits else ""
