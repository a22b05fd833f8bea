"""The view of a TransformerLens ``TransformerBridge`` in compatibility mode (TL 3.9 and 4.x).

After ``enable_compatibility_mode()`` a bridge's processed weights equal a HookedTransformer's; what
differs is where they are read: the score divisor, grouped keys and values, absent biases, rotary
tables, folded norms, ``W_pos``, the embedding scale, parameter and hook names, and the unmodelled
parts. Every such per-family fact lives in this module, one function each, each with a test in
tests/unit/test_view.py; the table of them, HookedTransformer beside bridge, is
docs/guides/bridge-facts.md#the-facts-one-place."""

from typing import Any

import torch
from torch import Tensor

from tl_leadterms.adapters.view.base import ModelView
from tl_leadterms.errors import LeadTermsError

__all__ = ["BridgeView", "hf_score_divisor"]

# Hugging Face attention classes that do not store their scale in ``scaling``
_UNSCALED = ("GPTNeoSelfAttention",)  # GPT-Neo multiplies by nothing
_INV_NORM = ("BloomAttention",)  # Bloom: baddbmm(..., alpha=inv_norm_factor)


def hf_score_divisor(hf_attention: Any, architecture: str | None) -> float:
    """The divisor of the attention scores of one Hugging Face attention module.

    Raises LeadTermsError for an attention class whose scale the view cannot read.
    """
    name = type(hf_attention).__name__
    if name in _UNSCALED:
        return 1.0
    if name in _INV_NORM:
        return 1.0 / float(hf_attention.inv_norm_factor)
    scaling = getattr(hf_attention, "scaling", None)
    if isinstance(scaling, int | float) and scaling > 0:
        return 1.0 / float(scaling)
    raise LeadTermsError(
        f"cannot read the attention scale of {architecture or 'this'} bridge: its attention "
        f"{name} has no positive 'scaling' attribute, so the maps would be wrong; load the "
        "checkpoint as a HookedTransformer under TransformerLens 3 (tl_leadterms.load_model)"
    )


def _architecture(model: Any) -> str | None:
    config = getattr(getattr(model, "original_model", None), "config", None)
    found = getattr(config, "architectures", None) or []
    return found[0] if found else getattr(model.cfg, "original_architecture", None)


def _embed_scale(model: Any) -> float:
    """Gemma's ``√d_model`` (a buffer of its scaled embedding), 1 for every other family."""
    scale = getattr(model.embed.original_component, "embed_scale", None)
    return 1.0 if scale is None else float(scale)


def _position_offset(model: Any) -> int:
    """OPT's learned positions start at row 2 (``offset``); 0 elsewhere."""
    return int(getattr(model.pos_embed.original_component, "offset", 0) or 0)


def _sincos_table(model: Any) -> Tensor | None:
    """GPT-J's ``embed_positions`` buffer (its Hugging Face ``rotary_emb``, which the bridge
    does not wrap), or None for other families."""
    for name, module in model.original_model.named_modules():
        if name.endswith("rotary_emb") and isinstance(getattr(module, "embed_positions", None),
                                                       Tensor):  # fmt: skip
            return module.embed_positions
    return None


def _gpt_j_tables(sincos: Tensor, n_ctx: int) -> tuple[Tensor, Tensor]:
    """GPT-J's ``embed_positions`` ``[max_pos, rotary_dim]`` = ``cat(sin, cos)``, each frequency
    repeated for its adjacent pair ``(2i, 2i + 1)``."""
    sincos = sincos[:n_ctx].to(torch.float64).cpu()
    sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
    return sin.repeat_interleave(2, -1), cos.repeat_interleave(2, -1)


def _rotary_module_tables(rotary: Any, n_ctx: int, d_head: int, like: Tensor):
    """``(sin, cos)`` ``[n_ctx, rotary_dim]`` from a Hugging Face rotary embedding module."""
    x = torch.zeros(1, n_ctx, d_head, dtype=like.dtype, device=like.device)
    positions = torch.arange(n_ctx, device=like.device)[None]
    cos, sin = rotary(x, positions)
    return sin[0].to(torch.float64).cpu(), cos[0].to(torch.float64).cpu()


def _rotary_base(model: Any) -> float:
    """``rope_theta`` of the Hugging Face config (a bridge's ``cfg.rotary_base`` is a default)."""
    config = model.original_model.config
    rope = getattr(config, "rope_parameters", None) or {}
    theta = rope.get("rope_theta") if isinstance(rope, dict) else None
    theta = theta or getattr(config, "rope_theta", None) or getattr(config, "rotary_emb_base", None)
    return float(theta if theta is not None else model.cfg.rotary_base)


class BridgeView(ModelView):
    """A :class:`~tl_leadterms.adapters.view.base.ModelView` of a TransformerBridge."""

    kind = "bridge"

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.architecture = _architecture(model)
        self._offset_gain = bool(getattr(model.cfg, "rmsnorm_uses_offset", False))
        self._divisors = [
            hf_score_divisor(block.attn.original_component, self.architecture)
            for block in model.blocks
        ]
        if self.normalization in ("LN", "RMS") and self._norms_are_identity():
            self.normalization += "Pre"  # folded by compatibility mode

    def _norm_modules(self) -> list[Any]:
        return [block.ln1 for block in self.model.blocks] + [self.model.ln_final]

    def _gain(self, ln: Any) -> Tensor:
        w = super()._gain(ln)
        return w + 1 if self._offset_gain else w

    def _norms_are_identity(self) -> bool:
        for ln in self._norm_modules():
            b = getattr(ln, "b", None)
            if not bool((self._gain(ln) == 1).all()) or (b is not None and bool((b != 0).any())):
                return False
        return True

    def score_divisor(self, layer: int) -> float:
        return self._divisors[layer]

    def W_E(self) -> Tensor:
        W_E = self.model.W_E.detach()
        scale = _embed_scale(self.model)
        return W_E if scale == 1.0 else W_E * torch.tensor(scale, dtype=W_E.dtype)

    def W_pos(self) -> Tensor:
        W_pos = self.model.pos_embed.W_pos.detach()
        offset = _position_offset(self.model)
        return W_pos[offset : offset + self.n_ctx]

    def weight(self, layer: int, name: str) -> Tensor:
        return getattr(self.model.blocks[layer].attn, name).detach()

    def bias(self, layer: int, name: str) -> Tensor:
        b = getattr(self.model.blocks[layer].attn, name)
        if b is not None:
            return b.detach()
        heads = self.n_kv_heads if name in ("b_K", "b_V") else self.n_heads
        return torch.zeros(heads, self.d_head, dtype=self.dtype, device=self.device)

    def rotary_tables(self, layer: int, n_ctx: int) -> tuple[Tensor, Tensor, bool]:
        rotary = getattr(self.model, "rotary_emb", None)
        if rotary is not None:
            sin, cos = _rotary_module_tables(
                rotary.original_component, n_ctx, self.d_head, self.W_E()
            )
            return sin, cos, False
        sincos = _sincos_table(self.model)
        if sincos is not None:
            sin, cos = _gpt_j_tables(sincos, n_ctx)
            return sin, cos, True
        raise LeadTermsError(
            f"cannot read the rotary tables of this {self.architecture} bridge (no rotary_emb "
            "module and no embed_positions table); load it as a HookedTransformer under "
            "TransformerLens 3"
        )

    def rotary_facts(self) -> dict[str, Any]:
        sin, _, adjacent = self.rotary_tables(0, 1)
        return {
            "rotary_dim": int(sin.shape[-1]),
            "rotary_base": _rotary_base(self.model),
            "rotary_adjacent_pairs": adjacent,
        }

    def _extra_norms(self) -> tuple[bool, bool, bool]:
        first = self.model.blocks[0] if self.n_layers else None
        attn = None if first is None else first.attn.original_component
        block = None if first is None else first.original_component
        return (
            getattr(attn, "q_norm", None) is not None,
            getattr(self.model, "embed_ln", None) is not None,
            getattr(block, "post_feedforward_layernorm", None) is not None,
        )

    def named_weights(self) -> list[tuple[str, Tensor]]:
        named = [
            (name, None if p is None else p.detach())
            for name, p in self.model.tl_named_parameters()
        ]
        embed_ln = getattr(self.model, "embed_ln", None)  # Bloom; not in tl_named_parameters
        if embed_ln is not None:
            named += [("embed.ln.w", embed_ln.w.detach()), ("embed.ln.b", embed_ln.b.detach())]
        return named
