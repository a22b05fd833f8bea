"""`decompose`: how much bigram, interchangeability and context each weight of a model holds."""

import math
from collections.abc import Sequence
from typing import Any

import torch
from transformer_lens import FactoredMatrix

from tl_leadterms.adapters import PaperWeights, factored
from tl_leadterms.adapters.convert import weights_for_stats
from tl_leadterms.analyses.decompose.draws import Scored, bootstrap_cosines, null_cosines
from tl_leadterms.analyses.decompose.fit import BasisCache, MapFit, Projections, fit_map, map_parts
from tl_leadterms.analyses.decompose.result import Decomposition
from tl_leadterms.checks import Layers, check_bool, check_layers
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.progress import progress_bar
from tl_leadterms.protocols import ReadableModel
from tl_leadterms.results.bootstrap import add_interval, add_noise_share
from tl_leadterms.results.labels import head_label
from tl_leadterms.results.null import NullSpec, add_verdicts, permutations, summarize
from tl_leadterms.results.uncertainty import Uncertainty, shorthands
from tl_leadterms.stats.blocks import BlockStats
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.stats.degenerate import degenerate_reason
from tl_leadterms.theory import WEIGHTS, Schedule, ScheduleLike, Term, Weight, term

__all__ = ["IMPLIED_MIN_COSINE", "decompose", "leading_cosines", "leading_map", "model_weights"]

#: the implied s·η is reported only when the cosine with the leading term is at least this
IMPLIED_MIN_COSINE = 0.2


def model_weights(pw: PaperWeights) -> list[str]:
    """The weights of the theorem this model has, in table order.

    The paper model has ``W_O``, ``V``, ``W``, ``P``; a model with token embeddings has
    ``W_O``, ``V·W_O`` (its value path is defined in vocabulary space only as the product), ``W``
    and, with learned positions, ``P``.
    """
    return ["W_O", pw.value_weight, "W"] + (["P"] if pw.has_P else [])


def _select_weights(weights: Any, pw: PaperWeights) -> list[str]:
    """``None`` -> every weight the model has; names from the table otherwise.

    ``"V"`` and ``"V·W_O"`` both select the model's value path (whichever it has).
    """
    have = model_weights(pw)
    if weights is None:
        return have
    if isinstance(weights, str):
        weights = (weights,)
    if not isinstance(weights, Sequence) or not weights or any(w not in WEIGHTS for w in weights):
        raise LeadTermsError(
            f"weights must be None or a non-empty list of {', '.join(WEIGHTS)}; got {weights!r}"
        )
    value = term(pw.V_kind).weight
    chosen = [value if w in ("V", "V·W_O") else w for w in weights]
    if "P" in chosen and not pw.has_P:
        raise LeadTermsError(pw.P_unavailable())
    return list(dict.fromkeys(chosen))


def _maps(
    pw: PaperWeights,
    stats: CorpusStats,
    t: Term,
    layer: int | None,
    per_head: bool,
    projections: Projections | None = None,
):
    """The map(s) of one weight, restricted to the kept tokens: ``[h, k, k]`` or ``[h, n_ctx]``.

    With ``projections``, ``V``/``W`` of a model with embeddings come back as a restricted
    :class:`~tl_leadterms.adapters.sandwich.Sandwich` (its outer factors shared across heads and
    layers).
    """
    kept = stats.kept
    sandwich = None if projections is None or layer is None else pw.sandwich(t.weight, layer)
    if sandwich is not None and t.weight != "P":
        if not per_head:
            sandwich = sandwich.combined(mean=t.weight == "W")
        return projections.restrict(sandwich)
    if t.weight == "P":
        P = pw.P[layer] if per_head else pw.layer_map("P", layer)[None]
        return P[..., : min(P.shape[-1], stats.n_ctx)]
    if t.weight == "W_O":
        M = pw.W_O
    elif per_head:
        M = (pw.W if t.weight == "W" else pw.V)[layer]
    else:
        M = pw.layer_map(t.weight, layer)
    if kept is not None:
        M = factored.restrict(M, kept, kept)
    if isinstance(M, FactoredMatrix):
        return FactoredMatrix(M.A[None], M.B[None]) if M.A.dim() == 2 else M
    return M[None] if M.dim() == 2 else M


@shorthands
@torch.no_grad()
def decompose(
    model: ReadableModel | PaperWeights,
    stats: CorpusStats | BlockStats,
    *,
    schedule: ScheduleLike = None,
    layers: Layers = None,
    per_head: bool = False,
    weights: Weight | Sequence[Weight] | None = None,
    null: int | NullSpec | None = None,
    ci: float | None = None,
    uncertainty: Uncertainty | None = None,
    progress: bool = True,
) -> Decomposition:
    """Decompose each weight of ``model`` into bigram, interchangeability and context parts.

    For every (weight, layer, head) the weight is compared with its own leading term
    (docs/math.md#leading-terms: ``W_O ~ B̄``, ``V ~ Φ̄ᵀB̄ᵀ`` for the paper model or ``Φ̄ᵀΣ_B̄`` for
    the value→output map of models with embeddings, ``W ~ Q̄``, ``P ~ Δ``) and fitted by least
    squares onto the basis of :mod:`tl_leadterms.theory` table. Factored maps are never
    materialised.

    Args:
        model: a HookedTransformer (any model :func:`tl_leadterms.to_paper` accepts) or a
            :class:`~tl_leadterms.adapters.PaperWeights`.
        stats: corpus statistics over the model's vocabulary (restricted ones compare the kept
            tokens only).
        schedule: the training run, if known (a :class:`~tl_leadterms.theory.Schedule`, an
            ``(lr, steps)`` pair or the run's ``TrainHistory``): ``lr`` sharpens the implied
            ``s·η`` (solved from the exact coefficient instead of its ``η → 0`` limit);
            ``lr·steps`` (or ``s_lr``) is shown beside it as expected.
        layers: which layers (default all).
        per_head: score each head on its own: one row per head instead of one per layer with
            the heads combined (``W``, ``P`` averaged, ``V`` summed over heads; the default).
        weights: which weights (default: every weight the model has, see
            :func:`model_weights`); names from :data:`tl_leadterms.theory.WEIGHTS`. ``"V"`` and
            ``"V·W_O"`` both select the value path; asking for ``P`` of a model without learned
            positions is an error that says why.
        null: the permutation null of each row's cosine, ``R`` (an int) or a
            :class:`~tl_leadterms.results.null.NullSpec` (shorthand for
            ``uncertainty.null``): columns ``null_mean``, ``null_sd``, the effect size
            ``excess`` = ``cosine − null_mean`` and ``excess_share``, the evidence ``z``, ``p``
            and ``q`` (Benjamini–Hochberg over the rows; :mod:`tl_leadterms.results.null`) and,
            with ``NullSpec(reference=...)``, a ``reference`` column (the reference model's
            cosine). ``P`` is indexed by offset, not token: its null columns are NaN.
        ci: a confidence level, e.g. ``0.95`` (shorthand for ``uncertainty.ci``): the bootstrap
            interval ``lo``/``hi`` of each row's distribution-level cosine over resamples of
            corpus blocks, the estimate ``corrected`` it is built around (bias-corrected,
            within ``lo``..``hi``) and ``noise_share``, the sample's noise against what the
            cosine measures (tables mark the interval from
            :data:`~tl_leadterms.results.marks.WIDE_NOISE_SHARE` on). Needs ``stats`` from
            :func:`~tl_leadterms.stats.blocks.block_stats`; none for the model's own training
            windows (``metadata["ci"]`` says why).
        uncertainty: the whole :class:`~tl_leadterms.results.uncertainty.Uncertainty` (the
            null, the interval, its ``bootstrap`` resamples and method, and ``population``:
            which question the scores answer, recorded in ``metadata["population"]``).
        progress: a progress bar over (weight, layer).

    Every token-token row also has ``specific`` and ``common_share`` (the common component,
    docs/guides/effect-sizes.md#the-same-question-for-decompose; ``P`` rows have neither).
    Shares are exact Shapley values of ``R²`` with ``unique`` and ``shared`` parts, and
    ``character`` names a component only when it clearly dominates
    (docs/guides/decompose.md#shapley). ``implied_s_lr`` is NaN below a cosine of
    :data:`IMPLIED_MIN_COSINE` (0.2).

    The statistics depend on the window length T they were counted with (Q̄, Φ̄ and Δ weigh
    positions by ``1/t``); compare a model with statistics of the T it was trained on. ``P``
    is compared on the offsets both share (``metadata["P_offsets_compared"]``).

    Returns:
        A :class:`~tl_leadterms.analyses.decompose.result.Decomposition`.

    Example:
        >>> import torch
        >>> from tl_leadterms import corpus_stats, decompose, paper_model, train
        >>> tokens = torch.randint(0, 12, (64, 9), generator=torch.Generator().manual_seed(0))
        >>> stats = corpus_stats(tokens, d_vocab=12, progress=False)
        >>> model = paper_model(d_vocab=12, n_ctx=8, n_layers=1)
        >>> history = train(model, tokens, lr=1.0, steps=4, progress=False)
        >>> d = decompose(model, stats, schedule=history, per_head=True)
        >>> row = d.row("W_O")
        >>> row["cosine"] > 0.999, round(row["implied_s_lr"], 1)  # lr·steps = 4
        (True, 4.0)
    """
    sure = Uncertainty.of(uncertainty, null=null, ci=ci).resolve(stats, model)
    stats, boot, spec = sure.stats, sure.boot, sure.null
    pw = weights_for_stats(model, stats)
    chosen = check_layers(layers, pw.n_layers)
    per_head = check_bool("per_head", per_head)
    schedule = Schedule.of(schedule)
    check_bool("progress", progress)
    cache = BasisCache.of(stats)
    kept = None if stats.kept is None else stats.kept.to(pw.W_O.A.device if hasattr(pw.W_O, "A")
                                                         else pw.W_O.device)  # fmt: skip
    projections = Projections(cache, kept)
    perms = None if spec is None else permutations(stats.k, spec.permutations, spec.seed)
    jobs = [(w, layer) for w in _select_weights(weights, pw)
            for layer in ([None] if w == "W_O" else chosen)]  # fmt: skip
    rows: list[dict[str, Any]] = []
    scored: list[Scored] = []  # every map, for the null and the bootstrap
    owned: list[list[dict]] = []  # the rows of each scored map
    voided = {w: degenerate_reason(stats, term(w).statistic) for w, _ in jobs
              if term(w).statistic is not None and stats.has(term(w).statistic)}  # fmt: skip
    for weight, layer in progress_bar(jobs, desc="decompose", disable=not progress):
        t = term(weight)
        M = _maps(pw, stats, t, layer, per_head, projections)
        fits = fit_map(M, t, cache, projections)
        scored.append(Scored(M, t, torch.tensor([f.norm for f in fits], dtype=torch.float64)))
        specific, common = _common(M, t, cache, projections, fits)
        owned.append([])
        for head, fit in enumerate(fits):
            row = _row(t, layer, head if per_head and weight != "W_O" else None, fit, schedule)
            if not t.vector:  # P is indexed by offset: no token axis, no such columns
                row.update(specific=float(specific[head]), common_share=float(common[head]))
            owned[-1].append(row)
            rows.append(row)
    if perms is not None:
        _add_null(scored, owned, cache, perms, projections)
        add_verdicts(rows, spec)  # q (Benjamini–Hochberg over this model's rows), verdict
    for row in rows:
        if voided.get(row["weight"]):  # the target is zero up to rounding: no score, a reason
            row.update(cosine=math.nan, implied_s_lr=math.nan, character="degenerate",
                       reason=voided[row["weight"]])  # fmt: skip
    if boot is not None:
        resampled = bootstrap_cosines(scored, boot, projections)
        add_interval(rows, resampled.draws, boot, "cosine", resampled)
        add_noise_share(rows, resampled, boot, "cosine")
    if spec is not None and spec.reference is not None:
        _add_reference(rows, spec.reference_model(model), stats, layers, per_head, weights)
    metadata = _metadata(pw, stats, schedule, per_head) | sure.metadata(cosines=True)
    if spec is not None:
        metadata["null"]["reference"] = _reference_name(spec)
    return Decomposition(rows, metadata=metadata)


def _metadata(pw, stats, schedule: Schedule, per_head: bool) -> dict[str, Any]:
    """What a Decomposition was computed from: model, statistics, run and null settings."""
    metadata = {
        "model": pw.metadata,
        "stats": dict(stats.metadata),
        "k": stats.k,
        "n_ctx": stats.n_ctx,
        "n_sequences": stats.n_sequences,
        **schedule.to_dict(),
        "per_head": per_head,
        "P_offsets_compared": min(pw.n_ctx, stats.n_ctx) if pw.has_P else 0,
    }
    return metadata


def _reference_name(spec: NullSpec) -> str | None:
    """How ``metadata["null"]`` names the reference model: ``"random"``, ``"model"`` or None."""
    reference = spec.reference
    return "model" if reference is not None and not isinstance(reference, str) else reference


def _common(M, t: Term, cache: BasisCache, projections, fits):
    """``specific`` and ``common_share`` per head
    (:mod:`tl_leadterms.analyses.decompose.fit`)."""
    if t.vector:
        nan = torch.full((len(fits),), math.nan, dtype=torch.float64)
        return nan, nan
    lead2 = float(cache.gram(t)[0, 0])
    inner = torch.tensor([f.projection * lead2 for f in fits], dtype=torch.float64)
    return map_parts(M, t, cache, projections, inner)


def _add_null(scored: list[Scored], owned: list[list[dict]], cache: BasisCache, perms,
              projections) -> None:  # fmt: skip
    """The null columns of every row: the maps of one leading term scored together, so each
    relabelling of the theory is formed once (:func:`.draws.null_cosines`)."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(scored):
        groups.setdefault(s.term.weight, []).append(i)
    for members in groups.values():
        draws = null_cosines([scored[i] for i in members], cache, perms, projections)
        for i, d in zip(members, draws, strict=True):
            for head, row in enumerate(owned[i]):
                row.update(summarize(row["cosine"], d[:, head]))


def _add_reference(rows: list[dict], reference, stats, layers, per_head, weights) -> None:
    """A ``reference`` column: the same rows scored on the reference model."""
    ref = decompose(reference, stats, layers=layers, per_head=per_head, weights=weights)
    by_key = {(r["weight"], r["layer"], r["head"]): r["cosine"] for r in ref.rows}
    for r in rows:
        r["reference"] = by_key.get((r["weight"], r["layer"], r["head"]), math.nan)


def _row(t: Term, layer: int | None, head: int | None, fit: MapFit, schedule: Schedule) -> dict:
    clear = fit.cosine >= IMPLIED_MIN_COSINE
    label = head_label(layer, head)
    return {
        "weight": t.weight,
        "layer": layer,
        "head": head,
        "label": label or t.weight,
        "kind": t.kind,
        "target": t.target.formula,
        "cosine": fit.cosine,
        "projection": fit.projection,
        "implied_s_lr": t.implied_s_lr(fit.projection, schedule.lr) if clear else math.nan,
        "expected_s_lr": math.nan if schedule.s_lr is None else schedule.s_lr,
        "norm": fit.norm,
        "explained": 1.0 - fit.remainder,
        "remainder": fit.remainder,
        "character": fit.character,
        "shares": fit.shares,
        "unique": fit.unique,
        "shared": fit.shared,
        "family_shares": fit.family_shares,
    }


def leading_map(stats: CorpusStats, weight: str) -> torch.Tensor:
    """The leading term of ``weight`` (``"W"`` → ``Q̄``, ``"V·W_O"`` → ``Φ̄ᵀΣ_B̄``, ...) over
    the statistics' kept tokens, built once per statistics and shared with every
    decomposition of them."""
    return BasisCache.of(stats).map(term(weight).target)


@torch.no_grad()
def leading_cosines(model: ReadableModel, stats: CorpusStats) -> dict[str, float]:
    """The cosine of every weight with its own leading term, heads combined per layer.

    Args:
        model: the model to read.
        stats: the corpus statistics it was trained on.

    A weight that is still exactly zero (``W`` and ``P`` before step 3) has no direction and
    gets NaN. Keys are ``"W_O"``, then ``"V.{l}"`` (paper model) or ``"V·W_O.{l}"`` (models with
    embeddings), ``"W.{l}"`` and ``"P.{l}"`` (models with learned positions). This is the
    paper's metric (docs/math.md#agreement) and what :func:`tl_leadterms.train` records with
    ``track=stats``.
    """
    pw = weights_for_stats(model, stats)
    cache = BasisCache.of(stats)
    out = {}
    for weight in model_weights(pw):
        t = term(weight)
        for layer in [None] if weight == "W_O" else range(pw.n_layers):
            M = _maps(pw, stats, t, layer, per_head=False)
            target = cache.map(t.target)
            if t.vector:  # [1, offsets], cut to the offsets both have
                target = target[None, : M.shape[-1]].to(M.device, M.dtype)
            # one pass for ‖M‖² and one for ⟨M, T⟩; ‖T‖² of a matrix target is cached
            norm2 = float(factored.sq_norm(M).flatten()[0])
            if norm2 == 0.0:
                value = math.nan
            else:
                t2 = float((target**2).sum()) if t.vector else cache.sq_norm(t.target)
                dot = float(factored.inner_maps(M, target).flatten()[0])
                value = max(-1.0, min(1.0, dot / math.sqrt(norm2 * t2))) if t2 > 0 else 0.0
            out[weight if layer is None else f"{weight}.{layer}"] = value
    return out
