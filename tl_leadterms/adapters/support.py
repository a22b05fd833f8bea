"""Which model objects the analyses can read correctly, and one clear refusal for the rest.

A model the adapters cannot read exactly must never produce numbers: every entry point that reads a
model calls :func:`check_supported` first, which returns the model's read-only view
(:func:`tl_leadterms.adapters.view.model_view`)."""

from typing import Any

import torch

from tl_leadterms.adapters.view import ModelView, model_view
from tl_leadterms.errors import LeadTermsError

__all__ = ["check_finite", "check_supported"]


def check_supported(model: Any, *, caller: str) -> ModelView:
    """The view of ``model``, or a :class:`LeadTermsError` unless the adapters read it exactly.

    What is read and what is refused (each refusal naming the fix) is
    :func:`~tl_leadterms.adapters.view.model_view`'s rule; a model with a weight that holds NaN or
    inf is refused too (:func:`check_finite`).

    Example:
        >>> from tl_leadterms.models.paper import paper_model
        >>> check_supported(paper_model(d_vocab=8, n_ctx=4, n_layers=1), caller="to_paper").kind
        'hooked'
        >>> check_supported(object(), caller="to_paper")
        Traceback (most recent call last):
        ...
        tl_leadterms.errors.LeadTermsError: to_paper reads a TransformerLens ...
    """
    view = model_view(model, caller=caller)
    check_finite(view)
    return view


def check_finite(weights: Any) -> None:
    """The one refusal of NaN or inf weights (every analysis, the monitor), naming the first of
    ``weights``: named tensors (a dict), or a model's under their TransformerLens names where a
    view reads it, else its parameters' (output_agreement runs any model). A positional table
    the model does not use (rotary or ALiBi positions: TransformerLens 3.9 leaves
    ``pos_embed.W_pos`` uninitialised there) is not read."""
    if isinstance(weights, dict):
        named = weights.items()
    else:
        try:
            view = model_view(weights, caller="check_finite")
            unused = view.positional_type not in ("standard", "shortformer")
            named = [(n, w) for n, w in view.named_weights()
                     if not (unused and n.endswith("W_pos"))]  # fmt: skip
        except LeadTermsError:
            named = getattr(weights, "named_parameters", list)()
    for name, tensor in named:
        if tensor is not None and not bool(torch.isfinite(tensor).all()):
            raise LeadTermsError(
                f"the weight {name} holds NaN or inf values: no analysis reads such a model "
                "(load a healthy checkpoint or fix training)"
            )
