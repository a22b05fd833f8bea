"""The head atlas: one row per attention head, with what the theory and TransformerLens say of it.

Its computation and result (:class:`HeadAtlas`, :mod:`.compute`) and its figure, an HTML grid
(:func:`plot_atlas`, :mod:`.figure`).
"""

from tl_leadterms.analyses.atlas.compute import HeadAtlas, head_atlas
from tl_leadterms.analyses.atlas.figure import atlas_html, plot_atlas

__all__ = ["HeadAtlas", "atlas_html", "head_atlas", "plot_atlas"]
