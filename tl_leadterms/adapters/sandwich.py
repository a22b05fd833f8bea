"""Per-head maps that share their outer factors: ``M_h = L · A_h · B_h · R``.

Every query-key and value map of a model with embeddings has this shape: ``L`` is the layer's input
map (``W_E``, restricted to the kept tokens), ``R`` its output map (``W_U`` or ``Lᵀ``) and
``A_h B_h`` a ``d_model × d_model`` core of rank ``d_head`` (``W_V^h W_O^h``, or
``W_Q^h W_K^hᵀ / scale``). Against a dense ``k × k`` statistic ``T``,

    ⟨L A_h B_h R, T⟩ = ⟨A_h B_h, Lᵀ T Rᵀ⟩        ‖L A_h B_h R‖² = Σ (A_hᵀ G_L A_h) ⊙ (B_h G_R B_hᵀ)

with ``G_L = LᵀL`` and ``G_R = R Rᵀ``. The projection ``Lᵀ T Rᵀ`` (``d_model × d_model``,
``O(k²·d_model)``) is shared by every head of every layer that reads through the same ``L`` and
``R``; after it each head costs ``O(d_model²·d_head)`` instead of ``O(k²·d_head)``.

Example:
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> L, R = torch.randn(6, 4, generator=g), torch.randn(4, 5, generator=g)
    >>> s = Sandwich(L, torch.randn(3, 4, 2, generator=g), torch.randn(3, 2, 4, generator=g), R)
    >>> T = torch.randn(6, 5, generator=g, dtype=torch.float64)
    >>> dense = L @ s.A @ s.B @ R
    >>> torch.allclose(s.inner_projected(project(T, L, R)), (dense * T).sum((-2, -1)).double())
    True
    >>> torch.allclose(s.sq_norm(), (dense**2).sum((-2, -1)).double())
    True
    >>> T2 = torch.randn(6, 5, generator=g, dtype=torch.float64)
    >>> many = s.inner_projected_many([project(T, L, R), project(T2, L, R)])
    >>> torch.allclose(many[1], (dense * T2).sum((-2, -1)).double())
    True
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["Sandwich", "project"]

_ACC = torch.float64
_BLOCK_ROWS = 4096
# float64 elements of head cores (or of stacked projections) formed at once: 256 MiB
_CORE_ELEMENTS = 2**25


def project(T: Tensor, left: Tensor, right: Tensor) -> Tensor:
    """``Lᵀ T Rᵀ`` in float64, a block of rows of ``T`` at a time."""
    out = None
    R = right.to(_ACC).T
    for start in range(0, T.shape[0], _BLOCK_ROWS):
        rows = slice(start, start + _BLOCK_ROWS)
        part = left[rows].to(_ACC).T @ (T[rows].to(device=left.device, dtype=_ACC) @ R)
        out = part if out is None else out + part
    return out


@dataclass(frozen=True)
class Sandwich:
    """``M_h = left · A[h] · B[h] · right`` for every head ``h`` (see the module docstring)."""

    left: Tensor  # [n, d]
    A: Tensor  # [h, d, r]
    B: Tensor  # [h, r, e]
    right: Tensor  # [e, m]

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.A.shape[0], self.left.shape[0], self.right.shape[1])

    def restrict(self, rows: Tensor | None, cols: Tensor | None) -> "Sandwich":
        """Keep the given rows and columns (token ids) of every head's map."""
        left = self.left if rows is None else self.left.index_select(0, rows.to(self.left.device))
        right = (
            self.right if cols is None else self.right.index_select(1, cols.to(self.right.device))
        )
        return Sandwich(left, self.A, self.B, right)

    def combined(self, mean: bool) -> "Sandwich":
        """One map for all heads: their sum, or their mean (``mean=True``)."""
        h, d, r = self.A.shape
        A = self.A.transpose(0, 1).reshape(d, h * r)[None]
        B = self.B.reshape(1, h * r, self.B.shape[-1])
        return Sandwich(self.left, A / h if mean else A, B, self.right)

    def sq_norm(self, gram_left: Tensor | None = None, gram_right: Tensor | None = None) -> Tensor:
        """``‖M_h‖²`` per head (float64); pass cached ``LᵀL`` and ``R Rᵀ`` to reuse them."""
        GL = self.left.to(_ACC).T @ self.left.to(_ACC) if gram_left is None else gram_left
        GR = self.right.to(_ACC) @ self.right.to(_ACC).T if gram_right is None else gram_right
        A, B = self.A.to(_ACC), self.B.to(_ACC)
        return ((A.transpose(-1, -2) @ GL @ A) * (B @ GR @ B.transpose(-1, -2))).sum((-2, -1))

    def inner_projected(self, projected: Tensor) -> Tensor:
        """``⟨M_h, T⟩`` per head from ``project(T, left, right)`` (float64)."""
        A, B = self.A.to(_ACC), self.B.to(_ACC)
        return ((A.transpose(-1, -2) @ projected.to(A.device)) * B).sum((-2, -1))

    def inner_projected_many(self, projected: Sequence[Tensor] | Tensor) -> Tensor:
        """``[n, h]``: ``⟨M_h, T_j⟩`` per head for ``n`` projections ``project(T_j, left, right)``
        (a sequence of ``[d, e]``, or one ``[n, d, e]`` tensor, read in place).

        Each head's core ``A_h B_h`` (``d × e``) is formed once and dotted with every projection:
        ``O(h·d·r·e + n·h·d·e)`` in all, against ``O(n·h·d·r·e)`` for ``n`` calls of
        :meth:`inner_projected` (a basis of several maps, or a null's relabelled leading terms).
        Cores and stacked projections are formed a bounded number of elements at a time."""
        A, B = self.A.to(_ACC), self.B.to(_ACC)
        h, d, _ = A.shape
        e = B.shape[-1]
        n = len(projected)
        out = torch.empty(n, h, dtype=_ACC, device=A.device)
        step = max(1, _CORE_ELEMENTS // (d * e))  # heads per core block, projections per stack
        for h0 in range(0, h, step):
            core = (A[h0 : h0 + step] @ B[h0 : h0 + step]).reshape(-1, d * e)
            for j0 in range(0, n, step):
                if isinstance(projected, Tensor):
                    stack = projected[j0 : j0 + step].to(A.device, _ACC).reshape(-1, d * e).T
                else:
                    stack = torch.stack([p.to(device=A.device, dtype=_ACC).reshape(d * e)
                                         for p in projected[j0 : j0 + step]], dim=1)  # fmt: skip
                out[j0 : j0 + step, h0 : h0 + step] = (core @ stack).T
        return out
