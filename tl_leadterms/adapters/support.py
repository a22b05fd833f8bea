"""Which model objects the analyses can read correctly, and one clear refusal for the rest.

A model the adapters do not know how to read must never produce numbers: a TransformerLens
``TransformerBridge`` (TL 3.9 and 4.x) stores a placeholder ``cfg.attn_scale = -1.0`` and keeps
grouped keys, rotary tables and hook names elsewhere, so reading it as a ``HookedTransformer``
would silently flip and rescale ``W`` and ``P``. :func:`check_supported` is called by every entry
point that reads a model before it reads anything.
"""

from typing import Any

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.models.paper import PaperModel

__all__ = ["check_supported"]


def _class_names(model: Any) -> set[str]:
    return {f"{c.__module__}.{c.__qualname__}" for c in type(model).__mro__}


def _is_bridge(model: Any) -> bool:
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


def check_supported(model: Any, *, caller: str) -> None:
    """Raise :class:`LeadTermsError` unless ``model`` is a model type the adapters read exactly.

    Supported: the paper model (:func:`tl_leadterms.paper_model`) and a TransformerLens
    ``HookedTransformer`` (TL 3.x) whose
    ``cfg.attn_scale`` is a positive score divisor. Refused, each naming the fix: a
    ``TransformerBridge``, any other class, and a config whose ``attn_scale`` is not positive
    while ``use_attn_scale`` is on.

    Example:
        >>> from tl_leadterms.models.paper import paper_model
        >>> check_supported(paper_model(d_vocab=8, n_ctx=4, n_layers=1), caller="to_paper")
        >>> check_supported(object(), caller="to_paper")
        Traceback (most recent call last):
        ...
        tl_leadterms.errors.LeadTermsError: to_paper reads a TransformerLens ...
    """
    name = type(model).__name__
    if _is_bridge(model):
        raise LeadTermsError(
            f"{caller} cannot read a TransformerBridge yet: its cfg.attn_scale is a placeholder "
            f"({getattr(getattr(model, 'cfg', None), 'attn_scale', None)!r}) and its grouped keys, "
            "rotary tables and hook names differ from a HookedTransformer's, so the maps would be "
            "wrong; load the checkpoint as a HookedTransformer instead "
            "(tl_leadterms.load_model or HookedTransformer.from_pretrained)"
        )
    if not (isinstance(model, PaperModel) or _is_hooked_transformer(model)):
        raise LeadTermsError(
            f"{caller} reads a TransformerLens HookedTransformer, got {name}; load the model "
            "with tl_leadterms.load_model, HookedTransformer.from_pretrained or "
            "tl_leadterms.paper_model"
        )
    cfg = model.cfg
    scale = getattr(cfg, "attn_scale", None)
    if getattr(cfg, "use_attn_scale", True) and not (isinstance(scale, int | float) and scale > 0):
        raise LeadTermsError(
            f"{caller}: cfg.attn_scale={scale!r} is not a positive score divisor (with "
            "use_attn_scale=True the scores are divided by it); set cfg.attn_scale to the "
            "model's real divisor (usually sqrt(d_head)) or load the model with "
            "tl_leadterms.load_model"
        )
