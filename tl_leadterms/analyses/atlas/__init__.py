"""The head atlas: one row per attention head, with what the theory and TransformerLens say of it.

Its computation and result (:class:`HeadAtlas`, :mod:`.compute`) and its figure, an HTML grid
(:func:`plot_atlas`, :mod:`.figure`).
"""

from tl_leadterms.analyses.atlas.compute import DETECTORS, HeadAtlas, detector_scores, head_atlas
from tl_leadterms.analyses.atlas.figure import (
    CHARACTER_COLOURS,
    atlas_html,
    character_key,
    plot_atlas,
)
from tl_leadterms.results.sections import Section

__all__ = [
    "CHARACTER_COLOURS",
    "DETECTORS",
    "HeadAtlas",
    "atlas_html",
    "character_key",
    "detector_scores",
    "head_atlas",
    "plot_atlas",
    "report_section",
]


def report_section(result: HeadAtlas) -> Section:
    """The report section of a head atlas: its grid."""
    return Section("atlas", "Head atlas", f'<div class="view atlas">{atlas_html(result)}</div>')
