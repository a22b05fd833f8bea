"""tl_leadterms.adapters.factored against the materialised computation, written out plainly."""

import doctest
import itertools

import pytest
import torch
from transformer_lens import FactoredMatrix

from tests.conftest import unchecked
from tl_leadterms.adapters import factored
from tl_leadterms.errors import LeadTermsError

N, M, D, H = 23, 17, 5, 3


def _random_maps(dtype, seed=0):
    """A dense and a factored map with a head dim, and a dense statistic."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(H, N, D, generator=g, dtype=dtype)
    B = torch.randn(H, D, M, generator=g, dtype=dtype)
    dense = torch.randn(H, N, M, generator=g, dtype=dtype)
    S = torch.randn(N, M, generator=g, dtype=dtype)
    return FactoredMatrix(A, B), dense, S


def _plain_inner(X, Y):
    """Σ_ij X_ij Y_ij over the last two dims, in float64, by explicit loops over heads."""
    X, Y = X.double(), Y.double()
    lead = torch.broadcast_shapes(X.shape[:-2], Y.shape[:-2])
    X, Y = X.expand(*lead, *X.shape[-2:]), Y.expand(*lead, *Y.shape[-2:])
    out = torch.zeros(lead, dtype=torch.float64)
    for key in itertools.product(*[range(s) for s in lead]):
        x, y = X[key], Y[key]
        rows, cols = x.shape
        out[key] = sum(float(x[i, j] * y[i, j]) for i in range(rows) for j in range(cols))
    return out


TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def _close(got, want, scale, dtype):
    """|got − want| ≤ tol·scale, scale = product of the norms (the size an inner product has)."""
    assert got.dtype == torch.float64
    assert got.shape == want.shape
    assert torch.all((got - want.double()).abs() <= TOL[dtype] * scale), (got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inner_with_statistic(dtype):
    F, dense, S = _random_maps(dtype)
    for Mp in (F, dense):
        mat = factored.materialise(Mp)
        want = _plain_inner(mat, S)
        scale = mat.double().flatten(1).norm(dim=1) * S.double().norm()
        _close(factored.inner(Mp, S), want, scale, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inner_maps_all_kinds(dtype):
    F1, D1, _ = _random_maps(dtype, seed=1)
    F2, D2, _ = _random_maps(dtype, seed=2)
    for X, Y in [(F1, F2), (F1, D2), (D1, F2), (D1, D2)]:
        x, y = factored.materialise(X), factored.materialise(Y)
        scale = x.double().flatten(1).norm(dim=1) * y.double().flatten(1).norm(dim=1)
        _close(factored.inner_maps(X, Y), _plain_inner(x, y), scale, dtype)


def test_inner_maps_broadcasts_a_single_map_against_heads():
    F, _, _ = _random_maps(torch.float64)
    single = FactoredMatrix(torch.randn(N, 2, dtype=torch.float64), torch.randn(2, M).double())
    want = _plain_inner(F.AB, single.AB)
    got = factored.inner_maps(F, single)
    assert got.shape == (H,)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_norms_and_cosine(dtype):
    F, dense, S = _random_maps(dtype)
    for Mp in (F, dense):
        mat = factored.materialise(Mp).double()
        want_sq = torch.stack([(mat[h] ** 2).sum() for h in range(H)])
        assert torch.allclose(factored.sq_norm(Mp), want_sq, rtol=TOL[dtype])
        assert torch.allclose(factored.norm(Mp), want_sq.sqrt(), rtol=TOL[dtype])
        want_cos = torch.stack(
            [(mat[h] * S.double()).sum() / (mat[h].norm() * S.double().norm()) for h in range(H)]
        )
        assert torch.allclose(factored.cosine(Mp, S), want_cos, atol=TOL[dtype])
        assert torch.allclose(factored.cosine(Mp, Mp), torch.ones(H, dtype=torch.float64))


def test_cosine_of_a_zero_map_is_zero_not_nan():
    F, _, S = _random_maps(torch.float32)
    zero = FactoredMatrix(torch.zeros(N, 2), torch.randn(2, M))
    assert factored.cosine(zero, S).item() == 0.0
    assert torch.equal(factored.cosine(F, torch.zeros(N, M)), torch.zeros(H, dtype=torch.float64))


def test_orientation_matters():
    """A map and its statistic transposed (square case) must not score the same."""
    g = torch.Generator().manual_seed(3)
    S = torch.randn(N, N, generator=g)
    Mp = FactoredMatrix(torch.randn(N, 4, generator=g), torch.randn(4, N, generator=g))
    assert not torch.isclose(factored.inner(Mp, S), factored.inner(Mp, S.T))
    assert torch.isclose(factored.inner(Mp, S.T), _plain_inner(Mp.AB.T, S), rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_head_combination(dtype):
    F, dense, _ = _random_maps(dtype)
    for Mp in (F, dense):
        heads = factored.materialise(Mp)
        plain_sum = heads[0] + heads[1] + heads[2]
        summed, meaned = factored.sum_heads(Mp), factored.mean_heads(Mp)
        assert isinstance(summed, FactoredMatrix) == isinstance(Mp, FactoredMatrix)
        assert isinstance(meaned, FactoredMatrix) == isinstance(Mp, FactoredMatrix)
        rtol = 10 * TOL[dtype]
        assert torch.allclose(factored.materialise(summed), plain_sum, rtol=rtol, atol=rtol)
        assert torch.allclose(factored.materialise(meaned), plain_sum / H, rtol=rtol, atol=rtol)
    assert factored.sum_heads(F).A.shape == (N, H * D)


def test_head_combination_keeps_further_batch_dims():
    g = torch.Generator().manual_seed(4)
    A, B = torch.randn(H, 2, N, D, generator=g).double(), torch.randn(H, 2, D, M).double()
    got = factored.sum_heads(FactoredMatrix(A, B))
    want = sum(A[h] @ B[h] for h in range(H))
    assert got.shape == (2, N, M)
    assert torch.allclose(got.AB, want, rtol=1e-12, atol=1e-12)


def test_restrict_stays_factored_and_selects_token_ids():
    F, dense, S = _random_maps(torch.float64)
    rows, cols = torch.tensor([5, 0, 22]), torch.tensor([16, 3])
    for Mp in (F, dense):
        got = factored.restrict(Mp, rows, cols)
        assert isinstance(got, FactoredMatrix) == isinstance(Mp, FactoredMatrix)
        mat = factored.materialise(Mp)
        want = [[[float(mat[h, i, j]) for j in cols] for i in rows] for h in range(H)]
        assert torch.allclose(factored.materialise(got), torch.tensor(want, dtype=torch.float64))
        only_rows = factored.restrict(Mp, rows=rows)
        assert factored.materialise(only_rows).shape == (H, 3, M)
        assert torch.allclose(factored.materialise(only_rows), mat[:, rows])
    assert torch.allclose(
        factored.inner(factored.restrict(F, rows, cols), S[rows][:, cols]),
        _plain_inner(F.AB[:, rows][:, :, cols], S[rows][:, cols]),
    )


def test_statistic_is_read_in_row_blocks(monkeypatch):
    """The blocked float64 accumulation gives the same result as one block."""
    F, dense, S = _random_maps(torch.float32)
    whole = (factored.inner(F, S), factored.inner(dense, S))
    monkeypatch.setattr(factored, "_BLOCK_ELEMENTS", 2 * M)  # two rows per block
    blocked = (factored.inner(F, S), factored.inner(dense, S))
    for w, b in zip(whole, blocked, strict=True):
        assert torch.allclose(w, b, rtol=1e-12)


def test_bad_input():
    F, dense, S = _random_maps(torch.float32)
    with pytest.raises(LeadTermsError, match=r"different \[n, m\] shapes"):
        unchecked(factored.inner)(F, S[:, :-1])
    with pytest.raises(LeadTermsError, match="use inner_maps"):
        unchecked(factored.inner)(dense, F)
    with pytest.raises(LeadTermsError, match="FactoredMatrix, got list"):
        unchecked(factored.sq_norm)([[1.0]])
    with pytest.raises(LeadTermsError, match="no head dim"):
        unchecked(factored.sum_heads)(S)
    with pytest.raises(LeadTermsError, match=r"rows holds ids outside 0\.\.22"):
        unchecked(factored.restrict)(F, torch.tensor([23]))
    with pytest.raises(LeadTermsError, match="do not broadcast"):
        unchecked(factored.inner_maps)(dense, torch.randn(2, N, M))


def test_docstring_examples():
    result = doctest.testmod(factored, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
