"""The common component of a token-token map: how much of a cosine every token shares.

A map ``M`` (rows and columns indexed by the kept tokens: ``n × m``) is compared with its
leading term ``T`` by the Frobenius cosine. A part of ``M`` may not depend on which token it
is about at all: a vector ``v`` added to every row (``1vᵀ``, each input token writes the same
thing) or to every column (``w1ᵀ``). Centring over tokens on both axes removes exactly that,

    M° = H_n M H_m,      H_n = I − 11ᵀ/n   (the double-centred map),

and splits the numerator of the cosine into two parts that add up (``H`` is an orthogonal
projection, so ``⟨M, T⟩ = ⟨M°, T°⟩ + ⟨M − M°, T − T°⟩``):

* ``specific = ⟨M°, T°⟩ / (‖M°‖ ‖T°‖)``: the cosine of the token-specific parts;
* ``common_share = |c| / (|s| + |c|)`` with ``s = ⟨M°, T°⟩`` and ``c = ⟨M, T⟩ − s``: the share
  of the raw cosine's numerator carried by the common rows and columns, in ``[0, 1]`` (0: none
  of it; 1: all of it; NaN only when both parts are 0). The two parts are signed: where they
  point against each other, ``1 − s/⟨M, T⟩`` (the share of their sum) leaves ``[0, 1]``
  without bound as the sum nears 0 (−1.48 and 3.48 were printed), so the share is of their
  sizes. Where both have the sign of the sum, the two readings agree.

Nothing is materialised: ``⟨M°, T°⟩ = ⟨M°, T⟩`` and a factored ``M = AB`` has
``M° = (H A)(B H)``; a :class:`~tl_leadterms.adapters.sandwich.Sandwich` ``L·A_h·B_h·R``
needs only rank-one corrections of its cached projection ``Lᵀ T Rᵀ`` and Gram matrices, and
``‖T°‖² = ‖T‖² − ‖T1‖²/m − ‖1ᵀT‖²/n + (1ᵀT1)²/(nm)``.

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

import torch
from torch import Tensor
from transformer_lens import FactoredMatrix

from tl_leadterms.adapters import factored
from tl_leadterms.adapters.sandwich import Sandwich
from tl_leadterms.analyses.decompose.fit import BasisCache, Projections, target_terms
from tl_leadterms.theory import Term

__all__ = ["COMMON_COLUMNS", "common_share", "dense_parts", "map_parts", "target_terms"]

#: what :func:`~tl_leadterms.decompose` adds to each token-token row
COMMON_COLUMNS = ("specific", "common_share")


def _ratio(num: Tensor, den: Tensor) -> Tensor:
    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), math.nan)


def common_share(specific: Tensor, common: Tensor) -> Tensor:
    """``|common| / (|specific| + |common|)`` of two signed parts of a numerator: in
    ``[0, 1]``, NaN where both are 0 (the module docstring).

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
