"""The HTML of a :class:`~tl_leadterms.results.table.ResultTable` (its ``_repr_html_``).

One self-contained fragment, no network: a caption, a heatmap grid per group when the table
declares ``GRID`` (e.g. layers × heads), and a table whose score column is an inline SVG: the
score as a bar from 0, the confidence interval as a whisker and the null band
(``null_mean ± 2·null_sd``) shaded behind them. Rows whose ``q`` (else ``p``) is above the
table's ``ALPHA`` are greyed. Clicking a column heading sorts the rows (a few lines of inline
script; without scripts the table still reads). Every string is html-escaped.

Example:
    >>> from tl_leadterms.results.table import ResultTable
    >>> t = ResultTable([{"layer": 0, "head": 0, "score": 0.9, "lo": 0.8, "hi": 0.95,
    ...                   "p": 0.5, "token": "<b>"}])
    >>> html = table_html(t)
    >>> 'class="tl-row tl-ns"' in html, "&lt;b&gt;" in html, "<b>" in html
    (True, True, False)
"""

import html
import math
from typing import Any

__all__ = ["MAX_ROWS", "heat_colour", "table_html"]

#: rows written into one HTML table (the rest are counted in a note)
MAX_ROWS = 400
_BAR_WIDTH = 110

_STYLE = """<style>
.tl-table{font:12px system-ui,sans-serif;color:#222;margin:.4em 0}
.tl-table table{border-collapse:collapse;font-size:inherit}
.tl-table th{cursor:pointer;background:#f3f3f3;padding:2px 6px;border-bottom:1px solid #bbb;
text-align:right;white-space:nowrap}
.tl-table td{padding:1px 6px;text-align:right;white-space:nowrap;border-bottom:1px solid #eee}
.tl-table td.tl-str{text-align:left}
.tl-table tr.tl-ns{color:#999}.tl-table tr.tl-ns svg{opacity:.4}
.tl-table .tl-heat td{width:2.6em;height:1.5em;text-align:center;border:1px solid #fff;
font-size:10px;padding:0}
.tl-table .tl-heat td.tl-ns{opacity:.4}
.tl-table .tl-grids{display:flex;flex-wrap:wrap;gap:1.5em;margin:.3em 0 .8em}
</style>"""

_SORT = """<script>window.tlltSort=window.tlltSort||function(th){var t=th.closest('table'),
b=t.tBodies[0],i=Array.prototype.indexOf.call(th.parentNode.children,th),
d=th.getAttribute('data-dir')==='asc'?'desc':'asc';th.setAttribute('data-dir',d);
var rs=Array.prototype.slice.call(b.rows);rs.sort(function(x,y){var a=x.cells[i].
getAttribute('data-v'),c=y.cells[i].getAttribute('data-v'),na=parseFloat(a),nc=parseFloat(c),
r=(isNaN(na)||isNaN(nc))?String(a).localeCompare(String(c)):na-nc;return d==='asc'?r:-r});
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


def heat_colour(x: float | None) -> str:
    """A diverging colour for ``x`` in ``[-1, 1]``: blue for positive, red for negative.

    >>> heat_colour(0.0), heat_colour(None)
    ('rgb(255,255,255)', '#eeeeee')
    """
    if x is None:
        return "#eeeeee"
    x = max(-1.0, min(1.0, x))
    far = round(255 * (1 - abs(x)))
    return f"rgb({far},{far},255)" if x >= 0 else f"rgb(255,{far},{far})"


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


def significant(table: Any, row: dict[str, Any]) -> bool | None:
    """False when the row's ``q`` (else ``p``) exceeds ``ALPHA``; None when it has neither."""
    for column in table.SIGNIFICANCE:
        v = _num(row.get(column))
        if v is not None:
            return v <= table.ALPHA
    return None


def _bar(table: Any, row: dict[str, Any], domain: tuple[float, float]) -> str:
    """The score cell: null band, bar from 0, CI whisker (SVG) and the number."""
    lo, hi = domain

    def x(v: float) -> float:
        return round(max(0.0, min(1.0, (v - lo) / (hi - lo))) * _BAR_WIDTH, 1)

    score = _num(row.get(table.SCORE))
    parts = []
    mean, sd = (_num(row.get(c)) for c in table.NULL)
    if mean is not None and sd is not None:
        a, b = x(mean - 2 * sd), x(mean + 2 * sd)
        parts.append(f'<rect class="tl-null" x="{a}" y="0" width="{max(b - a, 1)}" '
                     'height="14" fill="#ddd"/>')  # fmt: skip
    if score is not None:
        a, b = sorted((x(0.0), x(score)))
        parts.append(f'<rect class="tl-bar" x="{a}" y="3" width="{max(b - a, 1)}" height="8" '
                     f'fill="{"#4878b8" if score >= 0 else "#c0504d"}"/>')  # fmt: skip
    low, high = (_num(row.get(c)) for c in table.INTERVAL)
    if low is not None and high is not None:
        a, b = x(low), x(high)
        parts.append(f'<path class="tl-ci" d="M{a} 7H{b}M{a} 3V11M{b} 3V11" stroke="#222" '
                     'stroke-width="1.2" fill="none"/>')  # fmt: skip
    svg = (f'<svg width="{_BAR_WIDTH}" height="14" style="vertical-align:middle">'
           f"{''.join(parts)}</svg>")  # fmt: skip
    value = "" if score is None else repr(score)
    return f'<td data-v="{value}">{svg} {html.escape(_shown(row.get(table.SCORE)))}</td>'


def _cell(value: Any) -> str:
    number = _num(value)
    sort = html.escape(repr(number) if number is not None else _shown(value), quote=True)
    kind = "" if number is not None else ' class="tl-str"'
    return f'<td{kind} data-v="{sort}">{html.escape(_shown(value))}</td>'


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
    lo, hi = _domain(table)
    scale = max(abs(lo), abs(hi)) or 1.0
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(g) for g in table.GROUP), []).append(r)
    out = ['<div class="tl-grids">']
    for group, mine in groups.items():
        ys = list(dict.fromkeys(r[across] for r in mine))
        xs = list(dict.fromkeys(r[down] for r in mine))
        cell = {(r[across], r[down]): r for r in mine}
        name = ", ".join(f"{g}={_shown(v)}" for g, v in zip(table.GROUP, group, strict=True))
        top = "".join(f"<th>{html.escape(_shown(x))}</th>" for x in xs)
        caption = html.escape(name or table.SCORE)
        out.append(f'<table class="tl-heat" data-group="{html.escape(name, quote=True)}">'
                   f"<caption>{caption}</caption><tr><td></td>{top}</tr>")  # fmt: skip
        for y in ys:
            out.append(f"<tr><th>{html.escape(across)} {html.escape(_shown(y))}</th>")
            for x in xs:
                r = cell.get((y, x))
                v = None if r is None else _num(r.get(table.SCORE))
                faint = ' class="tl-ns"' if r is not None and significant(table, r) is False else ""
                tip = "" if r is None else html.escape(_tip(table, r), quote=True)
                out.append(f'<td{faint} title="{tip}" style="background:'
                           f'{heat_colour(None if v is None else v / scale)}">'
                           f"{'' if v is None else f'{v:.2f}'}</td>")  # fmt: skip
            out.append("</tr>")
        out.append("</table>")
    out.append("</div>")
    return "".join(out)


def _tip(table: Any, row: dict[str, Any]) -> str:
    names = [c for c in table.columns() if c not in table.NESTED and c not in table.HIDDEN]
    return "\n".join(f"{c}: {_shown(row.get(c))}" for c in names[:16])


def table_html(table: Any) -> str:
    """The HTML fragment of ``table`` (see the module docstring)."""
    flat = table.flat_rows()
    hidden = set(table.HIDDEN)
    names = []
    for c in table.columns():
        if c in table.NESTED and c not in hidden:
            names += [k for r in flat for k in r if k.startswith(table.NESTED[c] + ":")]
        elif c not in hidden and c not in table.NESTED:
            names.append(c)
    names = list(dict.fromkeys(n for n in names if n not in hidden))
    domain = _domain(table)
    head = "".join(
        f'<th onclick="tlltSort(this)" title="sort">{html.escape(c)}</th>' for c in names
    )
    body = []
    for raw, r in list(zip(table.rows, flat, strict=True))[:MAX_ROWS]:
        faint = " tl-ns" if significant(table, raw) is False else ""
        cells = [_bar(table, r, domain) if c == table.SCORE else _cell(r.get(c)) for c in names]
        body.append(f'<tr class="tl-row{faint}">{"".join(cells)}</tr>')
    more = len(table.rows) - MAX_ROWS
    note = f"<p>… {more} more rows (to_pandas() has them all)</p>" if more > 0 else ""
    legend = _legend(table)
    return (
        f'<div class="tl-table">{_STYLE}{_SORT}<div><strong>{html.escape(table.title())}</strong>'
        f"</div>{_grids(table)}<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}"
        f"</tbody></table>{note}{legend}</div>"
    )


def _legend(table: Any) -> str:
    have = set(table.columns())
    bits = []
    if table.SCORE in have:
        bits.append(f"bar: {html.escape(table.SCORE)}")
    if set(table.INTERVAL) <= have:
        bits.append("whisker: interval " + "–".join(table.INTERVAL))
    if set(table.NULL) <= have:
        bits.append("grey band: null mean ± 2 sd")
    sig = [c for c in table.SIGNIFICANCE if c in have]
    if sig:
        bits.append(f"greyed: {sig[0]} &gt; {table.ALPHA}")
    return f"<p><small>{'; '.join(bits)}; click a heading to sort</small></p>" if bits else ""
