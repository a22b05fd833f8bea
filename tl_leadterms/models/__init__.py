"""Models: the paper's one-hot attention-only transformer (its training loop is
:func:`tl_leadterms.train`)."""

from tl_leadterms.models.paper import PaperModel, paper_model

__all__ = ["PaperModel", "paper_model"]
