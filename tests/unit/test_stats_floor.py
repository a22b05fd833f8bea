"""The statistics after the work around their kernels was cut (issue 31, part 1): still equal to
the plain dense one-hot reference, with 1ᵀḠ computed once per run, reused pass-two tables, Σ_B̄
built row by row and the degeneracy test decided from one max pass."""

import pytest
import torch

from tests.reference import dense_corpus_stats
from tests.unit.test_stats import STATS, markov_windows
from tl_leadterms import LeadTermsError, corpus_stats
from tl_leadterms.stats import AttentionAccumulator, algebra, compute, resolve_vocab
from tl_leadterms.stats import accumulate as accumulate_module
from tl_leadterms.stats.definitions import column_sums, key_shift
from tl_leadterms.stats.degenerate import TOLERANCE, negligible

BACKENDS = ("numba", "torch")
KEPT = [7, 3, 39, 0, 12, 21, 5, 30, 8, 44, 17, 26, 1]  # not sorted: the order is the matrix order


def _max_rel(mine: torch.Tensor, ref: torch.Tensor) -> float:
    return float((mine.double() - ref).abs().max() / ref.abs().max())


@pytest.fixture
def small_blocks(monkeypatch):
    """Column blocks of a few columns (also the fused Ḡ kernel's), so the blockwise products
    cross many block edges."""
    monkeypatch.setattr(algebra, "_BLOCK_BYTES", 1)
    monkeypatch.setattr(algebra, "_MIN_BLOCK_COLUMNS", 5)
    monkeypatch.setattr(algebra, "_COMPOSED_COLUMNS", 5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])  # float32: two row groups
@pytest.mark.parametrize(("kept", "centre_vocab"), [(None, None), (KEPT, None), (KEPT, 13)])
def test_statistics_across_blocks_and_row_groups_equal_the_reference(
    small_blocks, backend, dtype, kept, centre_vocab
):
    v, tokens = 48, markov_windows(30, 11, 48, seed=5)
    stats = corpus_stats(
        tokens, d_vocab=v, vocab=kept, centre_vocab=centre_vocab, dtype=dtype,
        backend=backend, progress=False,
    )  # fmt: skip
    ref = dense_corpus_stats(tokens, v, kept=kept, centre_vocab=centre_vocab)
    tol = 1e-10 if dtype == torch.float64 else 1e-6
    for name in STATS:
        mine = getattr(stats, name)
        assert mine.dtype == dtype, name
        assert _max_rel(mine, ref[name]) <= tol, name
    assert set(stats.timings) >= {"pass1", "G_bar", "pass2", "degenerate"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_sigma_b_is_exactly_symmetric_and_equals_the_plain_product(small_blocks, backend, dtype):
    v, tokens = 48, markov_windows(25, 9, 48, seed=8)
    stats = corpus_stats(tokens, d_vocab=v, vocab=KEPT, centre_vocab=40, dtype=dtype,
                         progress=False)  # fmt: skip
    op = algebra.CentredBigram(
        stats.pair_codes, stats.pair_counts, stats.unigram_counts, stats.n_positions,
        stats.centre_vocab, dtype, backend=backend,
    )  # fmt: skip
    sigma = op.gram()
    b_bar = dense_corpus_stats(tokens, v, kept=KEPT, centre_vocab=40)["B_bar"]
    assert torch.equal(sigma, sigma.T)
    assert _max_rel(sigma, b_bar.T @ b_bar) <= (1e-13 if dtype == torch.float64 else 1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("progress", [False, True])  # True: the fused kernel in column chunks
def test_composed_equals_the_plain_triple_product(small_blocks, backend, dtype, progress):
    v, tokens = 48, markov_windows(25, 9, 48, seed=9)
    ref = dense_corpus_stats(tokens, v, kept=KEPT, centre_vocab=40)
    stats = corpus_stats(tokens, d_vocab=v, vocab=KEPT, centre_vocab=40, dtype=dtype,
                         want=["Phi_bar"], progress=False)  # fmt: skip
    op = algebra.CentredBigram(
        stats.pair_codes, stats.pair_counts, stats.unigram_counts, stats.n_positions,
        stats.centre_vocab, dtype, backend=backend,
    )  # fmt: skip
    plain = ref["B_bar"].T @ (ref["B_bar"] @ ref["Phi_bar"])
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert _max_rel(op.composed(stats.Phi_bar, progress=progress), plain) <= tol
    strided = torch.full((13, 26), float("nan"), dtype=dtype)[:, ::2]  # a non-contiguous out
    op.composed(stats.Phi_bar, out=strided, progress=progress)
    assert _max_rel(strided, plain) <= tol


def test_column_sums_and_key_shift_equal_the_plain_formula():
    g = torch.randn(37, 23, generator=torch.Generator().manual_seed(2)).float()
    plain = g.double().sum(0)
    torch.testing.assert_close(column_sums(g, rows=5), plain, rtol=1e-15, atol=0)
    vocab = resolve_vocab(list(range(23)), 40, centre_vocab=50)
    shift = key_shift(g[:23], vocab, "centred")
    expected = torch.cat([(-g[:23].double().sum(0) / 50).float(), torch.zeros(1)])
    torch.testing.assert_close(shift, expected, rtol=1e-7, atol=0)


def test_one_reduction_of_g_bar_per_run(monkeypatch):
    calls = []

    def counted(g_bar, vocab, q_targets):
        calls.append(g_bar.shape)
        return key_shift(g_bar, vocab, q_targets)

    monkeypatch.setattr(compute, "key_shift", counted)
    monkeypatch.setattr(accumulate_module, "key_shift", counted)
    tokens = markov_windows(20, 8, 48, seed=1)
    # float32 results summed in float64: pass two runs in two query-row groups
    stats = corpus_stats(tokens, d_vocab=48, vocab=KEPT, dtype=torch.float32, progress=False)
    assert len(calls) == 1
    ref = dense_corpus_stats(tokens, 48, kept=KEPT)
    assert _max_rel(stats.Q_bar, ref["Q_bar"]) <= 1e-6


def test_a_given_shift_is_used_and_checked():
    tokens = markov_windows(15, 7, 48, seed=4)
    kept = resolve_vocab(KEPT, 48)
    stats = corpus_stats(tokens, d_vocab=48, vocab=KEPT, progress=False)
    shift = key_shift(stats.G_bar, kept, "centred")
    given = AttentionAccumulator(stats.G_bar, kept, shift=shift).update(tokens).result()
    auto = AttentionAccumulator(stats.G_bar, kept).update(tokens).result()
    assert all(torch.equal(a, b) for a, b in zip(given, auto, strict=True))
    with pytest.raises(LeadTermsError, match="shift=None does not fit"):
        AttentionAccumulator(stats.G_bar, kept, shift=None)
    with pytest.raises(LeadTermsError, match=r"a tensor \(13,\)"):
        AttentionAccumulator(stats.G_bar, kept, shift=shift[:-1])
    with pytest.raises(LeadTermsError, match="must be None"):
        AttentionAccumulator(stats.G_bar, kept, shift=shift, q_targets="one-hot")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reused_table_gives_the_same_sums_as_a_fresh_one(backend):
    tokens = markov_windows(15, 7, 48, seed=6)
    kept = resolve_vocab(KEPT, 48)
    g_bar = corpus_stats(tokens, d_vocab=48, vocab=KEPT, progress=False).G_bar
    fresh = AttentionAccumulator(g_bar, kept, backend=backend, rows=(0, 7))
    fresh.update(tokens)
    dirty = torch.full((7 * 13 + 40,), 3.5, dtype=torch.float64)  # larger, full of garbage
    reused = AttentionAccumulator(g_bar, kept, backend=backend, rows=(0, 7), table=dirty)
    assert reused.table.data_ptr() == dirty.data_ptr()
    reused.update(tokens)
    assert all(torch.equal(a, b) for a, b in zip(fresh.result(), reused.result(), strict=True))
    wrong = torch.zeros(7 * 13 + 1, dtype=torch.float32)  # another dtype: not used
    assert AttentionAccumulator(g_bar, kept, rows=(0, 7), table=wrong).table is not wrong


def test_the_max_pass_decides_as_the_float64_norm_does():
    gen = torch.Generator().manual_seed(0)
    eps = torch.finfo(torch.float64).eps
    bound = TOLERANCE * eps
    tables = []
    for size in (1, 7, 400):
        base = torch.randn(size, size, generator=gen, dtype=torch.float64)
        spike = torch.zeros(size, size, dtype=torch.float64)
        spike[0, -1] = 1.0  # max = norm: only the norm decides near the bound
        for shape in (base, base.abs() + 1, spike):
            unit = shape / shape.norm()
            for ratio in (1e-3, 0.3, 0.9, 0.999, 1.001, 1.1, 3.0, 1e3):
                tables.append(unit * (ratio * bound))
    decided = [negligible(t, scale=1.0) for t in tables]
    plain = [float(t.norm()) <= bound for t in tables]
    assert decided == plain
    assert any(decided) and not all(decided)
    assert not negligible(torch.tensor([1e-30, float("nan")]), scale=1.0)
    assert negligible(torch.ones(3), scale=0.0)
    assert negligible(torch.zeros(3), scale=float("nan"))
    assert not negligible(torch.ones(3), scale=float("nan"))
