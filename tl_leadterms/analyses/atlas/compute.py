"""`head_atlas`: one row per attention head, with what the theory and TransformerLens say of it
(docs/guides/meaningful-scores.md#the-head-atlas).

Per (layer, head): the character of its query-key map ``W`` and of its value path, the cosine
of ``W`` with ``Q̄`` with its null, interval, ``specific`` and ``common_share`` (the columns of
:func:`~tl_leadterms.decompose`), the implied ``s·η``; with ``tokens``, its agreement with the
predicted attention (:func:`~tl_leadterms.attention_agreement`) and TransformerLens's
previous-token, duplicate-token and induction detector scores (``transformer_lens.head_detector``'s
patterns and ``"mul"`` measure applied to token ids, averaged over the sequences).
"""

import math
from typing import Any

import torch
from transformer_lens import head_detector

from tl_leadterms.adapters.support import check_supported
from tl_leadterms.analyses.attention import attention_agreement
from tl_leadterms.analyses.decompose import decompose
from tl_leadterms.checks import check_tokens
from tl_leadterms.protocols import ReadableModel, TokenWindows
from tl_leadterms.results.null import NullSpec, add_verdicts
from tl_leadterms.results.table import ResultTable
from tl_leadterms.results.uncertainty import Uncertainty, shorthands
from tl_leadterms.stats.blocks import BlockStats
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import Schedule, ScheduleLike

__all__ = ["DETECTORS", "HeadAtlas", "detector_scores", "head_atlas"]

DETECTORS = ("previous_token", "duplicate_token", "induction")
_COLUMNS = ("label", "layer", "head", "character", "cosine", "lo", "hi", "corrected",
            "noise_share", "z", "p",
            "implied_s_lr", "value_character", "value_cosine", "js_divergence",
            "rank_correlation", *DETECTORS, "null_mean", "excess", "excess_share", "q",
            "verdict", "specific", "common_share")  # fmt: skip

#: the columns each head's row takes from its ``W`` row of the decomposition, in order
_OWN = ("value_character", "value_cosine", "js_divergence", "rank_correlation", "q", *DETECTORS)
_FROM_W = tuple(c for c in _COLUMNS if c not in _OWN)


class HeadAtlas(ResultTable):
    """Rows of :func:`head_atlas` (``to_pandas()``, ``to_dict()``; ``repr`` a compact table)."""

    KEYS = ("layer", "head")
    COLUMNS = _COLUMNS
    SCORE = "cosine"
    SCORE_RANGE = (-1.0, 1.0)

    def title(self) -> str:
        null = self.metadata.get("null")
        null = f"{null['permutations']} permutations, seed {null['seed']}" if null else None
        return f"HeadAtlas ({len(self.rows)} heads; null: {null})"

    def plot(self, **kwargs: Any) -> Any:
        """:func:`~tl_leadterms.analyses.atlas.figure.plot_atlas` of this atlas (its keywords)."""
        from tl_leadterms.analyses.atlas.figure import plot_atlas

        return plot_atlas(self, **kwargs)


def detector_scores(model: Any, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """TransformerLens's detector scores per head, ``[n_layers, n_heads]`` each, averaged over
    the sequences of ``tokens`` (see the module docstring)."""
    view = check_supported(model, caller="detector_scores")
    layers = list(range(view.n_layers))
    out = {
        name: torch.zeros(view.n_layers, view.n_heads, dtype=torch.float64) for name in DETECTORS
    }
    for seq in tokens:
        seq = seq[None]
        patterns = view.patterns(seq, layers)
        for name in DETECTORS:
            pattern = getattr(head_detector, f"get_{name}_head_detection_pattern")(seq.cpu())
            for layer in layers:
                attn = patterns[layer][0].detach().cpu()
                for h in range(view.n_heads):
                    out[name][layer, h] += head_detector.compute_head_attention_similarity_score(
                        attn[h], pattern.to(attn.dtype), exclude_bos=False,
                        exclude_current_token=False, error_measure="mul",
                    )  # fmt: skip
    return {name: v / tokens.shape[0] for name, v in out.items()}


@shorthands
@torch.no_grad()
def head_atlas(
    model: ReadableModel,
    stats: CorpusStats | BlockStats,
    tokens: TokenWindows | None = None,
    *,
    schedule: ScheduleLike = None,
    null: int | NullSpec | None = 99,
    ci: float | None = None,
    uncertainty: Uncertainty | None = None,
) -> HeadAtlas:
    """Every head of ``model`` in one table (see the module docstring for the columns).

    Args:
        model: a HookedTransformer (anything :func:`~tl_leadterms.decompose` accepts).
        stats: corpus statistics over its vocabulary, or a ``BlockStats`` from
            :func:`~tl_leadterms.stats.blocks.block_stats`: then ``lo``/``hi``/``corrected``
            hold the bootstrap interval of the cosine of ``W`` with ``Q̄`` (level ``ci``,
            default 0.95), NaN for the model's training windows.
        tokens: optional ``[batch, pos]`` token ids (``1 < pos < n_ctx``, at most the
            statistics' ``n_ctx``): adds attention agreement and the detector scores.
        schedule: the training run, if known (sharpens the implied ``s·η``; a
            :class:`~tl_leadterms.theory.Schedule`, an ``(lr, steps)`` pair or a
            ``TrainHistory``).
        null: permutations of the null (default 99; ``None``: no null, NaN columns), shorthand
            for ``uncertainty.null``.
        ci: the interval's level (a ``BlockStats`` only), shorthand for ``uncertainty.ci``.
        uncertainty: the whole :class:`~tl_leadterms.results.uncertainty.Uncertainty`
            (bootstrap resamples and method, ``population``; see
            :func:`~tl_leadterms.decompose`).

    ``lo``/``hi``/``corrected`` are NaN without a ``BlockStats``.
    """
    sure = Uncertainty.of(uncertainty, ci=ci)
    if sure.null is None:  # null= (default 99) unless uncertainty holds one
        sure = Uncertainty.of(sure, null=null)
    if isinstance(stats, BlockStats) and sure.ci is None:
        sure = Uncertainty.of(sure, ci=0.95)
    schedule = Schedule.of(schedule)
    d = decompose(model, stats, schedule=schedule, weights=["W", "V"], per_head=True,
                  progress=False, uncertainty=sure)  # fmt: skip
    stats = stats.full() if isinstance(stats, BlockStats) else stats  # the one d scored
    value = {(r["layer"], r["head"]): r for r in d.rows if r["weight"] != "W"}
    agreement, detectors = {}, None
    if tokens is not None:
        tokens = check_tokens(tokens, check_supported(model, caller="head_atlas").d_vocab,
                              min_len=2)  # fmt: skip
        agree = attention_agreement(model, stats, tokens, schedule=schedule, progress=False)
        agreement = {(r["layer"], r["head"]): r for r in agree.rows}
        detectors = detector_scores(model, tokens)
    rows = []
    nan = math.nan
    for r in d.rows:
        if r["weight"] != "W":
            continue
        key = (r["layer"], r["head"])
        v, a = value.get(key, {}), agreement.get(key, {})
        row = {c: None if c == "verdict" else r.get(c, nan) for c in _FROM_W}
        row |= {"value_character": v.get("character", ""), "value_cosine": v.get("cosine", nan)}
        row |= {c: a.get(c, nan) for c in ("js_divergence", "rank_correlation")}
        for name in DETECTORS:
            row[name] = nan if detectors is None else float(detectors[name][key])
        rows.append(row)
    if sure.null is not None:
        add_verdicts(rows, sure.null)  # q over the heads of this table, verdict
    metadata = {**d.metadata, "tokens": None if tokens is None else list(tokens.shape)}
    return HeadAtlas(rows, metadata)
