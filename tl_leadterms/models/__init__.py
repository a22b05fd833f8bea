"""Models: the paper's one-hot attention-only transformer (a standalone ``HookedRootModule``)."""

from tl_leadterms.models.leading import leading_model
from tl_leadterms.models.paper import PaperModel, paper_model
from tl_leadterms.models.paper_config import PaperConfig

__all__ = ["PaperConfig", "PaperModel", "leading_model", "paper_model"]
