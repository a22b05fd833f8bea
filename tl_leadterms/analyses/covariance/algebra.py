"""Exact factored algebra of the covariance similarity (see :mod:`.covariance` for the maths).

A model map is ``Ã = L Rᵀ``; the theory matrix ``T`` is dense ``[n, m]``. ``theory_terms``
computes (once per statistics) the theory's row scales, row means and ``‖T̃T̃ᵀ‖²``;
``cross_terms`` accumulates ``X Xᵀ`` with ``X = Lᵀ T̃`` in column blocks; ``self_norm2`` is
``tr((LᵀL · RᵀR)²)``.

Precision: every stage runs in ``dtype``; with ``gemm_dtype=torch.float32`` under a float64
``dtype`` only the matrix products (the ``O(n³)`` Gram blocks of ``theory_terms``, the
``O(n²r)`` products of ``cross_terms``) run in float32, their sums of squares and everything
else in float64 (docs/guides/pythia-protocol.md#precision: the scores stay within the
documented 1e-6).
"""

import math
import weakref
from typing import NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.corpus import CorpusStats

_BLOCK_ELEMENTS = 2**25  # elements of one materialised block of the theory matrix
# stats -> {(theory, dtype, device, gemm dtype): TheoryTerms}; weak keys: never keeps stats alive
_THEORY_CACHE: "weakref.WeakKeyDictionary[CorpusStats, dict]" = weakref.WeakKeyDictionary()


class TheoryTerms(NamedTuple):
    """What the scores need of a theory matrix ``T``: ``T̃ = diag(scale)·T − mean·1ᵀ``.

    Centred over tokens too, ``T̃° = T̃ − 1 c̄ᵀ`` (``c̄``: the column means of ``T̃``) and
    ``T̃T̃ᵀ = T̃°T̃°ᵀ + w1ᵀ + 1wᵀ + a·11ᵀ`` with ``w = T̃°c̄`` and ``a = ‖c̄‖²``: the common
    component (see :mod:`.covariance`).
    """

    scale: Tensor  # [n] 1/‖T_i‖ (0 for a zero row)
    mean: Tensor  # [n] row means of the scaled rows
    norm2: float  # ‖T̃T̃ᵀ‖_F² = centred_norm2 + 2n‖w‖² + n²a²
    centred_norm2: float = math.nan  # ‖T̃°T̃°ᵀ‖_F² (double-centred covariance)
    w: Tensor | None = None  # [n] T̃°c̄
    a: float = math.nan  # ‖c̄‖²


def _inverse(norms: Tensor) -> Tensor:
    return torch.where(norms > 0, 1.0 / norms.clamp_min(torch.finfo(norms.dtype).tiny), 0.0)


def _block(n: int) -> int:
    return max(1, min(n, _BLOCK_ELEMENTS // max(n, 1)))


def _scaled(block: Tensor, scale: Tensor, mean: Tensor, dtype: torch.dtype) -> Tensor:
    """``diag(scale)·block − mean·1ᵀ`` in ``dtype``, one new tensor (``block`` is untouched)."""
    if block.dtype == dtype:
        return torch.mul(block, scale[:, None]).sub_(mean[:, None])
    return block.to(dtype).mul_(scale[:, None]).sub_(mean[:, None])


def _rows(T: Tensor, terms: TheoryTerms, rows: slice, dtype: torch.dtype) -> Tensor:
    return _scaled(T[rows], terms.scale[rows], terms.mean[rows], dtype)


def _cols(T: Tensor, terms: TheoryTerms, cols: slice, dtype: torch.dtype) -> Tensor:
    return _scaled(T[:, cols], terms.scale, terms.mean, dtype)


def _sum_squares(G: Tensor, dtype: torch.dtype) -> float:
    """``Σ G²`` accumulated in ``dtype`` (``G`` may be narrower: a float32 product)."""
    return float((G * G).sum()) if G.dtype == dtype else float((G * G).sum(dtype=dtype))


@torch.no_grad()
def theory_terms(
    T: Float[Tensor, "n m"],
    dtype: torch.dtype = torch.float64,
    gemm_dtype: torch.dtype | None = None,
) -> TheoryTerms:
    """Row scaling, row means and ``‖T̃T̃ᵀ‖²`` of a theory matrix, blockwise in ``dtype``
    (the Gram blocks ``T̃_i T̃_jᵀ`` in ``gemm_dtype``, default ``dtype``)."""
    gemm = gemm_dtype or dtype
    n, m = T.shape
    b = _block(m)
    sq = torch.empty(n, dtype=dtype, device=T.device)
    sums = torch.empty(n, dtype=dtype, device=T.device)
    for start in range(0, n, b):
        block = T[start : start + b].to(dtype)
        sq[start : start + b] = (block * block).sum(1)
        sums[start : start + b] = block.sum(1)
    scale = _inverse(sq.sqrt())
    terms = TheoryTerms(scale, sums * scale / m, 0.0)
    col_sums = torch.zeros(m, dtype=dtype, device=T.device)
    for start in range(0, n, b):
        col_sums += _rows(T, terms, slice(start, start + b), dtype).sum(0)
    c_bar = col_sums / n  # column means of T̃: what every token's row shares
    w = torch.empty(n, dtype=dtype, device=T.device)
    centred = 0.0
    starts = range(0, n, b)
    for i, si in enumerate(starts):
        Ti = _rows(T, terms, slice(si, si + b), dtype).sub_(c_bar)
        w[si : si + b] = Ti @ c_bar
        Ti = Ti.to(gemm)
        for sj in starts[i:]:
            Tj = Ti if sj == si else _rows(T, terms, slice(sj, sj + b), dtype).sub_(c_bar)
            G = Ti @ Tj.to(gemm).T
            centred += (1.0 if sj == si else 2.0) * _sum_squares(G, dtype)
    a = float(c_bar @ c_bar)
    norm2 = centred + 2 * n * float(w @ w) + n * n * a * a
    return terms._replace(norm2=norm2, centred_norm2=centred, w=w, a=a)


def cache_key(name: str, dtype: torch.dtype, device, gemm_dtype: torch.dtype | None) -> tuple:
    """The in-memory cache's key of one theory matrix's terms."""
    return (name, dtype, str(device), gemm_dtype or dtype)


def remember_terms(stats: CorpusStats, name: str, dtype: torch.dtype, device,
                   gemm_dtype: torch.dtype | None, terms: TheoryTerms) -> None:  # fmt: skip
    """Put terms read elsewhere (a theory file) into the cache :func:`cached_terms` reads."""
    _THEORY_CACHE.setdefault(stats, {})[cache_key(name, dtype, device, gemm_dtype)] = terms


def cached_terms(stats: CorpusStats, name: str, T: Tensor, dtype: torch.dtype,
                 gemm_dtype: torch.dtype | None = None) -> TheoryTerms:  # fmt: skip
    """The terms of ``T`` (named ``name`` among ``stats``' theory matrices), computed once per
    statistics object, dtype, device and GEMM dtype."""
    per_stats = _THEORY_CACHE.setdefault(stats, {})
    key = cache_key(name, dtype, T.device, gemm_dtype)
    if key not in per_stats:
        terms = theory_terms(T, dtype, gemm_dtype)
        if not (torch.isfinite(terms.scale).all() and math.isfinite(terms.norm2)):
            raise LeadTermsError(
                f"the statistics' {name} matrix holds NaN or inf; recompute the statistics"
            )
        per_stats[key] = terms
    return per_stats[key]


class Factor(NamedTuple):
    """A token map ``L Rᵀ`` (``R`` None: the map is ``L`` itself, an ``n × d`` matrix)."""

    L: Tensor
    R: Tensor | None


def prepare(factor: Factor, scale_rows: bool) -> Factor:
    """Rows scaled to unit norm (when asked; zero rows stay 0), then centred (row means 0)."""
    L, R = factor
    if R is None:
        if scale_rows:
            L = L * _inverse(L.norm(dim=1))[:, None]
        return Factor(L - L.mean(1, keepdim=True), None)
    if scale_rows:
        row_sq = ((L @ (R.T @ R)) * L).sum(1).clamp_min(0)
        L = L * _inverse(row_sq.sqrt())[:, None]
    return Factor(L, R - R.mean(0, keepdim=True))


def self_norm2(factor: Factor) -> float:
    """``‖ÃÃᵀ‖_F² = ‖ÃᵀÃ‖_F²`` of a prepared factor, ``O(n r²)``."""
    G_L = factor.L.T @ factor.L
    if factor.R is None:
        return float((G_L * G_L).sum())
    P = G_L @ (factor.R.T @ factor.R)
    return float((P * P.T).sum())


def cross_terms(factors: list[Factor], T: Tensor, terms: TheoryTerms, dtype: torch.dtype,
                gemm_dtype: torch.dtype | None = None) -> list:  # fmt: skip
    """Per factor, ``X Xᵀ`` (``[r, r]``; ``‖X‖²`` when ``R`` is None), ``X = Lᵀ T̃``; one pass.

    In float64, ``X = (diag(scale) L)ᵀ T − (Lᵀ mean) 1ᵀ`` reads ``T`` in place; in float32 each
    column block of ``T̃`` is formed first (no cancellation after the product). With a float32
    ``gemm_dtype`` under a float64 ``dtype`` the block of ``T̃`` is formed in float64, the
    products ``Lᵀ T̃`` and ``X Xᵀ`` of each block run in float32 and are summed in float64.
    """
    gemm = gemm_dtype or dtype
    L_all = torch.cat([f.L for f in factors], dim=1).T.contiguous()
    widths = [f.L.shape[1] for f in factors]
    acc = [torch.zeros((r, r) if f.R is not None else (), dtype=dtype, device=T.device)
           for r, f in zip(widths, factors, strict=True)]  # fmt: skip
    direct = T.dtype == dtype == gemm == torch.float64
    if direct:
        shift = (L_all @ terms.mean)[:, None]
        L_all = L_all * terms.scale
    L_all = L_all.to(gemm)
    b = _block(T.shape[0])
    for start in range(0, T.shape[1], b):
        cols = slice(start, start + b)
        X = L_all @ T[:, cols] - shift if direct else L_all @ _cols(T, terms, cols, dtype).to(gemm)
        for a, Xi, f in zip(acc, X.split(widths), factors, strict=True):
            if f.R is not None and gemm == dtype:
                a.addmm_(Xi, Xi.T)
            elif f.R is not None:
                a += (Xi @ Xi.T).to(dtype)
            elif gemm == dtype:
                a += torch.vdot(Xi.flatten(), Xi.flatten())
            else:
                a += _sum_squares(Xi, dtype)
    return acc


def _cross(acc: Tensor, factor: Factor) -> float:
    """``⟨ÃÃᵀ, T̃T̃ᵀ⟩ = ‖R Lᵀ T̃‖² = ⟨RᵀR, X Xᵀ⟩`` (``R = I`` for a plain map: ``‖X‖²``)."""
    if factor.R is None:
        return float(acc)
    return float((acc * (factor.R.T @ factor.R)).sum())


def score(cross: float, self2: float, theory2: float) -> float:
    """Frobenius cosine of the two covariances (NaN when either is zero)."""
    denom = math.sqrt(self2 * theory2) if self2 > 0 and theory2 > 0 else 0.0
    return cross / denom if denom > 0 else math.nan


class Scores(NamedTuple):
    """One map's scores: ``raw`` (the paper's cosine, rows centred over features only),
    ``specific`` (both covariances double-centred, ``H·C·H``) and ``common_share`` (the share
    of the sizes of the raw cosine numerator's two parts carried by the common component,
    ``|c| / (|s| + |c|)``, in ``[0, 1]``: docs/guides/effect-sizes.md)."""

    raw: float
    specific: float
    common_share: float


class Parts(NamedTuple):
    """A prepared factor centred over tokens too (``L° = L − 1 l̄ᵀ``) and its common part:
    ``ÃÃᵀ = Ã°Ã°ᵀ + w1ᵀ + 1wᵀ + a·11ᵀ`` with ``ā = R l̄``, ``w = Ã°ā``, ``a = ‖ā‖²``."""

    factor: Factor  # (L°, R)
    w: Tensor  # [n]
    a: float
    centred2: float  # ‖Ã°Ã°ᵀ‖²
    raw2: float  # ‖ÃÃᵀ‖²


def token_parts(factor: Factor) -> Parts:
    """:class:`Parts` of a prepared factor, ``O(n r²)``."""
    L, R = factor
    n = L.shape[0]
    l_bar = L.mean(0)
    L_c = L - l_bar
    v = l_bar if R is None else (R.T @ R) @ l_bar  # RᵀR l̄ (Ã°ā = L° RᵀR l̄)
    w = L_c @ v
    a = float(l_bar @ v)
    centred = Factor(L_c, R)
    c2 = self_norm2(centred)
    return Parts(centred, w, a, c2, c2 + 2 * n * float(w @ w) + n * n * a * a)


def scores_of(parts: Parts, acc: Tensor, terms: TheoryTerms, w: Tensor | None = None) -> Scores:
    """:class:`Scores` from ``acc`` = :func:`cross_terms` of ``parts.factor`` (``w``: the
    model's ``w`` re-indexed by a permutation; default ``parts.w``)."""
    n = parts.factor.L.shape[0]
    specific_cross = _cross(acc, parts.factor)
    w = parts.w if w is None else w
    common = 2 * n * float(w @ terms.w) + n * n * parts.a * terms.a
    raw_cross = specific_cross + common
    # a token-specific part at rounding level (every row the same) has no direction: NaN
    floor = (1e3 * torch.finfo(parts.factor.L.dtype).eps) ** 2
    specific = (
        score(specific_cross, parts.centred2, terms.centred_norm2)
        if parts.centred2 > floor * parts.raw2 and terms.centred_norm2 > floor * terms.norm2
        else math.nan
    )
    size = abs(specific_cross) + abs(common)  # the share of the parts' sizes, in [0, 1]
    return Scores(score(raw_cross, parts.raw2, terms.norm2), specific,
                  abs(common) / size if size > 0 else math.nan)  # fmt: skip


def _scored(factors: list[Factor], T, terms, dtype, gemm_dtype=None) -> list[Scores]:
    parts = [token_parts(f) for f in factors]
    accs = cross_terms([p.factor for p in parts], T, terms, dtype, gemm_dtype)
    return [scores_of(p, a, terms) for p, a in zip(parts, accs, strict=True)]


def value_scores(maps: list[Tensor], T, terms, both: bool, dtype, gemm_dtype=None) -> list[Scores]:
    """The :class:`Scores` of each ``[n, d]`` map against the theory ``T`` (one pass over ``T``)."""
    return _scored(value_factors(maps, both), T, terms, dtype, gemm_dtype)


def value_factors(maps: list[Tensor], both: bool) -> list[Factor]:
    """The prepared factors :func:`value_scores` scores."""
    return [prepare(Factor(E, None), both) for E in maps]


def attention_factors(E, W_Q, W_K, both: bool, per_head: bool) -> list[Factor]:
    """The prepared factors :func:`attention_scores` scores: the layer's, then each head's."""
    H, d, d_head = W_Q.shape
    if H * d_head <= d:
        layer = Factor(E @ W_Q.transpose(0, 1).reshape(d, H * d_head) / H,
                       E @ W_K.transpose(0, 1).reshape(d, H * d_head))  # fmt: skip
    else:
        layer = Factor(E @ (torch.einsum("hdk,hek->de", W_Q, W_K) / H), E)
    heads = [prepare(Factor(E @ W_Q[h], E @ W_K[h]), both) for h in range(H)] if per_head else []
    return [prepare(layer, both), *heads]


def permuted_scores(factors: list[Factor], T, terms, perms: Tensor, dtype,
                    gemm_dtype: torch.dtype | None = None) -> Tensor:  # fmt: skip
    """``[R, len(factors), 2]`` scores (raw, token-specific) with the tokens relabelled by each
    row of ``perms``.

    Relabelling the theory's tokens (rows and columns of ``T`` together) gives the same score
    as relabelling the rows of the model's prepared ``L`` (its covariance depends on ``L``'s
    rows only; row scaling, the column centring of ``R`` and the centring over tokens commute
    with it), so each draw is one pass of :func:`cross_terms` with re-indexed ``L°`` (and
    ``w``); self norms are unchanged.
    """
    parts = [token_parts(f) for f in factors]
    out = torch.empty(perms.shape[0], len(factors), 2, dtype=torch.float64)
    for r, perm in enumerate(perms):
        p = perm.to(factors[0].L.device)
        moved = [Factor(q.factor.L[p], q.factor.R) for q in parts]
        accs = cross_terms(moved, T, terms, dtype, gemm_dtype)
        for i, (a, q) in enumerate(zip(accs, parts, strict=True)):
            out[r, i] = torch.tensor(
                scores_of(q._replace(factor=moved[i]), a, terms, q.w[p])[:2], dtype=torch.float64
            )
    return out


def attention_scores(E, W_Q, W_K, T, terms, both: bool, per_head: bool, dtype,
                     gemm_dtype=None) -> list[Scores]:  # fmt: skip
    """``E mean_h(W_Q^h W_K^hᵀ) Eᵀ``'s :class:`Scores`, then each head's (when ``per_head``)."""
    H, d, d_head = W_Q.shape
    if per_head and H * d_head <= d and not both:
        # both centrings commute with column slicing and L's rows are not rescaled: each
        # head's X Xᵀ is a diagonal block of the layer's (a common scale cancels)
        prepared = attention_factors(E, W_Q, W_K, both, False)[0]
        layer = token_parts(prepared)
        acc = cross_terms([layer.factor], T, terms, dtype, gemm_dtype)[0]
        out = [scores_of(layer, acc, terms)]
        for h in range(H):
            cols = slice(h * d_head, (h + 1) * d_head)
            head = token_parts(Factor(prepared.L[:, cols], prepared.R[:, cols]))
            out.append(scores_of(head, acc[cols, cols], terms))
        return out
    return _scored(attention_factors(E, W_Q, W_K, both, per_head), T, terms, dtype, gemm_dtype)


VALUE_NAME = "Phi_bar^T B_bar^T"


def attention_name(protocol: str) -> str:
    """The attention theory matrix a protocol compares with: ``Q̄`` or, as the paper's code
    does, ``Q̄ᵀ``."""
    return "Q_bar^T" if protocol == "paper-code" else "Q_bar"


class Theory(NamedTuple):
    """The two theory matrices on the device, their cached terms and what they are.

    ``Theory.of(stats, protocol, device, dtype)`` computes the terms once per statistics object
    in this process; :mod:`.theory_file` keeps them in a file for every later process.
    """

    protocol: str
    attention_name: str
    attention: Tensor
    attention_terms: TheoryTerms
    value: Tensor
    value_terms: TheoryTerms
    device: torch.device
    dtype: torch.dtype
    gemm_dtype: torch.dtype | None = None

    @classmethod
    def of(cls, stats: CorpusStats, protocol: str, device, dtype,
           gemm_dtype: torch.dtype | None = None) -> "Theory":  # fmt: skip
        device = torch.device(device)
        name = attention_name(protocol)
        T_att = (stats.Q_bar.T if name == "Q_bar^T" else stats.Q_bar).to(device)
        T_val = stats.B_bar_Phi_bar.T.to(device)
        att_terms = cached_terms(stats, name, T_att, dtype, gemm_dtype)
        val_terms = cached_terms(stats, VALUE_NAME, T_val, dtype, gemm_dtype)
        return cls(protocol, name, T_att, att_terms, T_val, val_terms, device, dtype, gemm_dtype)


def bootstrap_scores(factors, boot, protocol, device, dtype,
                     gemm_dtype: torch.dtype | None = None) -> Tensor:  # fmt: skip
    """``[R, maps, 2]`` scores (raw, token-specific) of every layer's factors against each
    resample's theory, the maps in row order (per layer: attention, value_post, value_attn,
    then each head's attention)."""
    identity = torch.arange(factors[0][0][0].L.shape[0])[None]
    out = []
    for resampled in boot.resamples():
        theory = Theory.of(resampled, protocol, device, dtype, gemm_dtype)
        draw = []
        for att, val in factors:
            a = permuted_scores(att, theory.attention, theory.attention_terms, identity, dtype,
                                gemm_dtype)[0]  # fmt: skip
            v = permuted_scores(val, theory.value, theory.value_terms, identity, dtype,
                                gemm_dtype)[0]  # fmt: skip
            draw += [a[0], v[0], v[1], *a[1:]]
        out.append(torch.stack(draw))
    return torch.stack(out)
