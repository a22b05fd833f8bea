"""`View`: circuitsvis views and HTML fragments that render offline, alone or many to a page.

circuitsvis returns a ``RenderedHTML`` with two sources: ``cdn_src`` imports the React bundle
from unpkg.com (needs the network) and ``local_src`` inlines the bundle (about 1.3 MB) into a
``<script type="module">``. A :class:`View` only ever reads ``local_src``. It splits it into the
bundle and the one ``CircuitsVis.render(...)`` call, then writes the bundle once per page as a
classic ``<script>`` (which defines the global ``CircuitsVis``) followed by one
``<div></div><script>CircuitsVis.render(...)</script>`` per view, with a fresh element id each
time the view is written. So:

* the page needs no network (no ``src=`` and no ``import`` from any URL);
* several views, or the same view twice, can share one page (distinct ids, one bundle);
* the ``<div .../>`` of circuitsvis, which HTML parses as an *unclosed* div that would swallow
  everything after it (and be wiped when React renders into it), is written closed.
"""

import base64
import html
import re
import uuid
from pathlib import Path
from typing import Any

from tl_leadterms.atomic import write_bytes
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.style import theme_css

__all__ = ["View", "circuitsvis_library", "figure_html", "save_html"]

_LOCAL = re.compile(
    r'^\s*<div id="(?P<id>[^"]+)"[^>]*?/?>\s*<script[^>]*>(?P<body>.*)</script>\s*$', re.S
)
_CALL = re.compile(
    r'CircuitsVis\.render\(\s*"(?P<id>[^"]+)"\s*,\s*CircuitsVis\.(?P<name>\w+)\s*,'
    r"\s*(?P<props>.*?)\s*\)\s*$",
    re.S,
)
_CSS = (
    theme_css(":root", page=True)
    + """
body { font-family: system-ui, sans-serif; margin: 2em; }
.tl-leadterms-view { margin: 1.5em 0; }
.tl-leadterms-view table { border-collapse: collapse; font-size: 0.9em; }
.tl-leadterms-view th, .tl-leadterms-view td { border: 1px solid var(--tl-border);
  padding: 0.2em 0.6em; }
"""
)


class _Circuit:
    """One circuitsvis view, split into its bundle and its render call."""

    def __init__(self, rendered: Any) -> None:
        local = getattr(rendered, "local_src", None)
        if not isinstance(local, str):
            raise LeadTermsError(
                "expected a circuitsvis RenderedHTML (with .local_src), got "
                f"{type(rendered).__name__}"
            )
        self.local_src = local
        self.library: str | None = None
        self.name = self.props = None
        match = _LOCAL.match(local)
        if match is not None:
            body = match["body"]
            cut = body.rfind("CircuitsVis.render(")
            call = _CALL.match(body[cut:]) if cut >= 0 else None
            if call is not None:
                self.library = body[:cut].strip()
                self.name, self.props = call["name"], call["props"]

    def fragment(self) -> str:
        element = "tl-leadterms-cv-" + uuid.uuid4().hex
        if self.library is None:  # an unexpected circuitsvis layout: use local_src as it is
            old = _LOCAL.match(self.local_src)
            src = self.local_src
            if old is not None:
                src = src.replace(old["id"], element)
                src = re.sub(r"(<div [^>]*?)\s*/>", r"\1></div>", src, count=1)
            return src
        # the props are JSON: inside a <script>, only "</" and "<!--" could end or derail it
        props = self.props.replace("</", "<\\/").replace("<!--", "<\\!--")
        return (
            f'<div id="{element}" class="tl-leadterms-cv" style="margin: 15px 0; background: #fff; '
            'color: #000; color-scheme: light;"></div>\n'
            f'<script>CircuitsVis.render("{element}", CircuitsVis.{self.name}, {props});</script>'
        )


def _is_figure(part: object) -> bool:
    return hasattr(part, "savefig") and hasattr(part, "axes")


class View:
    """One or more HTML fragments (circuitsvis views, plain HTML, figures) under a title.

    Renders in notebooks (``_repr_html_``); :meth:`html` gives a self-contained page,
    :meth:`fragment` the body part for a larger page and :meth:`save` writes the page.

    Args:
        parts: circuitsvis ``RenderedHTML`` objects, strings of (trusted) HTML, matplotlib
            figures (embedded as PNG) or other :class:`View` objects (their parts and titles are
            nested), in display order.
        title: shown as a heading (escaped).
        data: the numbers behind the view (e.g. the values the tokens are coloured by).

    Several views in one page: ``View([view_a, "<p>...</p>", view_b], title="Report").save(p)``
    writes the circuitsvis bundle once; fragments of separate views can also be concatenated
    (each then carries the bundle) because every fragment gets fresh element ids.
    """

    def __init__(
        self, parts: object, title: object = "", data: dict[str, Any] | None = None
    ) -> None:
        if isinstance(parts, (str, View)) or hasattr(parts, "local_src") or _is_figure(parts):
            parts = [parts]
        if not isinstance(parts, (list, tuple)):
            raise LeadTermsError(
                f"parts must be a list of circuitsvis views, HTML strings, figures or Views, "
                f"got {type(parts).__name__}"
            )
        if not isinstance(title, str):
            raise LeadTermsError(f"title must be a str, got {title!r}")
        self.title = title
        self.data = dict(data or {})
        self.parts: list[Any] = []
        for i, part in enumerate(parts):
            if isinstance(part, (str, View)):
                self.parts.append(part)
            elif hasattr(part, "local_src"):
                self.parts.append(_Circuit(part))
            elif _is_figure(part):
                self.parts.append(figure_html(part))
            else:
                raise LeadTermsError(
                    f"part {i} is a {type(part).__name__}; pass circuitsvis RenderedHTML, an HTML "
                    "string, a matplotlib figure or a View"
                )

    def _circuits(self) -> list[_Circuit]:
        out = []
        for part in self.parts:
            if isinstance(part, _Circuit):
                out.append(part)
            elif isinstance(part, View):
                out.extend(part._circuits())
        return out

    def _library(self) -> str:
        for circuit in self._circuits():
            if circuit.library is not None:
                return f"<script>\n{circuit.library}\n</script>\n"
        return ""

    def _body(self, depth: int) -> str:
        level = min(depth + 1, 6)
        out = ['<section class="tl-leadterms-view">']
        if self.title:
            out.append(f"<h{level}>{html.escape(self.title)}</h{level}>")
        for part in self.parts:
            if isinstance(part, View):
                out.append(part._body(depth + 1))
            elif isinstance(part, _Circuit):
                out.append(part.fragment())
            else:
                out.append(part)
        out.append("</section>")
        return "\n".join(out)

    def fragment(self, library: bool = True) -> str:
        """The view as an HTML fragment to place inside a page's ``<body>``.

        Args:
            library: start with the circuitsvis bundle (a classic ``<script>``, ~1.3 MB). Pass
                False when the page already loads it (e.g. from another view's fragment, or
                :meth:`html` of a combined view) earlier in the document.
        """
        return (self._library() if library else "") + self._body(1)

    def html(self, standalone: bool = True) -> str:
        """A complete, offline HTML page (``standalone=True``) or :meth:`fragment`."""
        if not standalone:
            return self.fragment()
        title = html.escape(self.title or "tl_leadterms")
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{title}</title>\n<style>{_CSS}</style>\n{self._library()}</head>\n"
            f"<body>\n{self._body(0)}\n</body>\n</html>\n"
        )

    def save(self, path: object) -> Path:
        """Write :meth:`html` to ``path`` atomically; returns the path."""
        return save_html(self, path)

    def _repr_html_(self) -> str:
        return self.fragment()

    def __repr__(self) -> str:
        kinds = [type(p).__name__.strip("_").replace("Circuit", "circuitsvis") for p in self.parts]
        return f"View({self.title!r}, parts={kinds})"


def save_html(view: object, path: object) -> Path:
    """Write a self-contained, offline HTML page for a :class:`View` or a circuitsvis
    ``RenderedHTML`` (its ``local_src``), atomically (a temporary file, then a rename).

    Returns:
        The path written.
    """
    if not isinstance(view, View):
        if not hasattr(view, "local_src"):
            raise LeadTermsError(
                f"save_html takes a View or a circuitsvis RenderedHTML, got {type(view).__name__}"
            )
        view = View([view])
    page = view.html(standalone=True).encode("utf-8")
    return write_bytes(path, page, parents=True)


def figure_html(fig: object, alt: object = "figure") -> str:
    """An ``<img src="data:image/png;base64,...">`` tag of a matplotlib figure (self-contained)."""
    import io

    if not _is_figure(fig):
        raise LeadTermsError(f"figure_html takes a matplotlib Figure, got {type(fig).__name__}")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return (
        f'<img src="data:image/png;base64,{data}" alt="{html.escape(str(alt))}" '
        'style="max-width: 100%;">'
    )


def circuitsvis_library() -> str:
    """The circuitsvis bundle as one classic ``<script>`` (defines the global ``CircuitsVis``,
    whose components a page can then render itself, e.g. ``CircuitsVis.AttentionPattern``)."""
    import circuitsvis.attention

    view = View([circuitsvis.attention.attention_pattern(tokens=["a"], attention=[[1.0]])])
    library = view._library()
    if not library:
        raise LeadTermsError("this circuitsvis version's local_src has no bundle to inline")
    return library
