"""`to_paper`: a HookedTransformer's weights as the paper's vocabulary-space maps.

For the paper's own model (:func:`tl_leadterms.models.paper.paper_model`) the maps ARE its
parameters. For a model with embeddings every map is the token-token (direct-path) part of the
corresponding computation, kept as a :class:`~transformer_lens.FactoredMatrix`:

========  ==============================================  =================================
weight    map (per head h)                                 shape
========  ==============================================  =================================
``W_O``   ``W_E · W_U``                                   ``[d_vocab, d_vocab]``
``V[l]``  ``W_E · W_V^h · W_O^h · W_U``                   ``[n_heads, d_vocab, d_vocab]``
``W[l]``  ``W_E · W_Q^h · W_K^hᵀ · W_Eᵀ / attn_scale``    ``[n_heads, d_vocab, d_vocab]``
``P[l]``  offset average of ``W_pos W_Q^h W_K^hᵀ W_posᵀ / attn_scale``  ``[n_heads, n_ctx]``
========  ==============================================  =================================

``attn_scale`` is the model's own score divisor (``√d_head``, times ``layer + 1`` under
``scale_attn_by_inverse_layer_idx``), so ``W`` and ``P`` are what enters the softmax.
LayerNorm weights are folded on the fly (the model is not modified); see :func:`to_paper`.
"""

from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens import FactoredMatrix

from tl_leadterms.adapters.weights import LayerMaps, PaperWeights
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.models.paper import PaperModel

__all__ = ["to_paper"]

NORMALIZATIONS = (None, "LN", "LNPre", "RMS", "RMSPre")
ROTARY_LIKE_REASON = {
    "rotary": "rotary positions rotate queries and keys by their position instead of adding a "
    "learned vector to the residual stream, so the scores have no separate position-position term",
    "alibi": "ALiBi adds a fixed (not learned) linear distance penalty to the scores",
    "shortformer": "shortformer positions enter only the query/key inputs, outside the residual "
    "stream that the adapter's maps describe",
}


def _check_model(model: object) -> None:
    missing = [name for name in ("cfg", "W_E", "W_U", "blocks") if not hasattr(model, name)]
    if missing:
        raise LeadTermsError(
            f"to_paper needs a transformer_lens HookedTransformer, got {type(model).__name__} "
            f"without {', '.join(missing)}; load the model with HookedTransformer.from_pretrained "
            "or tl_leadterms.models.paper_model"
        )
    cfg = model.cfg
    n_kv = getattr(cfg, "n_key_value_heads", None)
    if n_kv is not None and n_kv != cfg.n_heads:
        raise LeadTermsError(
            f"grouped-query attention (n_key_value_heads={n_kv}, n_heads={cfg.n_heads}) is not "
            "supported: the adapter expects one key and value matrix per query head"
        )
    if getattr(cfg, "attention_dir", "causal") != "causal":
        raise LeadTermsError(
            f"attention_dir={cfg.attention_dir!r} is not supported: the paper's model is causal"
        )
    if getattr(cfg, "normalization_type", None) not in NORMALIZATIONS:
        raise LeadTermsError(
            f"normalization_type={cfg.normalization_type!r} is not supported; supported: "
            f"{NORMALIZATIONS}"
        )
    for layer, block in enumerate(model.blocks):
        attn = getattr(block, "attn", None)
        lacking = [w for w in ("W_Q", "W_K", "W_V", "W_O") if not hasattr(attn, w)]
        if lacking:
            raise LeadTermsError(
                f"blocks.{layer}.attn has no {', '.join(lacking)}: the adapter needs standard "
                "multi-head attention weights W_Q, W_K, W_V, W_O"
            )


def _check_finite(named: dict[str, Tensor]) -> None:
    for name, tensor in named.items():
        if not bool(torch.isfinite(tensor).all()):
            raise LeadTermsError(
                f"the weight {name} holds NaN or inf values; the model cannot be decomposed "
                "(load a healthy checkpoint or fix training)"
            )


def _nonzero_biases(model: Any) -> list[str]:
    names = []
    for name, param in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if (leaf.startswith("b_") or leaf == "b") and bool((param != 0).any()):
            names.append(name)
    return names


def _attn_scale(cfg: Any, layer: int) -> float:
    scale = float(cfg.attn_scale) if cfg.use_attn_scale else 1.0
    if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
        scale *= layer + 1
    return scale


def _centred(W_U: Float[Tensor, "d_in d_vocab"]) -> bool:
    """Whether every row of ``W_U`` has zero mean over the vocabulary (up to rounding)."""
    return bool((W_U.mean(-1).abs().max() <= 1e-6 * W_U.abs().max()).item())


def _paper_weights(model: PaperModel) -> PaperWeights:
    cfg = model.cfg
    params = {name: p for name, p in model.paper_parameters().items()}
    _check_finite(params)
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
        "unembed_centred": _centred(model.unembed.W_U.detach()),
        "biases_ignored": [],
        "attn_scale": [1.0] * cfg.n_layers,
        "scores_divided_by_attn_scale": True,
        "V_kind": "value",
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


class _Folded:
    """The model's weights with LayerNorm folded in (new tensors; the model is untouched)."""

    def __init__(self, model: Any, fold_ln: bool) -> None:
        self.model = model
        norm = model.cfg.normalization_type
        self.scale_ln = fold_ln and norm in ("LN", "RMS")  # multiply the LN weights in
        # LayerNorm centres its input; LNPre models keep doing so at run time
        self.centre = norm == "LNPre" or (fold_ln and norm == "LN")

    def _fold(self, W: Tensor, ln: Any) -> Tensor:
        if self.scale_ln:
            W = ln.w[:, None] * W
        if self.centre:
            # x̃ W with x̃ = x − mean(x) equals x (W − mean over the d_model rows of W)
            W = W - W.mean(-2, keepdim=True)
        return W

    def reading(self, layer: int, name: str) -> Float[Tensor, "n_heads d_model d_head"]:
        block = self.model.blocks[layer]
        return self._fold(getattr(block.attn, name).detach(), getattr(block, "ln1", None))

    def unembed(self) -> Float[Tensor, "d_model d_vocab"]:
        return self._fold(self.model.W_U.detach(), getattr(self.model, "ln_final", None))


def _offset_average(M: Float[Tensor, "n_heads n_ctx n_ctx"]) -> Float[Tensor, "n_heads n_ctx"]:
    """``P[h, d] = mean_{t ≥ d} M[h, t, t − d]``."""
    n_heads, T, _ = M.shape
    pos = torch.arange(T, device=M.device)
    offset = pos[:, None] - pos[None, :]
    causal = offset >= 0
    sums = torch.zeros(n_heads, T, dtype=M.dtype, device=M.device)
    index = offset.clamp(min=0).flatten().expand(n_heads, -1)
    sums.scatter_add_(1, index, torch.where(causal, M, 0.0).flatten(1))
    counts = (T - torch.arange(T, device=M.device)).to(M.dtype)
    return sums / counts


def _embedded_weights(model: Any, fold_ln: bool) -> PaperWeights:
    cfg = model.cfg
    norm = cfg.normalization_type
    pos_type = cfg.positional_embedding_type
    used = {"W_E": model.W_E, "W_U": model.W_U}
    if pos_type == "standard":
        used["W_pos"] = model.W_pos
    for layer, block in enumerate(model.blocks):
        for name in ("W_Q", "W_K", "W_V", "W_O"):
            used[f"blocks.{layer}.attn.{name}"] = getattr(block.attn, name)
        if fold_ln and norm in ("LN", "RMS"):
            used[f"blocks.{layer}.ln1.w"] = block.ln1.w
    if fold_ln and norm in ("LN", "RMS"):
        used["ln_final.w"] = model.ln_final.w
    _check_finite(used)

    folded = _Folded(model, fold_ln)
    W_E = model.W_E.detach()
    with torch.no_grad():
        W_U = folded.unembed()

    @torch.no_grad()
    def value(layer: int) -> FactoredMatrix:
        W_V = folded.reading(layer, "W_V")
        W_O = model.blocks[layer].attn.W_O.detach()
        return FactoredMatrix(W_E @ W_V, W_O @ W_U)

    @torch.no_grad()
    def query_key(layer: int) -> FactoredMatrix:
        scale = _attn_scale(cfg, layer)
        A = W_E @ folded.reading(layer, "W_Q") / scale
        return FactoredMatrix(A, (W_E @ folded.reading(layer, "W_K")).transpose(-1, -2))

    @torch.no_grad()
    def positional(layer: int) -> Float[Tensor, "n_heads n_ctx"]:
        W_pos = model.W_pos.detach()
        q = W_pos @ folded.reading(layer, "W_Q")
        k = W_pos @ folded.reading(layer, "W_K")
        return _offset_average(q @ k.transpose(-1, -2) / _attn_scale(cfg, layer))

    if pos_type == "standard":
        P, P_error = LayerMaps("P", cfg.n_layers, positional, "[n_heads, n_ctx] tensors"), None
    else:
        reason = ROTARY_LIKE_REASON.get(pos_type, "it has no learned absolute positions")
        P, P_error = (
            None,
            (
                f"P is not defined for positional_embedding_type={pos_type!r}: {reason}, so "
                "there is no learned per-offset bias to compare with Δ; use pw.W and pw.V "
                "(pw.has_P tells whether P exists), or a model with learned ('standard') positions"
            ),
        )

    architecture = "attn_only" if cfg.attn_only else "full"
    exact = cfg.attn_only and norm is None
    if norm in ("LNPre", "RMSPre"):
        ln_handling = "already folded by TransformerLens"
    elif norm is None:
        ln_handling = "none (no LayerNorm)"
    elif fold_ln:
        ln_handling = "folded by the adapter"
    else:
        ln_handling = "not folded (fold_ln=False): LayerNorm weights left out of the maps"
    ln_into = []
    if folded.scale_ln:
        ln_into = ["blocks.l.ln1.w -> W_Q, W_K, W_V", "ln_final.w -> W_U"]
    metadata = {
        "model_name": cfg.model_name,
        "original_architecture": getattr(cfg, "original_architecture", None),
        "architecture": architecture,
        "normalization_type": norm,
        "positional_embedding_type": pos_type,
        "fold_ln": fold_ln,
        "ln_handling": ln_handling,
        "ln_folded_into": ln_into,
        "ln_centring": (
            "reading weights (W_Q, W_K, W_V, W_U) centred over d_model, equivalent to "
            "LayerNorm centring the residual stream"
            if folded.centre
            else None
        ),
        "ln_scale_ignored": norm is not None,
        # center_unembed: zero mean over the vocabulary, like the theory targets' rows
        "unembed_centred": _centred(W_U),
        "biases_ignored": _nonzero_biases(model),
        "attn_scale": [_attn_scale(cfg, layer) for layer in range(cfg.n_layers)],
        "scores_divided_by_attn_scale": True,
        "V_kind": "value_output",
    }
    return PaperWeights(
        W_O=FactoredMatrix(W_E, W_U),
        V=LayerMaps("V", cfg.n_layers, value, "[n_heads, V, V] FactoredMatrix (W_E W_V W_O W_U)"),
        W=LayerMaps("W", cfg.n_layers, query_key, "[n_heads, V, V] FactoredMatrix"),
        P=P,
        P_error=P_error,
        V_kind="value_output",
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        d_vocab=cfg.d_vocab,
        n_ctx=cfg.n_ctx,
        architecture=architecture,
        exact=bool(exact),
        metadata=metadata,
    )


def to_paper(model: Any, *, fold_ln: bool = True) -> PaperWeights:
    """A model's weights in the paper's notation: ``W_O``, ``V[l]``, ``W[l]``, ``P[l]``.

    Args:
        model: a :class:`~transformer_lens.HookedTransformer`: the paper model, an
            attention-only model, or a full model (GPT-2, Pythia, ...), causal, without
            grouped-query attention.
        fold_ln: fold unfolded LayerNorm / RMSNorm (``normalization_type`` ``"LN"``/``"RMS"``)
            into the maps on the fly, as ``HookedTransformer.process_weights_(fold_ln=True)``
            would: ``ln1.w`` scales the rows of ``W_Q, W_K, W_V``, ``ln_final.w`` those of
            ``W_U``, and for LayerNorm the reading weights are centred over ``d_model``. The
            model is not modified. Already-folded models (``"LNPre"``/``"RMSPre"``) are used
            as they are (LNPre still centres). LayerNorm's ``1/σ`` scale, LN biases and all
            attention / unembedding biases are ignored; ``metadata`` records which were nonzero.

    Returns:
        :class:`PaperWeights`; its module docstring table says what each map contains.
        ``metadata`` keys: ``model_name``, ``original_architecture``, ``architecture``,
        ``normalization_type``, ``positional_embedding_type``, ``fold_ln``, ``ln_handling``,
        ``ln_folded_into``, ``ln_centring``, ``ln_scale_ignored``, ``unembed_centred`` (``W_U``
        has zero mean over the vocabulary, as after ``center_unembed``: the ``W_O`` and ``V``
        maps' rows then sum to 0 like the theory targets'), ``biases_ignored``,
        ``attn_scale`` (per layer), ``scores_divided_by_attn_scale``, ``V_kind``.

    Example:
        >>> from tl_leadterms.models.paper import paper_model
        >>> from tl_leadterms.adapters import to_paper
        >>> model = paper_model(d_vocab=8, n_ctx=5, n_layers=2)
        >>> pw = to_paper(model)
        >>> pw.W[1] is model.blocks[1].attn.W_Q, pw.W_O is model.unembed.W_U
        (True, True)
        >>> pw.layer_map("V", 0).shape, pw.P[0].shape, pw.V_kind
        (torch.Size([8, 8]), torch.Size([1, 5]), 'value')
    """
    _check_model(model)
    if not isinstance(fold_ln, bool):
        raise LeadTermsError(f"fold_ln must be True or False, got {fold_ln!r}")
    if isinstance(model, PaperModel):
        return _paper_weights(model)
    return _embedded_weights(model, fold_ln)
