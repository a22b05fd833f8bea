"""Predicted attention on real text, ``A = S(Mask(c·X Q̄ Xᵀ + c·DM(Δ)))`` in every layer
(docs/math.md#leading-terms; ``X`` one-hot, a token outside the kept vocabulary a zero row):
:func:`predict_attention` computes it, :func:`attention_agreement` compares it with a model's
``hook_pattern`` per layer and head.
"""

import math
from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import ActivationCache

from tl_leadterms.adapters.support import check_supported
from tl_leadterms.adapters.view import ModelView
from tl_leadterms.analyses.attention.fit import LayerScores, scale_text, score_layer, score_ranks
from tl_leadterms.checks import (
    Layers,
    check_bool,
    check_layers,
    check_stats,
    check_tokens,
    check_vocab,
    positive_number,
)
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.progress import progress_bar
from tl_leadterms.protocols import ReadableModel, TokenWindows
from tl_leadterms.results.labels import head_label
from tl_leadterms.results.null import NullSpec, add_verdicts, permutations, summarize
from tl_leadterms.results.style import number
from tl_leadterms.results.table import ResultTable
from tl_leadterms.results.uncertainty import Uncertainty, shorthands
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import Schedule, ScheduleLike, run_shorthands

# patterns by hook name: TransformerLens' ActivationCache, or a plain dict of them
Cache = ActivationCache | Mapping[str, Tensor]

__all__ = [
    "AttentionAgreement",
    "attention_agreement",
    "attention_scale",
    "predict_attention",
    "predicted_scores",
    "scaled_softmax",
]


def _check_stats_tokens(stats: Any, tokens: Any) -> Int[Tensor, "batch pos"]:
    stats = check_stats(stats)
    return check_tokens(
        tokens,
        stats.d_vocab,
        max_len=stats.n_ctx,
        max_len_hint=f" (Δ covers offsets 0..{stats.n_ctx - 1}, the statistics' T)",
    )


def predicted_scores(
    stats: CorpusStats, tokens: Tensor, perm: Tensor | None = None
) -> Float[Tensor, "batch query key"]:
    """``X Q̄ Xᵀ + DM(Δ)`` (unscaled, unmasked above the diagonal: −inf there).

    ``perm`` (``[k]``): relabel the kept tokens, kept token ``i`` reading row and column
    ``perm[i]`` of Q̄ (the permutation null; a gather, nothing recomputed).
    """
    Q, Delta = stats.Q_bar, stats.Delta
    k = stats.k
    padded = torch.zeros(k + 1, k + 1, dtype=Q.dtype, device=Q.device)
    padded[:k, :k] = Q
    index_map = stats.vocab.index_map(Q.device)
    idx = tokens.to(Q.device) if index_map is None else index_map[tokens.to(Q.device)]
    if perm is not None:  # index k (a dropped token) stays k
        idx = torch.cat([perm.to(Q.device), torch.tensor([k], device=Q.device)])[idx]
    scores = padded[idx[:, :, None], idx[:, None, :]]  # [batch, query, key]
    n = tokens.shape[1]
    offset = torch.arange(n, device=Q.device)[:, None] - torch.arange(n, device=Q.device)[None]
    scores = scores + torch.where(offset >= 0, Delta[offset.clamp(min=0)], 0.0)
    return scores.masked_fill(offset < 0, -math.inf)


@run_shorthands
def predict_attention(
    stats: CorpusStats,
    tokens: TokenWindows,
    *,
    schedule: ScheduleLike = None,
    scale: float | None = None,
) -> Float[Tensor, "batch query key"]:
    """The attention pattern the leading terms predict for ``tokens``, in every layer.

    Args:
        stats: corpus statistics (Q̄ and Δ).
        tokens: ``[batch, pos]`` (or ``[pos]``) input token ids, ``pos ≤ stats.n_ctx``.
        schedule: the training run (a :class:`~tl_leadterms.theory.Schedule`, an
            ``(lr, steps)`` pair or a ``TrainHistory``): with ``lr`` and ``steps`` the scale is
            ``c = (3C(s,4) + 2C(s,3))·η⁴`` (``steps=0`` gives uniform attention, the model at
            initialisation); with only ``s_lr = s·η`` its gradient-flow limit ``(s·η)⁴/8``.
        scale: the scale ``c`` directly (e.g. one fitted by :func:`attention_agreement`).
            Give exactly one of ``schedule`` and ``scale``.

    Returns:
        ``[batch, query, key]`` rows summing to 1, zero above the diagonal.

    Example:
        >>> import torch
        >>> from tl_leadterms import corpus_stats, predict_attention
        >>> tokens = torch.randint(0, 10, (32, 9), generator=torch.Generator().manual_seed(0))
        >>> stats = corpus_stats(tokens, d_vocab=10, progress=False)
        >>> A = predict_attention(stats, tokens[:2, :8], schedule=(1.0, 10))
        >>> A.shape, bool(torch.allclose(A.sum(-1), torch.ones(2, 8, dtype=A.dtype)))
        (torch.Size([2, 8, 8]), True)
    """
    tokens = _check_stats_tokens(stats, tokens)
    c = attention_scale(schedule, scale)
    if c is None:
        raise LeadTermsError(
            "the prediction needs its scale: schedule=Schedule(lr=..., steps=...) (c = "
            "(3C(s,4) + 2C(s,3))·lr⁴), Schedule(s_lr=...) (c = (s·η)⁴/8), or scale="
        )
    return scaled_softmax(c, predicted_scores(stats, tokens))


def scaled_softmax(scale: float, scores: Tensor) -> Tensor:
    """``S(Mask(c·scores))`` with the causal mask kept at ``c = 0`` (uniform causal attention)."""
    masked = torch.isneginf(scores)
    return torch.softmax(
        (scale * scores.masked_fill(masked, 0.0)).masked_fill(masked, -math.inf), -1
    )


def attention_scale(schedule: ScheduleLike, scale: Any = None) -> float | None:
    """The scale ``c`` of the attention statistic from a training run or ``scale``; None when
    neither is given (the scale is then fitted). ``lr`` alone is refused."""
    schedule = Schedule.of(schedule)
    if scale is not None:
        if schedule.known:
            raise LeadTermsError("give either scale= or the training run (schedule=), not both")
        return positive_number("scale", scale)
    if schedule.lr is not None and schedule.steps is None:
        raise LeadTermsError(
            f"lr={schedule.lr} alone does not fix the scale: give steps too, or s_lr (s·η), "
            "or scale="
        )
    return schedule.coefficient("W")


class AttentionAgreement(ResultTable):
    """Per (layer, head): how close the model's attention is to the leading-term prediction.

    Row fields: ``layer``, ``head``, ``label`` (``"L{l}H{h}"``), ``js_divergence`` (mean
    Jensen-Shannon divergence of the pattern rows, natural log, 0 = identical, ln 2 ≈ 0.693 =
    disjoint), ``rank_correlation`` (mean Spearman correlation of each row's keys, model pattern
    against predicted scores), ``scale`` (the ``c`` of ``S(c·(XQ̄Xᵀ + DM(Δ)))`` used: from the
    training run, or fitted per head to minimise the JS divergence; see
    :mod:`~tl_leadterms.analyses.attention.fit`) and ``scale_at_bound`` (None, or ``"lower"``
    / ``"upper"``: the fitted scale is at that edge of the search, read it as "at most" / "at
    least", :func:`~.fit.scale_text`). With ``null=``: ``null_mean``, ``excess``, ``z``, ``p``,
    ``q`` and the ``verdict`` of the rank correlation.
    """

    KEYS = ("layer", "head")
    COLUMNS = ("layer", "head", "label", "js_divergence", "rank_correlation", "scale",
               "scale_at_bound")  # fmt: skip
    SCORE = "rank_correlation"
    SCORE_RANGE = (-1.0, 1.0)

    def row(self, *key: Any, **where: Any) -> dict[str, Any]:
        """The row of one head: ``row(layer, head=0)`` (any other column by name)."""
        where = self._where(key, where)
        where.setdefault("head", 0)
        return super().row(**where)

    def title(self) -> str:
        meta = self.metadata
        scale = "fitted per head" if meta["fitted"] else "from the training run"
        return (f"AttentionAgreement ({meta['n_sequences']} sequences of {meta['n_positions']} "
                f"tokens; scale c {scale})")  # fmt: skip

    def cell(self, row: dict[str, Any], column: str) -> Any:
        """A ``scale`` at the search's edge reads ``≤ c (edge)`` or ``≥ c (edge)``."""
        edge = row.get("scale_at_bound") if column == "scale" else None
        if edge is None:
            return super().cell(row, column)
        return f"{'≤' if edge == 'lower' else '≥'} {number(row['scale'])} (edge)"

    def notes(self) -> list[str]:
        """The null's note and, once, what a scale at the search's edge means."""
        edges = {r["scale_at_bound"]: r for r in self.rows if r.get("scale_at_bound")}
        return super().notes() + [
            f"{r['label']}: {scale_text(r['scale'], edge)}" for edge, r in sorted(edges.items())
        ]

    def plot(self, **kwargs: Any) -> Any:
        """:func:`~tl_leadterms.analyses.attention.figure.plot_agreement` of this table (its
        keywords)."""
        from tl_leadterms.analyses.attention.figure import plot_agreement

        return plot_agreement(self, **kwargs)


def _patterns(
    view: ModelView, tokens: Tensor, layers: list[int], cache: Cache | None
) -> dict[int, Tensor]:
    """``hook_pattern`` of each layer: from ``cache`` when it has them, else one model run."""
    out = view.patterns(tokens, layers) if cache is None else {}
    for layer in layers if cache is not None else ():
        name = view.hook_name("pattern", layer)
        if name not in cache:
            raise LeadTermsError(
                f"cache has no {name!r}; run the model with run_with_cache on these tokens (or "
                "pass cache=None)"
            )
        pattern = cache[name]
        if pattern.shape[0] != tokens.shape[0] or pattern.shape[-1] != tokens.shape[1]:
            raise LeadTermsError(
                f"cache[{name!r}] has shape {tuple(pattern.shape)}, not that of tokens "
                f"{tuple(tokens.shape)}: pass the cache of a run on these tokens"
            )
        out[layer] = pattern.detach()
    # ranked in its own dtype by numpy (bfloat16, which it lacks, as float32), fitted in float64
    return {k: p.cpu().float() if p.dtype == torch.bfloat16 else p.cpu() for k, p in out.items()}


@shorthands
@torch.no_grad()
def attention_agreement(
    model: ReadableModel,
    stats: CorpusStats,
    tokens: TokenWindows,
    *,
    schedule: ScheduleLike = None,
    layers: Layers = None,
    cache: Cache | None = None,
    null: int | NullSpec | None = None,
    uncertainty: Uncertainty | None = None,
    progress: bool = True,
) -> AttentionAgreement:
    """Compare every head's attention pattern on ``tokens`` with the leading-term prediction.

    Each layer and head is compared with :func:`predict_attention` on the same tokens. With
    the training run (``schedule``: ``lr`` and ``steps``, or ``s_lr``) the prediction's scale is the
    theory's ``c``; without it the scale is fitted per head (a model with embeddings has its
    own score scale).

    Args:
        model: any HookedTransformer or TransformerBridge (compatibility mode) over the
            statistics' vocabulary.
        stats: corpus statistics.
        tokens: ``[batch, pos]`` input token ids (``pos ≤ stats.n_ctx``).
        schedule: the training run, if known (a :class:`~tl_leadterms.theory.Schedule`, an
            ``(lr, steps)`` pair or the run's ``TrainHistory``).
        layers: which layers (default all).
        cache: an ``ActivationCache`` (TransformerLens' ``run_with_cache``), or a dict by hook
            name, of the model on ``tokens`` holding ``hook_pattern`` of these layers; the
            model is run only without one.
        null: the permutation null of ``rank_correlation``, ``R`` or a
            :class:`~tl_leadterms.results.null.NullSpec` (shorthand for ``uncertainty.null``):
            ``null_mean``, ``null_sd``, ``excess``, ``excess_share``, ``z``, ``p`` and ``q``
            over the heads (:mod:`tl_leadterms.results.null`); each draw relabels the kept
            tokens of Q̄ (``NullSpec.reference`` is not used here).
        uncertainty: an :class:`~tl_leadterms.results.uncertainty.Uncertainty` holding the
            null; this analysis has no bootstrap interval (``ci`` is refused).
        progress: show a tqdm bar over layers.
    """
    view = check_supported(model, caller="attention_agreement")
    tokens = _check_stats_tokens(stats, tokens)
    check_vocab(stats, d_vocab=view.d_vocab, tokenizer=view.tokenizer)
    check_bool("progress", progress)
    schedule = Schedule.of(schedule)
    fixed = attention_scale(schedule)
    chosen = check_layers(layers, view.n_layers)
    spec = _null_only(Uncertainty.of(uncertainty, null=null))
    patterns = _patterns(view, tokens, chosen, cache)
    scores = predicted_scores(stats, tokens).to(torch.float64).cpu()
    ranks = score_ranks(scores)  # the same for every layer
    rows, scored_layers = [], []
    for layer in progress_bar(chosen, desc="attention agreement", disable=not progress):
        actual = patterns.pop(layer).transpose(0, 1)  # [H, B, q, k]
        layer_scores = LayerScores(actual, scores)
        heads = score_layer(actual, scores, fixed, layer_scores, ranks)
        if spec is not None:  # the null reuses the patterns' ranks
            scored_layers.append(layer_scores)
        for head, scored in enumerate(heads):
            rows.append({"layer": layer, "head": head, "label": head_label(layer, head)} | scored)
    metadata = {"n_sequences": tokens.shape[0], "n_positions": tokens.shape[1],
                "fitted": fixed is None, **schedule.to_dict()}  # fmt: skip
    if spec is not None:
        draws = _null_rank_correlations(stats, tokens, scored_layers, spec)
        for row, column in zip(rows, draws.T, strict=True):
            row.update(summarize(row["rank_correlation"], column))
        add_verdicts(rows, spec)
        metadata["null"] = {"permutations": spec.permutations, "seed": spec.seed,
                            "negligible": spec.negligible}  # fmt: skip
    return AttentionAgreement(rows, metadata)


def _null_only(uncertainty: Uncertainty) -> NullSpec | None:
    """The null of an :class:`Uncertainty` for an analysis that has no interval."""
    if uncertainty.ci is not None:
        raise LeadTermsError(
            f"attention_agreement has no bootstrap interval (ci={uncertainty.ci}): its rank "
            "correlations are of the given text, not of corpus statistics; drop ci="
        )
    return uncertainty.null


def _null_rank_correlations(stats, tokens, layers: list[LayerScores], spec: NullSpec) -> Tensor:
    """``[R, heads]`` rank correlations with the predicted scores of relabelled tokens."""
    out = []
    for perm in permutations(stats.k, spec.permutations, spec.seed):
        ranks = score_ranks(predicted_scores(stats, tokens, perm).to(torch.float64).cpu())
        out.append(torch.cat([layer.rank_correlation(ranks) for layer in layers]))
    return torch.stack(out)
