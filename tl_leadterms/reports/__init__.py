"""The report: one self-contained HTML page composed from results that already exist
(:func:`report`, :mod:`.compose`), around the page's one stylesheet (:mod:`.page`)."""

from tl_leadterms.reports.compose import report, statistics_needed

__all__ = ["report", "statistics_needed"]
