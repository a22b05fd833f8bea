"""One read-only view of a model: every weight, config fact and hook name the analyses read.

:func:`model_view` wraps a TransformerLens ``HookedTransformer`` (TL 3.x; the paper model too) or a
``TransformerBridge`` in compatibility mode (TL 3.9 and 4.x) in a
:class:`~tl_leadterms.adapters.view.base.ModelView` with one surface: ``W_E`` (embedding scale
included), ``W_pos``, ``W_U``, per-block ``W_Q``/``W_K``/``W_V``/``W_O`` (grouped keys and values
kept grouped) and biases (zeros where absent), each layer's score divisor, rotary tables, the
normalisation state, hook names, device, dtype and tokenizer. This package is the only place that
knows TransformerLens internals (``_W_K``, ``cfg.attn_scale``, ``calculate_sin_cos_rotary``,
``original_component``, ``hook.name``); a bridge's per-family facts live in
:mod:`tl_leadterms.adapters.view.bridge`.

Example:
    >>> from tl_leadterms.models.paper import paper_model
    >>> view = model_view(paper_model(d_vocab=8, n_ctx=4, n_layers=2), caller="example")
    >>> view.kind, view.n_layers, view.score_divisor(1), view.hook_name("pattern", 1)
    ('hooked', 2, 1.0, 'blocks.1.attn.hook_pattern')
"""

from tl_leadterms.adapters.view.base import (
    HOOK_KINDS,
    PLACEHOLDER_TOKENIZER,
    ModelView,
    own_tokenizer,
    tokenizer_for,
)
from tl_leadterms.adapters.view.select import is_bridge, model_view

__all__ = [
    "HOOK_KINDS",
    "PLACEHOLDER_TOKENIZER",
    "ModelView",
    "is_bridge",
    "model_view",
    "own_tokenizer",
    "tokenizer_for",
]
