"""The one exception type of tl_leadterms, and the two checks most inputs need."""


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
