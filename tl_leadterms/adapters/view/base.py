"""The surface every model view offers (:class:`ModelView`) and what both implementations share.

A view never modifies the model: every tensor it returns is detached, and reading one builds it
afresh (a layer at a time), so no copy of the whole model is ever held.
"""

from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

__all__ = ["HOOK_KINDS", "PLACEHOLDER_TOKENIZER", "ModelView", "own_tokenizer", "tokenizer_for"]

# name_or_path of the stand-in tokenizer load_model gives a bridge of a folder without one
# (TransformerBridge.boot_transformers needs a tokenizer); a view reports no tokenizer for it
PLACEHOLDER_TOKENIZER = "tl_leadterms-placeholder-tokenizer"

# the activations the analyses read, as TransformerLens names them (hook_<kind>)
HOOK_KINDS = {
    "resid_pre": "blocks.{layer}.hook_resid_pre",
    "resid_post": "blocks.{layer}.hook_resid_post",
    "attn_out": "blocks.{layer}.hook_attn_out",
    "pattern": "blocks.{layer}.attn.hook_pattern",
}


def own_tokenizer(model: Any) -> Any:
    """``model``'s own tokenizer: None without one, or for load_model's stand-in."""
    tokenizer = getattr(model, "tokenizer", None)
    return None if getattr(tokenizer, "name_or_path", None) == PLACEHOLDER_TOKENIZER else tokenizer


def tokenizer_for(given: Any, model: Any, stats: Any) -> Any:
    """The one rule for which tokenizer encodes text and labels tokens, in every analysis,
    view, report and monitor: the one ``given``; else the model's own (:func:`own_tokenizer`:
    the one that makes its inputs); else the one the statistics were computed with; else None
    (tokens are labelled by id). A model's own tokenizer is also what its statistics are
    checked against (:func:`~tl_leadterms.checks.check_vocab`), so any two of them that are
    both present read the same vocabulary."""
    for tokenizer in (given, own_tokenizer(model), getattr(stats, "tokenizer", None)):
        if tokenizer is not None:
            return tokenizer
    return None


class ModelView:
    """A read-only view of a TransformerLens model (build it with ``model_view``).

    Attributes:
        model: the wrapped model.
        kind: ``"hooked"`` (HookedTransformer, paper model) or ``"bridge"`` (TransformerBridge).
        d_vocab, d_model, n_ctx, n_layers, n_heads, n_kv_heads, d_head: sizes (``n_kv_heads``
            equals ``n_heads`` without grouped-query attention).
        grouped: whether the model has fewer key/value heads than query heads.
        kv_group: per query head, the index of its key/value head.
        model_name, architecture: the model's name and its Hugging Face architecture (or None).
        positional_type: ``"standard"`` (learned), ``"rotary"``, ``"alibi"``, ...
        normalization: the normalisation as the maps see it: ``None``, ``"LN"``/``"RMS"``
            (gains not folded into the weights) or ``"LNPre"``/``"RMSPre"`` (folded: gains 1
            and biases 0; a bridge's folded norms keep their ``LN``/``RMS`` type name).
        attn_only, attention_dir: as TransformerLens' config names them.
        loading: the weight processing ``load_model`` applied and recorded (``fold_ln``,
            centring, model class, compatibility mode, TransformerLens version), or None.
    """

    kind = "base"

    def __init__(self, model: Any) -> None:
        self.model = model
        cfg = model.cfg
        self.d_vocab, self.d_model = int(cfg.d_vocab), int(cfg.d_model)
        self.n_layers, self.n_heads = int(cfg.n_layers), int(cfg.n_heads)
        self.d_head = int(cfg.d_head)
        self.n_kv_heads = int(getattr(cfg, "n_key_value_heads", None) or cfg.n_heads)
        self.grouped = self.n_kv_heads != self.n_heads
        # TransformerLens repeats each key/value group for consecutive query heads
        self.kv_group = [h // (self.n_heads // self.n_kv_heads) for h in range(self.n_heads)]
        self.n_ctx = int(cfg.n_ctx)
        self.model_name = getattr(cfg, "model_name", None)
        self.positional_type = getattr(cfg, "positional_embedding_type", "standard")
        self.attn_only = bool(getattr(cfg, "attn_only", False))
        self.attention_dir = getattr(cfg, "attention_dir", "causal")
        self.architecture: str | None = getattr(cfg, "original_architecture", None)
        self.normalization: str | None = getattr(cfg, "normalization_type", None)
        # what tl_leadterms.load_model did to the weights (None for a model built elsewhere)
        loading = getattr(model, "tl_leadterms_loading", None)
        self.loading: dict[str, Any] | None = dict(loading) if loading else None

    # -- device, dtype, tokenizer ----------------------------------------------------------
    @property
    def device(self) -> torch.device:
        param = next(iter(self.model.parameters()), None)
        return param.device if param is not None else torch.device(self.model.cfg.device)

    @property
    def dtype(self) -> torch.dtype:
        return self.model.cfg.dtype

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (None without one, or for load_model's stand-in)."""
        return own_tokenizer(self.model)

    # -- weights (implemented per kind) ------------------------------------------------------
    def score_divisor(self, layer: int) -> float:
        """The number the attention scores of ``layer`` are divided by before the softmax."""
        raise NotImplementedError

    def W_E(self) -> Float[Tensor, "d_vocab d_model"]:
        """The token embedding as it enters the residual stream (embedding scale included)."""
        raise NotImplementedError

    def W_pos(self) -> Float[Tensor, "n_ctx d_model"]:
        """Learned positions, one row per position ``0..n_ctx-1`` (offset rows dropped)."""
        raise NotImplementedError

    def W_U(self) -> Float[Tensor, "d_model d_vocab"]:
        return self.model.W_U.detach()

    def weight(self, layer: int, name: str) -> Tensor:
        """``W_Q`` ``[n_heads, d_model, d_head]``, ``W_K``/``W_V`` ``[n_kv_heads, ...]``,
        ``W_O`` ``[n_heads, d_head, d_model]``."""
        raise NotImplementedError

    def bias(self, layer: int, name: str) -> Tensor:
        """``b_Q`` ``[n_heads, d_head]``, ``b_K``/``b_V`` ``[n_kv_heads, d_head]``; zeros when the
        model has none."""
        raise NotImplementedError

    def _gain(self, ln: Any) -> Tensor:
        """A norm module's gain as the model applies it (a kind may add an offset)."""
        return ln.w.detach()

    def norm_gain(self, layer: int | None) -> Tensor | None:
        """The multiplicative gain of ``blocks[layer].ln1`` (``None``: ``ln_final``) as the model
        applies it (Gemma's ``1 + w`` included), or None without a gain to fold."""
        if self.normalization not in ("LN", "RMS"):
            return None
        return self._gain(self.model.ln_final if layer is None else self.model.blocks[layer].ln1)

    def norm_bias(self, layer: int) -> Tensor | None:
        """The additive bias of ``blocks[layer].ln1``, or None."""
        return self.model.blocks[layer].ln1.b.detach() if self.normalization == "LN" else None

    def rotary_tables(self, layer: int, n_ctx: int) -> tuple[Tensor, Tensor, bool]:
        """``(sin, cos, adjacent_pairs)``: ``[n_ctx, rotary_dim]`` float64 tables of ``layer``."""
        raise NotImplementedError

    def rotary_facts(self) -> dict[str, Any]:
        """``rotary_dim``, ``rotary_base``, ``rotary_adjacent_pairs`` (provenance)."""
        raise NotImplementedError

    def _extra_norms(self) -> tuple[bool, bool, bool]:
        """Whether the model has QK-norm, a norm after ``W_E`` and norms after attention."""
        raise NotImplementedError

    def unmodelled(self) -> list[str]:
        """Configured computations the maps leave out (QK-norm, soft-capping, ...)."""
        cfg = self.model.cfg
        qk_norm, embed_ln, after = self._extra_norms()
        cap = getattr(cfg, "attn_scores_soft_cap", -1.0) or -1.0
        clip = getattr(cfg, "clip_qkv", None)
        found = {
            "use_qk_norm (RMSNorm of each query and key)": qk_norm,
            f"attn_scores_soft_cap={cap}": cap > 0,
            f"clip_qkv={clip}": clip is not None,
            "post_embedding_ln (LayerNorm after W_E)": embed_ln,
            "use_normalization_before_and_after (post-attention norms)": after,
        }
        return [name for name, present in found.items() if present]

    def named_weights(self) -> list[tuple[str, Tensor]]:
        """Every parameter under its TransformerLens name."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------
    def nonzero_biases(self) -> list[str]:
        """Sorted TransformerLens names of the nonzero biases (the maps leave them out)."""
        names = []
        for name, param in self.named_weights():
            leaf = name.rsplit(".", 1)[-1].lstrip("_")
            if param is None or not (leaf.startswith("b_") or leaf == "b"):
                continue
            if bool((param != 0).any()):
                names.append(name)
        return sorted(names)

    def hook_name(self, kind: str, layer: int) -> str:
        """The TransformerLens hook name of an activation (``HOOK_KINDS``) in ``layer``."""
        return HOOK_KINDS[kind].format(layer=layer)

    def run(self, tokens: Tensor, *, stop_at_layer: int | None = None) -> Tensor:
        """The model's forward pass on ``tokens`` (residual stream when ``stop_at_layer``)."""
        return self.model(tokens, stop_at_layer=stop_at_layer)

    def run_with_hooks(
        self,
        tokens: Tensor,
        hooks: dict[str, Callable[[Tensor], None]],
        *,
        stop_at_layer: int | None = None,
    ) -> None:
        """Run the model calling ``hooks[name](activation)`` for each named hook.

        Each callback is bound to the name it was registered under: inside a bridge's hook
        ``hook.name`` is the canonical name (``blocks.0.hook_in``), not the alias.
        """
        fwd = [(name, lambda act, hook, fn=fn: fn(act)) for name, fn in hooks.items()]
        self.model.run_with_hooks(
            tokens, return_type=None, fwd_hooks=fwd, stop_at_layer=stop_at_layer
        )

    def patterns(self, tokens: Tensor, layers: list[int]) -> dict[int, Tensor]:
        """``hook_pattern`` ``[batch, n_heads, q, k]`` of each layer on ``tokens`` (one run)."""
        out: dict[int, Tensor] = {}
        names = {self.hook_name("pattern", layer): layer for layer in layers}

        def keep(layer: int) -> Callable[[Tensor], None]:
            return lambda act: out.__setitem__(layer, act.detach())

        hooks = {name: keep(layer) for name, layer in names.items()}
        self.run_with_hooks(tokens.to(self.device), hooks, stop_at_layer=max(layers) + 1)
        return out

    def config_facts(self) -> dict[str, Any]:
        """The model's sizes and types, the same keys for every kind (report, provenance)."""
        cfg = self.model.cfg
        return {
            "model_name": self.model_name,
            "original_architecture": self.architecture,
            "view": self.kind,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_key_value_heads": self.n_kv_heads,
            "d_model": self.d_model,
            "d_head": self.d_head,
            "d_mlp": getattr(cfg, "d_mlp", None),
            "d_vocab": self.d_vocab,
            "n_ctx": self.n_ctx,
            "attn_only": self.attn_only,
            "act_fn": getattr(cfg, "act_fn", None),
            "normalization_type": self.normalization,
            "positional_embedding_type": self.positional_type,
        }
