"""Tokens as a reader sees them: with their spaces, shaded on a diverging scale centred at 0.

:func:`token_texts` (html-escaped: :func:`token_labels`) gives each token the text it adds to
the decoded sequence (so a word-level or BPE token keeps the space before it); a leading space
is written as a no-break space, which a browser never collapses. :func:`shaded_tokens` colours
tokens on the one diverging map (:data:`~tl_leadterms.results.style.DIVERGING`: blue negative,
white 0, red positive, as every table and figure) against a fixed scale ``±scale`` with a
legend, each token's text black or white, whichever reads on its colour. It never stretches a
tiny range to full colour: when the largest ``|value|`` in the text is below
``SHADE_FLOOR · scale``, the tokens stay unshaded and the page says "no association in this
text".

>>> "No association in this text" in shaded_tokens(["a", "b"], [0.0, 1e-9], scale=1.0)
True
"""

import html
from collections.abc import Sequence
from typing import Any

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.style import colour, ink, number

__all__ = ["SHADE_FLOOR", "legend", "shaded_tokens", "token_labels", "token_texts"]

#: texts whose largest |value| is below this fraction of the scale are "no association"
SHADE_FLOOR = 0.01
NBSP = "\u00a0"


def token_texts(ids: Sequence[int], tokenizer: Any) -> list[str]:
    """Each token's text as decoded in sequence (with the space before it), not escaped.

    Token ``i`` is the text that ``decode(ids[: i + 1])`` adds to ``decode(ids[:i])``; where
    the decoder rewrites earlier text (clean-up of spaces), the token's own ``decode([id])``.
    A leading space becomes a no-break space, so that the pieces side by side read as the text
    (``"the", "\u00a0little", "\u00a0girl"``) even where a page collapses spaces. Without a
    tokenizer the pieces are the ids.
    """
    if tokenizer is None:
        return [str(i) for i in ids]
    pieces, before = [], ""
    for n, token_id in enumerate(ids):
        text = tokenizer.decode(list(ids[: n + 1]))
        piece = text[len(before) :] if text.startswith(before) else tokenizer.decode([token_id])
        before = text
        if piece[:1].isspace():
            piece = NBSP + piece.lstrip()
        pieces.append(piece)
    return pieces


def token_labels(ids: Sequence[int], tokenizer: Any) -> list[str]:
    """:func:`token_texts`, html-escaped (for pages that write the labels as markup)."""
    return [html.escape(piece, quote=False) for piece in token_texts(ids, tokenizer)]


def legend(scale: float) -> str:
    """A gradient bar from ``-scale`` through 0 to ``+scale``."""
    ends = ", ".join(colour(x / 4) for x in range(-4, 5))
    bar = f"linear-gradient(to right, {ends})"
    return (
        '<div class="shade-legend" style="display:flex;align-items:center;gap:.4em;'
        f'font-size:.85em;margin:.3em 0"><span>−{number(scale)}</span>'
        f'<span style="display:inline-block;width:12em;height:.8em;background:{bar};'
        'border:1px solid"></span>'
        f"<span>+{number(scale)}</span><span>(blue negative, 0 white, red positive)</span></div>"
    )


def shaded_tokens(labels: Sequence[str], values: Sequence[float], *, scale: float) -> str:
    """HTML of escaped ``labels`` shaded by ``values / scale`` (clipped to ±1), with a legend.

    Args:
        labels: token strings, already html-escaped (see :func:`token_labels`).
        values: one number per token.
        scale: the value drawn in full colour, e.g. the largest ``|value|`` of the whole row
            of the statistic, so that one text is not stretched to the colour range.
    """
    peak = max((abs(v) for v in values), default=0.0)
    if not scale > 0 or peak < SHADE_FLOOR * scale:
        spans = "".join(f'<span class="tok">{t}</span>' for t in labels)
        return (
            f'<p class="note no-association">No association in this text: the largest |value| '
            f"here, {number(peak)}, is below {SHADE_FLOOR:g} of the scale {number(scale)}.</p>"
            f'<div class="shaded-tokens" style="white-space:pre-wrap">{spans}</div>'
        )
    fills = [colour(v / scale) for v in values]
    spans = "".join(
        f'<span class="tok" title="{number(v, 4)}" style="background:{f};color:{ink(f)}">{t}</span>'
        for t, v, f in zip(labels, values, fills, strict=True)
    )
    return (
        f'<div class="shaded-tokens" style="white-space:pre-wrap;line-height:1.8">{spans}</div>'
        + legend(scale)
    )


def token_label(tokenizer: Any, token_id: int) -> str:
    """The token's string, html-escaped (its id when there is no tokenizer)."""
    text = tokenizer.decode([token_id]) if tokenizer is not None else str(token_id)
    return html.escape(text, quote=False)  # quotes stay readable: labels are never attributes


def encode_text(text: str, tokenizer: Any, what: str) -> list[int]:
    if tokenizer is None:
        raise LeadTermsError(
            f"{what} is a string ({text[:40]!r}); pass tokenizer= (or attach one to the model or "
            "as stats.tokenizer), or pass token ids"
        )
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if not ids:
        raise LeadTermsError(f"{what} {text!r} encodes to no tokens; pass some text")
    return [int(i) for i in ids]
