"""HookedTransformer -> the paper's notation: vocabulary-space ``W_O``, ``V``, ``W``, ``P``.

:func:`to_paper` reads a model's weights as the paper's maps (kept factored where the model has
embeddings); :mod:`tl_leadterms.adapters.factored` compares such maps with dense corpus
statistics without materialising them.
"""

from tl_leadterms.adapters import factored
from tl_leadterms.adapters.convert import to_paper
from tl_leadterms.adapters.extended import extended_embedding
from tl_leadterms.adapters.weights import LayerMaps, PaperWeights

__all__ = ["LayerMaps", "PaperWeights", "extended_embedding", "factored", "to_paper"]
