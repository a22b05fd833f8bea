"""Training: plain SGD on next-token cross-entropy (:mod:`.loop`) and its curves (:mod:`.figure`).

:func:`train` records the loss and, with ``track=stats``, each weight's cosine with its own
leading term; :func:`plot_history` draws them.
"""

from tl_leadterms.training.figure import plot_history
from tl_leadterms.training.loop import TrainHistory, train

__all__ = ["TrainHistory", "plot_history", "train"]
