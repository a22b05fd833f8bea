"""The paper's covariance similarity of token maps (docs/math.md#pythia-protocol, steps 3-4;
docs/guides/pythia-protocol.md), computed in the exact factored form of :mod:`.algebra` (never
an ``n × n`` model covariance); ``theory=path`` keeps the theory's terms in a file
(:mod:`.theory_file`)."""

import math
import os
import warnings
from typing import Any, Literal

import torch
from torch import Tensor

from tl_leadterms.adapters.support import check_supported
from tl_leadterms.adapters.view import ModelView
from tl_leadterms.analyses.covariance.algebra import (
    Theory,
    attention_factors,
    attention_scores,
    bootstrap_scores,
    permuted_scores,
    value_factors,
    value_scores,
)
from tl_leadterms.analyses.covariance.options import Compute, Protocol, fill, option_shorthands
from tl_leadterms.analyses.covariance.result import SPECIFIC, CovarianceSimilarity
from tl_leadterms.analyses.covariance.theory_file import theory_for
from tl_leadterms.analyses.covariance.token_maps import TokenMaps, model_device, token_maps
from tl_leadterms.checks import Layers, check_bool, check_layers, check_stats, check_vocab
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.progress import progress_bar
from tl_leadterms.protocols import PathLike, ReadableModel
from tl_leadterms.results.bootstrap import add_interval
from tl_leadterms.results.null import NullSpec, add_verdicts, permutations, summarize
from tl_leadterms.results.uncertainty import Uncertainty, shorthands
from tl_leadterms.stats.blocks import BlockStats
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.version import __version__

__all__ = ["CovarianceSimilarity", "covariance_similarity"]

ProtocolName = Literal["theorem", "paper-code"]


def _check_gemm(gemm_dtype: Any, dtype: torch.dtype, device: torch.device) -> None:
    if gemm_dtype is None or gemm_dtype == dtype:
        return
    if device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        warnings.warn(
            "torch.backends.cuda.matmul.allow_tf32 is True: float32 products then run in TF32 "
            "(10-bit mantissa) and the scores can miss the documented 1e-6 tolerance; set it to "
            "False (PyTorch's default) for gemm_dtype=torch.float32",
            stacklevel=3,
        )


def _check_theory_path(theory: Any) -> None:
    if theory is not None and not isinstance(theory, (str, os.PathLike)):
        raise LeadTermsError(
            f"theory must be the path of a theory file (str or Path), got "
            f"{type(theory).__name__}; e.g. theory='stats.theory.safetensors'"
        )


def _check_maps(maps: object, ids: Tensor, layers: list[int]) -> TokenMaps:
    if not isinstance(maps, TokenMaps):
        raise LeadTermsError(f"maps must be TokenMaps from token_maps(), got {type(maps).__name__}")
    if not torch.equal(maps.token_ids.cpu(), ids):
        raise LeadTermsError(
            f"maps hold {maps.n} tokens that are not the statistics' {ids.numel()} kept tokens in "
            "order; compute them with token_maps(model, stats.kept) (or all ids without a "
            "restriction)"
        )
    missing = [layer for layer in layers if layer not in maps.layers]
    if missing:
        raise LeadTermsError(f"maps lack layers {missing} (they hold {maps.layers})")
    return maps


def _finite(name: str, t: Tensor) -> Tensor:
    if not torch.isfinite(t).all():
        raise LeadTermsError(f"{name} holds NaN or inf values; check the model's weights")
    return t


@torch.no_grad()
@shorthands
@option_shorthands
def covariance_similarity(
    model: ReadableModel,
    stats: CorpusStats | BlockStats,
    *,
    layers: Layers = None,
    per_head: bool = False,
    protocol: ProtocolName | Protocol = "theorem",
    null: int | NullSpec | None = None,
    ci: float | None = None,
    uncertainty: Uncertainty | None = None,
    maps: TokenMaps | None = None,
    theory: PathLike | None = None,
    compute: Compute | None = None,
    progress: bool = True,
) -> "CovarianceSimilarity":
    """The paper's covariance similarity of a model's token maps with the leading terms, raw
    and token-specific, each with its own null and interval (docs/guides/pythia-protocol.md;
    the maths in docs/math.md#pythia-protocol, the common component in
    docs/guides/effect-sizes.md).

    Per layer (rows = the statistics' kept tokens, each fed alone:
    :func:`~tl_leadterms.analyses.covariance.token_maps`) the maps ``"attention"``
    (``E_pre · mean_h(W_Q^h W_K^hᵀ) · E_preᵀ`` against ``Q̄``; each head's too with
    ``per_head=True``), ``"value_post"`` (``E_post``) and ``"value_attn"`` (``E_pre +
    attn_out``), both against ``Φ̄ᵀB̄ᵀ``, give two rows each: the paper's raw score (with
    ``common_share``) and ``<score>_specific`` (both covariances double-centred); see
    :class:`~tl_leadterms.analyses.covariance.CovarianceSimilarity`. A raw score with
    ``common_share`` near 1 sits on its null whatever the model learned: read its specific row.

    Args:
        model: a HookedTransformer (e.g. Pythia from ``from_pretrained(..., fold_ln=True)``).
        stats: corpus statistics with the model's ``d_vocab`` (typically restricted to the most
            frequent tokens, ``corpus_stats(..., vocab=20000)``).
        layers: layers to score (default: all).
        per_head: also score each head's attention map.
        protocol: a :class:`~tl_leadterms.analyses.covariance.options.Protocol`, or the name
            of its orientation: ``"theorem"`` (against ``Q̄``) or ``"paper-code"`` (against
            ``Q̄ᵀ``, on statistics from ``corpus_stats(..., last_target="paper-code",
            q_targets="centred")``; others are refused). Report both normalisations
            (docs/guides/pythia-protocol.md). The plain ``normalize=``, ``value_map=`` (and
            ``centre=``, without effect) fill it in.
        null: the permutation null of every row, ``R`` or a
            :class:`~tl_leadterms.results.null.NullSpec` (shorthand for ``uncertainty.null``):
            the null's columns and ``verdict`` (:mod:`tl_leadterms.results.null`); each draw
            re-indexes the model's token rows; with a reference model, ``reference``.
        ci: a confidence level (shorthand for ``uncertainty.ci``): ``lo``, ``hi`` and
            ``corrected`` of every row from resamples of corpus blocks (``stats`` a
            ``BlockStats``; none for the model's training windows).
        uncertainty: the whole :class:`~tl_leadterms.results.uncertainty.Uncertainty`.
        maps: precomputed :class:`TokenMaps` for ``stats.kept`` (reuse across settings).
        theory: the path of a theory file (``theory_path("stats.safetensors")``,
            :mod:`~tl_leadterms.analyses.covariance.theory_file`): the theory's ``O(k³)`` terms
            are read from it, or computed and written there; one for other statistics or
            settings is refused. Scores are bitwise the same as without it.
        compute: a :class:`~tl_leadterms.analyses.covariance.options.Compute` (``device``,
            ``dtype``, ``gemm_dtype``, ``batch_size``, the plain keywords fill it in).
        progress: show tqdm bars.

    Example:
        >>> import torch
        >>> from tl_leadterms import corpus_stats, paper_model
        >>> tokens = torch.randint(0, 12, (32, 9), generator=torch.Generator().manual_seed(0))
        >>> stats = corpus_stats(tokens, d_vocab=12, progress=False)
        >>> model = paper_model(d_vocab=12, n_ctx=8, n_layers=2)
        >>> with torch.no_grad():
        ...     _ = model.blocks[0].attn.W_V.copy_(stats.B_bar_Phi_bar.T[None])
        >>> sim = covariance_similarity(model, stats, normalize="both", value_map="write",
        ...                             progress=False)
        >>> round(sim.value("value_post", 0), 6), round(sim.value("value_post_specific", 0), 6)
        (1.0, 1.0)
    """
    sure = Uncertainty.of(uncertainty, null=null, ci=ci).resolve(stats, model)
    stats, boot, spec = sure.stats, sure.boot, sure.null
    view = check_supported(model, caller="covariance_similarity")
    protocol, run = Protocol.of(protocol), fill(compute, "compute")
    check_stats(stats)
    check_vocab(stats, d_vocab=view.d_vocab, tokenizer=view.tokenizer)
    _check_protocol(protocol.orientation, stats)
    layers = check_layers(layers, view.n_layers)
    check_bool("per_head", per_head)
    device = _resolve_device(model, run.device)
    _check_gemm(run.gemm_dtype, run.dtype, device)
    gemm_dtype = None if run.gemm_dtype == run.dtype else run.gemm_dtype
    _check_theory_path(theory)
    ids = stats.kept.cpu() if stats.kept is not None else torch.arange(stats.d_vocab)
    if maps is None:
        maps = token_maps(model, ids, layers=layers, batch_size=run.batch_size, progress=progress)
    maps = _check_maps(maps, ids, layers)
    terms = (Theory.of(stats, protocol.orientation, device, run.dtype, gemm_dtype)
             if theory is None else
             theory_for(stats, theory, protocol=protocol.orientation, device=device,
                        dtype=run.dtype, gemm_dtype=gemm_dtype))  # fmt: skip
    perms = None if spec is None else permutations(ids.numel(), spec.permutations, spec.seed)
    rows: list[dict[str, Any]] = []
    for layer in progress_bar(layers, desc="covariance similarity", disable=not progress):
        rows += _layer_rows(view, maps, layer, terms, protocol, per_head, perms)
    metadata = _metadata(view, stats, layers, ids, terms, protocol, per_head)
    if spec is not None and spec.reference is not None:
        ref = covariance_similarity(spec.reference_model(model), stats, layers=layers,
                                    per_head=per_head, protocol=protocol, theory=theory,
                                    compute=run, progress=False)  # fmt: skip
        by_key = {(r["layer"], r["head"], r["score"]): r["value"] for r in ref.rows}
        for r in rows:
            r["reference"] = by_key.get((r["layer"], r["head"], r["score"]), math.nan)
    if spec is not None:
        add_verdicts(rows, spec)  # q (Benjamini–Hochberg over this model's rows), verdict
    if boot is not None:
        factors = [_factors(view, maps, layer, terms, protocol, per_head) for layer in layers]
        draws = bootstrap_scores(factors, boot, protocol.orientation, device, run.dtype,
                                 gemm_dtype)  # fmt: skip
        add_interval(rows, _as_rows(draws, protocol.specific), boot, "value")
    return CovarianceSimilarity(rows, metadata | sure.metadata())


def _as_rows(draws: Tensor, specific: bool) -> Tensor:
    """``[..., maps, 2]`` (raw, specific) scores as ``[..., rows]`` in row order."""
    return draws.flatten(-2) if specific else draws[..., 0]


def _factors(view, maps, layer, theory, protocol: Protocol, per_head):
    """A layer's prepared factors in row order: attention (layer, heads), value_post/attn."""
    E_pre, W_Q, W_K, values = _layer_inputs(view, maps, layer, theory, protocol.value_map)
    both = protocol.normalize == "both"
    return attention_factors(E_pre, W_Q, W_K, both, per_head), value_factors(values, both)


def _check_protocol(protocol: str, stats: CorpusStats) -> None:
    if protocol != "paper-code":
        return
    built = {key: stats.metadata.get(key) for key in ("last_target", "q_targets")}
    if built != {"last_target": "paper-code", "q_targets": "centred"}:
        raise LeadTermsError(
            f"protocol='paper-code' needs statistics computed as the paper's code does, but "
            f"these have {built}; recompute them with corpus_stats(..., "
            "last_target='paper-code', q_targets='centred'), or use protocol='theorem'."
        )


def _resolve_device(model: Any, device: object) -> torch.device:
    try:
        return model_device(model, None) if device is None else torch.device(device)
    except (TypeError, RuntimeError) as err:
        raise LeadTermsError(f"device must be a torch device or its name, got {device!r}") from err


def _layer_inputs(view: ModelView, maps: TokenMaps, layer: int, theory: Theory, value_map):
    """``E_pre``, ``W_Q``, ``W_K`` (one per query head) and the two value maps of a layer,
    the maps checked finite (``check_supported`` checked the weights)."""
    device, dtype = theory.device, theory.dtype
    W_Q = view.weight(layer, "W_Q").to(device, dtype)
    kv_group = torch.tensor(view.kv_group, device=view.device)
    W_K = view.weight(layer, "W_K")[kv_group].to(device, dtype)

    def get(name: str) -> Tensor:
        return _finite(
            f"the layer {layer} {name} token map", maps.get(name, layer).to(device, dtype)
        )

    E_pre = get("pre")
    values = [get("post"), get("attn")]
    if value_map == "write":
        values = [E - E_pre for E in values]
    return E_pre, W_Q, W_K, values


def _layer_rows(view: ModelView, maps: TokenMaps, layer: int, theory: Theory, protocol: Protocol,
                per_head: bool, perms: Tensor | None) -> list[dict]:  # fmt: skip
    """The rows of one layer: per map (attention, value_post, value_attn, each head's
    attention), its raw row and, with ``protocol.specific``, its ``_specific`` row."""
    dtype, gemm = theory.dtype, theory.gemm_dtype
    E_pre, W_Q, W_K, values = _layer_inputs(view, maps, layer, theory, protocol.value_map)
    both = protocol.normalize == "both"
    att = attention_scores(
        E_pre, W_Q, W_K, theory.attention, theory.attention_terms, both, per_head, dtype, gemm
    )
    val = value_scores(values, theory.value, theory.value_terms, both, dtype, gemm)
    heads = ((h, "attention", v) for h, v in enumerate(att[1:]))
    where = [(None, "attention", att[0]), (None, "value_post", val[0]),
             (None, "value_attn", val[1]), *heads]  # fmt: skip
    rows = []
    for head, name, scores in where:
        rows.append({"layer": layer, "head": head, "score": name, "value": scores.raw,
                     "common_share": scores.common_share})  # fmt: skip
        if protocol.specific:
            rows.append({"layer": layer, "head": head, "score": f"{name}{SPECIFIC}",
                         "value": scores.specific})  # fmt: skip
    if perms is not None:
        pairs = ((attention_factors(E_pre, W_Q, W_K, both, per_head), theory.attention,
                  theory.attention_terms), (value_factors(values, both), theory.value,
                                            theory.value_terms))  # fmt: skip
        att, val = (permuted_scores(f, T, terms, perms, dtype, gemm) for f, T, terms in pairs)
        draws = torch.cat([att[:, :1], val, att[:, 1:]], dim=1)
        for row, d in zip(rows, _as_rows(draws, protocol.specific).T, strict=True):
            row.update({k: v for k, v in summarize(row["value"], d).items() if k != "score"})
    return rows


def _metadata(view, stats, layers, ids, theory: Theory, protocol: Protocol, per_head):
    norm_type = view.normalization
    return {
        "normalize": protocol.normalize,
        "value_map": protocol.value_map,
        "specific": protocol.specific,
        "per_head": per_head,
        "protocol": theory.protocol,
        "layers": layers,
        "n_tokens": int(ids.numel()),
        "d_vocab": stats.d_vocab,
        "restricted": stats.kept is not None,
        "theory": {"attention": theory.attention_name, "value": "Phi_bar^T B_bar^T"},
        "model_name": view.model_name,
        "normalization_type": norm_type,
        "fold_ln": norm_type in ("LNPre", "RMSPre"),
        "positional_embedding_type": view.positional_type,
        "view": view.kind,
        "loading": view.loading,
        "stats": {
            "n_ctx": stats.n_ctx,
            "n_sequences": stats.n_sequences,
            "centre_vocab": stats.centre_vocab,
            "q_targets": stats.metadata.get("q_targets"),
            "last_target": stats.metadata.get("last_target"),
        },
        "dtype": str(theory.dtype).removeprefix("torch."),
        "gemm_dtype": str(theory.gemm_dtype or theory.dtype).removeprefix("torch."),
        "library_version": __version__,
    }
