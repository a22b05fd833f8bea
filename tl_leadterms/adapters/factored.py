"""Exact algebra on vocabulary-space maps, dense or factored, never materialising a product.

A *map* is either a dense tensor ``[..., n, m]`` or a TransformerLens
:class:`~transformer_lens.FactoredMatrix` ``A @ B`` with ``A`` ``[..., n, d]`` and ``B``
``[..., d, m]``; leading dimensions (heads, layers) are batch dimensions. Every function here
works on both kinds, batched over the leading dimensions, and never forms the ``[n, m]`` product
of a factored map (docs/math.md#fast-algebra):

- ``⟨AB, S⟩ = Σ (AᵀS) ⊙ B``                      cost O(n·m·d)
- ``⟨A₁B₁, A₂B₂⟩ = Σ (A₁ᵀA₂) ⊙ (B₁B₂ᵀ)``         cost O((n + m)·d₁·d₂)
- ``‖AB‖² = Σ (AᵀA) ⊙ (BBᵀ)``                    cost O((n + m)·d²)

Inner products and norms are accumulated in float64 (a dense statistic is converted a block of
rows at a time, so memory stays bounded) and returned in float64 on the inputs' device.

Example:
    >>> import torch
    >>> from transformer_lens import FactoredMatrix
    >>> from tl_leadterms.adapters import factored
    >>> g = torch.Generator().manual_seed(0)
    >>> A, B = torch.randn(2, 5, 3, generator=g), torch.randn(2, 3, 4, generator=g)
    >>> M = FactoredMatrix(A, B)                      # two heads, each a 5x4 map of rank 3
    >>> S = torch.randn(5, 4, generator=g)
    >>> torch.allclose(factored.inner(M, S), (M.AB * S).sum((-2, -1)).double())
    True
    >>> torch.allclose(factored.sq_norm(M), (M.AB**2).sum((-2, -1)).double())
    True
    >>> factored.sum_heads(M).A.shape                 # heads concatenated along the inner dim
    torch.Size([5, 6])
"""

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import FactoredMatrix

from tl_leadterms.errors import LeadTermsError

__all__ = [
    "Map",
    "cosine",
    "inner",
    "inner_maps",
    "materialise",
    "mean_heads",
    "norm",
    "restrict",
    "sq_norm",
    "sum_heads",
]

Map = Float[Tensor, "*batch n m"] | FactoredMatrix
"""A vocabulary-space map: a dense tensor or a FactoredMatrix, with optional leading dims."""
# the second map of a pair: same [n, m], its own (broadcastable) leading dims
_Map2 = Float[Tensor, "*batch2 n m"] | FactoredMatrix
# a map derived from another one (rows, cols or heads changed)
_NewMap = Float[Tensor, "*new_batch new_n new_m"] | FactoredMatrix

# at most this many float64 elements of a dense statistic are converted at once
_BLOCK_ELEMENTS = 1 << 24
_ACC = torch.float64


def _check_map(name: str, M: object) -> None:
    if isinstance(M, FactoredMatrix):
        return
    if not isinstance(M, Tensor):
        raise LeadTermsError(
            f"{name} must be a torch.Tensor or a transformer_lens FactoredMatrix, got "
            f"{type(M).__name__}"
        )
    if M.ndim < 2 or not M.is_floating_point():
        raise LeadTermsError(
            f"{name} must be a floating tensor with at least 2 dims [..., n, m], got dtype "
            f"{M.dtype} and shape {tuple(M.shape)}"
        )


def _shape(M: object) -> tuple[int, ...]:
    return tuple(M.shape)


def _check_same_matrix_shape(M1: object, M2: object) -> None:
    if _shape(M1)[-2:] != _shape(M2)[-2:]:
        raise LeadTermsError(
            f"the maps have different [n, m] shapes {_shape(M1)[-2:]} and {_shape(M2)[-2:]}; "
            "restrict them to the same rows and columns first (factored.restrict)"
        )
    try:
        torch.broadcast_shapes(_shape(M1)[:-2], _shape(M2)[:-2])
    except RuntimeError as err:
        raise LeadTermsError(
            f"the leading (batch) dims {_shape(M1)[:-2]} and {_shape(M2)[:-2]} do not broadcast"
        ) from err


def _row_blocks(n: int, m: int) -> list[slice]:
    step = max(1, _BLOCK_ELEMENTS // max(1, m))
    return [slice(i, min(n, i + step)) for i in range(0, n, step)]


def _dense_inner(D1: Tensor, D2: Tensor) -> Tensor:
    """Σ D1 ⊙ D2 over the last two dims, in float64, a block of rows at a time."""
    n, m = D1.shape[-2], D1.shape[-1]
    lead = torch.broadcast_shapes(D1.shape[:-2], D2.shape[:-2])
    out = torch.zeros(lead, dtype=_ACC, device=D1.device)
    for rows in _row_blocks(n, m):
        block1 = D1[..., rows, :].to(_ACC)
        block2 = D2[..., rows, :].to(device=D1.device, dtype=_ACC)
        out = out + (block1 * block2).sum((-2, -1))
    return out


def _factored_dense_inner(F: FactoredMatrix, D: Tensor) -> Tensor:
    """⟨AB, D⟩ = Σ (AᵀD) ⊙ B, accumulating AᵀD over blocks of rows of D."""
    A = F.A.to(_ACC)
    B = F.B.to(device=A.device, dtype=_ACC)
    n, m = D.shape[-2], D.shape[-1]
    AtD = None
    for rows in _row_blocks(n, m):
        part = A[..., rows, :].transpose(-1, -2) @ D[..., rows, :].to(device=A.device, dtype=_ACC)
        AtD = part if AtD is None else AtD + part
    return (AtD * B).sum((-2, -1))


def inner(M: Map, S: Float[Tensor, "*batch2 n m"]) -> Float[Tensor, "..."]:
    """Frobenius inner product ``⟨M, S⟩ = Σ_ij M_ij S_ij`` with a dense statistic ``S``.

    ``S`` is usually ``[n, m]`` and broadcasts against the leading dims of ``M``. For a factored
    ``M = A B`` this costs O(n·m·d) and never forms ``A B``. Returns float64.

    Example:
        >>> import torch
        >>> from tl_leadterms.adapters.factored import inner
        >>> inner(torch.ones(3, 2, 2), torch.eye(2))
        tensor([2., 2., 2.], dtype=torch.float64)
    """
    _check_map("M", M)
    _check_map("S", S)
    if isinstance(S, FactoredMatrix):
        raise LeadTermsError("inner takes a dense statistic S; use inner_maps for two maps")
    _check_same_matrix_shape(M, S)
    if isinstance(M, FactoredMatrix):
        return _factored_dense_inner(M, S)
    return _dense_inner(M, S)


def inner_maps(M1: Map, M2: _Map2) -> Float[Tensor, "..."]:
    """Frobenius inner product ``⟨M1, M2⟩`` of two maps of either kind (float64).

    Two factored maps cost O((n + m)·d₁·d₂) via ``Σ (A₁ᵀA₂) ⊙ (B₁B₂ᵀ)``.
    """
    _check_map("M1", M1)
    _check_map("M2", M2)
    _check_same_matrix_shape(M1, M2)
    f1, f2 = isinstance(M1, FactoredMatrix), isinstance(M2, FactoredMatrix)
    if f1 and f2:
        A1, B1 = M1.A.to(_ACC), M1.B.to(_ACC)
        A2 = M2.A.to(device=A1.device, dtype=_ACC)
        B2 = M2.B.to(device=A1.device, dtype=_ACC)
        return ((A1.transpose(-1, -2) @ A2) * (B1 @ B2.transpose(-1, -2))).sum((-2, -1))
    if f1:
        return _factored_dense_inner(M1, M2)
    if f2:
        return _factored_dense_inner(M2, M1)
    return _dense_inner(M1, M2)


def sq_norm(M: Map) -> Float[Tensor, "*batch"]:
    """Squared Frobenius norm ``‖M‖²`` (float64); factored: ``Σ (AᵀA) ⊙ (BBᵀ)``."""
    _check_map("M", M)
    if isinstance(M, FactoredMatrix):
        A, B = M.A.to(_ACC), M.B.to(_ACC)
        gram = ((A.transpose(-1, -2) @ A) * (B @ B.transpose(-1, -2))).sum((-2, -1))
        return gram.clamp(min=0.0)
    return _dense_inner(M, M)


def norm(M: Map) -> Float[Tensor, "*batch"]:
    """Frobenius norm ``‖M‖`` (float64)."""
    return sq_norm(M).sqrt()


def cosine(M: Map, S: _Map2) -> Float[Tensor, "..."]:
    """Flattened Frobenius cosine ``⟨M, S⟩ / (‖M‖ ‖S‖)`` (docs/math.md#agreement), float64.

    ``S`` may be a dense statistic or another map. Where either norm is 0 the cosine is defined
    as 0 (not NaN): a zero map explains nothing and is explained by nothing. Rounding is
    clipped to ``[-1, 1]``.

    Example:
        >>> import torch
        >>> from tl_leadterms.adapters.factored import cosine
        >>> cosine(torch.eye(3), 2 * torch.eye(3)).item()
        1.0
        >>> cosine(torch.zeros(3, 3), torch.eye(3)).item()
        0.0
    """
    dot = inner_maps(M, S)
    denom = (sq_norm(M) * sq_norm(S).to(dot.device)).sqrt()
    ratio = dot / torch.where(denom > 0, denom, 1.0)
    return torch.where(denom > 0, ratio.clamp(-1.0, 1.0), 0.0)


def restrict(
    M: Map, rows: Int[Tensor, " r"] | None = None, cols: Int[Tensor, " c"] | None = None
) -> _NewMap:
    """Keep the given rows and columns (token ids) of ``M``; a factored map stays factored.

    Example:
        >>> import torch
        >>> from tl_leadterms.adapters.factored import restrict
        >>> restrict(torch.arange(12.).reshape(3, 4), torch.tensor([2]), torch.tensor([0, 3]))
        tensor([[ 8., 11.]])
    """
    _check_map("M", M)
    n, m = _shape(M)[-2:]
    for name, index, size in (("rows", rows, n), ("cols", cols, m)):
        if index is None:
            continue
        if index.ndim != 1 or index.is_floating_point():
            raise LeadTermsError(f"{name} must be a 1-d integer tensor of token ids")
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= size):
            raise LeadTermsError(
                f"{name} holds ids outside 0..{size - 1} (min {int(index.min())}, max "
                f"{int(index.max())}); the map has {size} {name}"
            )
    if isinstance(M, FactoredMatrix):
        A, B = M.A, M.B
        if rows is not None:
            A = A.index_select(-2, rows.to(A.device))
        if cols is not None:
            B = B.index_select(-1, cols.to(B.device))
        return FactoredMatrix(A, B)
    if rows is not None:
        M = M.index_select(-2, rows.to(M.device))
    if cols is not None:
        M = M.index_select(-1, cols.to(M.device))
    return M


def _combine_heads(M: Map, scale: float | None) -> _NewMap:
    _check_map("M", M)
    if len(_shape(M)) < 3:
        raise LeadTermsError(
            f"the map has shape {_shape(M)} and no head dim to combine; expected "
            "[n_heads, ..., n, m]"
        )
    n_heads = _shape(M)[0]
    if isinstance(M, FactoredMatrix):
        A, B = M.A, M.B
        # [h, *rest, n, d] -> [*rest, n, h*d] and [h, *rest, d, m] -> [*rest, h*d, m]
        A = A.movedim(0, -2).flatten(-2, -1)
        B = B.movedim(0, -3).flatten(-3, -2)
        if scale is not None:
            A = A * (scale / n_heads)
        return FactoredMatrix(A, B)
    return M.mean(0) if scale is not None else M.sum(0)


def sum_heads(M: Map) -> _NewMap:
    """``Σ_h M[h]`` over the head dim (dim 0); factored maps concatenate their factors."""
    return _combine_heads(M, None)


def mean_heads(M: Map) -> _NewMap:
    """``mean_h M[h]`` over the head dim (dim 0); factored maps concatenate their factors."""
    return _combine_heads(M, 1.0)


def materialise(M: Map) -> Float[Tensor, "*batch n m"]:
    """The dense tensor of a map (``A @ B`` for a factored one); dense maps come back as is."""
    _check_map("M", M)
    return M.AB if isinstance(M, FactoredMatrix) else M
