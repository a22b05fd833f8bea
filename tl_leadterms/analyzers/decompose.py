"""`decompose`: how much bigram, interchangeability and context each weight of a model holds."""

import math
from typing import Any

import torch
from transformer_lens import FactoredMatrix

from tl_leadterms.adapters import PaperWeights, factored, to_paper
from tl_leadterms.analyzers import basis
from tl_leadterms.analyzers.fit import BasisCache, fit_map
from tl_leadterms.analyzers.result import Decomposition
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.corpus import CorpusStats

__all__ = ["decompose", "leading_cosines", "weight_kind"]

WEIGHTS = ("W_O", "V", "W", "P")


def weight_kind(pw: PaperWeights, weight: str) -> str:
    """The :mod:`~tl_leadterms.analyzers.basis` kind of one of the paper's weights."""
    return {"W_O": "output", "V": pw.V_kind, "W": "attention", "P": "positional"}[weight]


def _adapt(model: object, stats: object) -> PaperWeights:
    if not isinstance(stats, CorpusStats):
        raise LeadTermsError(
            f"stats must be a CorpusStats (from tl_leadterms.corpus_stats), got "
            f"{type(stats).__name__}"
        )
    pw = model if isinstance(model, PaperWeights) else to_paper(model)
    if pw.d_vocab != stats.d_vocab:
        raise LeadTermsError(
            f"the statistics were computed for d_vocab={stats.d_vocab} but the model has "
            f"d_vocab={pw.d_vocab}; compute them from the model's own tokenizer "
            "(corpus_stats(tokens, d_vocab=model.cfg.d_vocab))"
        )
    return pw


def _layers(layers: object, n_layers: int) -> list[int]:
    if layers is None:
        return list(range(n_layers))
    if isinstance(layers, int) and not isinstance(layers, bool):
        layers = [layers]
    if not isinstance(layers, (list, tuple, range)) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in layers
    ):
        raise LeadTermsError(f"layers must be None, an int or a list of ints, got {layers!r}")
    bad = [i for i in layers if not 0 <= i < n_layers]
    if bad:
        raise LeadTermsError(
            f"layers {bad} out of range: the model has {n_layers} layers (0..{n_layers - 1})"
        )
    return list(layers)


def _weights(weights: object, pw: PaperWeights) -> list[str]:
    if isinstance(weights, str):
        weights = (weights,)
    if not isinstance(weights, (list, tuple)) or any(w not in WEIGHTS for w in weights):
        raise LeadTermsError(f"weights must be a subset of {WEIGHTS}, got {weights!r}")
    return [w for w in weights if w != "P" or pw.has_P]


def _maps(pw: PaperWeights, stats: CorpusStats, weight: str, layer: int | None, per_head: bool):
    """The map(s) of one weight, restricted to the kept tokens: ``[h, k, k]`` or ``[h, n_ctx]``."""
    kept = stats.kept
    if weight == "P":
        P = pw.P[layer] if per_head else pw.layer_map("P", layer)[None]
        return P[..., : min(P.shape[-1], stats.n_ctx)]
    if weight == "W_O":
        M = pw.W_O
    elif per_head:
        M = (pw.V if weight == "V" else pw.W)[layer]
    else:
        M = pw.layer_map(weight, layer)
    if kept is not None:
        M = factored.restrict(M, kept, kept)
    if isinstance(M, FactoredMatrix):
        return FactoredMatrix(M.A[None], M.B[None]) if M.A.dim() == 2 else M
    return M[None] if M.dim() == 2 else M


@torch.no_grad()
def decompose(
    model,
    stats: CorpusStats,
    *,
    lr: float | None = None,
    steps: int | None = None,
    layers: int | list[int] | None = None,
    per_head: bool = True,
    weights: str | tuple[str, ...] | list[str] = WEIGHTS,
) -> Decomposition:
    """Decompose each weight of ``model`` into bigram, interchangeability and context parts.

    For every (weight, layer, head) the weight is compared with its own leading term (MATH.md
    §3: ``W_O ~ B̄``, ``V ~ Φ̄ᵀB̄ᵀ`` for the paper model or ``Φ̄ᵀΣ_B̄`` for the value→output map of
    models with embeddings, ``W ~ Q̄``, ``P ~ Δ``) and fitted by least squares onto the basis of
    :mod:`tl_leadterms.analyzers.basis`. Factored maps are never materialised.

    Args:
        model: a HookedTransformer (any model :func:`tl_leadterms.to_paper` accepts) or a
            :class:`~tl_leadterms.adapters.PaperWeights`.
        stats: corpus statistics over the model's vocabulary (restricted ones compare the kept
            tokens only).
        lr, steps: the training run, if known: ``lr`` sharpens the implied ``s·η`` (solved from
            the exact coefficient instead of its ``η → 0`` limit), and ``lr·steps`` is shown
            beside it.
        layers: which layers (default all).
        per_head: one row per head (default) or one per layer with heads combined (``W``, ``P``
            averaged, ``V`` summed over heads).
        weights: which of ``"W_O"``, ``"V"``, ``"W"``, ``"P"``; ``P`` is skipped for models
            without learned positions.

    The statistics depend on the window length T they were counted with (Q̄, Φ̄ and Δ weigh
    positions by ``1/t``); compare a model with statistics of the T it was trained on. ``P``
    is compared on the offsets both share (``metadata["P_offsets_compared"]``).

    Returns:
        A :class:`~tl_leadterms.analyzers.result.Decomposition`.

    Example:
        >>> import torch
        >>> from tl_leadterms import corpus_stats, decompose, paper_model, train
        >>> tokens = torch.randint(0, 12, (64, 9), generator=torch.Generator().manual_seed(0))
        >>> stats = corpus_stats(tokens, d_vocab=12, progress=False)
        >>> model = paper_model(d_vocab=12, n_ctx=8, n_layers=1)
        >>> _ = train(model, tokens, lr=1.0, steps=4, progress=False)
        >>> d = decompose(model, stats, lr=1.0, steps=4)
        >>> row = d.row("W_O")
        >>> row["cosine"] > 0.999, round(row["implied_s_lr"], 1)  # lr·steps = 4
        (True, 4.0)
    """
    pw = _adapt(model, stats)
    chosen = _layers(layers, pw.n_layers)
    if not isinstance(per_head, bool):
        raise LeadTermsError(f"per_head must be True or False, got {per_head!r}")
    for name, value in (("lr", lr), ("steps", steps)):
        if value is not None and (isinstance(value, bool) or not value > 0):
            raise LeadTermsError(f"{name} must be positive or None, got {value!r}")
    cache = BasisCache.of(stats)
    expected = lr * steps if lr is not None and steps is not None else math.nan
    rows: list[dict[str, Any]] = []
    for weight in _weights(weights, pw):
        kind = weight_kind(pw, weight)
        for layer in [None] if weight == "W_O" else chosen:
            M = _maps(pw, stats, weight, layer, per_head)
            for head, fit in enumerate(fit_map(M, kind, cache, vector=weight == "P")):
                rows.append(
                    _row(
                        weight,
                        layer,
                        head if per_head and weight != "W_O" else None,
                        kind,
                        fit,
                        lr,
                        expected,
                    )
                )
    metadata = {
        "model": pw.metadata,
        "stats": dict(stats.metadata),
        "k": stats.k,
        "n_ctx": stats.n_ctx,
        "n_sequences": stats.n_sequences,
        "lr": lr,
        "steps": steps,
        "per_head": per_head,
        "P_offsets_compared": min(pw.n_ctx, stats.n_ctx) if pw.has_P else 0,
    }
    return Decomposition(rows, metadata=metadata, weights=pw, stats=stats)


def _row(weight, layer, head, kind, fit, lr, expected) -> dict[str, Any]:
    target = basis.target(kind)
    dominant = max(fit.shares, key=fit.shares.get)
    label = "" if layer is None else f"L{layer}" + ("" if head is None else f"H{head}")
    return {
        "weight": weight,
        "layer": layer,
        "head": head,
        "label": label or weight,
        "kind": kind,
        "target": target.formula,
        "cosine": fit.cosine,
        "projection": fit.projection,
        "implied_s_lr": basis.implied_s_lr(kind, fit.projection, lr),
        "expected_s_lr": expected,
        "norm": fit.norm,
        "explained": 1.0 - fit.remainder,
        "remainder": fit.remainder,
        "character": f"{dominant}-like" if fit.norm > 0 else "zero",
        "shares": fit.shares,
        "family_shares": fit.family_shares,
    }


@torch.no_grad()
def leading_cosines(model, stats: CorpusStats) -> dict[str, float]:
    """The cosine of every weight with its own leading term, heads combined per layer.

    A weight that is still exactly zero (``W`` and ``P`` before step 3) has no direction and
    gets NaN. Keys are ``"W_O"``, ``"V.{l}"``, ``"W.{l}"`` and ``"P.{l}"`` (``P`` only for models
    with learned positions). This is the paper's metric (MATH.md §4) and what
    :func:`tl_leadterms.train` records with ``track=stats``.
    """
    pw = _adapt(model, stats)
    cache = BasisCache.of(stats)
    out = {}
    for weight in _weights(WEIGHTS, pw):
        kind = weight_kind(pw, weight)
        for layer in [None] if weight == "W_O" else range(pw.n_layers):
            M = _maps(pw, stats, weight, layer, per_head=False)
            target = cache.map(basis.target(kind))
            if weight == "P":  # [1, offsets], cut to the offsets both have
                target = target[None, : M.shape[-1]].to(M.device, M.dtype)
            # one pass for ‖M‖² and one for ⟨M, T⟩; ‖T‖² of a matrix target is cached
            norm2 = float(factored.sq_norm(M).flatten()[0])
            if norm2 == 0.0:
                value = math.nan
            else:
                t2 = (
                    float((target**2).sum()) if weight == "P" else cache.sq_norm(basis.target(kind))
                )
                dot = float(factored.inner_maps(M, target).flatten()[0])
                value = max(-1.0, min(1.0, dot / math.sqrt(norm2 * t2))) if t2 > 0 else 0.0
            out[weight if layer is None else f"{weight}.{layer}"] = value
    return out
