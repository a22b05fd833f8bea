"""Fused CPU kernels for the two accumulation passes (numba).

Each kernel walks every causal (query ``t``, key ``m <= t``) pair of a batch once and adds its
weight straight into the flat ``k·k + 1`` table: one random table update per pair, the memory-bound
limit. Threads own disjoint table rows (row ``r`` belongs to thread ``r % n_threads``), so updates
never race and the result does not depend on scheduling; each visits its positions in row order
(:func:`_owned`; docs/guides/performance.md#statistics). Inputs are matrix indices, ``k`` standing
for a dropped token (it adds nothing to the table; Δ still counts it). The torch implementation in
:mod:`.accumulate` computes the same sums on any device. Also here: ``csr_times_dense`` (B̄'s
products on the CPU), ``centred_gram`` (``Σ_B̄``), ``centred_composed`` (``Ḡ``) and
``permuted_dots``, the permutation null's fused gather-dot."""

from typing import no_type_check

import numba
import numpy as np
from numba import prange

__all__ = [
    "attention_pass",
    "centred_composed",
    "centred_gram",
    "context_pass",
    "csr_times_dense",
    "n_threads",
    "permuted_dots",
]


def n_threads() -> int:
    return numba.get_num_threads()


@numba.njit(cache=True, nogil=True)
@no_type_check
def _owned(rows, lo, hi, n_parts, part):  # pragma: no cover - compiled
    """Flat positions ``p`` of ``rows`` with ``lo <= rows[p] < hi`` and ``rows[p] % n_parts ==
    part``, sorted by row, stably (a counting sort): consecutive positions then update the
    same table row while it is in the cache, and every entry still receives its terms in the
    order of the positions, so the sums are bit for bit those of a pass in reading order."""
    flat = rows.reshape(-1)
    starts = np.zeros(hi - lo + 1, dtype=np.int64)
    for p in range(flat.shape[0]):
        r = flat[p]
        if lo <= r < hi and r % n_parts == part:
            starts[r - lo + 1] += 1
    for r in range(hi - lo):
        starts[r + 1] += starts[r]
    order = np.empty(starts[hi - lo], dtype=np.int64)
    for p in range(flat.shape[0]):
        r = flat[p]
        if lo <= r < hi and r % n_parts == part:
            order[starts[r - lo]] = p
            starts[r - lo] += 1
    return order


@numba.njit(parallel=True, cache=True, nogil=True)
@no_type_check  # compiled code: keep the test-time runtime type checker off it
def _context(x, y, table, k, n_parts):  # pragma: no cover - compiled
    t_len = x.shape[1]
    for part in prange(n_parts):
        for p in _owned(y, 0, k, n_parts, part):  # this thread's rows, row by row
            n, t = p // t_len, p % t_len
            w = 1.0 / (t + 1)
            base = y[n, t] * k
            for m in range(t + 1):
                col = x[n, m]
                if col != k:
                    table[base + col] += w


@numba.njit(parallel=True, cache=True, nogil=True)
@no_type_check
def _attention(
    x, y, g_table, shift, weights, q_table, delta_parts, k, lo, hi, n_parts
):  # pragma: no cover - compiled
    t_len = x.shape[1]
    for part in prange(n_parts):
        g = np.empty(t_len, dtype=g_table.dtype)
        delta = delta_parts[part]
        for p in _owned(x, lo, hi, n_parts, part):  # this thread's query rows, row by row
            n, t = p // t_len, p % t_len  # (dropped queries = k count for Δ)
            query = x[n, t]
            target = y[n, t]
            total = 0.0
            if target == k:  # a dropped target: only the per-key term (shift[k] = 0)
                for m in range(t + 1):
                    g[m] = shift[x[n, m]]
                    total += g[m]
            else:
                base = target * k
                for m in range(t + 1):
                    col = x[n, m]
                    g[m] = (0.0 if col == k else g_table[base + col]) + shift[col]
                    total += g[m]
            inv = 1.0 / (t + 1)
            mean = total * inv
            out = (query - lo) * k
            weight = weights[n]  # the window's multiplicity: 1.0 leaves every sum bit for bit
            for m in range(t + 1):
                q = ((g[m] - mean) * inv) * weight
                delta[t - m] += q
                col = x[n, m]
                if query != k and col != k:
                    q_table[out + col] += q


@numba.njit(parallel=True, cache=True, nogil=True)
@no_type_check
def _csr_times_dense(indptr, indices, values, m, out):  # pragma: no cover - compiled
    n_cols = m.shape[1]
    for r in prange(indptr.shape[0] - 1):  # rows are independent: no races
        for p in range(indptr[r], indptr[r + 1]):
            c, v = indices[p], values[p]
            for j in range(n_cols):
                out[r, j] += v * m[c, j]


@numba.njit(parallel=True, cache=True, nogil=True)
@no_type_check
def _gram(ptr, idx, val, t_ptr, t_idx, t_val, beta, c, out, n_parts):  # pragma: no cover
    k = out.shape[0]
    for part in prange(n_parts):
        acc = np.empty(k, dtype=np.float64)
        for r in range(part, k, n_parts):  # rows are independent: no races
            beta_r = beta[r]
            for j in range(k):
                acc[j] = c - (beta_r + beta[j])  # symmetric in (r, j) bit for bit
            for p in range(t_ptr[r], t_ptr[r + 1]):  # every i with S[i, r] != 0, ascending
                i, v = t_idx[p], t_val[p]
                for q in range(ptr[i], ptr[i + 1]):
                    acc[idx[q]] += v * val[q]
            for j in range(k):
                out[r, j] = acc[j]


@numba.njit(parallel=True, cache=True, nogil=True, fastmath={"contract"})
@no_type_check
def _composed(ptr, idx, val, au, colsum, g0, phi, out, start, stop, width):  # pragma: no cover
    k = ptr.shape[0] - 1
    for b in prange((stop - start + width - 1) // width):  # blocks are independent
        c0 = start + b * width
        c1 = min(c0 + width, stop)
        w = c1 - c0
        p = np.empty(w, dtype=out.dtype)  # one row of P = B̄Φ̄ in the block: stays in L1
        f = np.empty((k, w), dtype=out.dtype)  # the block of Φ̄, packed
        o = np.empty((k, w), dtype=out.dtype)  # the block of Ḡ, packed
        s, g = colsum[c0:c1], g0[c0:c1]
        for r in range(k):
            fr, orow, src = f[r], o[r], phi[r, c0:c1]
            for j in range(w):
                fr[j] = src[j]
                orow[j] = g[j]
        for i in range(k):  # P[i] = Σ_c B[i, c]·Φ̄[c] − uα_i·1ᵀΦ̄, then Ḡ[c] += B[i, c]·P[i]
            lo, hi = ptr[i], ptr[i + 1]
            if lo == hi:
                continue
            a = au[i]
            for j in range(w):
                p[j] = -a * s[j]
            for q in range(lo, hi):
                v, fr = val[q], f[idx[q]]
                for j in range(w):
                    p[j] += v * fr[j]
            for q in range(lo, hi):
                v, orow = val[q], o[idx[q]]
                for j in range(w):
                    orow[j] += v * p[j]
        for r in range(k):
            orow, dst = o[r], out[r, c0:c1]
            for j in range(w):
                dst[j] = orow[j]


@numba.njit(parallel=True, cache=True, nogil=True, fastmath={"reassoc", "contract"})
@no_type_check
def _permuted_dots(maps, target, inverse, out):  # pragma: no cover - compiled
    n, k = maps.shape[0], target.shape[0]
    for r in prange(inverse.shape[0]):  # draws are independent: no races
        inv = inverse[r]
        row = np.empty(k, dtype=np.float64)  # row i of the relabelled target: stays in L1
        acc = np.zeros(n, dtype=np.float64)
        for i in range(k):
            src = target[inv[i]]
            for j in range(k):
                row[j] = src[inv[j]]
            for h in range(n):
                m = maps[h, i]
                part = 0.0
                for j in range(k):
                    part += m[j] * row[j]
                acc[h] += part
        for h in range(n):
            out[r, h] = acc[h]


def permuted_dots(
    maps: np.ndarray, target: np.ndarray, inverse: np.ndarray, out: np.ndarray
) -> None:
    """``out[r, h] = Σ_ij maps[h, i, j]·target[inv_r[i], inv_r[j]]`` for every row ``inv_r`` of
    ``inverse`` (``[R, k]`` int64): ``⟨M_h, T_π⟩`` of the null's relabellings, one parallel task per
    draw (``maps`` ``[n, k, k]`` and ``target`` ``[k, k]``, float64, C-contiguous).

    Row ``i`` of the relabelled target is gathered once into a ``k``-long buffer and met by row
    ``i`` of every map: no ``[k, k]`` copy, no index array. Each dot of two rows may be summed in
    any order (``fastmath``); float64 throughout."""
    _permuted_dots(maps, target, inverse, out)


def centred_composed(
    csr: tuple[np.ndarray, np.ndarray, np.ndarray],
    alpha_u: np.ndarray,
    colsum: np.ndarray,
    g0: np.ndarray,
    phi: np.ndarray,
    out: np.ndarray,
    columns: tuple[int, int],
    width: int,
) -> None:
    """Columns ``columns = (start, stop)`` of ``Ḡ = B̄ᵀ(B̄Φ̄)`` into ``out`` (``[k, k]``), for
    ``B̄ = S − u·α1ᵀ`` with ``S`` given as CSR ``(indptr, indices, values)``.

    With ``P = B̄Φ̄``, row ``i`` of ``P`` is ``Σ_c S[i, c]·Φ̄[c] − uα_i·1ᵀΦ̄`` (``alpha_u = uα``,
    ``colsum = 1ᵀΦ̄``) and ``Ḡ = SᵀP − u·1(αᵀP)`` (``g0 = −u·αᵀP``, formed by the caller as
    ``−u·(βᵀΦ̄ − u‖α‖²·1ᵀΦ̄)``, ``β = Sᵀα``). Each block of ``width`` columns is one parallel task:
    it packs its columns of Φ̄ and of Ḡ (filled with ``g0``) into two contiguous ``[k, width]``
    buffers (packing halved the time at k = 3,000), forms each ``P[i]`` in a ``width``-long vector,
    adds ``S[i, c]·P[i]`` to row ``c`` of the block, and copies the block out. ``2·nnz·width``
    products per block; each entry of ``Ḡ`` sums its products in ``i`` ascending, whatever the
    number of threads. Scratch: ``2·k·width`` entries per thread."""
    _composed(*csr, alpha_u, colsum, g0, phi, out, columns[0], columns[1], width)


def csr_times_dense(
    indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, m: np.ndarray, out: np.ndarray
) -> None:
    """``out += S @ m`` for a CSR matrix ``S`` and a C-contiguous dense ``m`` (in place)."""
    _csr_times_dense(indptr, indices, values, m, out)


def centred_gram(
    csr: tuple[np.ndarray, np.ndarray, np.ndarray],
    csr_t: tuple[np.ndarray, np.ndarray, np.ndarray],
    beta: np.ndarray,
    c: float,
    out: np.ndarray,
) -> None:
    """``out = SᵀS − (β1ᵀ + 1βᵀ) + c·11ᵀ`` for a sparse ``S`` given as CSR
    ``(indptr, indices, values)`` and its transpose ``csr_t`` (float64 values, indices ascending in
    each row).

    Row ``r`` of ``SᵀS`` is ``Σ_i S[i, r]·S[i, :]``, summed in a float64 vector and rounded once
    into ``out``; entries ``(r, j)`` and ``(j, r)`` add the same products in the same order, so
    ``out`` is exactly symmetric. ``Σ_i nnz(S[i, :])²`` products, against ``nnz·k`` for ``Sᵀ`` times
    dense column blocks."""
    _gram(*csr, *csr_t, beta, c, out, n_threads())


def context_pass(x: np.ndarray, y: np.ndarray, table: np.ndarray, k: int) -> None:
    """Φ pairs: ``table[y_t·k + x_m] += 1/t`` for every ``m <= t`` (in place)."""
    _context(x, y, table, k, n_threads())


def attention_pass(
    x: np.ndarray,
    y: np.ndarray,
    g_table: np.ndarray,
    q_table: np.ndarray,
    delta: np.ndarray,
    k: int,
    rows: tuple[int, int],
    shift: np.ndarray | None = None,
    weights: np.ndarray | None = None,
) -> None:
    """Q̄ and Δ sums of one batch given the flat Ḡ table (in place).

    Only queries with matrix index in ``rows = (lo, hi)`` count (``k``, a dropped query, counts
    for Δ alone); ``q_table`` holds rows ``lo..hi-1`` of Q̄. ``shift`` (``[k + 1]``, last entry
    0) is added to every looked-up ``g`` by key, for any target (``q_targets="centred"``).
    ``weights`` (``[b]`` float64, default 1): each window's terms counted that many times (a
    bootstrap resample's multiplicities; a weight of 1 changes no bit).
    """
    parts = n_threads()
    delta_parts = np.zeros((parts, x.shape[1]), dtype=q_table.dtype)
    if shift is None:  # adding exact zeros leaves every sum bit for bit as it was
        shift = np.zeros(k + 1, dtype=g_table.dtype)
    if weights is None:
        weights = np.ones(x.shape[0], dtype=np.float64)
    _attention(x, y, g_table, shift, weights, q_table, delta_parts, k, rows[0], rows[1], parts)
    delta += delta_parts.sum(0)
