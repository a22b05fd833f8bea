"""Exact products with the centred bigram map, without dense ``V³`` work
(docs/math.md#fast-algebra).

``B̄ = B − u·α·1ᵀ``: the sparse pair-frequency matrix ``B[i, j] = #(i, j)/NT`` (at most ``N·T``
non-zeros) minus a rank-one term (``α`` the unigram frequencies, ``u = 1/|V|``). Every product with
``B̄`` is a sparse-times-dense product plus a rank-one correction, and the ``[k, k]`` products
(``Σ_B̄ = B̄ᵀB̄``, ``Ḡ = B̄ᵀ(B̄Φ̄)``) are built column block by column block into their output, with
``[k, block]`` temporaries only."""

import warnings
from functools import cached_property

import torch

from tl_leadterms.progress import progress_bar
from tl_leadterms.stats.tables import as_numpy, kernels, padded_square, resolve_backend

__all__ = ["CentredBigram", "block_columns", "fused_scratch_bytes", "symmetrise_"]

# a [k, width] column block stays in the CPU cache (docs/guides/performance.md#statistics)
_BLOCK_BYTES = 1 << 22
_MIN_BLOCK_COLUMNS = 64  # the inner loop stays long for large vocabularies
_COMPOSED_COLUMNS = 64  # columns per parallel task of the fused Ḡ kernel


def block_columns(k: int, itemsize: int) -> int:
    """Columns of one ``[k, width]`` block of the blockwise products (at most ``k``)."""
    return max(1, min(k, max(_MIN_BLOCK_COLUMNS, _BLOCK_BYTES // max(1, k * itemsize))))


def fused_scratch_bytes(k: int, itemsize: int, threads: int) -> int:
    """Bytes of the fused Ḡ kernel's scratch: two packed ``[k, width]`` blocks per thread."""
    return threads * 2 * k * max(1, min(k, _COMPOSED_COLUMNS)) * itemsize


def _csr(starts: torch.Tensor, columns: torch.Tensor, values: torch.Tensor, k: int) -> torch.Tensor:
    """A ``[k, k]`` CSR tensor from row starts and (row-major, sorted) columns and values."""
    with warnings.catch_warnings():  # torch calls sparse CSR "beta" on every construction
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(starts, columns, values, (k, k), check_invariants=False)


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


class CentredBigram:
    """The centred bigram map ``B̄`` as an operator over its sparse counts.

    Args:
        pair_codes: distinct flat codes ``i·k + j`` of the observed (current, next) pairs,
            sorted ascending.
        pair_counts: their counts.
        unigram_counts: ``[k]`` counts of each token among the input positions.
        n_positions: ``N·T``.
        centre_vocab: ``|V|`` of the centring.
        dtype: float dtype of the results.
        backend: ``"numba"`` (CPU kernel), ``"torch"`` (torch's CSR product, any device) or
            ``"auto"``.
    """

    def __init__(
        self,
        pair_codes: torch.Tensor,
        pair_counts: torch.Tensor,
        unigram_counts: torch.Tensor,
        n_positions: int,
        centre_vocab: int,
        dtype: torch.dtype,
        backend: str = "auto",
    ) -> None:
        self.k = unigram_counts.shape[0]
        self.rows = pair_codes // self.k
        self.cols = pair_codes % self.k
        self.counts = pair_counts
        self.unigram_counts = unigram_counts
        self.n_positions = n_positions
        self.values = pair_counts.to(dtype) / n_positions
        self.alpha = unigram_counts.to(dtype) / n_positions
        self.u = 1.0 / centre_vocab
        self.dtype = dtype
        self.backend = resolve_backend(backend, self.alpha.device)

    @property
    def device(self) -> torch.device:
        return self.alpha.device

    @cached_property
    def sparse(self) -> torch.Tensor:
        """``B`` as a sparse CSR ``[k, k]`` tensor (the codes are sorted: rows ascending, columns
        ascending within a row, so the CSR is built directly, with no sort)."""
        starts = torch.zeros(self.k + 1, dtype=torch.long, device=self.device)
        starts[1:] = torch.bincount(self.rows, minlength=self.k).cumsum(0)
        return _csr(starts, self.cols, self.values, self.k)

    @cached_property
    def sparse_t(self) -> torch.Tensor:
        """``Bᵀ`` as a sparse CSR ``[k, k]`` tensor: the non-zeros in column order (rows
        ascending within a column, as a coalesced transpose has them)."""
        rows, _, values = self._column_nonzeros
        return _csr(self._by_column[0], rows, values, self.k)

    @cached_property
    def _by_column(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(column starts [k + 1], order)``: ``order`` sorts the non-zeros by column (rows
        ascending within a column), so the non-zeros of a column block are one slice."""
        order = torch.argsort(self.cols, stable=True)
        starts = torch.zeros(self.k + 1, dtype=torch.long, device=self.device)
        starts[1:] = torch.bincount(self.cols, minlength=self.k).cumsum(0)
        return starts, order

    @cached_property
    def _column_nonzeros(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rows, columns and values of the non-zeros in column order."""
        order = self._by_column[1]
        return self.rows[order], self.cols[order], self.values[order]

    def columns(self, start: int, stop: int) -> torch.Tensor:
        """Dense ``B̄[:, start:stop]``: ``#(i, j)/NT − α_i·u``."""
        out = (-self.u * self.alpha).unsqueeze(1).repeat(1, stop - start)
        starts = self._by_column[0]
        rows, cols, values = self._column_nonzeros
        lo, hi = int(starts[start]), int(starts[stop])  # the block's non-zeros: one slice
        out.index_put_((rows[lo:hi], cols[lo:hi] - start), values[lo:hi], accumulate=True)
        return out

    def row_block(self, start: int, stop: int) -> torch.Tensor:
        """Dense rows ``B̄[start:stop, :]``, entry for entry those of :meth:`dense`."""
        out = (-self.u * self.alpha[start:stop]).unsqueeze(1).repeat(1, self.k)
        lo, hi = (int(x) for x in torch.searchsorted(self.rows, torch.tensor([start, stop])))
        where = (self.rows[lo:hi] - start, self.cols[lo:hi])
        return out.index_put_(where, self.values[lo:hi], accumulate=True)

    def row(self, i: int) -> torch.Tensor:
        """Dense row ``B̄[i, :]`` from the sparse counts (no ``[k, k]`` table)."""
        fill = -self.u * float(self.alpha[i])
        out = torch.full((self.k,), fill, dtype=self.dtype, device=self.device)
        lo, hi = torch.searchsorted(self.rows, torch.tensor([i, i + 1], device=self.device))
        out.index_add_(0, self.cols[lo:hi], self.values[lo:hi])
        return out

    def dense(self) -> torch.Tensor:
        """Dense ``B̄`` ``[k, k]``."""
        return self.columns(0, self.k)

    def _sparse_times(self, csr: torch.Tensor, m: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out += S m``: the numba kernel on the CPU, torch's CSR product elsewhere."""
        if self.backend == "torch":
            return out.add_(csr @ m)
        parts = (csr.crow_indices(), csr.col_indices(), csr.values(), m.to(self.dtype))
        kernels().csr_times_dense(*map(as_numpy, parts), out.numpy())
        return out

    def times(self, m: torch.Tensor) -> torch.Tensor:
        """``B̄ M = B M − u·α·(1ᵀM)`` for a dense ``[k, n]`` matrix ``M``."""
        out = torch.outer(self.alpha, m.sum(0)).mul_(-self.u)  # the rank-one term first
        return self._sparse_times(self.sparse, m, out)

    def t_times(self, m: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``B̄ᵀ M = Bᵀ M − u·1·(αᵀM)`` for a dense ``[k, n]`` matrix ``M`` (written into ``out``,
        a C-contiguous ``[k, n]`` matrix of this dtype, where given: every entry is set)."""
        row = (self.alpha @ m).mul_(-self.u)
        out = row.expand(self.k, -1).contiguous() if out is None else out.copy_(row)
        return self._sparse_times(self.sparse_t, m, out)

    def _blockwise(self, column_fn, out: torch.Tensor | None, desc: str, progress: bool):
        """Fill ``out`` column block by column block (``out=None``: a new ``[k, k]`` matrix)."""
        step = block_columns(self.k, self.alpha.element_size())
        if out is None:
            if step >= self.k:  # one block: its result is the matrix
                return column_fn(0, self.k)
            out = torch.empty(self.k, self.k, dtype=self.dtype, device=self.device)
        starts = range(0, self.k, step)
        for c0 in progress_bar(starts, desc=desc, disable=not progress or len(starts) < 4):
            c1 = min(c0 + step, self.k)
            out[:, c0:c1] = column_fn(c0, c1)
        return out

    def gram(self, progress: bool = False) -> torch.Tensor:
        """``Σ_B̄ = B̄ᵀB̄`` ``[k, k]``, exactly symmetric.

        On the CPU (numba) row by row from the sparse counts,
        ``Σ_B̄ = BᵀB − u(β1ᵀ + 1βᵀ) + u²‖α‖²·11ᵀ`` with ``β = Bᵀα``, summed in float64 and
        rounded once (:func:`.kernels.centred_gram`; ``Σ_i nnz(row i)²`` products). With the
        torch backend, ``B̄ᵀ`` times dense column blocks of ``B̄`` (``O(nnz·k)``), symmetrised.
        """
        if self.backend == "numba":
            return self._gram_rows()
        column_fn = lambda c0, c1: self.t_times(self.columns(c0, c1))  # noqa: E731
        return symmetrise_(self._blockwise(column_fn, None, "Σ_B̄", progress))

    def _composed_fused(self, phi: torch.Tensor, out: torch.Tensor, progress: bool) -> torch.Tensor:
        """Ḡ by the fused kernel (see :meth:`composed`), written into ``out``."""
        phi = phi.to(self.dtype).contiguous()
        target = out if out.is_contiguous() else torch.empty(out.shape, dtype=self.dtype)
        colsum = phi.sum(0)
        beta = torch.zeros(self.k, dtype=self.dtype).index_add_(
            0, self.cols, self.values * self.alpha[self.rows]
        )  # β = Bᵀα
        alpha_p = beta @ phi - (self.u * float(self.alpha @ self.alpha)) * colsum  # αᵀB̄Φ̄
        vectors = ((self.u * self.alpha).numpy(), colsum.numpy(), (-self.u * alpha_p).numpy())
        csr = self.sparse
        parts = (as_numpy(csr.crow_indices()), as_numpy(csr.col_indices()), as_numpy(csr.values()))
        width = max(1, min(self.k, _COMPOSED_COLUMNS))
        step = width * 4 * kernels().n_threads() if progress else self.k  # a bar needs steps
        starts = range(0, self.k, step)
        for c0 in progress_bar(starts, desc="Ḡ = Σ_B̄ Φ̄", disable=not progress or len(starts) < 4):
            columns = (c0, min(c0 + step, self.k))
            kernels().centred_composed(parts, *vectors, phi.numpy(), target.numpy(), columns, width)
        if target is not out:
            out.copy_(target)
        return out

    def gram_terms(self) -> tuple[torch.Tensor, torch.Tensor, float]:
        """``(values, shift, constant)`` of ``Σ_B̄ = BᵀB − (s1ᵀ + 1sᵀ) + c·11ᵀ`` in float64: the
        pair frequencies ``#(i, j)/NT``, ``s = u·Bᵀα`` and ``c = u²‖α‖²`` (what
        :meth:`gram`'s row kernel sums from, and what a file records to sum one row of Σ_B̄)."""
        values = self.counts.to(torch.float64) / self.n_positions
        alpha = self.unigram_counts.to(torch.float64) / self.n_positions
        beta = torch.zeros(self.k, dtype=torch.float64)
        beta.index_add_(0, self.cols, values * alpha[self.rows])  # β = Bᵀα
        return values, self.u * beta, self.u * self.u * float(alpha @ alpha)

    def _gram_rows(self) -> torch.Tensor:
        """Σ_B̄ by the row kernel, from float64 frequencies (see :meth:`gram`)."""
        values, shift, constant = self.gram_terms()
        col_starts, order = self._by_column
        out = torch.empty(self.k, self.k, dtype=self.dtype)
        kernels().centred_gram(
            (as_numpy(self.sparse.crow_indices()), as_numpy(self.cols), values.numpy()),
            (col_starts.numpy(), as_numpy(self.rows[order]), values[order].numpy()),
            shift.numpy(),
            constant,
            out.numpy(),
        )
        return out

    def composed(
        self, phi: torch.Tensor, out: torch.Tensor | None = None, progress: bool = False
    ) -> torch.Tensor:
        """``Ḡ = Σ_B̄ Φ̄ = B̄ᵀ(B̄Φ̄)`` ``[k, k]`` for a context map ``phi``, written into ``out``.

        By default ``out`` is a padded matrix (``tables.padded_square``), from which pass two
        gathers without a copy. On the CPU (numba) one fused kernel
        (:func:`.kernels.centred_composed`) forms each block of columns of ``P = B̄Φ̄`` a row at a
        time and adds it into ``Ḡ`` at once (``4·nnz·k`` flops, no ``[k, block]`` temporaries, no
        transpose of ``B``); with the torch backend, ``B̄ᵀ(B̄Φ̄[:, block])`` by CSR products, column
        block by column block. The same operator builds Ḡ in :func:`~tl_leadterms.corpus_stats` and
        on load, so the two agree. A dense GEMM ``Σ_B̄ @ Φ̄`` (``2k³`` flops) was measured slower
        (``benchmarks/results/stats_rebuild.json``; docs/guides/performance.md#statistics)."""
        if out is None:  # every entry is written below: only the pad slot needs a zero
            out = padded_square(self.k, phi.dtype, phi.device, zero=False)
        if self.backend == "numba":
            return self._composed_fused(phi, out, progress)
        column_fn = lambda c0, c1: self.t_times(self.times(phi[:, c0:c1]))  # noqa: E731
        return self._blockwise(column_fn, out, "Ḡ = Σ_B̄ Φ̄", progress)
