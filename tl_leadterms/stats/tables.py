"""Flat pair tables: the layout of a window's causal pairs, flat codes, padded tables, backends.

A ``[k, k]`` statistic is accumulated in a flat ``k·k + 1`` table. Pair (row ``i``, column ``j``)
has code ``i·k + j``; code ``k·k`` (the pad slot) collects every pair that touches a dropped token,
so restricted vocabularies need no masks. Positions are 0-based: the paper's position ``t`` is
``i + 1``.
"""

import torch

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.vocab import KeptVocab

__all__ = [
    "BACKENDS",
    "PairLayout",
    "add_counts",
    "as_numpy",
    "code_dtype",
    "flat_parts",
    "kernels",
    "padded_flat",
    "padded_square",
    "padded_view",
    "pair_codes",
    "resolve_backend",
]


class PairLayout:
    """Index arrays of the causal (query, key) pairs of a window of ``n_ctx`` positions.

    ``query[p]``, ``key[p]`` are 0-based positions of pair ``p`` (row-major lower triangle),
    ``inv_t[p] = 1/(query[p] + 1)`` is the uniform attention weight, ``offset[p] = query - key``,
    and ``tail[m] = Σ_{t >= m+1} 1/t`` is the total weight position ``m`` receives as a key.
    """

    def __init__(
        self, n_ctx: int, dtype: torch.dtype, device: torch.device, code_dtype: torch.dtype
    ) -> None:
        self.n_ctx = n_ctx
        q, k = torch.tril_indices(n_ctx, n_ctx, device=device)
        self.query, self.key = q.to(code_dtype), k.to(code_dtype)
        self.offset = q - k
        inv = 1.0 / torch.arange(1, n_ctx + 1, dtype=torch.float64, device=device)
        self.inv_pos = inv.to(dtype)  # 1/t for t = 1..T
        self.inv_t = self.inv_pos[q]
        self.tail = inv.flip(0).cumsum(0).flip(0)  # float64: feeds the small μ vector
        self._lengths = torch.arange(1, n_ctx + 1, device=device)
        self._tiled: dict[str, torch.Tensor] = {}

    def _tile(self, name: str, values: torch.Tensor, b: int, flat: bool) -> torch.Tensor:
        """``values`` repeated for ``b`` windows, cached (the same batch size recurs)."""
        cached = self._tiled.get(name)
        if cached is None or cached.shape[0] != (b * values.numel() if flat else b):
            cached = values.repeat(b) if flat else values.expand(b, -1).contiguous()
            self._tiled[name] = cached
        return cached

    def row_lengths(self, b: int) -> torch.Tensor:
        """``[b, T]`` number of keys of each query (1..T), for segment sums over pairs."""
        return self._tile("lengths", self._lengths, b, flat=False)

    def repeated_inv_t(self, b: int) -> torch.Tensor:
        """``inv_t`` tiled ``b`` times, ``[b * n_pairs]``."""
        return self._tile("inv_t", self.inv_t, b, flat=True)

    def repeated_tail(self, b: int) -> torch.Tensor:
        """``tail`` tiled ``b`` times, ``[b * T]``."""
        return self._tile("tail", self.tail, b, flat=True)


def code_dtype(vocab: KeptVocab) -> torch.dtype:
    """int32 flat codes while they fit (half the memory traffic), else int64.

    A pair of two dropped tokens adds two sentinels of ``k·k`` before the clamp, so the codes
    reach ``2·k·k``.
    """
    return torch.int32 if 2 * vocab.k * vocab.k < 2**31 else torch.int64


def flat_parts(idx: torch.Tensor, vocab: KeptVocab) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column parts of flat table codes ``row * k + col`` (dropped -> ``k*k``)."""
    k = vocab.k
    idx = idx.to(code_dtype(vocab))
    if not vocab.restricted:
        return idx * k, idx
    dropped = idx == k
    sentinel = torch.full_like(idx, k * k)
    return torch.where(dropped, sentinel, idx * k), torch.where(dropped, sentinel, idx)


def pair_codes(
    rows: torch.Tensor, key_part: torch.Tensor, layout: PairLayout, vocab: KeptVocab
) -> torch.Tensor:
    """Flat codes ``rows[:, query] + key_part`` for every causal pair, ``[b * n_pairs]``.

    ``key_part`` is ``cols[:, key]`` (shared by the codes of one batch).
    """
    codes = rows.index_select(1, layout.query).add_(key_part)
    if vocab.restricted:
        codes.clamp_(max=vocab.k * vocab.k)
    return codes.view(-1)


BACKENDS = ("auto", "numba", "torch")


def kernels():
    """The fused numba kernels (imported on first use: compiling them takes a few seconds)."""
    from tl_leadterms.stats import kernels as module

    return module


def resolve_backend(backend: str, device: torch.device) -> str:
    """``"numba"`` (fused CPU kernels) or ``"torch"`` (vectorised, any device)."""
    if backend not in BACKENDS:
        raise LeadTermsError(f"backend={backend!r} is not one of {BACKENDS}.")
    if backend == "auto":
        try:
            import numba  # noqa: F401
        except ImportError:  # pragma: no cover - numba is a dependency; degrade gracefully anyway
            return "torch"
        return "numba" if device.type == "cpu" else "torch"
    if backend == "numba" and device.type != "cpu":
        raise LeadTermsError(
            f"backend='numba' runs on the CPU, but device={device}; use backend='torch' or 'auto'."
        )
    return backend


def as_numpy(t: torch.Tensor):
    """A numpy view of a CPU tensor (a copy only if it is not contiguous)."""
    return t.contiguous().numpy()


def padded_square(k: int, dtype: torch.dtype, device, *, zero: bool = True) -> torch.Tensor:
    """A zeroed ``[k, k]`` view of a flat ``k·k + 1`` table (the pad slot, zero, after its
    entries; see the module). ``zero=False`` leaves the ``[k, k]`` entries unset, for a caller
    that writes every one of them (a fill of a fresh table costs as much as its page faults)."""
    flat = torch.empty(k * k + 1, dtype=dtype, device=device)
    if zero:
        flat.zero_()
    else:
        flat[-1] = 0
    view = padded_view(flat, k)
    view._tl_leadterms_padded = True  # padded_flat trusts only matrices made here
    return view


def padded_view(flat: torch.Tensor, k: int) -> torch.Tensor:
    """The ``[k, k]`` view of a flat ``k·k + 1`` table."""
    return flat[: k * k].view(k, k)


def padded_flat(matrix: torch.Tensor) -> torch.Tensor | None:
    """The flat ``k·k + 1`` table behind a :func:`padded_square` matrix, or None."""
    k = matrix.shape[0]
    if not getattr(matrix, "_tl_leadterms_padded", False):
        return None  # the slot after someone else's matrix may hold anything
    if matrix.storage_offset() != 0 or not matrix.is_contiguous():
        return None
    if matrix.untyped_storage().nbytes() < (k * k + 1) * matrix.element_size():
        return None
    flat = torch.empty(0, dtype=matrix.dtype, device=matrix.device)
    flat.set_(matrix.untyped_storage(), 0, (k * k + 1,))
    return flat if flat[-1] == 0 else None


def add_counts(
    codes_a: torch.Tensor, counts_a: torch.Tensor, codes_b: torch.Tensor, counts_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum two sparse count vectors given as (distinct codes, counts)."""
    codes, inverse = torch.unique(torch.cat([codes_a, codes_b]), return_inverse=True)
    counts = torch.zeros_like(codes).index_add_(0, inverse, torch.cat([counts_a, counts_b]))
    return codes, counts
