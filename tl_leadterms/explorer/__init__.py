"""The explorer: one offline page over every head of a model, tied to the corpus statistics.

:func:`explore` (:mod:`.build`) gathers the numbers (:mod:`.data`) and writes the page
(:mod:`.page`); :func:`plot_associations` (:mod:`.associations`) shows a word's association lists
beside a text shaded by them.
"""

from tl_leadterms.explorer.associations import Associations, associations, plot_associations
from tl_leadterms.explorer.build import Explorer, explore

__all__ = ["Associations", "Explorer", "associations", "explore", "plot_associations"]
