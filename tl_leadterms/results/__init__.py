"""What every analysis's result shares.

* :mod:`~tl_leadterms.results.table`: :class:`ResultTable`, the one base of every result, with
  its text, HTML (:mod:`~tl_leadterms.results.table_html`) and pandas renderings;
* :mod:`~tl_leadterms.results.uncertainty`: :class:`Uncertainty`, the one option object of how
  sure a number is (null, interval, and which question a score answers: exact for the
  model's training windows, or an estimate of the distribution-level score) that every
  analysis takes;
* :mod:`~tl_leadterms.results.null`: permutation nulls (:class:`NullSpec`);
* :mod:`~tl_leadterms.results.bootstrap`: bootstrap intervals over corpus blocks
  (:class:`BootstrapSpec`), from the formulas of :mod:`~tl_leadterms.results.intervals`;
* :mod:`~tl_leadterms.results.figures`, :mod:`~tl_leadterms.results.html` and
  :mod:`~tl_leadterms.results.tokens`: figure helpers, offline HTML views, tokens as text.
"""

from tl_leadterms.results.bootstrap import BootstrapSpec
from tl_leadterms.results.html import View, figure_html, save_html
from tl_leadterms.results.null import NullSpec, random_reference
from tl_leadterms.results.table import ResultTable
from tl_leadterms.results.uncertainty import Uncertainty

__all__ = [
    "BootstrapSpec",
    "NullSpec",
    "ResultTable",
    "Uncertainty",
    "View",
    "figure_html",
    "random_reference",
    "save_html",
]
