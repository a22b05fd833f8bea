"""The explorer's page: one offline HTML document around the data of
:mod:`~tl_leadterms.explorer.data` (styles and script below, circuitsvis inlined once), in the
theme's colours (light or dark as its host says, else as the reader prefers) and the one
diverging map (the summary's ``ramp``).

The grid is drawn from a small summary (a few numbers per head); each head's details sit in
their own ``<script type="application/json" data-head="L3H2">`` block and are parsed only when
the head is clicked, so a 30 × 9 model opens as fast as a 2 × 1 one. JSON is embedded with
``<``, ``>`` and ``&`` escaped (``\\u003c`` ...), so no token string can end a script; the page
puts text into the DOM through ``textContent`` only.

>>> html = page({"summary": {"title": "<x>"}, "heads": {}}, library="")
>>> "\\\\u003cx\\\\u003e" in html and "<x>" not in html
True
"""

import html as html_lib
import json
from importlib.resources import files
from typing import Any

from tl_leadterms.results.style import ramp, theme_css

__all__ = ["embed_json", "page"]


def embed_json(value: Any) -> str:
    """``value`` as JSON safe inside a ``<script>`` element."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _asset(name: str) -> str:
    """A file shipped with the package next to this module (the page's style and script)."""
    return (files("tl_leadterms.explorer") / name).read_text(encoding="utf-8")


def page(data: dict[str, Any], library: str, title: str = "tl_leadterms explorer") -> str:
    """The complete page; ``library`` is the circuitsvis ``<script>`` (or empty)."""
    summary = {**data.get("summary", {}), "ramp": ramp()}
    options = "".join(
        f'<option value="{html_lib.escape(key)}">{html_lib.escape(name)}</option>'
        for key, name in summary.get("score_names", {}).items()
    )
    heads = "\n".join(
        f'<script type="application/json" class="tl-head" data-head="{html_lib.escape(label)}">'
        f"{embed_json(value)}</script>"
        for label, value in data.get("heads", {}).items()
    )
    kinds = "".join(f'<option value="{k}">{k}</option>' for k in ("context", "bigram",
                    "interchangeability"))  # fmt: skip
    css, script = _asset("explorer.css"), _asset("explorer.js")
    legend = html_lib.escape(data.get("words", {}).get("legend", ""))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html_lib.escape(title)}</title><style>{theme_css(':root', page=True)}{css}"
        f"</style>{library}</head><body>"
        f'<div id="tl-root"><h1>{html_lib.escape(title)}</h1><div class="tl-meta">'
        f"{html_lib.escape(summary.get('meta', ''))}</div>"
        '<div id="tl-layout"><div id="tl-side">'
        f'<label>colour by <select id="tl-score">{options}</select></label>'
        '<div id="tl-grid"></div><div id="tl-legend"></div>'
        '<div id="tl-words"><h2>Word box</h2><label>token <input id="tl-word" size="16" '
        f'placeholder="type a word"></label> <select id="tl-word-kind">{kinds}</select>'
        f'<p class="tl-note" id="tl-word-scoring">{legend}</p>'
        '<div id="tl-word-lists"></div><div id="tl-word-text"></div></div></div>'
        '<div id="tl-panel"><p class="tl-note">click a head to open its panel</p></div>'
        "</div></div>"
        f'<script type="application/json" id="tl-summary">{embed_json(summary)}</script>'
        f"\n{heads}\n<script>{script}</script>"  # the word table after it: the grid draws first
        f'<script type="application/json" id="tl-words-data">'
        f"{embed_json(data.get('words', {}))}</script></body></html>\n"
    )
