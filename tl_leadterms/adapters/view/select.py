"""Which models can be read exactly, and the view that reads each (:func:`model_view`)."""

from typing import Any

from tl_leadterms.adapters.view.base import ModelView
from tl_leadterms.adapters.view.bridge import BridgeView
from tl_leadterms.adapters.view.hooked import HookedView
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.models.paper import PaperModel

__all__ = ["is_bridge", "model_view"]


def _class_names(model: Any) -> set[str]:
    return {f"{c.__module__}.{c.__qualname__}" for c in type(model).__mro__}


def is_bridge(model: Any) -> bool:
    """Whether ``model`` is a TransformerLens ``TransformerBridge`` (any major)."""
    return any(
        name.startswith("transformer_lens.") and name.endswith(".TransformerBridge")
        for name in _class_names(model)
    )


def _is_hooked_transformer(model: Any) -> bool:
    try:
        from transformer_lens import HookedTransformer
    except ImportError:  # TransformerLens 4 has no HookedTransformer
        return False
    return isinstance(model, HookedTransformer)


def _bridge_view(model: Any, caller: str) -> BridgeView:
    if not getattr(model, "compatibility_mode", False):
        raise LeadTermsError(
            f"{caller} reads a TransformerBridge in compatibility mode (HookedTransformer-"
            "equivalent processed weights and hook names); call model.enable_compatibility_mode() "
            "first, or load the model with tl_leadterms.load_model"
        )
    return BridgeView(model)


def _hooked_view(model: Any, caller: str) -> HookedView:
    cfg = model.cfg
    scale = getattr(cfg, "attn_scale", None)
    if getattr(cfg, "use_attn_scale", True) and not (isinstance(scale, int | float) and scale > 0):
        raise LeadTermsError(
            f"{caller}: cfg.attn_scale={scale!r} is not a positive score divisor (with "
            "use_attn_scale=True the scores are divided by it); set cfg.attn_scale to the "
            "model's real divisor (usually sqrt(d_head)) or load the model with "
            "tl_leadterms.load_model"
        )
    return HookedView(model)


def model_view(model: Any, *, caller: str) -> ModelView:
    """The read-only view of ``model``, or one clear LeadTermsError naming what to do.

    Read: a TransformerLens ``HookedTransformer`` whose ``cfg.attn_scale`` is a positive score
    divisor, the paper model, and a ``TransformerBridge`` in compatibility mode of an
    architecture whose scale and rotary tables the bridge view reads. Refused: any other class,
    a non-positive ``attn_scale``, a bridge outside compatibility mode or of an unreadable
    architecture.

    Args:
        model: the model.
        caller: the public function asking (named in the error).

    Example:
        >>> model_view(object(), caller="to_paper")
        Traceback (most recent call last):
        ...
        tl_leadterms.errors.LeadTermsError: to_paper reads a TransformerLens ...
    """
    if isinstance(model, ModelView):
        return model
    if is_bridge(model):
        return _bridge_view(model, caller)
    if isinstance(model, PaperModel) or _is_hooked_transformer(model):
        return _hooked_view(model, caller)
    raise LeadTermsError(
        f"{caller} reads a TransformerLens HookedTransformer or TransformerBridge, got "
        f"{type(model).__name__}; load the model with tl_leadterms.load_model, "
        "HookedTransformer.from_pretrained, TransformerBridge.boot_transformers or "
        "tl_leadterms.paper_model"
    )
