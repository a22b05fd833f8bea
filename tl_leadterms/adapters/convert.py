"""`to_paper`: a HookedTransformer's weights as the paper's vocabulary-space maps.

For the paper's own model (:func:`tl_leadterms.models.paper.paper_model`) the maps ARE its
parameters; for a model with embeddings every map is the token-token (direct-path) part of the
corresponding computation, a :class:`~transformer_lens.FactoredMatrix`. The table of the maps,
their ``attn_scale`` and the norms' folding: the guide's section
(docs/guides/transformerlens.md#a-models-weights-as-the-papers-maps).
"""

from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens import FactoredMatrix

from tl_leadterms.adapters.extended import extended_embedding
from tl_leadterms.adapters.folding import FoldedWeights
from tl_leadterms.adapters.paper_weights import paper_model_weights, unembed_centred
from tl_leadterms.adapters.rotary import check_token_weights, rotary_profile
from tl_leadterms.adapters.sandwich import Sandwich
from tl_leadterms.adapters.support import check_finite, check_supported
from tl_leadterms.adapters.view import ModelView, model_view
from tl_leadterms.adapters.weights import LayerMaps, PaperWeights
from tl_leadterms.checks import check_stats, check_vocab
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.models.paper import PaperModel
from tl_leadterms.protocols import ReadableModel

__all__ = ["INPUT_MAPS", "to_paper", "weights_for_stats"]

NORMALIZATIONS = (None, "LN", "LNPre", "RMS", "RMSPre")
INPUT_MAPS = ("embed", "extended")
NO_P_REASON = {
    "alibi": "ALiBi adds a fixed (not learned) linear distance penalty to the scores",
    "shortformer": "shortformer positions enter only the query/key inputs, outside the residual "
    "stream that the adapter's maps describe",
}


def _check_model(model: object) -> ModelView:
    view = check_supported(model, caller="to_paper")
    if view.n_heads % view.n_kv_heads:
        raise LeadTermsError(
            f"n_key_value_heads={view.n_kv_heads} does not divide n_heads={view.n_heads}: each "
            "key/value head must serve the same number of query heads"
        )
    if view.attention_dir != "causal":
        raise LeadTermsError(
            f"attention_dir={view.attention_dir!r} is not supported: the paper's model is causal"
        )
    if view.normalization not in NORMALIZATIONS:
        raise LeadTermsError(
            f"normalization_type={view.normalization!r} is not supported; supported: "
            f"{NORMALIZATIONS}"
        )
    for layer in range(view.n_layers):
        try:
            for name in ("W_Q", "W_K", "W_V", "W_O"):
                view.weight(layer, name)
        except AttributeError as err:
            raise LeadTermsError(
                f"blocks.{layer}.attn has no {err.name or 'W_Q/W_K/W_V/W_O'}: the adapter needs "
                "standard multi-head attention weights W_Q, W_K, W_V, W_O"
            ) from err
    return view


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


class _Maps:
    """The per-layer map builders of a model with embeddings (one layer built per call)."""

    def __init__(self, view: ModelView, folded: FoldedWeights, extended: Tensor | None, pi: Any):
        self.view, self.folded = view, folded
        self.W_E = view.W_E()
        self.extended = extended
        self.pi = pi  # float64 token frequencies, or None for uniform
        self.groups = torch.tensor(folded.kv_group, device=self.W_E.device)
        with torch.no_grad():
            self.W_U = folded.unembed()

    def inputs(self, layer: int) -> Float[Tensor, "d_vocab d_model"]:
        """The input map of a layer: ``W_E`` for layer 0, the extended embedding after it."""
        return self.W_E if self.extended is None or layer == 0 else self.extended

    def direct(self) -> FactoredMatrix:
        return FactoredMatrix(self.W_E if self.extended is None else self.extended, self.W_U)

    @torch.no_grad()
    def value(self, layer: int) -> FactoredMatrix:
        E_V = self.inputs(layer) @ self.folded.reading(layer, "W_V")  # [kv heads, V, d_head]
        W_O = self.view.weight(layer, "W_O")
        return FactoredMatrix(E_V[self.groups], W_O @ self.W_U)

    @torch.no_grad()
    def value_sandwich(self, layer: int) -> Sandwich:
        """``inputs · W_V^h · W_O^h · W_U`` with the key/value group of each query head."""
        W_V = self.folded.reading(layer, "W_V")[self.groups]
        W_O = self.view.weight(layer, "W_O")
        return Sandwich(self.inputs(layer), W_V, W_O, self.W_U)

    @torch.no_grad()
    def query_key_sandwich(self, layer: int) -> Sandwich:
        """``inputs · W_Q^h · W_K^hᵀ / scale · inputsᵀ``."""
        E = self.inputs(layer)
        W_Q = self.folded.reading(layer, "W_Q") / self.view.score_divisor(layer)
        W_K = self.folded.reading(layer, "W_K")[self.groups]
        return Sandwich(E, W_Q, W_K.transpose(-1, -2), E.T)

    @torch.no_grad()
    def query_key(self, layer: int) -> FactoredMatrix:
        E = self.inputs(layer)
        A = E @ self.folded.reading(layer, "W_Q") / self.view.score_divisor(layer)
        E_K = E @ self.folded.reading(layer, "W_K")  # [kv heads, V, d_head]
        return FactoredMatrix(A, E_K[self.groups].transpose(-1, -2))

    @torch.no_grad()
    def learned_positional(self, layer: int) -> Float[Tensor, "n_heads n_ctx"]:
        W_pos = self.view.W_pos()
        q = W_pos @ self.folded.reading(layer, "W_Q")
        k = (W_pos @ self.folded.reading(layer, "W_K"))[self.groups]
        return _offset_average(q @ k.transpose(-1, -2) / self.view.score_divisor(layer))

    @torch.no_grad()
    def mean_vector(self, layer: int, name: str) -> Float[Tensor, "heads d_head"]:
        """``Σ_v π_v (E_v W + b)`` for ``W_Q`` or ``W_K`` (per kv group), biases included."""
        E = self.inputs(layer)
        e_mean = E.double().mean(0) if self.pi is None else self.pi.to(E.device) @ E.double()
        W = self.folded.reading(layer, name)
        return e_mean.to(W.dtype) @ W + self.folded.bias(layer, name)

    @torch.no_grad()
    def rotary_positional(self, layer: int) -> Float[Tensor, "n_heads n_ctx"]:
        q_mean = self.mean_vector(layer, "W_Q")
        k_mean = self.mean_vector(layer, "W_K")[self.groups]
        scale = self.view.score_divisor(layer)
        return rotary_profile(self.view, layer, q_mean, k_mean, self.view.n_ctx, scale)


def _positional(maps: _Maps) -> tuple[LayerMaps | None, str | None, str | None]:
    """``(P, P_error, P_kind)`` for the model's positional embedding type."""
    view = maps.view
    pos_type = view.positional_type
    if pos_type == "standard":
        kind = "[n_heads, n_ctx] offset averages of learned positions"
        return LayerMaps("P", view.n_layers, maps.learned_positional, kind), None, "learned"
    if pos_type == "rotary":
        kind = "[n_heads, n_ctx] rotary mean-field profiles"
        P = LayerMaps("P", view.n_layers, maps.rotary_positional, kind)
        return P, None, "rotary_mean_field"
    reason = NO_P_REASON.get(pos_type, "it has neither learned nor rotary positions")
    error = (
        f"P is not defined for positional_embedding_type={pos_type!r}: {reason}, so there is no "
        "per-offset bias to compare with Δ; use pw.W and pw.V (pw.has_P tells whether P "
        "exists), or a model with learned ('standard') or rotary positions"
    )
    return None, error, None


def _ln_metadata(norm: str | None, fold_ln: bool, folded: FoldedWeights) -> dict[str, Any]:
    if norm in ("LNPre", "RMSPre"):
        handling = "already folded by TransformerLens"
    elif norm is None:
        handling = "none (no LayerNorm)"
    elif fold_ln:
        handling = "folded by the adapter"
    else:
        handling = "not folded (fold_ln=False): LayerNorm weights left out of the maps"
    centring = None
    if folded.centre:
        centring = (
            "reading weights (W_Q, W_K, W_V, W_U) centred over d_model, equivalent to "
            "LayerNorm centring the residual stream"
        )
    return {
        "fold_ln": fold_ln,
        "ln_handling": handling,
        "ln_folded_into": (
            ["blocks.l.ln1.w -> W_Q, W_K, W_V", "ln_final.w -> W_U"] if folded.scale_ln else []
        ),
        "ln_centring": centring,
        "ln_scale_ignored": norm is not None,
    }


def _weights_metadata(view: ModelView, fold_ln: bool, folded: FoldedWeights, W_U: Tensor,
                      extended: Tensor | None) -> dict[str, Any]:  # fmt: skip
    norm = view.normalization
    return {
        "model_name": view.model_name,
        "original_architecture": view.architecture,
        "architecture": "attn_only" if view.attn_only else "full",
        "view": view.kind,
        "loading": view.loading,
        "normalization_type": norm,
        "positional_embedding_type": view.positional_type,
        **_ln_metadata(norm, fold_ln, folded),
        # center_unembed: zero mean over the vocabulary, like the theory targets' rows
        "unembed_centred": unembed_centred(W_U),
        "biases_ignored": view.nonzero_biases(),
        "unmodelled": view.unmodelled(),
        "attn_scale": [view.score_divisor(layer) for layer in range(view.n_layers)],
        "scores_divided_by_attn_scale": True,
        "V_kind": "value_output",
        "n_key_value_heads": view.n_kv_heads,
        "kv_group": list(folded.kv_group),
        "token_weights": None,
        "input_map_by_layer": [
            "W_E" if extended is None or layer == 0 else "extended"
            for layer in range(view.n_layers)
        ],
    }


def _embedded_weights(view: ModelView, fold_ln: bool, pi: Any, input_map: str) -> PaperWeights:
    folded = FoldedWeights(view, fold_ln)
    extended = None
    if input_map == "extended":
        extended = extended_embedding(view)
        check_finite({"the extended embedding (residual after block 0)": extended})
    maps = _Maps(view, folded, extended, pi)
    P, P_error, P_kind = _positional(maps)
    exact = view.attn_only and view.normalization is None and extended is None
    metadata = _weights_metadata(view, fold_ln, folded, maps.W_U, extended)
    metadata.update(P_kind=P_kind, input_map=input_map)
    if P_kind == "rotary_mean_field":
        metadata["token_weights"] = "uniform" if pi is None else "given"
        metadata["rotary"] = {
            **view.rotary_facts(),
            "biases_included": "b_Q, b_K (and the folded LayerNorm bias)",
        }
    n_layers = view.n_layers
    return PaperWeights(
        W_O=maps.direct(),
        V=LayerMaps("V", n_layers, maps.value, "[n_heads, V, V] FactoredMatrix (E W_V W_O W_U)"),
        W=LayerMaps("W", n_layers, maps.query_key, "[n_heads, V, V] FactoredMatrix"),
        P=P,
        P_error=P_error,
        V_kind="value_output",
        n_layers=n_layers,
        n_heads=view.n_heads,
        d_vocab=view.d_vocab,
        n_ctx=view.n_ctx,
        architecture=metadata["architecture"],
        exact=bool(exact),
        metadata=metadata,
        kv_group=folded.kv_group,
        sandwiches={"V": maps.value_sandwich, "W": maps.query_key_sandwich},
    )


def to_paper(
    model: ReadableModel,
    *,
    fold_ln: bool = True,
    token_weights: Tensor | None = None,
    input_map: str = "embed",
) -> PaperWeights:
    """A model's weights in the paper's notation: ``W_O``, ``V[l]``, ``W[l]``, ``P[l]``.

    Args:
        model: a :class:`~transformer_lens.HookedTransformer` (the paper model, an attention-only
            model, or a full model: GPT-2, Pythia, Llama-style with grouped-query attention, ...) or
            a TransformerBridge in compatibility mode, causal. MLPs are not part of the maps
            (attention paths only) unless ``input_map="extended"``.
        fold_ln: fold unfolded LayerNorm / RMSNorm (``"LN"``/``"RMS"``) into the maps on the fly, as
            ``HookedTransformer.process_weights_(fold_ln=True)`` would: ``ln1.w`` scales the rows
            of ``W_Q, W_K, W_V``, ``ln_final.w`` those of ``W_U``, and LayerNorm centres them
            over ``d_model`` (:mod:`~tl_leadterms.adapters.folding`; the model is not modified).
            Already-folded models (``"LNPre"``/``"RMSPre"``) are used as they are (LNPre still
            centres). The norms' ``1/σ`` scale is ignored; LN, attention and unembedding biases
            are left out of ``W_O``, ``V`` and ``W`` (``metadata["biases_ignored"]`` lists the
            nonzero ones) but enter rotary ``P``.
        token_weights: ``[d_vocab]`` token frequencies or counts (e.g. unigram counts mapped to the
            model's token ids) for the mean query/key vectors of the rotary ``P``
            (:mod:`tl_leadterms.adapters.rotary`); ``None`` = uniform. Unused by other models.
        input_map: ``"embed"`` (``W_E``) or ``"extended"``: layers ``l ≥ 1`` and ``W_O`` read each
            token through its residual stream after block 0 on a length-1 input
            (:func:`tl_leadterms.adapters.extended.extended_embedding`); layer 0 still reads
            ``W_E``, its actual input. Not available for the paper model.

    Returns:
        :class:`PaperWeights` with one entry per QUERY head (``pw.kv_group`` names each
        head's key/value group); the module docstring says what each map contains.
        ``metadata`` keys: ``model_name``, ``original_architecture``, ``architecture``,
        ``normalization_type``, ``positional_embedding_type``, ``fold_ln``, ``ln_handling``,
        ``ln_folded_into``, ``ln_centring``, ``ln_scale_ignored``, ``unembed_centred`` (``W_U``
        has zero mean over the vocabulary, as after ``center_unembed``: the ``W_O`` and ``V``
        maps' rows then sum to 0 like the theory targets'), ``biases_ignored``, ``unmodelled``
        (configured computations the maps leave out: QK-norm, soft-capping, ...),
        ``attn_scale`` (per layer), ``scores_divided_by_attn_scale``, ``V_kind``,
        ``n_key_value_heads``, ``kv_group``, ``P_kind`` (``"learned"``,
        ``"rotary_mean_field"`` or ``None``), ``token_weights`` (``"uniform"``/``"given"`` for
        rotary ``P``), ``input_map``, ``input_map_by_layer``, and ``rotary`` for rotary models.

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
    view = _check_model(model)
    if not isinstance(fold_ln, bool):
        raise LeadTermsError(f"fold_ln must be True or False, got {fold_ln!r}")
    if input_map not in INPUT_MAPS:
        raise LeadTermsError(f"input_map must be one of {INPUT_MAPS}, got {input_map!r}")
    pi = check_token_weights(token_weights, view.d_vocab)
    if isinstance(model, PaperModel):
        if input_map != "embed":
            raise LeadTermsError(
                "input_map='extended' needs a model with embeddings; the paper model reads "
                "one-hot tokens directly (use input_map='embed')"
            )
        return paper_model_weights(model)
    return _embedded_weights(view, fold_ln, pi, input_map)


def weights_for_stats(model: Any, stats: Any, *, caller: str = "decompose") -> PaperWeights:
    """``model`` in the paper's notation, checked against the statistics' vocabulary.

    ``model`` is a HookedTransformer (anything :func:`~tl_leadterms.to_paper` accepts) or
    :class:`~tl_leadterms.adapters.PaperWeights`; the statistics must share its ``d_vocab`` and,
    when both record one, its tokenizer. ``caller`` names the analysis in the refusal of a
    model the view cannot read.
    """
    stats = check_stats(stats)
    view = None if isinstance(model, PaperWeights) else model_view(model, caller=caller)
    pw = model if isinstance(model, PaperWeights) else to_paper(model)  # the view refused first
    tokenizer = None if view is None else view.tokenizer
    check_vocab(stats, d_vocab=pw.d_vocab, tokenizer=tokenizer)
    return pw
