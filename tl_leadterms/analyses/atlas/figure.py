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
import math
from typing import Any

from tl_leadterms.results.html import View
from tl_leadterms.results.null import FAINT

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


def _num(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _hover(row: dict[str, Any]) -> str:
    parts = [f"{row['label']}: {row.get('character', '')}",
             f"cos(W, Q̄) {_num(row.get('cosine'))}; distribution-level est. "
             f"{_num(row.get('corrected'))} [{_num(row.get('lo'))}, {_num(row.get('hi'))}]",
             f"excess {_num(row.get('excess'))} ({row.get('verdict') or 'no null'}), null z "
             f"{_num(row.get('z'))}, q {_num(row.get('q'))}",
             f"implied s·η {_num(row.get('implied_s_lr'))}",
             f"value: {row.get('value_character', '')} (cos {_num(row.get('value_cosine'))})",
             f"agreement: JS {_num(row.get('js_divergence'))}, "
             f"rank {_num(row.get('rank_correlation'))}",
             f"TL detectors: prev {_num(row.get('previous_token'))}, "
             f"dup {_num(row.get('duplicate_token'))}, "
             f"ind {_num(row.get('induction'))}"]  # fmt: skip
    return "\n".join(parts)


def atlas_html(atlas: Any) -> str:
    """The atlas grid as an HTML fragment (see the module docstring)."""
    rows = atlas.rows
    layers = sorted({r["layer"] for r in rows})
    heads = sorted({r["head"] for r in rows})
    cell = {(r["layer"], r["head"]): r for r in rows}
    esc = html_lib.escape
    out = ['<div class="head-atlas">', '<table style="border-collapse:collapse">',
           "<tr><th></th>" + "".join(f"<th>H{h}</th>" for h in heads) + "</tr>"]  # fmt: skip
    for layer in layers:
        out.append(f"<tr><th>L{layer}</th>")
        for h in heads:
            r = cell.get((layer, h))
            if r is None:
                out.append("<td></td>")
                continue
            key = character_key(r.get("character", ""))
            colour = CHARACTER_COLOURS.get(key, "#969696")
            faint = "opacity:0.45;" if r.get("verdict") in FAINT else ""
            out.append(
                f'<td class="atlas-cell" data-label="{esc(r["label"])}" '
                f'data-character="{esc(key)}" title="{esc(_hover(r))}" '
                f'style="background:{colour};{faint}width:2.2em;height:1.6em;'
                f'border:1px solid #fff;text-align:center;font-size:0.75em">'
                f"{esc(_num(r.get('cosine')))}</td>"
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
    out.append(f"<p>{legend}<br><small>cell text: cosine of W with Q̄; faded: verdict "
               f"{' or '.join(FAINT)}; hover for the numbers</small>{notes}</p></div>")  # fmt: skip
    return "\n".join(out)


def plot_atlas(atlas: Any, title: str = "Head atlas") -> View:
    """The atlas grid as a :class:`~tl_leadterms.results.html.View` (notebook-renderable)."""
    return View([atlas_html(atlas)], title=title, data={"rows": atlas.rows})
