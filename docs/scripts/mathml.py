"""MkDocs hook: the site's maths as MathML, typeset at build time (no JavaScript, no CDN).

Pages write TeX between ``$...$`` (inline) and ``$$...$$`` (display); ``pymdownx.arithmatex``
in generic mode keeps it intact through Markdown as ``<span class="arithmatex">\\(...\\)</span>``
and ``<div class="arithmatex">\\[...\\]</div>``, and this hook replaces each with the
``<math>`` element that ``latex2mathml`` makes of it, so the pages render their formulas
opened from the file system with no network. A formula that does not convert (an unknown
command survives as its own text) is a warning, which fails the strict build.

Overlines are written ``\\overline{B}``: browsers without a maths font place
``latex2mathml``'s ``\\overline`` over the letter at its width, where ``\\bar`` gives a short
bar that sits inside tall letters.
"""

import html
import logging
import re
from functools import cache
from xml.etree import ElementTree as ET

from latex2mathml.converter import convert

log = logging.getLogger("mkdocs.hooks.mathml")

NS = "http://www.w3.org/1998/Math/MathML"
ET.register_namespace("", NS)

_INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.S)
_BLOCK = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.S)
#: MathML 3 named widths, which MathML Core (Chromium) does not know
_SPACES = {
    "negativeveryverythinmathspace": "-0.0556em",
    "negativeverythinmathspace": "-0.1111em",
    "negativethinmathspace": "-0.1667em",
    "negativemediummathspace": "-0.2222em",
    "negativethickmathspace": "-0.2778em",
    "veryverythinmathspace": "0.0556em",
    "verythinmathspace": "0.1111em",
    "thinmathspace": "0.1667em",
    "mediummathspace": "0.2222em",
    "thickmathspace": "0.2778em",
}
#: ``mathvariant`` other than normal is not in MathML Core: the Unicode letters instead
#: (the first capital, small letter and digit of each alphabet)
_ALPHABETS = {"bold": (0x1D400, 0x1D41A, 0x1D7CE), "double-struck": (None, None, 0x1D7D8)}


#: operators that TeX sets with no space around them, where MathML's dictionary adds some
_ORDINARY = {"|", "/", "\u2016"}


def _tag(element: ET.Element) -> str:
    return element.tag.rpartition("}")[2]


def _variant(text: str, variant: str) -> str | None:
    upper, lower, digit = _ALPHABETS[variant]
    out = []
    for ch in text:
        if "0" <= ch <= "9" and digit is not None:
            out.append(chr(digit + ord(ch) - ord("0")))
        elif "A" <= ch <= "Z" and upper is not None:
            out.append(chr(upper + ord(ch) - ord("A")))
        elif "a" <= ch <= "z" and lower is not None:
            out.append(chr(lower + ord(ch) - ord("a")))
        else:
            return None
    return "".join(out)


def _table(table: ET.Element) -> None:
    """Alignment and spacing of a table (``align*``, ``cases``) as CSS, which MathML Core
    reads (it ignores ``columnalign`` and ``columnspacing``; Firefox reads both)."""
    spacing = table.get("columnspacing", "0.8em").split()
    for row in table:
        cells = list(row)
        for i, cell in enumerate(cells):
            style = ["padding-left: 0", "padding-right: 0"]
            if i + 1 < len(cells):
                style[1] = f"padding-right: {spacing[min(i, len(spacing) - 1)]}"
            if align := cell.get("columnalign"):
                style.append(f"text-align: {align}")
            cell.set("style", "; ".join(style))


def _core(root: ET.Element) -> None:
    """``latex2mathml``'s MathML 3 made readable by MathML Core browsers, in place."""
    for element in root.iter():
        tag = _tag(element)
        if tag == "mspace" and element.get("width") in _SPACES:
            element.set("width", _SPACES[element.get("width")])
        elif tag in ("mi", "mn") and element.get("mathvariant") in _ALPHABETS:
            if (letters := _variant(element.text or "", element.get("mathvariant"))) is not None:
                element.text = letters
                del element.attrib["mathvariant"]
        elif tag == "mo" and element.text in _ORDINARY:
            element.set("lspace", "0")  # TeX's spacing: |V|, 1/t, ‖A‖ are tight
            element.set("rspace", "0")
        elif tag == "mi" and len(element.text or "") == 1 and "\u0391" <= element.text <= "\u03a9":
            element.set("mathvariant", "normal")  # capital Greek upright, as TeX sets it
        elif tag == "mi" and element.text in ("\u27e8", "\u27e9"):
            element.tag = f"{{{NS}}}mo"  # angle brackets are fences, not identifiers
        elif tag == "mtable":
            _table(element)


@cache
def mathml(tex: str, display: bool = False) -> str:
    """The ``<math>`` element of the TeX ``tex``; ValueError if part of it did not convert.

    >>> mathml(r"\\overline{B}^\\top")  # doctest: +ELLIPSIS
    '<math ...><mrow><msup><mover>...<mi>B</mi>...<mo accent="true">―</mo></mover><mo>⊤</mo>...'
    """
    root = ET.fromstring(convert(tex.strip(), display="block" if display else "inline"))
    for element in root.iter():  # an unknown command is left as its own text
        if "\\" in (element.text or ""):
            raise ValueError(f"{element.text!r} did not convert")
    _core(root)
    return ET.tostring(root, encoding="unicode")


def typeset(text: str, where: str = "") -> str:
    """``text`` (HTML) with every arithmatex formula replaced by its MathML."""

    def replace(match: re.Match, display: bool) -> str:
        tex = html.unescape(match.group(1))
        try:
            element = mathml(tex, display)
        except Exception as error:  # latex2mathml raises its own types too
            log.warning("%s: the formula %r did not typeset: %s", where, tex, error)
            return match.group(0)
        return f'<div class="math-display">{element}</div>' if display else element

    text = _BLOCK.sub(lambda m: replace(m, True), text)
    return _INLINE.sub(lambda m: replace(m, False), text)


def on_page_content(html: str, page, **kwargs) -> str:
    return typeset(html, page.file.src_uri)


_TOC = re.compile(r"\\\((.*?)\\\)", re.S)


def on_page_context(context, page, **kwargs):
    """Headings with a formula: their entries in the table of contents (plain text with the
    TeX between ``\\(`` and ``\\)``) typeset as well."""

    def walk(items) -> None:
        for item in items:
            marked = _TOC.sub(lambda m: f'<span class="arithmatex">{m.group(0)}</span>', item.title)
            item.title = typeset(marked, page.file.src_uri)
            walk(item.children)

    walk(page.toc)
    return context
