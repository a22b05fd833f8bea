"""The one exception type of tl_leadterms, and the checks the lowest layers need.

Every entry point reaches these through :mod:`tl_leadterms.checks`, which re-exports them.
"""

import re
from collections.abc import Sequence
from typing import Any

_BOTH = re.compile("\u27e6([^\u27e6\u27e7|]*)\\|([^\u27e6\u27e7|]*)\u27e7")


class LeadTermsError(ValueError):
    """Bad input to tl_leadterms.

    The message names the offending value and says what to do about it. It subclasses
    ``ValueError`` so that generic handlers keep working.

    One message speaks to both audiences: a part written ``⟦API words|CLI words⟧`` reads as the
    first in Python (``str(err)``) and as the second on the command line (``err.cli_message``),
    so an error names ``tokenizer=`` to a notebook and ``--tokenizer`` to a shell.

    >>> err = LeadTermsError("token 'red' is a string; pass ⟦tokenizer=|--tokenizer⟧")
    >>> str(err), err.cli_message
    ("token 'red' is a string; pass tokenizer=", "token 'red' is a string; pass --tokenizer")
    """

    def __init__(self, *args: object) -> None:
        self.template = str(args[0]) if args else ""
        text = _BOTH.sub(r"\1", self.template)
        super().__init__(*((text, *args[1:]) if args else ()))

    @property
    def cli_message(self) -> str:
        """The message in the command line's words (flags instead of keywords)."""
        return _BOTH.sub(r"\2", self.template) if self.template else str(self)


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an int >= 1 (not a bool); else a LeadTermsError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LeadTermsError(f"{name} must be a positive int, got {value!r}")
    return value


def positive_number(name: str, value: object) -> float:
    """``value`` as a float if it is a finite number > 0; else a LeadTermsError naming ``name``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not 0 < value < float("inf"):
        raise LeadTermsError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def check_choice(name: str, value: Any, options: Sequence[str]) -> str:
    """``value`` if it is one of ``options``."""
    if not isinstance(value, str) or value not in options:
        raise LeadTermsError(
            f"{name} must be one of {', '.join(map(repr, options))}; got {value!r}"
        )
    return value


def first_line(err: BaseException) -> str:
    """The error's type and first line (at most 200 characters), for one-line messages.

    >>> first_line(ValueError("bad value\\nmore detail"))
    'ValueError: bad value'
    """
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:200] if lines else ''}"
