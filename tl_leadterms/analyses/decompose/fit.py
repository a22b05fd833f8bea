"""Fit one vocabulary-space map (or a stack of per-head maps) onto a basis of corpus statistics.

Everything here works from inner products only (:mod:`tl_leadterms.adapters.factored`), so a
factored map is never materialised. For a map ``M`` and basis ``T_1..T_n`` with Gram matrix
``G_ij = ⟨T_i, T_j⟩`` and ``b_i = ⟨T_i, M⟩``:

- cosine with the leading term ``T_0``: ``b_0 / (‖M‖ ‖T_0‖)``;
- projection coefficient ``a = b_0 / ‖T_0‖²`` (the ``c`` of ``M ≈ c·T_0``);
- least squares ``β = argmin ‖M − Σ β_i T_i‖``; the explained fraction ``R² = 1 − ‖r‖²/‖M‖²``;
- the share of component ``i`` is its exact Shapley value of ``R²``
  (:mod:`tl_leadterms.results.attribution`): order-independent, the shares add up to ``R²``
  exactly, and each comes with its unique part (``R²`` lost without it) and shared part;
- a family's share is the sum of the shares of the components it owns; a composed component
  (e.g. ``Φ̄ᵀB̄ᵀ``, owned by context and bigram) is split equally among its owners, the only
  split the fit itself cannot inform (its Shapley value is one number).
"""

import math
import weakref
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from tl_leadterms.adapters import factored
from tl_leadterms.adapters.sandwich import Sandwich, project
from tl_leadterms.results.attribution import character, shapley
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import FAMILIES, Component, Term

__all__ = [
    "BasisCache",
    "MapFit",
    "Projections",
    "fit_map",
    "fits_from_products",
    "lead_cosines",
    "permuted_lead_inner",
    "target_terms",
]


def target_terms(T: Tensor) -> tuple[Tensor, Tensor, float, float, float]:
    """Row sums, column sums, total, ``‖T‖²`` and ``‖T°‖²`` of a dense target (float64)."""
    T = T.double()
    n, m = T.shape
    rows, cols = T.sum(1), T.sum(0)
    total = float(rows.sum())
    norm2 = float((T * T).sum())
    centred = norm2 - float(rows @ rows) / m - float(cols @ cols) / n + total**2 / (n * m)
    return rows, cols, total, norm2, max(centred, 0.0)


class BasisCache:
    """The basis matrices and Gram matrices of one ``CorpusStats``, built once and reused."""

    _instances: ClassVar["weakref.WeakKeyDictionary[CorpusStats, BasisCache]"] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, stats: CorpusStats) -> None:
        self._stats = weakref.ref(stats)  # a strong reference would keep the cache key alive
        self._maps: dict[str, Tensor] = {}
        self._gram: dict[str, Tensor] = {}
        self._sq_norms: dict[str, float] = {}

    @property
    def stats(self) -> CorpusStats:
        """The statistics whose maps this cache holds."""
        return self._stats()

    @classmethod
    def of(cls, stats: CorpusStats) -> "BasisCache":
        if stats not in cls._instances:
            cls._instances[stats] = cls(stats)
        return cls._instances[stats]

    def map(self, component: Component) -> Tensor:
        if component.formula not in self._maps:
            if component.transpose_of is not None:  # a view of the cached original
                self._maps[component.formula] = self.map(component.transpose_of).T
            else:
                self._maps[component.formula] = component.build(self._stats())
        return self._maps[component.formula]

    def sq_norm(self, component: Component) -> float:
        """``‖T‖²`` of one basis map (summed in float64)."""
        if component.formula not in self._sq_norms:
            T = self.map(component)
            self._sq_norms[component.formula] = float(factored.inner_maps(T, T))
        return self._sq_norms[component.formula]

    def gram(self, term: Term) -> Tensor:
        """``G_ij = ⟨T_i, T_j⟩`` (float64) of a weight's basis."""
        if term.weight not in self._gram:
            maps = [self.map(c) for c in term.basis]
            n = len(maps)
            gram = torch.zeros(n, n, dtype=torch.float64)
            for i in range(n):
                for j in range(i, n):
                    value = float(factored.inner_maps(maps[i], maps[j]))  # sums in float64
                    gram[i, j] = gram[j, i] = value
            self._gram[term.weight] = gram
        return self._gram[term.weight]


def _key(t: Tensor) -> tuple:
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t.device)


# memo keys of Projections that depend on the statistics (dropped by with_cache)
_THEORY_KEYS = ("T", "Tπ", "Tsums")


class Projections:
    """One analysis' cache for :class:`~tl_leadterms.adapters.sandwich.Sandwich` maps.

    The outer factors ``L`` and ``R`` of a model are shared by its heads and usually by its
    layers; restricting them to the kept tokens, their Gram matrices and each basis map's
    projection ``Lᵀ T Rᵀ`` are computed once per factor and reused. Factors are held here (keys
    are storage addresses, which must stay alive to stay unique).
    """

    def __init__(self, cache: BasisCache, kept: Tensor | None) -> None:
        self.cache, self.kept = cache, kept
        self._held: dict[tuple, Tensor] = {}

    def _memo(self, key: tuple, build) -> Any:
        if key not in self._held:
            self._held[key] = build()
        return self._held[key]

    def with_cache(self, cache: BasisCache) -> "Projections":
        """A :class:`Projections` for other statistics over the same kept tokens (e.g. a
        bootstrap resample) that reuses this one's model side (restricted factors, their Gram
        matrices) and recomputes only the theory's projections."""
        other = Projections(cache, self.kept)
        other._held = {k: v for k, v in self._held.items() if k[0] not in _THEORY_KEYS}
        return other

    def restrict(self, s: Sandwich) -> Sandwich:
        if self.kept is None:
            return s
        left = self._memo(("rows", _key(s.left)), lambda: s.left.index_select(0, self.kept))
        right = self._memo(("cols", _key(s.right)), lambda: s.right.index_select(1, self.kept))
        self._held[("src", _key(s.left))], self._held[("src", _key(s.right))] = s.left, s.right
        return Sandwich(left, s.A, s.B, right)

    def grams(self, s: Sandwich) -> tuple[Tensor, Tensor]:
        """``LᵀL`` and ``R Rᵀ`` of the outer factors (float64, computed once per factor)."""
        GL = self._memo(("GL", _key(s.left)), lambda: s.left.double().T @ s.left.double())
        GR = self._memo(("GR", _key(s.right)), lambda: s.right.double() @ s.right.double().T)
        return GL, GR

    def norms(self, s: Sandwich) -> Tensor:
        return s.sq_norm(*self.grams(s))

    def projected(self, s: Sandwich, component: Component) -> Tensor:
        """``Lᵀ T Rᵀ`` of one basis map (float64, computed once per outer factor pair)."""
        key = ("T", component.formula, _key(s.left), _key(s.right))
        return self._memo(key, lambda: project(self.cache.map(component), s.left, s.right))

    def inner(self, s: Sandwich, component: Component) -> Tensor:
        return s.inner_projected(self.projected(s, component))

    def inner_many(self, s: Sandwich, components: tuple[Component, ...]) -> Tensor:
        """``[h, n]``: ``⟨M_h, T_j⟩`` of every head with each of ``n`` basis maps (the heads'
        cores formed once: :meth:`Sandwich.inner_projected_many
        <tl_leadterms.adapters.sandwich.Sandwich.inner_projected_many>`)."""
        key = ("T", tuple(c.formula for c in components), _key(s.left), _key(s.right))
        stacked = self._memo(key, lambda: torch.stack([self.projected(s, c) for c in components]))
        return s.inner_projected_many(stacked).T

    def inner_permuted(self, s: Sandwich, component: Component, perms: Tensor) -> Tensor:
        """``⟨M_h[π][:, π], T⟩ = ⟨M_h, T_π⟩`` for each row ``π`` of ``perms`` (``[R, k]``).

        ``T_π = T[π⁻¹][:, π⁻¹]`` is the statistic with its kept tokens relabelled; since
        ``⟨L A B R, T_π⟩ = ⟨A B, L_πᵀ T R_πᵀ⟩`` with ``L_π = L[π]``, ``R_π = R[:, π]``, one
        projection per draw and outer factor serves every head and layer. Returns ``[R, h]``.
        """
        T = self.cache.map(component)

        def stacked() -> Tensor:  # [R, d, e]: one projection per draw, stacked once
            out = None
            for r, perm in enumerate(perms):
                p = perm.to(s.left.device)
                P = project(T, s.left[p], s.right[:, p])
                if out is None:
                    out = P.new_empty((perms.shape[0], *P.shape))
                out[r] = P
            return out

        key = ("Tπ", component.formula, _key(s.left), _key(s.right), _key(perms))
        projected = self._memo(key, stacked)
        self._held[("perms", _key(perms))] = perms
        return s.inner_projected_many(projected).cpu()

    def target_sums(self, component: Component) -> tuple:
        """:func:`target_terms` of one basis map, computed once."""
        return self._memo(("Tsums", component.formula),
                          lambda: target_terms(self.cache.map(component)))  # fmt: skip


@dataclass
class MapFit:
    """The fit of one map (one head, or one head-combined layer)."""

    cosine: float
    projection: float
    norm: float
    shares: dict[str, float]  # Shapley value of R² per component
    family_shares: dict[str, float]
    remainder: float
    unique: dict[str, float]  # R²(all) − R²(all without the component)
    shared: dict[str, float]  # Shapley − unique
    character: str  # see tl_leadterms.results.attribution.character


def _lstsq(gram: Tensor, b: Tensor) -> Tensor:
    """``β`` minimising ``‖M − Σ β_i T_i‖²`` from ``G`` and ``b`` (columns scaled to unit norm)."""
    scale = gram.diagonal().clamp(min=0).sqrt()
    usable = scale > 0
    beta = torch.zeros_like(b)
    if usable.any():
        s = scale[usable]
        G = gram[usable][:, usable] / (s[:, None] * s[None, :])
        rhs = b[..., usable] / s
        solution = torch.linalg.pinv(G, rtol=1e-10, hermitian=True) @ rhs.unsqueeze(-1)
        beta[..., usable] = solution.squeeze(-1) / s
    return beta


def fit_map(
    M, term: Term, cache: BasisCache, projections: Projections | None = None
) -> list[MapFit]:
    """Fit ``M`` onto ``term``'s basis; one :class:`MapFit` per leading index ``h``.

    ``M`` is ``[h, n, m]`` maps (dense, factored, or a restricted
    :class:`~tl_leadterms.adapters.sandwich.Sandwich` with ``projections``), or ``[h, n]``
    vectors for ``P``.
    """
    basis = term.basis
    if isinstance(M, Sandwich):
        gram = cache.gram(term)
        b = projections.inner_many(M, basis).cpu()
        sq = projections.norms(M).cpu()
    elif term.vector:  # [h, n] against vectors cut to the same length n (common offsets)
        M = M.detach().double()
        maps = [cache.map(c).double().to(M.device)[: M.shape[-1]] for c in basis]
        gram = torch.stack([torch.stack([(S * T).sum() for T in maps]) for S in maps]).cpu()
        b = torch.stack([(M * T).sum(-1) for T in maps], dim=-1).cpu()
        sq = (M * M).sum(-1).cpu()
    else:
        gram = cache.gram(term)
        maps = [cache.map(c) for c in basis]
        b = torch.stack([factored.inner(M, T).cpu() for T in maps], dim=-1)
        sq = factored.sq_norm(M).cpu()
    return fits_from_products(gram, b, sq, basis)


def permuted_lead_inner(
    M, term: Term, cache: BasisCache, perms: Tensor, projections: Projections | None = None
) -> Tensor:
    """``⟨M_h, T_π⟩`` of the leading term relabelled by each permutation: ``[R, h]``.

    A vector weight (``P``, indexed by offset, not token) has no token relabelling: NaN.
    """
    if term.vector:
        return torch.full((perms.shape[0], M.shape[0]), math.nan, dtype=torch.float64)
    if isinstance(M, Sandwich):
        return projections.inner_permuted(M, term.target, perms)
    T = cache.map(term.target)
    out = []
    for perm in perms:  # ⟨M[π][:, π], T⟩ = ⟨M, T_π⟩, as for the Sandwich maps
        out.append(factored.inner(factored.restrict(M, perm, perm), T).cpu().double())
    return torch.stack(out)


def lead_cosines(
    M, term: Term, cache: BasisCache, norms: Tensor, projections: Projections | None = None
) -> Tensor:
    """``[h]`` cosines of each map with ``term``'s leading term from ``cache``'s statistics.

    ``norms`` are the maps' ``‖M_h‖`` (model side, computed once); NaN where a norm is 0.
    """
    if isinstance(M, Sandwich):
        inner = projections.inner(M, term.target).cpu().double()
        t2 = cache.sq_norm(term.target)
    elif term.vector:
        M = M.detach().double()
        T = cache.map(term.target).double().to(M.device)[: M.shape[-1]]
        inner, t2 = (M * T).sum(-1).cpu(), float((T * T).sum())
    else:
        inner = factored.inner(M, cache.map(term.target)).cpu().double()
        t2 = cache.sq_norm(term.target)
    denominator = norms.double() * math.sqrt(max(t2, 0.0))
    nan = torch.full_like(inner, math.nan)
    return torch.where(denominator > 0, inner / denominator, nan).clamp(-1.0, 1.0)


def fits_from_products(gram: Tensor, b: Tensor, sq: Tensor, basis) -> list[MapFit]:
    """One :class:`MapFit` per head from ``G`` (``[n, n]``), ``b`` (``[h, n]``), ``‖M‖²``."""
    lead = 0
    beta = _lstsq(gram, b)
    residual = sq - 2 * (beta * b).sum(-1) + ((beta @ gram) * beta).sum(-1)
    attribution = shapley(gram, b, sq)
    names = [c.name for c in basis]
    fits = []
    for h in range(b.shape[0]):
        norm2, lead_sq = float(sq[h]), float(gram[lead, lead])
        denominator = (norm2 * lead_sq) ** 0.5
        cosine = float(b[h, lead]) / denominator if denominator > 0 else math.nan
        shares = dict(zip(names, attribution.shapley[h].tolist(), strict=True))
        families = dict.fromkeys(FAMILIES, 0.0)
        for component in basis:
            for family in component.families:
                families[family] += shares[component.name] / len(component.families)
        remainder = max(0.0, float(residual[h]) / norm2) if norm2 > 0 else 1.0
        fits.append(
            MapFit(
                cosine=cosine if math.isnan(cosine) else max(-1.0, min(1.0, cosine)),
                projection=float(b[h, lead]) / lead_sq if lead_sq > 0 else 0.0,
                norm=norm2**0.5,
                shares=shares,
                family_shares={f: v for f, v in families.items() if f in _families(basis)},
                remainder=remainder,
                unique=dict(zip(names, attribution.unique[h].tolist(), strict=True)),
                shared=dict(zip(names, attribution.shared[h].tolist(), strict=True)),
                character=character(
                    names, list(shares.values()), float(attribution.r2[h]), norm2**0.5
                ),
            )
        )
    return fits


def _families(basis: tuple[Component, ...]) -> set[str]:
    return {family for component in basis for family in component.families}
