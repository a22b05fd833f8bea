"""The page around the sections: the one stylesheet (on the theme's variables), the table of
contents, the sections, and the circuitsvis bundle once, before the first section that draws
with it."""

from tl_leadterms.results.html import circuitsvis_library
from tl_leadterms.results.sections import Section, esc
from tl_leadterms.results.style import theme_css

__all__ = ["CSS", "page"]

CSS = theme_css(":root", page=True) + """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em;
  box-sizing: border-box; overflow-wrap: anywhere; } section { min-width: 0; }
/* a table wider than the page scrolls inside its own box; the page never scrolls sideways */
.table-scroll { max-width: 100%; overflow-x: auto; margin: .5em 0 1em; } .table-scroll > table {
  margin: 0; } section > table, details > table, section > div > table:not(.heatmap) {
  display: block; max-width: 100%; overflow-x: auto; } td, th { overflow-wrap: normal; }
iframe, svg, canvas, video, img { max-width: 100%; } a { color: var(--tl-accent); }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid var(--tl-border); padding-bottom: .2em; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .9em; } th { background:
  var(--tl-head); } td, th { border: 1px solid var(--tl-border); padding: .25em .6em;
  text-align: left; vertical-align: top; } td.num { text-align: right; white-space: nowrap;
  font-variant-numeric: tabular-nums; } tr[data-dim] td, .note { color: var(--tl-muted); }
.note { font-style: italic; } .view { margin: .5em 0 1.5em; } pre { background: var(--tl-head);
  padding: .5em; overflow-x: auto; } details > summary { cursor: pointer; margin: .5em 0; }
.findings li { margin: .25em 0; } .findings { background: var(--tl-head); padding: .2em 1em; }
.heatmaps { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
table.heatmap { font-size: .75em; margin: 0; border-collapse: separate; border-spacing: 1px; }
table.heatmap td { min-width: 2.6em; height: 1.5em; padding: 0 2px; text-align: center;
  border: none; font-variant-numeric: tabular-nums; } table.heatmap th { padding: 0 .3em;
  background: none; border: none; font-weight: normal; } table.heatmap caption {
  font-weight: bold; text-align: left; } .legend span { display: inline-block; padding: 0 .4em;
  margin-right: .3em; }
"""  # fmt: skip


def page(title: str, date: str, version: str, sections: list[Section]) -> str:
    """The whole document: head, table of contents and one ``<section>`` per entry."""
    toc = "".join(f'<li><a href="#{s.id}">{esc(s.title)}</a></li>' for s in sections)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f'<h1 class="title">{esc(title)}</h1>',
        f"<p>Generated {esc(date)} by tl_leadterms {esc(version)}.</p><ul>{toc}</ul>",
    ]
    library = True
    for s in sections:
        if library and "CircuitsVis.render(" in s.body:
            parts.append(circuitsvis_library())
            library = False
        parts.append(f'<section id="{s.id}"><h2>{esc(s.title)}</h2>\n{s.body}\n</section>')
    parts.append("</body></html>")
    return "\n".join(parts)
