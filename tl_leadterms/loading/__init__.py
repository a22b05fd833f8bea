"""Model loading: any checkpoint TransformerLens converts, offline tiny models, checkpoint series.

* :mod:`~tl_leadterms.loading.checkpoint`: :func:`load_model` and :func:`load_series`;
* :mod:`~tl_leadterms.loading.bridge`: what a TransformerBridge needs (TL 4.x, or 3.9);
* :mod:`~tl_leadterms.loading.configs`: Hugging Face config fields TL 3.9's reader misses;
* :mod:`~tl_leadterms.loading.tiny`: tiny random models of every family, saved locally;
* :mod:`~tl_leadterms.loading.series`: a real offline checkpoint series (a tiny Pythia or
  Llama).
"""

from tl_leadterms.loading.checkpoint import load_model, load_series
from tl_leadterms.loading.series import load_windows, train_neox_series
from tl_leadterms.loading.tiny import save_tiny_model

__all__ = ["load_model", "load_series", "load_windows", "save_tiny_model", "train_neox_series"]
