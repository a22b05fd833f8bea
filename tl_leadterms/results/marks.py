"""How tables mark an interval that is wider than its level.

A row with an interval carries ``noise_share``
(:func:`~tl_leadterms.results.intervals.noise_share`): the sample's noise against what the
score measures. From :data:`WIDE_NOISE_SHARE` on, the interval covers the truth more often than
its level says (the population benchmark, ``benchmarks/results/coverage.json``: ``population``
→ ``by_noise_share``), and every table says so the same way: the text tables put
:data:`WIDE_MARK` after the interval and :func:`wide_note` under the table, the HTML table
draws the interval's whisker dashed and explains it in its legend.

>>> is_wide({"noise_share": 0.7}), is_wide({"noise_share": 0.2}), is_wide({})
(True, False, False)
>>> wide_note([{"noise_share": 0.2}]) is None
True
"""

__all__ = ["WIDE_COVERAGE", "WIDE_MARK", "WIDE_NOISE_SHARE", "is_wide", "wide_note"]

#: the ``noise_share`` from which an interval is marked as wider than its level: in the
#: population benchmark rows at or above it covered the truth more often than nominal, rows
#: below it about as often as nominal
WIDE_NOISE_SHARE = 0.5
#: what those rows' intervals did there, as the notes quote it
WIDE_COVERAGE = "in the population benchmark 99% of such 90% and 95% intervals held the truth"
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
            f"{WIDE_NOISE_SHARE:.0%} of what the score measures, and the interval is wider "
            f"than its level ({WIDE_COVERAGE}); more windows narrow it")  # fmt: skip
