"""What a result puts in a report: one :class:`Section`, and the small HTML helpers sections use.

Every result the report takes renders its own section: an analysis's result through its
package's ``report_section(result)`` (declared by its line in :mod:`tl_leadterms.registry`),
a training history, a sweep table, the explorer, attention views and association lists through
their own. A section carries the findings its result writes about itself, in sentences;
:func:`~tl_leadterms.report` puts them all at the top of the page.

>>> s = Section("atlas", "Head atlas", "<p>grid</p>", (esc("2 < 3"),))
>>> s.findings
('2 &lt; 3',)
"""

import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tl_leadterms.errors import LeadTermsError

__all__ = ["Section", "esc", "figure_block", "kv_table", "note", "step_text"]


@dataclass(frozen=True)
class Section:
    """One section of a report.

    Attributes:
        id: its anchor (``"decompose"``, ``"atlas"``, ...; the report makes repeated ids
            unique).
        title: its heading.
        body: its HTML (built from escaped text).
        findings: what its result says, each an escaped HTML sentence, for the findings on
            top of the page.
    """

    id: str
    title: str
    body: str
    findings: tuple[str, ...] = ()


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


def figure_block(make: Callable[[], Any], caption: str) -> str:
    """``<figure>`` holding the PNG of the figure ``make()`` draws, with ``caption``; a note
    instead when ``make`` refuses (a :class:`LeadTermsError`, e.g. an empty history)."""
    from tl_leadterms.results.html import figure_html

    try:
        image = figure_html(make(), caption)
    except LeadTermsError as err:
        return note(f"{caption}: {err}")
    return f'<figure class="figure">{image}<figcaption>{esc(caption)}</figcaption></figure>'


def step_text(lr: float | None, steps: int | None) -> str:
    """``"step 4 (s·η = 4)"``, or ``"the given weights"`` when the step is unknown."""
    if steps is None:
        return "the given weights"
    return f"step {steps}" + (f" (s·η = {lr * steps:g})" if lr is not None else "")
