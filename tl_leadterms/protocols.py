"""The types of the public parameters: what a model, a corpus of windows and a path may be.

Every analysis reads its model through one view (:mod:`tl_leadterms.adapters.view`), so the
type a signature states is a small structural one, :class:`ReadableModel`; the view refuses,
naming the fix, a model it cannot read.
"""

import os
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

__all__ = ["Documents", "PathLike", "ReadableModel", "TokenWindows"]


@runtime_checkable
class ReadableModel(Protocol):
    """A model :func:`~tl_leadterms.to_paper` reads: a TransformerLens ``HookedTransformer``
    (TransformerLens 3), a ``TransformerBridge`` (3.9 and 4), or the paper's model
    (:class:`~tl_leadterms.models.PaperModel`, :func:`~tl_leadterms.models.leading_model`).
    Structurally: a module with TransformerLens' config ``cfg``."""

    cfg: Any


#: windows of ``T + 1`` token ids: a 2-D integer tensor or array ``[n, T + 1]``, an iterable of
#: such batches, or a ``datasets.Dataset`` with an ``input_ids`` column
TokenWindows = torch.Tensor | np.ndarray | Iterable[Any]

#: documents to cut into windows: token-id sequences, strings (with a tokenizer), or a
#: ``datasets.Dataset`` with a text or ``input_ids`` column
Documents = torch.Tensor | np.ndarray | Iterable[Any]

#: a file or folder path
PathLike = str | os.PathLike
