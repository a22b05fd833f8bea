"""Training: plain SGD on next-token cross-entropy (:mod:`.loop`) and its curves (:mod:`.figure`).

:func:`train` records the loss and, with ``track=stats``, each weight's cosine with its own
leading term; :func:`plot_history` draws them, and :func:`report_section` puts them in a report.
"""

from tl_leadterms.training.figure import plot_history, report_section
from tl_leadterms.training.loop import TrainHistory, train

__all__ = ["TrainHistory", "plot_history", "report_section", "train"]
