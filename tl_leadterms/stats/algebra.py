"""Exact products of the statistics without dense ``V³`` work (MATH.md §5).

The centred bigram map is the sparse pair-frequency matrix minus a rank-one term,
``B̄ = B − u·α·1ᵀ`` (``B[i, j] = #(i, j)/NT``, ``α`` the unigram frequencies), so every product
with ``B̄`` is a sparse-times-dense product plus a rank-one correction. ``Ḡ = B̄ᵀ(B̄Φ̄)`` is built
in column blocks so its only large temporaries are ``[k, block]``.
"""

import warnings

import torch

__all__ = [
    "bigram_dense",
    "bigram_sparse",
    "centred_bigram_times",
    "composed_context",
    "interchangeability",
    "symmetrise_",
]

_BLOCK_BYTES = 1 << 28  # temporaries of one column block of Ḡ


def bigram_sparse(
    pair_codes: torch.Tensor, pair_counts: torch.Tensor, k: int, n_positions: int, dtype
) -> torch.Tensor:
    """Raw pair-frequency matrix ``B = counts/NT`` as a sparse CSR ``[k, k]`` tensor."""
    rows, cols = pair_codes // k, pair_codes % k
    values = pair_counts.to(dtype) / n_positions
    coo = torch.sparse_coo_tensor(
        torch.stack([rows, cols]), values, (k, k), is_coalesced=True, check_invariants=False
    )
    return _to_csr(coo)


def _to_csr(coo: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():  # torch calls sparse CSR "beta" on every conversion
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return coo.to_sparse_csr()


def bigram_dense(
    pair_codes: torch.Tensor,
    pair_counts: torch.Tensor,
    alpha: torch.Tensor,
    k: int,
    n_positions: int,
    centre_vocab: int,
) -> torch.Tensor:
    """Centred bigram ``B̄[i, j] = #(i, j)/NT − α_i/|V|`` as a dense ``[k, k]`` tensor."""
    out = (-alpha / centre_vocab).unsqueeze(1).expand(k, k).contiguous()
    out.view(-1).index_add_(0, pair_codes, pair_counts.to(alpha.dtype) / n_positions)
    return out


def centred_bigram_times(
    b_sparse: torch.Tensor, alpha: torch.Tensor, u: float, m: torch.Tensor
) -> torch.Tensor:
    """``B̄ M = B M − u·α·(1ᵀM)`` for a dense ``[k, n]`` matrix ``M``."""
    out = b_sparse @ m
    out -= u * torch.outer(alpha, m.sum(0))
    return out


def _sparse_t(b: torch.Tensor) -> torch.Tensor:
    return _to_csr(b.to_sparse_coo().t().coalesce())


def interchangeability(
    b_sparse: torch.Tensor, b_dense: torch.Tensor, alpha: torch.Tensor, u: float
):
    """``Σ_B̄ = B̄ᵀB̄ = Bᵀ B̄ − u·1·(αᵀB̄)``, symmetrised to remove rounding asymmetry."""
    sigma = _sparse_t(b_sparse) @ b_dense
    sigma -= u * (alpha @ b_dense).unsqueeze(0)
    return symmetrise_(sigma)


def symmetrise_(m: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """``m ← (m + mᵀ)/2`` in place, block by block (no second ``[k, k]`` matrix)."""
    k = m.shape[0]
    for i in range(0, k, block):
        for j in range(i, k, block):
            upper = m[i : i + block, j : j + block]
            mean = (upper + m[j : j + block, i : i + block].T).mul_(0.5)
            upper.copy_(mean)
            m[j : j + block, i : i + block].copy_(mean.T)
    return m


def composed_context(
    b_sparse: torch.Tensor,
    alpha: torch.Tensor,
    u: float,
    phi: torch.Tensor,
    out: torch.Tensor | None = None,
    progress: bool = False,
) -> torch.Tensor:
    """``Ḡ = Σ_B̄ Φ̄ = B̄ᵀ(B̄Φ̄)`` for a ``[k, k]`` context map ``phi``, written into ``out``.

    With ``M = B̄Φ̄ = BΦ̄ − u·α·(1ᵀΦ̄)`` and ``B̄ᵀM = BᵀM − u·1·(αᵀM)``. Costs ``O(nnz(B)·k)``.
    """
    from tqdm.auto import tqdm

    from tl_leadterms.stats.accumulate import padded_square

    k = phi.shape[0]
    if out is None:  # padded: pass two gathers from it with no copy
        out = padded_square(k, phi.dtype, phi.device)
    bt = _sparse_t(b_sparse)
    block = max(1, min(k, _BLOCK_BYTES // max(1, 2 * k * phi.element_size())))
    starts = range(0, k, block)
    for c0 in tqdm(starts, desc="Ḡ = Σ_B̄ Φ̄", disable=not progress or len(starts) < 4):
        m = centred_bigram_times(b_sparse, alpha, u, phi[:, c0 : c0 + block])
        g = bt @ m
        g -= u * (alpha @ m).unsqueeze(0)
        out[:, c0 : c0 + block] = g
    return out
