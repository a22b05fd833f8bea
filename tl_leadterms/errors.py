"""The one exception type of tl_leadterms, and the checks the lowest layers need.

Every entry point reaches these through :mod:`tl_leadterms.checks`, which re-exports them.
"""

from collections.abc import Sequence
from typing import Any


class LeadTermsError(ValueError):
    """Bad input to tl_leadterms.

    The message names the offending value and says what to do about it. It subclasses
    ``ValueError`` so that generic handlers keep working.
    """


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
