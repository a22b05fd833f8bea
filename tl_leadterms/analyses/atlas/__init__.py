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

__all__ = [
    "CHARACTER_COLOURS",
    "DETECTORS",
    "HeadAtlas",
    "atlas_html",
    "character_key",
    "detector_scores",
    "head_atlas",
    "plot_atlas",
]
