"""The null and bootstrap draws of :func:`~tl_leadterms.decompose`, near the cost of reading
each map once: the model side of every map is prepared once and met by each relabelling or
resample of the theory; the bigram target stays sparse; a resample's cosines are memoised per
``BlockStats`` and ``BootstrapSpec`` (:meth:`~tl_leadterms.results.bootstrap.Bootstrap.memo`)
and come with ``‖T*‖²`` and ``⟨T̂, T*⟩`` for the row's ``noise_share``
(:class:`Resampled`, :func:`~tl_leadterms.results.intervals.noise_share`). The method is set out
in docs/guides/decompose.md#draws.
"""

import hashlib
import math
from dataclasses import dataclass, field

import torch
from torch import Tensor
from transformer_lens import FactoredMatrix

from tl_leadterms.adapters import factored
from tl_leadterms.adapters.sandwich import Sandwich
from tl_leadterms.analyses.decompose.fit import (
    BasisCache,
    Projections,
    lead_cosines,
    permuted_lead_inner,
)
from tl_leadterms.results.bootstrap import Bootstrap
from tl_leadterms.stats.tables import kernels, resolve_backend
from tl_leadterms.theory import Term

__all__ = ["Resampled", "Scored", "bootstrap_cosines", "null_cosines"]


@dataclass
class Scored:
    """One scored map: its term, the maps' norms ``‖M_h‖`` and, for a dense map, its float64
    model side (built once, on first use)."""

    M: object
    term: Term
    norms: Tensor
    _flat: Tensor | None = field(default=None, repr=False)
    _flat_t: Tensor | None = field(default=None, repr=False)
    _digest: str | None = field(default=None, repr=False)

    @property
    def dense(self) -> bool:
        """Whether the fast path applies: a dense ``[h, k, k]`` token-token map."""
        return isinstance(self.M, Tensor) and not self.term.vector and self.M.dim() == 3

    def flat(self, transposed: bool = False) -> Tensor:
        """``[h, k·k]`` float64 rows of ``M_h`` (``transposed``: of ``M_hᵀ``)."""
        if self._flat is None:
            self._flat = self.M.detach().to(torch.float64).reshape(self.M.shape[0], -1)
        if not transposed:
            return self._flat
        if self._flat_t is None:
            h, k = self.M.shape[0], self.M.shape[-1]
            self._flat_t = self._flat.view(h, k, k).transpose(1, 2).reshape(h, -1)
        return self._flat_t

    def digest(self) -> str:
        """A digest of the map's values, shape and dtype (the bootstrap memo's key)."""
        if self._digest is None:
            h = hashlib.blake2b(digest_size=16)
            for t in _tensors(self.M):
                t = t.detach().cpu().contiguous()
                h.update(f"{tuple(t.shape)}{t.dtype}".encode())
                h.update(t.view(torch.uint8).reshape(-1).numpy() if t.numel() else b"")
            self._digest = h.hexdigest()
        return self._digest


def _tensors(M: object) -> list[Tensor]:
    if isinstance(M, Sandwich):
        return [M.left, M.A, M.B, M.right]
    if isinstance(M, FactoredMatrix):
        return [M.A, M.B]
    return [M]


def _cosines(inner: Tensor, norms: Tensor, t2: float) -> Tensor:
    """``inner / (‖M‖‖T‖)`` as :func:`~.fit.lead_cosines` forms it (NaN where a norm is 0)."""
    denominator = norms.double() * math.sqrt(max(t2, 0.0))
    nan = torch.full_like(inner, math.nan)
    return torch.where(denominator > 0, inner / denominator, nan).clamp(-1.0, 1.0)


def _target(T: Tensor) -> tuple[Tensor, bool]:
    """``(contiguous float64 flat target, whether it pairs with the maps' transposes)``."""
    if not T.is_contiguous() and T.T.is_contiguous():
        return T.T.to(torch.float64).reshape(-1), True
    return T.to(torch.float64).contiguous().reshape(-1), False


# -- the permutation null -------------------------------------------------------------------


def null_cosines(group: list[Scored], cache: BasisCache, perms: Tensor,
                 projections: Projections) -> list[Tensor]:  # fmt: skip
    """``[R, h]`` null cosines of each scored map of ``group`` (maps of one leading term)."""
    dense = [s for s in group if s.dense]
    out = {id(s): _null_general(s, cache, perms, projections) for s in group if not s.dense}
    if dense:
        t = dense[0].term
        inner = permuted_inner(torch.cat([s.flat() for s in dense]), cache.map(t.target), perms)
        t2 = cache.sq_norm(t.target)
        start = 0
        for s in dense:
            h = s.norms.shape[0]
            out[id(s)] = _cosines(inner[:, start : start + h], s.norms, t2)
            start += h
    return [out[id(s)] for s in group]


def _null_general(s: Scored, cache: BasisCache, perms: Tensor, projections) -> Tensor:
    inner = permuted_lead_inner(s.M, s.term, cache, perms, projections)
    if s.term.vector:
        return inner
    return _cosines(inner, s.norms, cache.sq_norm(s.term.target))


def permuted_inner(flat: Tensor, T: Tensor, perms: Tensor) -> Tensor:
    """``[R, n]``: ``⟨M_i, T_π⟩ = ⟨M_i[π][:, π], T⟩`` for each row ``π`` of ``perms`` and each
    row ``M_i`` of ``flat`` (``[n, k·k]`` float64): one gather of ``T`` per draw, shared by
    every map.

    >>> g = torch.Generator().manual_seed(0)
    >>> M, T = torch.randn(4, 4, dtype=torch.float64, generator=g), torch.randn(4, 4, generator=g)
    >>> p = torch.randperm(4, generator=g)
    >>> direct = (M[p][:, p] * T.double()).sum()
    >>> torch.allclose(permuted_inner(M.reshape(1, -1), T, p[None])[0, 0], direct)
    True
    """
    k = T.shape[-1]
    inverse = torch.argsort(perms.to(T.device), dim=1)
    out = torch.empty(perms.shape[0], flat.shape[0], dtype=torch.float64)
    if T.device == flat.device and resolve_backend("auto", flat.device) == "numba":
        # the fused gather-dot: no relabelled copy, the target read once per draw
        target = T.detach().to(torch.float64).contiguous()
        maps = flat.view(-1, k, k)
        kernels().permuted_dots(maps.numpy(), target.numpy(), inverse.contiguous().numpy(),
                                out.numpy())  # fmt: skip
        return out
    target, transposed = _target(T)
    if transposed:  # ⟨M, Xᵀ⟩ = ⟨Mᵀ, X⟩, and (Mᵀ)[π][:, π] = (M[π][:, π])ᵀ
        flat = flat.view(-1, k, k).transpose(1, 2).reshape(flat.shape[0], -1)
    square = target.view(k, k)
    for r, inv in enumerate(inverse):  # two gathers (whole rows, then within rows), one product
        relabelled = square.index_select(0, inv).index_select(1, inv)
        out[r] = (flat @ relabelled.view(-1)).cpu()
    return out


# -- the bootstrap --------------------------------------------------------------------------


@dataclass(frozen=True)
class Resampled:
    """The bootstrap's draws of every scored map, one column per row (the order of
    :meth:`~tl_leadterms.results.bootstrap.Bootstrap.resamples` down the first axis)."""

    #: ``[R (+ extras), rows]``: each row's leading-term cosine on each resample
    draws: Tensor
    #: ``[R (+ extras), rows]``: ``‖T*‖²`` of each row's target on each resample (``P``'s on
    #: the offsets compared)
    star_sq: Tensor
    #: ``[R (+ extras), rows]``: ``⟨T̂, T*⟩``, ``T̂`` the full-corpus target
    cross: Tensor
    #: ``[rows]``: ``‖T̂‖²`` of each row's target (as the cosine compares it)
    target_sq: Tensor


def bootstrap_cosines(scored: list[Scored], boot: Bootstrap,
                      projections: Projections) -> Resampled:  # fmt: skip
    """The leading-term cosines of every scored map on each resample of ``boot``, and where
    each map's target lies on it (:class:`Resampled`; ``projections`` holds the full-corpus
    statistics' cache).

    Resamples already scored for the same map and target (the memo of ``boot``) are read, not
    recomputed; a resample is built only when some map still needs it.
    """
    memo = boot.memo()
    full = projections.cache
    keys = [(s.term.target.formula, s.digest()) for s in scored]
    todo = [i for i, key in enumerate(keys) if key not in memo]
    if todo:
        columns: dict[int, list[tuple[Tensor, Tensor, Tensor]]] = {i: [] for i in todo}
        stacks: dict = {}  # the dense maps of one target, stacked once for every resample
        for resampled in boot.resamples():
            cache = BasisCache(resampled)
            proj = projections.with_cache(cache)
            pending = [scored[i] for i in todo]
            for i, parts in _resample_cosines(pending, cache, full, proj, stacks).items():
                columns[todo[i]].append(parts)
        for i in todo:
            memo[keys[i]] = tuple(torch.stack(parts) for parts in zip(*columns[i], strict=True))
    draws, star_sq, cross = (torch.cat([memo[key][j] for key in keys], dim=1) for j in range(3))
    target_sq = torch.cat([torch.full((s.norms.shape[0],), _target_sq(s, full),
                                      dtype=torch.float64) for s in scored])  # fmt: skip
    return Resampled(draws, star_sq, cross, target_sq)


def _target_sq(s: Scored, full: BasisCache) -> float:
    """``‖T̂‖²`` of a scored map's target, on the part the cosine compares."""
    if s.term.vector:
        return float((_vector_target(s, full) ** 2).sum())
    return full.sq_norm(s.term.target)


def _vector_target(s: Scored, cache: BasisCache) -> Tensor:
    """A vector term's target (``P``'s ``Δ``) on the offsets its map has, in float64."""
    return cache.map(s.term.target).double()[: s.M.shape[-1]]


def _resample_cosines(scored: list[Scored], cache: BasisCache, full: BasisCache,
                      proj: Projections, stacks: dict) -> dict:  # fmt: skip
    """``{index: ([h] cosines, [h] ‖T*‖², [h] ⟨T̂, T*⟩)}`` of the scored maps on one resample's
    statistics (``cache``; ``full``: the full corpus')."""
    out: dict[int, tuple[Tensor, Tensor, Tensor]] = {}
    by_target: dict[str, list[int]] = {}
    placed: dict[tuple, tuple[float, float]] = {}  # a general-path target's, once per resample
    for i, s in enumerate(scored):
        if s.dense:
            by_target.setdefault(s.term.target.formula, []).append(i)
            continue
        cos = lead_cosines(s.M, s.term, cache, s.norms, proj)
        key = (s.term.target.formula, s.M.shape[-1] if s.term.vector else None)
        if key not in placed:
            placed[key] = _placed(s, cache, full)
        out[i] = (cos, *(torch.full_like(cos, x, dtype=torch.float64) for x in placed[key]))
    for formula, members in by_target.items():
        component = scored[members[0]].term.target
        if formula == "B̄":
            inner, t2 = _bigram_inner([scored[i] for i in members], cache, full, stacks)
        else:
            target, transposed = _target(cache.map(component))
            flat = _stacked(stacks, [scored[i] for i in members], formula, transposed, full)
            inner, t2 = flat @ target, float(target @ target)
        cross = float(inner[-1])  # the last row is the full-corpus target: ⟨T̂, T*⟩
        start = 0
        for i in members:
            h = scored[i].norms.shape[0]
            cos = _cosines(inner[start : start + h].cpu(), scored[i].norms, t2)
            out[i] = (cos, torch.full_like(cos, t2), torch.full_like(cos, cross))
            start += h
    return out


def _placed(s: Scored, cache: BasisCache, full: BasisCache) -> tuple[float, float]:
    """``(‖T*‖², ⟨T̂, T*⟩)`` of a general-path map's target from the two caches' maps."""
    if s.term.vector:
        star, hat = _vector_target(s, cache), _vector_target(s, full)
        return float((star * star).sum()), float((hat * star).sum())
    star = cache.map(s.term.target)
    return cache.sq_norm(s.term.target), float(factored.inner_maps(full.map(s.term.target), star))


def _stacked(stacks: dict, members: list[Scored], formula: str, transposed: bool,
             full: BasisCache) -> Tensor:  # fmt: skip
    """``[n + 1, k·k]``: the float64 rows of every member's maps, then the full-corpus target
    in the same layout (stacked once per target)."""
    key = (formula, transposed)
    if key not in stacks:
        hat = full.map(members[0].term.target)
        hat = (hat.T if transposed else hat).to(torch.float64).contiguous().reshape(1, -1)
        stacks[key] = torch.cat([*(s.flat(transposed) for s in members), hat.to(members[0].flat())])
    return stacks[key]


def _bigram_inner(members: list[Scored], cache: BasisCache, full: BasisCache,
                  stacks: dict) -> tuple[Tensor, float]:  # fmt: skip
    """``⟨M_h, B̄⟩`` of every member, then ``⟨B̄_full, B̄⟩``, and ``‖B̄‖²`` from the sparse
    counts (docs/guides/decompose.md#draws)."""
    bigram = cache.stats.bigram
    flat = _stacked(stacks, members, "B̄", False, full)
    k = bigram.k
    values = bigram.values.to(torch.float64)
    shift = bigram.u * bigram.alpha.to(torch.float64)  # [k]: u·α_i, subtracted from row i
    codes = (bigram.rows * k + bigram.cols).to(flat.device)
    if ("B̄ rows",) not in stacks:
        stacks[("B̄ rows",)] = flat.view(flat.shape[0], k, k).sum(-1)  # [n + 1, k]
    row_sums = stacks[("B̄ rows",)]
    inner = flat.index_select(1, codes) @ values - row_sums @ shift
    centred = values - shift[bigram.rows]
    t2 = float((centred * centred - shift[bigram.rows] ** 2).sum() + k * (shift @ shift))
    return inner, t2
