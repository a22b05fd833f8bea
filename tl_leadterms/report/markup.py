"""The page around the sections: escaping, small tables, numbers and the one stylesheet."""

import html
import json
import math

__all__ = ["CSS", "esc", "kv_table", "note", "num", "page"]

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222;
  padding: 0 1em; box-sizing: border-box; overflow-wrap: anywhere; }
section { min-width: 0; }
/* a table wider than the page scrolls inside its own box; the page never scrolls sideways */
.table-scroll { max-width: 100%; overflow-x: auto; margin: .5em 0 1em; }
.table-scroll > table { margin: 0; }
section > table, details > table, section > div > table:not(.heatmap) { display: block;
  max-width: 100%; overflow-x: auto; }
td, th { overflow-wrap: normal; }
iframe, svg, canvas, video { max-width: 100%; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .9em; }
td, th { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f4f4f4; } .note { color: #666; font-style: italic; }
.view { margin: .5em 0 1.5em; } pre { background: #f8f8f8; padding: .5em; overflow-x: auto; }
img { max-width: 100%; } details > summary { cursor: pointer; margin: .5em 0; }
.findings li { margin: .25em 0; } .findings { background: #fbfbf4; padding: .2em 1em; }
.heatmaps { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
table.heatmap { font-size: .75em; margin: 0; }
table.heatmap td { width: 2.6em; height: 1.5em; padding: 0; text-align: center;
  border: 1px solid #fff; }
table.heatmap th { padding: 0 .3em; background: none; border: none; font-weight: normal; }
table.heatmap caption { font-weight: bold; text-align: left; }
.legend span { display: inline-block; padding: 0 .4em; margin-right: .3em; border: 1px solid #ddd; }
"""


def esc(value: object) -> str:
    """``str(value)`` escaped for HTML text and attributes."""
    return html.escape(str(value), quote=True)


def note(text: str) -> str:
    """A grey, italic remark (escaped)."""
    return f'<p class="note">{esc(text)}</p>'


def _short(value: object, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def kv_table(items: list[tuple[str, object]], css: str) -> str:
    """A two-column table of ``(key, value)`` pairs, values shortened to 300 characters."""
    rows = "".join(
        f"<tr><th>{esc(key)}</th><td>{esc(_short(value))}</td></tr>" for key, value in items
    )
    return f'<table class="{css}">{rows}</table>'


def num(value: object, digits: int = 4) -> str:
    """A number with ``digits`` decimals (scientific when large); "–" for None and NaN.

    >>> num(0.123456), num(float("nan")), num(12345.0)
    ('0.1235', '–', '1.234e+04')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}" if abs(value) < 1e4 else f"{value:.3e}"


def page(title: str, date: str, version: str, sections: list[tuple[str, str, str]]) -> str:
    """The whole document: head, table of contents and one ``<section>`` per entry."""
    toc = "".join(f'<li><a href="#{sid}">{esc(head)}</a></li>' for sid, head, _ in sections)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f'<h1 class="title">{esc(title)}</h1>',
        f"<p>Generated {esc(date)} by tl_leadterms {esc(version)}.</p><ul>{toc}</ul>",
    ]
    for sid, head, body in sections:
        parts.append(f'<section id="{sid}"><h2>{esc(head)}</h2>\n{body}\n</section>')
    parts.append("</body></html>")
    return "\n".join(parts)
