"""A model's attention weights with LayerNorm/RMSNorm folded in, GQA kept grouped.

:class:`FoldedWeights` reads the weights the adapter's maps are built from, through the model's
view (:mod:`tl_leadterms.adapters.view`), as new tensors (the model is never modified):

- LayerNorm / RMSNorm weights folded on the fly, as ``process_weights_(fold_ln=True)`` would
  (``ln.w`` scales the rows of the reading weights; LayerNorm's centring becomes centring those
  rows over ``d_model``; the LN bias moves into the query/key/value biases);
- grouped-query attention (GQA/MQA) kept grouped: keys and values come back as
  ``[n_kv_heads, d_model, d_head]``, never repeated per query head;
  :attr:`FoldedWeights.kv_group` maps each query head to its group (TransformerLens repeats
  each group for ``n_heads // n_kv_heads`` consecutive query heads).
"""

from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from tl_leadterms.adapters.view import ModelView

__all__ = ["FoldedWeights", "kv_groups"]


def kv_groups(cfg: Any) -> list[int]:
    """The key/value group of each query head: ``h // (n_heads // n_kv_heads)``.

    Example:
        >>> from types import SimpleNamespace
        >>> kv_groups(SimpleNamespace(n_heads=6, n_key_value_heads=2))
        [0, 0, 0, 1, 1, 1]
        >>> kv_groups(SimpleNamespace(n_heads=3, n_key_value_heads=None))
        [0, 1, 2]
    """
    n_kv = getattr(cfg, "n_key_value_heads", None) or cfg.n_heads
    return [h // (cfg.n_heads // n_kv) for h in range(cfg.n_heads)]


class FoldedWeights:
    """The model's attention reading weights and biases with normalisation folded in.

    Args:
        view: the model's view (checked by ``to_paper``).
        fold_ln: fold unfolded ``"LN"``/``"RMS"`` weights (see ``to_paper``).
    """

    def __init__(self, view: ModelView, fold_ln: bool) -> None:
        self.view = view
        norm = view.normalization
        self.kv_group = list(view.kv_group)
        self.scale_ln = fold_ln and norm in ("LN", "RMS")  # multiply the LN weights in
        self.fold_ln_bias = fold_ln and norm == "LN"
        # LayerNorm centres its input; LNPre models keep doing so at run time
        self.centre = norm == "LNPre" or (fold_ln and norm == "LN")

    def _fold(self, W: Tensor, gain: Tensor | None) -> Tensor:
        if self.scale_ln:
            W = gain[:, None] * W
        if self.centre:
            # x̃ W with x̃ = x − mean(x) equals x (W − mean over the d_model rows of W)
            W = W - W.mean(-2, keepdim=True)
        return W

    def raw(self, layer: int, name: str) -> Tensor:
        """``W_Q`` ``[n_heads, ...]``, ``W_K``/``W_V`` per kv group, or ``b_Q``/``b_K``/``b_V``."""
        if name.startswith("b"):
            return self.view.bias(layer, name)
        return self.view.weight(layer, name)

    def reading(self, layer: int, name: str) -> Float[Tensor, "heads d_model d_head"]:
        """A folded reading weight; ``heads`` is ``n_kv_heads`` for grouped ``W_K``/``W_V``."""
        gain = self.view.norm_gain(layer) if self.scale_ln else None
        return self._fold(self.raw(layer, name), gain)

    def bias(self, layer: int, name: str) -> Float[Tensor, "heads d_head"]:
        """``b_Q``/``b_K``/``b_V`` (``name`` given as ``W_Q``...) plus the folded LN bias."""
        b = self.raw(layer, "b" + name[1:])
        if self.fold_ln_bias:
            ln_b = self.view.norm_bias(layer)
            b = b + torch.einsum("m,hmd->hd", ln_b, self.raw(layer, name))
        return b

    def unembed(self) -> Float[Tensor, "d_model d_vocab"]:
        gain = self.view.norm_gain(None) if self.scale_ln else None
        return self._fold(self.view.W_U(), gain)
