"""HookedTransformerConfig fields for the architectures whose TransformerLens 3.9 config reader
fails on a local folder under transformers 5.

TransformerLens converts GPT-2, Phi, Gemma and Gemma 2 weights, but its
``convert_hf_model_config`` cannot read their local configs: GPT-2's ``n_ctx`` and Phi's
``partial_rotary_factor`` are no longer attributes, and Gemma's fields are keyed on hub names
only. Each function below returns the dict TransformerLens builds for that architecture, with
the same fields, read from the Hugging Face config instead of from a name. The weights still go
through TransformerLens' own ``convert_*_weights``.
"""

from collections.abc import Callable
from typing import Any

__all__ = ["DERIVED", "rope_setting"]


def rope_setting(hf_config: Any, key: str, default: Any) -> Any:
    """A rotary setting (``rope_theta``, ``partial_rotary_factor``) from ``rope_parameters``
    (transformers 5) or the config's attribute (transformers 4), else ``default``.

    Example:
        >>> from types import SimpleNamespace
        >>> rope_setting(SimpleNamespace(rope_parameters={"rope_theta": 5e5}), "rope_theta", 1e4)
        500000.0
        >>> rope_setting(SimpleNamespace(rope_theta=7.0), "rope_theta", 1e4)
        7.0
    """
    params = getattr(hf_config, "rope_parameters", None) or {}
    if isinstance(params, dict) and params.get(key) is not None:
        return params[key]
    value = getattr(hf_config, key, None)
    return default if value is None else value


def gpt2(c: Any) -> dict[str, Any]:
    """``GPT2LMHeadModel``: TransformerLens' fields; ``d_mlp`` honours ``n_inner`` as HF does."""
    return {
        "d_model": c.n_embd,
        "d_head": c.n_embd // c.n_head,
        "n_heads": c.n_head,
        "d_mlp": c.n_inner or 4 * c.n_embd,
        "n_layers": c.n_layer,
        "n_ctx": c.n_positions,
        "eps": c.layer_norm_epsilon,
        "d_vocab": c.vocab_size,
        "act_fn": c.activation_function,
        "use_attn_scale": getattr(c, "scale_attn_weights", True),
        "use_local_attn": False,
        "scale_attn_by_inverse_layer_idx": c.scale_attn_by_inverse_layer_idx,
        "normalization_type": "LN",
    }


def _rotary(c: Any, d_head: int) -> dict[str, Any]:
    """The fields Phi and Gemma read alike from their Hugging Face configs (rotary, scaled)."""
    return {
        "d_model": c.hidden_size,
        "d_head": d_head,
        "n_heads": c.num_attention_heads,
        "d_mlp": c.intermediate_size,
        "n_layers": c.num_hidden_layers,
        "n_ctx": c.max_position_embeddings,
        "d_vocab": c.vocab_size,
        "initializer_range": c.initializer_range,
        "positional_embedding_type": "rotary",
        "rotary_base": rope_setting(c, "rope_theta", 10000.0),
        "use_attn_scale": True,
    }


def phi(c: Any) -> dict[str, Any]:
    """``PhiForCausalLM``: LayerNorm, parallel attention and MLP, partial rotary."""
    d_head = c.hidden_size // c.num_attention_heads
    return {
        **_rotary(c, d_head),
        "eps": c.layer_norm_eps,
        "act_fn": c.hidden_act,
        "normalization_type": "LN",
        "rotary_dim": round(rope_setting(c, "partial_rotary_factor", 0.5) * d_head),
        "parallel_attn_mlp": True,
        "default_prepend_bos": False,
    }


def gemma(c: Any) -> dict[str, Any]:
    """``GemmaForCausalLM``: RMSNorm (offset 1 added by the weight converter), embeddings
    scaled by √d_model (also in the converter), gated MLP, multi-query attention."""
    d_head = c.head_dim or c.hidden_size // c.num_attention_heads
    return {
        **_rotary(c, d_head),
        "eps": c.rms_norm_eps,
        "act_fn": getattr(c, "hidden_activation", None) or c.hidden_act,
        "normalization_type": "RMS",
        "rotary_dim": d_head,
        # the converter needs it set even without grouping
        "n_key_value_heads": c.num_key_value_heads,
        "gated_mlp": True,
        "final_rms": True,
    }


def gemma2(c: Any) -> dict[str, Any]:
    """``Gemma2ForCausalLM``: Gemma plus sliding-window layers, soft caps, norms after each
    block and the ``query_pre_attn_scalar`` attention scale."""
    layer_types = getattr(c, "layer_types", None) or [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(c.num_hidden_layers)
    ]
    return {
        **gemma(c),
        "attn_scale": float(c.query_pre_attn_scalar) ** 0.5,
        "window_size": c.sliding_window,
        "use_local_attn": True,
        "attn_types": ["local" if t == "sliding_attention" else "global" for t in layer_types],
        "attn_scores_soft_cap": c.attn_logit_softcapping or -1.0,
        "output_logits_soft_cap": c.final_logit_softcapping or -1.0,
        "use_normalization_before_and_after": True,
    }


# architecture -> the HookedTransformerConfig fields, from the Hugging Face config
DERIVED: dict[str, Callable[[Any], dict[str, Any]]] = {
    "GPT2LMHeadModel": gpt2,
    "PhiForCausalLM": phi,
    "GemmaForCausalLM": gemma,
    "Gemma2ForCausalLM": gemma2,
}
