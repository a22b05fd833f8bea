"""The paper model's parameters as :class:`PaperWeights` (no products: the maps ARE parameters)."""

from torch import Tensor

from tl_leadterms.adapters.weights import LayerMaps, PaperWeights
from tl_leadterms.models.paper import PaperModel

__all__ = ["paper_model_weights", "unembed_centred"]


def unembed_centred(W_U: Tensor) -> bool:
    """Whether every row of ``W_U`` has zero mean over the vocabulary (up to rounding)."""
    return bool((W_U.mean(-1).abs().max() <= 1e-6 * W_U.abs().max()).item())


def paper_model_weights(model: PaperModel) -> PaperWeights:
    """The paper model's ``W_O``, ``V``, ``W``, ``P`` parameters, one head per layer."""
    cfg = model.cfg
    blocks = model.blocks
    metadata = {
        "model_name": cfg.model_name,
        "original_architecture": "tl_leadterms.PaperModel",
        "architecture": "paper",
        "normalization_type": None,
        "positional_embedding_type": "paper relative bias P",
        "fold_ln": False,
        "ln_handling": "none (no LayerNorm)",
        "ln_folded_into": [],
        "ln_centring": None,
        "ln_scale_ignored": False,
        "unembed_centred": unembed_centred(model.unembed.W_U.detach()),
        "biases_ignored": [],
        "attn_scale": [1.0] * cfg.n_layers,
        "scores_divided_by_attn_scale": True,
        "V_kind": "value",
        "n_key_value_heads": 1,
        "kv_group": [0],
        "P_kind": "learned relative bias",
        "token_weights": None,
        "input_map": "one-hot",
    }
    return PaperWeights(
        W_O=model.unembed.W_U,
        V=LayerMaps("V", cfg.n_layers, lambda i: blocks[i].attn.W_V, "[1, V, V] W_V parameters"),
        W=LayerMaps("W", cfg.n_layers, lambda i: blocks[i].attn.W_Q, "[1, V, V] W_Q parameters"),
        P=LayerMaps("P", cfg.n_layers, lambda i: blocks[i].attn.P[None], "[1, n_ctx] P views"),
        P_error=None,
        V_kind="value",
        n_layers=cfg.n_layers,
        n_heads=1,
        d_vocab=cfg.d_vocab,
        n_ctx=cfg.n_ctx,
        architecture="paper",
        exact=True,
        metadata=metadata,
    )
