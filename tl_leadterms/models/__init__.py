"""Models: the paper's one-hot attention-only transformer and its training loop."""

from tl_leadterms.models.leading import leading_model
from tl_leadterms.models.paper import PaperModel, paper_model

__all__ = ["PaperModel", "TrainHistory", "leading_model", "paper_model", "train"]
