"""Fit one vocabulary-space map (or a stack of per-head maps) onto a basis of corpus statistics.

Everything here works from inner products only (:mod:`tl_leadterms.adapters.factored`), so a
factored map is never materialised: the cosine with the leading term, the projection
coefficient, the least-squares ``R²``, its exact Shapley shares (:func:`shapley`), the
character rule (:func:`character`) and the common component of a cosine (:func:`map_parts`).
The formulas are in docs/guides/decompose.md#fit.

Example (two orthogonal components mixed 3:1 in amplitude, so 9:1 in variance):

>>> import torch
>>> G = torch.eye(2, dtype=torch.float64)
>>> b = torch.tensor([[3.0, 1.0]], dtype=torch.float64)   # M = 3·T_1 + 1·T_2
>>> a = shapley(G, b, torch.tensor([10.0], dtype=torch.float64))
>>> [round(v, 6) for v in a.shapley[0].tolist()], round(float(a.r2[0]), 6)
([0.9, 0.1], 1.0)

Example:
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> T = torch.randn(6, 6, generator=g, dtype=torch.float64)
    >>> common = torch.ones(6, 1, dtype=torch.float64) @ torch.randn(1, 6, generator=g).double()
    >>> specific, share = dense_parts(torch.stack([T, T + 50 * common]), T)
    >>> [round(v, 6) for v in specific.tolist()]  # a common row changes nothing specific
    [1.0, 1.0]
    >>> round(share[0].item(), 4)  # T's own row and column means carry part of ⟨T, T⟩
    0.3118
"""

import math
import weakref
from dataclasses import dataclass
from itertools import combinations
from typing import Any, ClassVar

import torch
from torch import Tensor
from transformer_lens import FactoredMatrix

from tl_leadterms.adapters import factored
from tl_leadterms.adapters.sandwich import Sandwich, project
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import FAMILIES, Component, Term

__all__ = [
    "COMMON_COLUMNS",
    "MARGIN",
    "R2_FLOOR",
    "Attribution",
    "BasisCache",
    "MapFit",
    "Projections",
    "character",
    "common_share",
    "dense_parts",
    "fit_map",
    "fits_from_products",
    "lead_cosines",
    "map_parts",
    "permuted_lead_inner",
    "shapley",
    "subset_r2",
    "target_terms",
]

R2_FLOOR = 0.1  # below this explained fraction a weight is "unexplained"
MARGIN = 0.2  # the top Shapley value must lead the runner-up by this fraction of R²


@dataclass(frozen=True)
class Attribution:
    """Shapley values of R² per head: ``shapley``, ``unique``, ``shared`` are ``[h, n]``."""

    r2: Tensor  # [h]
    shapley: Tensor  # [h, n]
    unique: Tensor  # [h, n]

    @property
    def shared(self) -> Tensor:
        return self.shapley - self.unique


def subset_r2(gram: Tensor, b: Tensor, sq: Tensor) -> dict[int, Tensor]:
    """``R²(S)`` for every subset ``S`` (a bitmask) of the components, per head (``[h]``).

    Columns are scaled to unit norm before the pseudo-inverse (relative tolerance 1e-10), so
    components of very different magnitudes are handled alike; a zero component adds nothing.
    """
    gram, b, sq = gram.double(), b.double(), sq.double()
    n = gram.shape[0]
    scale = gram.diagonal().clamp(min=0).sqrt()
    usable = [i for i in range(n) if scale[i] > 0]
    safe_sq = torch.where(sq > 0, sq, torch.ones_like(sq))
    out = {0: torch.zeros_like(sq)}
    for size in range(1, n + 1):
        for subset in combinations(range(n), size):
            mask = sum(1 << i for i in subset)
            idx = [i for i in subset if i in usable]
            if not idx:
                out[mask] = torch.zeros_like(sq)
                continue
            s = scale[idx]
            G = gram[idx][:, idx] / (s[:, None] * s[None, :])
            rhs = b[:, idx] / s
            inv = torch.linalg.pinv(G, rtol=1e-10, hermitian=True)
            value = ((rhs @ inv) * rhs).sum(-1) / safe_sq
            out[mask] = torch.where(sq > 0, value, torch.zeros_like(value))
    return out


def shapley(gram: Tensor, b: Tensor, sq: Tensor) -> Attribution:
    """Exact Shapley values of ``R²`` over the components (docs/guides/decompose.md#shapley).

    Args:
        gram: ``[n, n]`` Gram matrix of the basis.
        b: ``[h, n]`` inner products of each head's map with each component.
        sq: ``[h]`` squared norms of the maps.
    """
    n = gram.shape[0]
    r2 = subset_r2(gram, b, sq)
    full = (1 << n) - 1
    values = torch.zeros(b.shape[0], n, dtype=torch.float64)
    unique = torch.zeros_like(values)
    for i in range(n):
        bit = 1 << i
        for mask, value in r2.items():
            if mask & bit:
                continue
            size = bin(mask).count("1")
            weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            values[:, i] += weight * (r2[mask | bit] - value)
        unique[:, i] = r2[full] - r2[full & ~bit]
    return Attribution(r2=r2[full], shapley=values, unique=unique)


def character(names: list[str], values: list[float], r2: float, norm: float) -> str:
    """The label of one fitted map from its Shapley values (docs/guides/decompose.md#shapley)."""
    if not norm > 0:
        return "zero"
    if not r2 >= R2_FLOOR:
        return "unexplained"
    order = sorted(range(len(values)), key=lambda i: values[i], reverse=True)
    top = values[order[0]]
    second = values[order[1]] if len(order) > 1 else 0.0
    if top - second >= MARGIN * r2:
        return f"{names[order[0]]}-like"
    return "mixed"


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
    character: str  # see character() above


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


#: what :func:`~tl_leadterms.decompose` adds to each token-token row
COMMON_COLUMNS = ("specific", "common_share")


def _ratio(num: Tensor, den: Tensor) -> Tensor:
    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), math.nan)


def common_share(specific: Tensor, common: Tensor) -> Tensor:
    """``|common| / (|specific| + |common|)`` of two signed parts of a numerator: in
    ``[0, 1]``, NaN where both are 0 (docs/guides/decompose.md#common-component).

    >>> common_share(torch.tensor([1.0, -1.0, 0.0]), torch.tensor([3.0, 2.0, 0.0])).tolist()
    [0.75, 0.6666666865348816, nan]
    """
    return _ratio(common.abs(), specific.abs() + common.abs())


def _finish(inner_c: Tensor, norm2_c: Tensor, inner_raw: Tensor, target_c2: float):
    specific = _ratio(inner_c, (norm2_c.clamp_min(0) * target_c2).sqrt()).clamp(-1.0, 1.0)
    return specific, common_share(inner_c, inner_raw - inner_c)


def dense_parts(M: Tensor, T: Tensor, inner_raw: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``specific`` and ``common_share`` (``[h]`` each) of dense maps ``[h, n, m]`` against ``T``
    (``inner_raw``: ``⟨M_h, T⟩`` when already known)."""
    M = M.double()
    centred = M - M.mean(-1, keepdim=True) - M.mean(-2, keepdim=True) + M.mean((-2, -1), True)
    T = T.to(M.device).double()
    *_, target_c2 = target_terms(T)
    raw = factored.inner(M, T) if inner_raw is None else inner_raw.to(M.device)
    return _finish(factored.inner(centred, T), factored.sq_norm(centred), raw, target_c2)


def _factored_parts(M: FactoredMatrix, T: Tensor, inner_raw: Tensor):
    A, B = M.A.double(), M.B.double()
    centred = FactoredMatrix(A - A.mean(-2, keepdim=True), B - B.mean(-1, keepdim=True))
    *_, target_c2 = target_terms(T)
    return _finish(factored.inner(centred, T).cpu(), factored.sq_norm(centred).cpu(),
                   inner_raw, target_c2)  # fmt: skip


def _sandwich_parts(s: Sandwich, t: Term, cache: BasisCache, projections: Projections,
                    inner_raw: Tensor):  # fmt: skip
    """``L°ᵀ T R°ᵀ = Lᵀ T° Rᵀ`` from the cached projection, ``L°ᵀL°``, ``R°R°ᵀ`` from the Grams."""
    rows, cols, total, _, target_c2 = projections.target_sums(t.target)
    L, R = s.left.double(), s.right.double()
    n, m = L.shape[0], R.shape[1]
    ones_l, ones_r = L.sum(0), R.sum(1)  # Lᵀ1, R1
    dev = L.device
    P = projections.projected(s, t.target).to(dev)
    P_c = (P - torch.outer(L.T @ rows.to(dev), ones_r) / m
           - torch.outer(ones_l, R @ cols.to(dev)) / n
           + total * torch.outer(ones_l, ones_r) / (n * m))  # fmt: skip
    GL, GR = projections.grams(s)
    GL_c = GL.to(dev) - torch.outer(ones_l, ones_l) / n
    GR_c = GR.to(dev) - torch.outer(ones_r, ones_r) / m
    inner_c = s.inner_projected(P_c).cpu()
    return _finish(inner_c, s.sq_norm(GL_c, GR_c).cpu(), inner_raw, target_c2)


def map_parts(M, t: Term, cache: BasisCache, projections: Projections | None,
              inner_raw: Tensor) -> tuple[Tensor, Tensor]:  # fmt: skip
    """``specific`` and ``common_share`` per head of the maps :func:`decompose` fits.

    ``inner_raw`` holds ``⟨M_h, T⟩`` (already computed by the fit). A vector weight (``P``,
    indexed by offset) has no token axis: NaN.
    """
    inner_raw = inner_raw.double().cpu()
    if t.vector:
        nan = torch.full_like(inner_raw, math.nan)
        return nan, nan.clone()
    if isinstance(M, Sandwich):
        return _sandwich_parts(M, t, cache, projections, inner_raw)
    T = cache.map(t.target)
    if isinstance(M, FactoredMatrix):
        return _factored_parts(M, T.to(M.A.device), inner_raw)
    specific, share = dense_parts(M, T, inner_raw)
    return specific.cpu(), share.cpu()
