"""The head atlas as an HTML grid: layers × heads, each cell coloured by the head's character.

``atlas_html(atlas)`` returns a self-contained fragment (inline styles, no script):
``<div class="head-atlas">`` holding a table whose cells are
``<td class="atlas-cell" data-label="L0H1" data-character="bigram" ...>`` with a ``title`` that
hovers the numbers, and a legend. ``plot_atlas(atlas)`` wraps it in a :class:`View`.

>>> from tl_leadterms.analyses.atlas.compute import HeadAtlas
>>> row = {"label": "L0H0", "layer": 0, "head": 0, "character": "bigram-like", "cosine": 0.9,
...        "z": 5.0, "p": 0.01}
>>> html = atlas_html(HeadAtlas([row], {}))
>>> 'data-label="L0H0"' in html and 'data-character="bigram"' in html
True
"""

import html as html_lib
from typing import Any

from tl_leadterms.results.html import View
from tl_leadterms.results.null import FAINT, dimmed
from tl_leadterms.results.style import ink, number

__all__ = ["CHARACTER_COLOURS", "atlas_html", "character_key", "plot_atlas"]

#: cell colours by character key (a component's family, or the attribution's verdict)
CHARACTER_COLOURS = {
    "attention": "#6a51a3",
    "bigram": "#2171b5",
    "previous": "#6baed6",
    "interchangeability": "#238b45",
    "context": "#d94801",
    "bigram∘context": "#8c6d31",
    "context∘bigram": "#8c6d31",
    "context∘interchangeability": "#b5a01f",
    "positional": "#807dba",
    "mixed": "#bdbdbd",
    "unexplained": "#f0f0f0",
    "zero": "#ffffff",
}


def character_key(character: str) -> str:
    """``"bigram-like"`` -> ``"bigram"``, ``"previous token-like"`` -> ``"previous"``,
    ``"attention statistic-like"`` -> ``"attention"``; verdicts stay as they are."""
    key = character.removesuffix("-like")
    return {"previous token": "previous", "attention statistic": "attention"}.get(key, key)


def _hover(row: dict[str, Any]) -> str:
    parts = [f"{row['label']}: {row.get('character', '')}",
             f"cos(W, Q̄) {number(row.get('cosine'))}; distribution-level est. "
             f"{number(row.get('corrected'))} [{number(row.get('lo'))}, {number(row.get('hi'))}]",
             f"excess {number(row.get('excess'))} ({row.get('verdict') or 'no null'}), null z "
             f"{number(row.get('z'))}, q {number(row.get('q'))}",
             f"implied s·η {number(row.get('implied_s_lr'))}",
             f"value: {row.get('value_character', '')} (cos {number(row.get('value_cosine'))})",
             f"agreement: JS {number(row.get('js_divergence'))}, "
             f"rank {number(row.get('rank_correlation'))}",
             f"TL detectors: prev {number(row.get('previous_token'))}, "
             f"dup {number(row.get('duplicate_token'))}, "
             f"ind {number(row.get('induction'))}"]  # fmt: skip
    return "\n".join(parts)


def atlas_html(atlas: Any) -> str:
    """The atlas grid as an HTML fragment (see the module docstring)."""
    rows = atlas.rows
    layers = sorted({r["layer"] for r in rows})
    heads = sorted({r["head"] for r in rows})
    cell = {(r["layer"], r["head"]): r for r in rows}
    esc = html_lib.escape
    out = ['<div class="head-atlas">',
           '<table style="border-collapse:separate;border-spacing:1px">',
           "<tr><th></th>" + "".join(f"<th>H{h}</th>" for h in heads) + "</tr>"]  # fmt: skip
    for layer in layers:
        out.append(f"<tr><th>L{layer}</th>")
        for h in heads:
            r = cell.get((layer, h))
            if r is None:
                out.append("<td></td>")
                continue
            key = character_key(r.get("character", ""))
            fill = CHARACTER_COLOURS.get(key, "#969696")
            edge = "1px dashed currentColor" if dimmed(r) else "1px solid transparent"
            out.append(
                f'<td class="atlas-cell" data-label="{esc(r["label"])}" '
                f'data-character="{esc(key)}" title="{esc(_hover(r))}" '
                f'style="background:{fill};color:{ink(fill)};min-width:2.2em;height:1.6em;'
                f'border:{edge};padding:0 2px;text-align:center;font-size:0.75em">'
                f"{esc(number(r.get('cosine'), 2))}</td>"
            )
        out.append("</tr>")
    out.append("</table>")
    present = sorted({character_key(r.get("character", "")) for r in rows})
    legend = "".join(
        f'<span class="atlas-legend" data-character="{esc(k)}" style="display:inline-block;'
        f'margin-right:1em"><span style="display:inline-block;width:1em;height:1em;'
        f'background:{CHARACTER_COLOURS.get(k, "#969696")}"></span> {esc(k)}</span>'
        for k in present
    )
    notes = "".join(f"<br><small>{esc(n)}</small>" for n in atlas.notes())
    out.append(f"<p>{legend}<br><small>cell text: cosine of W with Q̄; dashed edge: verdict "
               f"{' or '.join(FAINT)}; hover for the numbers</small>{notes}</p></div>")  # fmt: skip
    return "\n".join(out)


def plot_atlas(atlas: Any, title: str = "Head atlas") -> View:
    """The atlas grid as a :class:`~tl_leadterms.results.html.View` (notebook-renderable)."""
    return View([atlas_html(atlas)], title=title, data={"rows": atlas.rows})
