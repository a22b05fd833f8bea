"""Fit one vocabulary-space map (or a stack of per-head maps) onto a basis of corpus statistics.

Everything here works from inner products only (:mod:`tl_leadterms.adapters.factored`), so a
factored map is never materialised. For a map ``M`` and basis ``T_1..T_n`` with Gram matrix
``G_ij = ⟨T_i, T_j⟩`` and ``b_i = ⟨T_i, M⟩``:

- cosine with the leading term ``T_0``: ``b_0 / (‖M‖ ‖T_0‖)``;
- projection coefficient ``a = b_0 / ‖T_0‖²`` (the ``c`` of ``M ≈ c·T_0``);
- least squares ``β = argmin ‖M − Σ β_i T_i‖``; share of component ``i`` is
  ``β_i b_i / ‖M‖²``. The shares add up to the explained fraction ``1 − ‖r‖²/‖M‖²`` exactly;
  with strongly correlated components an individual share can be negative.
"""

import math
import weakref
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from tl_leadterms.adapters import factored
from tl_leadterms.adapters.sandwich import Sandwich, project
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import FAMILIES, Component, Term

__all__ = ["BasisCache", "MapFit", "Projections", "fit_map"]


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

    def _memo(self, key: tuple, build) -> Tensor:
        if key not in self._held:
            self._held[key] = build()
        return self._held[key]

    def restrict(self, s: Sandwich) -> Sandwich:
        if self.kept is None:
            return s
        left = self._memo(("rows", _key(s.left)), lambda: s.left.index_select(0, self.kept))
        right = self._memo(("cols", _key(s.right)), lambda: s.right.index_select(1, self.kept))
        self._held[("src", _key(s.left))], self._held[("src", _key(s.right))] = s.left, s.right
        return Sandwich(left, s.A, s.B, right)

    def norms(self, s: Sandwich) -> Tensor:
        GL = self._memo(("GL", _key(s.left)), lambda: s.left.double().T @ s.left.double())
        GR = self._memo(("GR", _key(s.right)), lambda: s.right.double() @ s.right.double().T)
        return s.sq_norm(GL, GR)

    def inner(self, s: Sandwich, component: Component) -> Tensor:
        key = ("T", component.formula, _key(s.left), _key(s.right))
        P = self._memo(key, lambda: project(self.cache.map(component), s.left, s.right))
        return s.inner_projected(P)


@dataclass
class MapFit:
    """The fit of one map (one head, or one head-combined layer)."""

    cosine: float
    projection: float
    norm: float
    shares: dict[str, float]
    family_shares: dict[str, float]
    remainder: float


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
    lead, basis = 0, term.basis
    if isinstance(M, Sandwich):
        gram = cache.gram(term)
        b = torch.stack([projections.inner(M, c).cpu() for c in basis], dim=-1)
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
    beta = _lstsq(gram, b)
    residual = sq - 2 * (beta * b).sum(-1) + ((beta @ gram) * beta).sum(-1)
    fits = []
    for h in range(b.shape[0]):
        norm2, lead_sq = float(sq[h]), float(gram[lead, lead])
        denominator = (norm2 * lead_sq) ** 0.5
        cosine = float(b[h, lead]) / denominator if denominator > 0 else math.nan
        shares = {c.name: float(beta[h, i] * b[h, i]) / norm2 if norm2 > 0 else 0.0
                  for i, c in enumerate(basis)}  # fmt: skip
        families = dict.fromkeys(FAMILIES, 0.0)
        for component in basis:
            for family in component.families:
                families[family] += shares[component.name] / len(component.families)
        fits.append(
            MapFit(
                cosine=cosine if math.isnan(cosine) else max(-1.0, min(1.0, cosine)),
                projection=float(b[h, lead]) / lead_sq if lead_sq > 0 else 0.0,
                norm=norm2**0.5,
                shares=shares,
                family_shares={f: v for f, v in families.items() if f in _families(basis)},
                remainder=max(0.0, float(residual[h]) / norm2) if norm2 > 0 else 1.0,
            )
        )
    return fits


def _families(basis: tuple[Component, ...]) -> set[str]:
    return {family for component in basis for family in component.families}
