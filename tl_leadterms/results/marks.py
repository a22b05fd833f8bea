"""How tables mark an interval whose sample is about as noisy as what its score measures.

A row with an interval carries ``noise_share``
(:func:`~tl_leadterms.results.intervals.noise_share`); from :data:`WIDE_NOISE_SHARE` on, the
interval is wide because much of the distance from 1 may be the sample's own noise
(:data:`WIDE_COVERAGE`: how such intervals covered; docs/guides/intervals.md#the-noise-share).
Text tables put :data:`WIDE_MARK` after the interval and :func:`wide_note` under the table; the
HTML table draws the whisker dashed and explains it in its legend.

>>> is_wide({"noise_share": 0.7}), is_wide({"noise_share": 0.2}), is_wide({})
(True, False, False)
>>> wide_note([{"noise_share": 0.2}]) is None
True
"""

__all__ = ["WIDE_COVERAGE", "WIDE_MARK", "WIDE_NOISE_SHARE", "is_wide", "wide_note"]

#: the ``noise_share`` from which an interval is marked: the sample's noise is at least half
#: of what the score measures
WIDE_NOISE_SHARE = 0.5
#: what those rows' intervals (the default method's) did in the population benchmark, as the
#: notes quote it
WIDE_COVERAGE = (
    "at the coverage benchmark's issue size 95% of such 90% intervals and 98% of such 95% "
    "intervals held the truth"
)
#: the mark the text tables put after such an interval
WIDE_MARK = "†"


def is_wide(row: dict) -> bool:
    """Whether ``row``'s interval is marked (its ``noise_share`` is at least
    :data:`WIDE_NOISE_SHARE`)."""
    share = row.get("noise_share")
    return isinstance(share, float) and share >= WIDE_NOISE_SHARE


def wide_note(rows: list[dict]) -> str | None:
    """The line under a text table that explains :data:`WIDE_MARK`, when some row carries it."""
    if not any(is_wide(r) for r in rows):
        return None
    return (f"{WIDE_MARK} noise_share >= {WIDE_NOISE_SHARE:g}: the sample's noise is at least "
            f"{WIDE_NOISE_SHARE:.0%} of what the score measures, so much of the distance from "
            f"1 may be noise and the interval is wide ({WIDE_COVERAGE}); more windows narrow "
            f"it")  # fmt: skip
