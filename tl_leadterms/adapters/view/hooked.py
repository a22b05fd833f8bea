"""The view of a TransformerLens ``HookedTransformer`` (TL 3.x) and of the paper model.

TransformerLens stores a grouped-query model's keys and values grouped in ``_W_K``/``_W_V``
(``W_K``/``W_V`` repeat them per query head), keeps the score divisor in ``cfg.attn_scale``
(times ``layer + 1`` under ``scale_attn_by_inverse_layer_idx``) and computes rotary tables with
each attention module's ``calculate_sin_cos_rotary``.
"""

from typing import Any

import torch
from torch import Tensor

from tl_leadterms.adapters.view.base import ModelView

__all__ = ["HookedView"]


class HookedView(ModelView):
    """A :class:`~tl_leadterms.adapters.view.base.ModelView` of a HookedTransformer."""

    kind = "hooked"

    def score_divisor(self, layer: int) -> float:
        cfg = self.model.cfg
        scale = float(cfg.attn_scale) if cfg.use_attn_scale else 1.0
        if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
            scale *= layer + 1
        return scale

    def W_E(self) -> Tensor:
        return self.model.W_E.detach()

    def W_pos(self) -> Tensor:
        return self.model.W_pos.detach()

    def _attn(self, layer: int) -> Any:
        return self.model.blocks[layer].attn

    def weight(self, layer: int, name: str) -> Tensor:
        attn = self._attn(layer)
        if self.grouped and name in ("W_K", "W_V"):
            # GroupedQueryAttention's W_K/W_V properties repeat the groups; read the stored ones
            return getattr(attn, "_" + name).detach()
        return getattr(attn, name).detach()

    def bias(self, layer: int, name: str) -> Tensor:
        attn = self._attn(layer)
        if self.grouped and name in ("b_K", "b_V"):
            return getattr(attn, "_" + name).detach()
        return getattr(attn, name).detach()

    def _rotary_base(self, layer: int) -> float:
        cfg = self.model.cfg
        local = getattr(cfg, "rotary_base_local", None)
        if local is not None and getattr(self._attn(layer), "attn_type", "global") == "local":
            return float(local)
        return float(cfg.rotary_base)

    def rotary_tables(self, layer: int, n_ctx: int) -> tuple[Tensor, Tensor, bool]:
        attn = self._attn(layer)
        sin, cos = attn.calculate_sin_cos_rotary(
            self.model.cfg.rotary_dim, n_ctx, base=self._rotary_base(layer), dtype=torch.float64
        )
        return sin, cos, bool(getattr(self.model.cfg, "rotary_adjacent_pairs", False))

    def rotary_facts(self) -> dict[str, Any]:
        cfg = self.model.cfg
        return {
            "rotary_dim": cfg.rotary_dim,
            "rotary_base": cfg.rotary_base,
            "rotary_adjacent_pairs": bool(getattr(cfg, "rotary_adjacent_pairs", False)),
        }

    def _extra_norms(self) -> tuple[bool, bool, bool]:
        cfg = self.model.cfg
        names = ("use_qk_norm", "post_embedding_ln", "use_normalization_before_and_after")
        return tuple(bool(getattr(cfg, name, False)) for name in names)

    def named_weights(self) -> list[tuple[str, Tensor]]:
        # grouped keys and values are stored as _W_K, _b_K, ...: name them as a bridge does
        return [
            (name.replace("._W_", ".W_").replace("._b_", ".b_"), p.detach())
            for name, p in self.model.named_parameters()
        ]
