"""The paper's covariance similarity of token maps (docs/math.md#pythia-protocol, steps 3-4).

For an ``n × m`` matrix ``M`` whose rows are the ``n`` kept tokens, ``M̃`` is ``M`` minus its row
means and ``Cov(M) = M̃M̃ᵀ/(m−1)``; a score is the Frobenius cosine of the model's and the
theory's covariances. Theory rows are first scaled to unit L2 norm (zero rows stay 0); with
``normalize="both"`` the model's rows are too.

Everything is computed in exact factored form, never as an ``n × n`` model covariance:

* a map is ``Ã = L Rᵀ`` (an attention map ``E W_Q W_Kᵀ Eᵀ`` with ``L = E W_Q``, ``R = E W_K``;
  a value map ``M̃`` with ``R = I``). Row scaling multiplies ``L`` by a diagonal (row norms from
  ``diag(L RᵀR Lᵀ)``, ``O(n r²)``); row centring subtracts the column mean of ``R``,
  ``Ã = L (R − 1 r̄ᵀ)ᵀ``, so the rank stays ``r``;
* ``⟨ÃÃᵀ, T̃T̃ᵀ⟩ = ‖Ãᵀ T̃‖² = ⟨RᵀR, X Xᵀ⟩`` with ``X = Lᵀ T̃`` (``O(n² r)``, column blocks of
  ``T̃`` built on the fly, ``X Xᵀ`` accumulated), and ``‖ÃÃᵀ‖² = tr((LᵀL · RᵀR)²)``
  (``O(n r²)``);
* the theory's ``‖T̃T̃ᵀ‖²`` costs ``O(n³)`` but depends only on the statistics: it is computed
  once per (statistics, dtype, device), blockwise, and cached without keeping the statistics
  alive; ``theory=path`` keeps it in a file for every later process (:mod:`.theory_file`).
"""

import math
import os
import warnings
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from tl_leadterms.adapters.support import check_supported
from tl_leadterms.adapters.view import ModelView
from tl_leadterms.analyses.covariance.algebra import (  # noqa: F401 (theory_terms re-exported)
    Scores,
    Theory,
    TheoryTerms,
    attention_factors,
    attention_scores,
    bootstrap_scores,
    cached_terms,
    permuted_scores,
    theory_terms,
    value_factors,
    value_scores,
)
from tl_leadterms.analyses.covariance.result import CovarianceSimilarity
from tl_leadterms.analyses.covariance.theory_file import theory_for
from tl_leadterms.analyses.covariance.token_maps import TokenMaps, model_device, token_maps
from tl_leadterms.checks import (
    Layers,
    check_bool,
    check_choice,
    check_layers,
    check_stats,
    check_vocab,
)
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.progress import progress_bar
from tl_leadterms.protocols import PathLike, ReadableModel
from tl_leadterms.results.bootstrap import add_interval
from tl_leadterms.results.null import NullSpec, add_qvalues, permutations, summarize
from tl_leadterms.results.uncertainty import Uncertainty, shorthands
from tl_leadterms.stats.blocks import BlockStats
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.version import __version__

__all__ = ["CovarianceSimilarity", "covariance_similarity"]

NORMALIZE = ("theory", "both")
CENTRES = ("features", "tokens")
VALUE_MAPS = ("post", "write")
ProtocolName = Literal["theorem", "paper-code"]
PROTOCOLS: tuple[str, ...] = get_args(ProtocolName)


def _check(view: ModelView, stats: Any, normalize: Any, value_map: Any, dtype: Any):
    check_stats(stats)
    check_vocab(stats, d_vocab=view.d_vocab, tokenizer=view.tokenizer)
    check_choice("normalize", normalize, NORMALIZE)
    check_choice("value_map", value_map, VALUE_MAPS)
    if dtype not in (torch.float32, torch.float64):
        raise LeadTermsError(f"dtype must be torch.float64 or torch.float32, got {dtype!r}")


def _check_gemm(gemm_dtype: Any, dtype: torch.dtype, device: torch.device) -> None:
    if gemm_dtype is None or gemm_dtype == dtype:
        return
    if not (gemm_dtype == torch.float32 and dtype == torch.float64):
        raise LeadTermsError(
            f"gemm_dtype must be None (the products in dtype) or torch.float32 with "
            f"dtype=torch.float64, got gemm_dtype={gemm_dtype!r} with dtype={dtype!r}"
        )
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
def covariance_similarity(
    model: ReadableModel,
    stats: CorpusStats | BlockStats,
    *,
    layers: Layers = None,
    per_head: bool = False,
    normalize: Literal["theory", "both"] = "theory",
    value_map: Literal["post", "write"] = "post",
    maps: TokenMaps | None = None,
    batch_size: int | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
    progress: bool = True,
    protocol: ProtocolName = "theorem",
    null: int | NullSpec | None = None,
    ci: float | None = None,
    uncertainty: Uncertainty | None = None,
    centre: Literal["features", "tokens"] = "features",
    theory: PathLike | None = None,
    gemm_dtype: torch.dtype | None = None,
) -> "CovarianceSimilarity":
    """The paper's covariance similarity of a model's token maps with the leading terms.

    Per layer ``l`` (rows = the statistics' kept tokens, fed one at a time, see
    :func:`~tl_leadterms.analyses.covariance.token_maps.token_maps`):

    * ``"attention"``: ``A_l = E_pre · mean_h(W_Q^h W_K^hᵀ) · E_preᵀ`` against ``Q̄``
      (TransformerLens weights as loaded, i.e. LayerNorm folded under ``fold_ln``; biases,
      rotary and the LayerNorm's normalisation ignored). ``per_head=True`` adds one row per head
      with ``W_Q^h W_K^hᵀ`` alone.
    * ``"value_post"``: ``E_post`` against ``Φ̄ᵀB̄ᵀ``; ``"value_attn"``: ``E_attn = E_pre +
      attn_out`` (no MLP) against ``Φ̄ᵀB̄ᵀ``. With ``value_map="write"`` the layer's own write
      ``E_post − E_pre`` and ``E_attn − E_pre`` are compared instead.

    Score = Frobenius cosine of ``Cov(M) = M̃M̃ᵀ/(m−1)`` (``M̃``: rows minus their means) of
    the model's map and of the theory's, exact and factored (see the module docstring: no
    ``n × n`` model matrix is formed; ``O(n²·d)`` per layer).

    Why both normalisations matter: the paper scales only the theory's rows
    (``normalize="theory"``, ``value_map="post"``, the default). That protocol is not
    scale-invariant on the model side: the model's rows differ in norm with token frequency,
    and ``E_post`` is dominated by the residual (the token's own embedding). On the paper's own
    model trained until its weights match the leading terms (weight cosines 0.99999), the
    paper's protocol scores the attention map only about 0.53 and the value map about 0.39,
    against about 0.48 for a random matrix. With both sides normalised and the layer's write
    (``normalize="both"``, ``value_map="write"``) the same model scores 0.99999. Report both.
    Only exactly zero rows stay zero: under ``"both"`` a model row that is zero in exact
    arithmetic but holds rounding noise (e.g. a token never seen as a query, whose ``Q̄`` row
    is 0) is scaled to unit norm like any other row.

    Two protocols. ``"theorem"`` (the default) compares ``A_l`` with ``Q̄`` in the theorem's
    orientation (``W ≈ c·Q̄``, rows = query tokens, as :func:`~tl_leadterms.decompose` does).
    ``"paper-code"`` reproduces the paper's ``pythia.py``: ``A_l`` is compared with ``Q̄ᵀ``
    (the script transposes relative to its own toy experiment), and the statistics must have
    been computed the way that script computes them, i.e. with
    ``corpus_stats(..., last_target="paper-code", q_targets="centred")`` (every window's last
    target set to token 0); other statistics raise a :class:`LeadTermsError`. The value scores
    are the same under both.

    Args:
        model: a HookedTransformer (e.g. Pythia from ``from_pretrained(..., fold_ln=True)``).
        stats: corpus statistics with the model's ``d_vocab`` (typically restricted to the most
            frequent tokens, ``corpus_stats(..., vocab=20000)``).
        layers: layers to score (default: all).
        per_head: also score each head's attention map.
        normalize: ``"theory"`` (the paper) or ``"both"``.
        value_map: ``"post"`` (the paper) or ``"write"``.
        maps: precomputed :class:`TokenMaps` for ``stats.kept`` (reuse across settings).
        batch_size: tokens per forward pass when computing the maps (default 1024).
        device: where the products run (default: the model's device); the statistics' two
            ``[k, k]`` theory matrices are moved there.
        dtype: precision of the products. ``float32`` halves the memory of the theory
            matrices on the device and, at 5,000 tokens on a 2-core CPU, took 0.42× the
            float64 time of the theory's terms and 0.51× per layer
            (``benchmarks/bench_token_centred.py``); a whole run is not faster when the token
            maps dominate (a 3,000-token run took 17.8 s against 16.1 s). Scores agree with
            float64 to about 3e-7 (the documented tolerance is 1e-6, see
            docs/guides/pythia-protocol.md#precision).
        gemm_dtype: ``torch.float32`` with ``dtype=torch.float64``: only the matrix products
            (the theory's ``O(k³)`` Gram blocks and each layer's ``O(k²r)`` products) run in
            float32, every sum of their squares, the scaling, centring and the scores in
            float64 (None: the products in ``dtype``). Within 1e-6 of float64 (measured by
            ``benchmarks/bench_covariance.py --case pythia160m``). On a GPU
            (``device="cuda"``) keep ``torch.backends.cuda.matmul.allow_tf32`` False
            (PyTorch's default).
        progress: show tqdm bars.
        protocol: ``"theorem"`` (attention map vs ``Q̄``) or ``"paper-code"`` (vs ``Q̄ᵀ``, on
            statistics with ``last_target="paper-code"``); recorded in ``metadata``.
        null: the permutation null of every score, ``R`` or a
            :class:`~tl_leadterms.results.null.NullSpec` (shorthand for ``uncertainty.null``):
            ``null_mean``, ``null_sd``, the effect size ``excess``, ``excess_share``, the
            evidence ``z``, ``p`` and the Benjamini–Hochberg ``q`` over the rows (each draw is
            one more pass over the theory with the model's token rows re-indexed, the token maps
            are reused) and, with a reference model, a ``reference`` column.
        ci: a confidence level (shorthand for ``uncertainty.ci``): ``lo``/``hi`` and
            ``corrected``, the bootstrap interval of each score over resamples of corpus blocks
            and the estimate of the distribution-level score it is built around
            (bias-corrected; none for the model's training windows); ``stats`` must then be a
            ``BlockStats`` from :func:`~tl_leadterms.stats.blocks.block_stats`
            (:mod:`tl_leadterms.results.bootstrap`). The model's factors are built once; each
            resample costs one pass over its two theory matrices.
        uncertainty: the whole :class:`~tl_leadterms.results.uncertainty.Uncertainty` (null,
            interval, its bootstrap and the ``population`` the scores answer for).
        centre: ``"features"`` (the paper: each covariance's rows centred over features
            only) or ``"tokens"``: both covariances double-centred, ``H·C·H`` with
            ``H = I − 11ᵀ/n``, so what every token shares is removed before the cosine and
            ``value`` (and its null and interval) is the token-specific score; the paper's
            score is then the ``raw`` column. Either way every row carries ``specific`` (the
            double-centred cosine) and ``common_share`` (the share of the paper's cosine
            carried by the common component); both cost nothing extra.
        theory: the path of a theory file (e.g. ``theory_path("stats.safetensors")``,
            :mod:`~tl_leadterms.analyses.covariance.theory_file`): its theory terms are read
            when it exists, computed and written there when it does not, so only the first
            process pays their ``O(k³)`` (467 s of CPU at Pythia's 20,000 tokens). A file
            written for other statistics or another ``protocol``, ``dtype``, ``gemm_dtype``
            or device type is refused, naming the difference. Scores are bitwise the same as
            without it. ``sweep(..., theory=path)`` passes it to every checkpoint, Ray tasks
            included.

    The common component. ``C = M̃M̃ᵀ`` splits exactly as ``C = C° + w1ᵀ + 1wᵀ + a·11ᵀ``
    with ``C° = H·C·H`` (``w``: the covariance of each token with the mean token, ``a``: the
    mean token's squared norm), and the two parts are orthogonal, so the numerator of the
    cosine is ``⟨C°_model, C°_theory⟩ + 2n·w_modelᵀw_theory + n²·a_model·a_theory``. When
    every token's map shares a large mean row (an ``E_post`` dominated by a direction all
    embeddings share, a theory whose rows share a mean), the second and third terms dominate:
    the raw score is high for any model, its permutation null sits just below it, and
    ``common_share`` is near 1. ``specific`` asks what the covariance protocol means to ask,
    whether tokens that the theory puts close together are close in the model; use
    ``centre="tokens"`` (recommended) and report ``common_share`` beside the paper's score.
    Computed in the same factored pass: ``L`` is centred over tokens, the theory's
    ``‖C°‖²``, ``w`` and ``a`` are cached with its other terms.

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
        >>> round(sim.value("value_post", 0), 6)
        1.0
    """
    sure = Uncertainty.of(uncertainty, null=null, ci=ci).resolve(stats, model)
    stats, boot, spec = sure.stats, sure.boot, sure.null
    view = check_supported(model, caller="covariance_similarity")
    _check(view, stats, normalize, value_map, dtype)
    _check_protocol(protocol, stats)
    check_choice("centre", centre, CENTRES)
    layers = check_layers(layers, view.n_layers)
    check_bool("per_head", per_head)
    device = _resolve_device(model, device)
    _check_gemm(gemm_dtype, dtype, device)
    gemm_dtype = None if gemm_dtype == dtype else gemm_dtype
    _check_theory_path(theory)
    ids = stats.kept.cpu() if stats.kept is not None else torch.arange(stats.d_vocab)
    if maps is None:
        maps = token_maps(model, ids, layers=layers, batch_size=batch_size, progress=progress)
    maps = _check_maps(maps, ids, layers)
    theory_path = theory
    theory = (Theory.of(stats, protocol, device, dtype, gemm_dtype) if theory is None else
              theory_for(stats, theory, protocol=protocol, device=device, dtype=dtype,
                         gemm_dtype=gemm_dtype))  # fmt: skip
    perms = None if spec is None else permutations(ids.numel(), spec.permutations, spec.seed)
    rows: list[dict[str, Any]] = []
    for layer in progress_bar(layers, desc="covariance similarity", disable=not progress):
        rows += _layer_rows(view, maps, layer, theory, normalize, value_map, per_head, perms,
                            centre)  # fmt: skip
    metadata = _metadata(view, stats, layers, ids, theory, normalize, value_map, per_head)
    metadata["centre"] = centre
    if spec is not None and spec.reference is not None:
        ref = covariance_similarity(
            spec.reference_model(model), stats, layers=layers, per_head=per_head,
            normalize=normalize, value_map=value_map, batch_size=batch_size, device=device,
            dtype=dtype, progress=False, protocol=protocol, centre=centre, theory=theory_path,
            gemm_dtype=gemm_dtype,
        )  # fmt: skip
        by_key = {(r["layer"], r["head"], r["score"]): r["value"] for r in ref.rows}
        for r in rows:
            r["reference"] = by_key.get((r["layer"], r["head"], r["score"]), math.nan)
    if spec is not None:
        add_qvalues(rows)  # Benjamini–Hochberg over this model's rows
    if boot is not None:
        factors = [_factors(view, maps, layer, theory, normalize, value_map, per_head)
                   for layer in layers]  # fmt: skip
        draws = bootstrap_scores(factors, boot, protocol, device, dtype, centre, gemm_dtype)
        add_interval(rows, draws, boot, "value")
    return CovarianceSimilarity(rows, metadata | sure.metadata())


def _factors(view, maps, layer, theory, normalize, value_map, per_head):
    """A layer's prepared factors in row order: attention (layer, heads), value_post/attn."""
    E_pre, W_Q, W_K, values = _layer_inputs(view, maps, layer, theory, value_map)
    both = normalize == "both"
    return attention_factors(E_pre, W_Q, W_K, both, per_head), value_factors(values, both)


def _check_protocol(protocol: object, stats: CorpusStats) -> None:
    check_choice("protocol", protocol, PROTOCOLS)
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


def _layer_rows(view: ModelView, maps: TokenMaps, layer: int, theory: Theory, normalize, value_map,
                per_head: bool, perms: Tensor | None, centre: str) -> list[dict]:  # fmt: skip
    """The scores of one layer: attention (and per head), value_post, value_attn."""
    dtype, gemm = theory.dtype, theory.gemm_dtype
    E_pre, W_Q, W_K, values = _layer_inputs(view, maps, layer, theory, value_map)
    both = normalize == "both"
    att = attention_scores(
        E_pre, W_Q, W_K, theory.attention, theory.attention_terms, both, per_head, dtype, gemm
    )
    val = value_scores(values, theory.value, theory.value_terms, both, dtype, gemm)
    where = [
        (None, "attention", att[0]),
        (None, "value_post", val[0]),
        (None, "value_attn", val[1]),
        *((h, "attention", v) for h, v in enumerate(att[1:])),
    ]
    rows = [_row(layer, head, name, scores, centre) for head, name, scores in where]
    if perms is not None:
        att_factors = attention_factors(E_pre, W_Q, W_K, both, per_head)
        att_null = permuted_scores(
            att_factors, theory.attention, theory.attention_terms, perms, dtype, centre, gemm
        )
        val_factors = value_factors(values, both)
        val_null = permuted_scores(
            val_factors, theory.value, theory.value_terms, perms, dtype, centre, gemm
        )
        draws = [att_null[:, 0], val_null[:, 0], val_null[:, 1], *att_null[:, 1:].T]
        for row, d in zip(rows, draws, strict=True):
            summary = summarize(row["value"], d)
            row.update({k: v for k, v in summary.items() if k != "score"})
    return rows


def _row(layer: int, head: int | None, name: str, scores: Scores, centre: str) -> dict:
    """One row: ``value`` is the score ``centre`` picks; ``specific`` and ``common_share``
    always; ``raw`` (the paper's score) beside a token-specific ``value``."""
    row = {"layer": layer, "head": head, "score": name, "value": scores.pick(centre),
           "specific": scores.specific, "common_share": scores.common_share}  # fmt: skip
    if centre == "tokens":
        row["raw"] = scores.raw
    return row


def _metadata(view, stats, layers, ids, theory: Theory, normalize, value_map, per_head):
    norm_type = view.normalization
    return {
        "normalize": normalize,
        "value_map": value_map,
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
