"""Reading JSON that another program (or a hostile file) wrote, and printing what it held.

A file on disk can hold anything. :func:`parse_json` turns JSON nested too deep for Python's
``json`` (a ``RecursionError``) and text that is not JSON into one :class:`LeadTermsError` naming
the file. Lone surrogates (``"\\ud800"``), which no UTF-8 stream, pandas or Arrow column can hold,
come back escaped as the text ``\\ud800`` (:func:`printable`), as every writer of text escapes
them; a token printed to a terminal goes through :func:`terminal_text` (control characters
escaped, long text cut).

Example:
    >>> parse_json('{"a": [1, 2]}', where="f.json")
    {'a': [1, 2]}
    >>> parse_json("[" * 100 + "]" * 100, where="f.json")
    Traceback (most recent call last):
    ...
    tl_leadterms.errors.LeadTermsError: f.json: JSON nested deeper than 32 levels; ...
"""

import json
import math
from typing import Any

from tl_leadterms.errors import LeadTermsError

__all__ = ["MAX_DEPTH", "SHOWN_CHARS", "TORN", "check_depth", "jsonable", "parse_json",
           "printable", "terminal_text"]  # fmt: skip

MAX_DEPTH = 32
"""No file this library writes nests JSON deeper than this."""

TORN = object()
"""What :func:`parse_json` returns with ``torn_ok=True`` for text that is not (complete) JSON."""


def printable(text: str) -> str:
    """``text`` with lone surrogates escaped as ``\\udXXX``, printable to any UTF-8 stream.

    >>> printable("ok"), printable("bad\\udcff")
    ('ok', 'bad\\\\udcff')
    """
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


SHOWN_CHARS = 100
"""Characters of a token string a terminal is shown; a longer one is cut, with its length."""


def terminal_text(text: str, limit: int = SHOWN_CHARS, *, quoted: bool = False) -> str:
    r"""``text`` (a token string, say) as a terminal may show it: every character that is not
    printable but a space (C0 and C1 controls such as ESC and BEL, line breaks, format
    characters, lone surrogates) escaped as Python writes it, so a token cannot move the
    cursor, set the title or write the clipboard; text over ``limit`` characters cut, with its
    length. A backslash is shown as it is; ``quoted=True`` gives the text in quotes as ``repr``
    writes it (the same characters escaped), for the ``repr`` of a result.

    >>> print(terminal_text("\x1b]0;TITLE\x07"), terminal_text(" the\n"))
    \x1b]0;TITLE\x07  the\n
    >>> print(terminal_text("x" * 200_000, limit=8))
    xxxxxxxx…(200,000 chars)
    """
    shown = (
        repr(text[:limit])
        if quoted
        else "".join(
            c if c.isprintable() or c == " " else c.encode("unicode_escape").decode()
            for c in text[:limit]
        )
    )
    return shown + f"…({len(text):,} chars)" if len(text) > limit else shown


def jsonable(value: Any, *, strict: bool = False) -> Any:
    """``value`` with dict keys as strings, tuples as lists and other objects as their repr
    (``strict``: as their str, and NaN and infinities as None, for strict JSON).

    Example:
        >>> jsonable({1: (2, None), "f": float})
        {'1': [2, None], 'f': "<class 'float'>"}
    """
    if strict and isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): jsonable(v, strict=strict) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, strict=strict) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value) if strict else repr(value)


def _too_deep(where: str) -> LeadTermsError:
    return LeadTermsError(
        f"{where}: JSON nested deeper than {MAX_DEPTH} levels; no writer of this library "
        "produces that, the file is corrupt or hostile"
    )


def check_depth(value: Any, *, where: str) -> Any:
    """``value`` (parsed JSON) with every string made :func:`printable`, if it nests at most
    :data:`MAX_DEPTH` levels; else the error."""

    def clean(item: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise _too_deep(where)
        if isinstance(item, dict):
            return {printable(k): clean(v, depth + 1) for k, v in item.items()}
        if isinstance(item, list):
            return [clean(v, depth + 1) for v in item]
        return printable(item) if isinstance(item, str) else item

    return clean(value, 1)


def parse_json(text: str | bytes, *, where: str, torn_ok: bool = False) -> Any:
    """``json.loads(text)``, refusing in one :class:`LeadTermsError` (naming ``where``) text
    nested deeper than :data:`MAX_DEPTH`, and text that is not JSON unless ``torn_ok`` (then
    :data:`TORN` is returned: an interrupted write's last line, say)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise _too_deep(where) from None
    except ValueError as err:
        if torn_ok:
            return TORN
        raise LeadTermsError(f"{where}: not valid JSON ({err})") from None
    return check_depth(value, where=where)
