"""Shapley attributions of R² and the permutation null of decompose, against plain references."""

import math

import pytest
import torch

from tests.conftest import unchecked
from tests.factories import markov_tokens, random_attn_only
from tl_leadterms import LeadTermsError, corpus_stats, decompose, paper_model, train
from tl_leadterms.analyses.decompose.fit import MARGIN, R2_FLOOR, character, shapley
from tl_leadterms.results.null import NullSpec, permutations, random_reference

V, T, L = 16, 8, 2


def _products(maps: list[torch.Tensor], M: torch.Tensor):
    X = torch.stack([m.flatten() for m in maps])
    return X @ X.T, (X @ M.flatten())[None], (M.flatten() @ M.flatten())[None]


def test_orthogonal_mixture_recovers_squared_coefficient_shares():
    g = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(36, 5, generator=g, dtype=torch.float64))
    maps = [Q[:, i].reshape(6, 6) * (i + 1) for i in range(4)]  # orthogonal, unequal norms
    coefficients = [0.3, -1.2, 0.0, 0.7]
    noise = Q[:, 4].reshape(6, 6) * 0.4  # orthogonal to every component
    M = sum(c * m for c, m in zip(coefficients, maps, strict=True)) + noise
    a = shapley(*_products(maps, M))
    total = float((M * M).sum())
    want = [c**2 * float((m * m).sum()) / total for c, m in zip(coefficients, maps, strict=True)]
    assert a.shapley[0].tolist() == pytest.approx(want, abs=1e-12)
    assert a.unique[0].tolist() == pytest.approx(want, abs=1e-12)  # nothing shared
    assert float(a.r2[0]) == pytest.approx(1 - 0.16 / total, abs=1e-12)


def test_correlated_shapley_sums_to_r2_and_is_order_independent():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(5, 7, 7, generator=g, dtype=torch.float64)
    maps = [base[0], base[0] + 0.3 * base[1], base[2], base[2] - base[3], base[4]]
    M = 2 * maps[0] + maps[2] + torch.randn(7, 7, generator=g, dtype=torch.float64)
    gram, b, sq = _products(maps, M)
    a = shapley(gram, b, sq)
    X = torch.stack([m.flatten() for m in maps], 1)
    y = M.flatten()
    fit = torch.linalg.lstsq(X, y[:, None]).solution[:, 0]
    r2 = 1 - float(((y - X @ fit) ** 2).sum() / (y @ y))
    assert float(a.shapley.sum()) == pytest.approx(r2, abs=1e-10)
    order = [3, 0, 4, 2, 1]
    b2 = shapley(gram[order][:, order], b[:, order], sq)
    assert b2.shapley[0].tolist() == pytest.approx(a.shapley[0, order].tolist(), abs=1e-12)
    assert (a.shared[0] > 0).any()  # correlated components share variance


def test_character_rule():
    names = ["bigram", "context"]
    assert character(names, [0.6, 0.2], 0.8, 1.0) == "bigram-like"
    lead = MARGIN * 0.8
    assert character(names, [0.4 + lead / 2 - 1e-9, 0.4 - lead / 2], 0.8, 1.0) == "mixed"
    assert character(names, [R2_FLOOR * 0.9, 0.0], R2_FLOOR * 0.9, 1.0) == "unexplained"
    assert character(names, [0.0, 0.0], 0.0, 0.0) == "zero"


@pytest.fixture(scope="module")
def setting():
    tokens = markov_tokens(100, T + 1, V, seed=3)
    stats = corpus_stats(tokens, d_vocab=V, progress=False)
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=L, dtype=torch.float64)
    train(model, tokens, lr=0.5, steps=6, progress=False)
    return tokens, stats, model


def test_trained_paper_model_beats_the_permutation_null(setting):
    _, stats, model = setting
    d = decompose(model, stats, null=NullSpec(permutations=199, seed=0), per_head=True)
    token_rows = [r for r in d.rows if r["weight"] != "P"]
    assert token_rows and all(r["p"] < 0.01 for r in token_rows)
    assert all(r["score"] == r["cosine"] for r in d.rows)
    assert all(math.isnan(r["p"]) for r in d.rows if r["weight"] == "P")  # offsets, no tokens


def test_random_init_model_is_within_the_null(setting):
    _, stats, model = setting
    reference = random_reference(model, seed=5, init_range=1.0)
    d = decompose(reference, stats, null=NullSpec(permutations=99, seed=1), per_head=True)
    token_rows = [r for r in d.rows if r["weight"] != "P"]
    within = sum(r["p"] > 0.05 for r in token_rows)
    assert within >= 0.6 * len(token_rows), [(r["label"], r["weight"], r["p"]) for r in token_rows]


def test_reference_column_scores_the_random_copy(setting):
    _, stats, model = setting
    d = decompose(
        model, stats, null=NullSpec(permutations=5, seed=0, reference="random"), per_head=True
    )
    ref = decompose(random_reference(model, seed=0), stats, per_head=True)
    for r, want in zip(d.rows, ref.rows, strict=True):
        assert r["reference"] == pytest.approx(want["cosine"], nan_ok=True)


@pytest.mark.hooked
def test_sandwich_null_matches_materialised_permuted_maps():
    tokens = markov_tokens(60, T + 1, V, seed=4)
    stats = corpus_stats(tokens, d_vocab=V, vocab=10, progress=False)  # restricted: Sandwich path
    model = random_attn_only(V, T, seed=2)
    d = decompose(
        model, stats, weights=["W", "V·W_O"], layers=[1], null=NullSpec(6, seed=3), per_head=True
    )
    perms = permutations(stats.k, 6, 3)
    kept = stats.kept
    W_E, W_U = model.W_E.detach().double()[kept], model.W_U.detach().double()[:, kept]
    for r in d.rows:
        attn = model.blocks[1].attn
        h = r["head"]
        if r["weight"] == "W":
            M = W_E @ attn.W_Q[h].double() @ attn.W_K[h].double().T @ W_E.T
            target = stats.Q_bar
        else:
            M = W_E @ attn.W_V[h].double() @ attn.W_O[h].double() @ W_U
            target = stats.G_bar.T
        M = M.detach()
        cos = [float((M[p][:, p] * target).sum() / (M.norm() * target.norm())) for p in perms]
        assert r["null_mean"] == pytest.approx(sum(cos) / len(cos), rel=1e-8, abs=1e-12)
        assert r["null_sd"] == pytest.approx(float(torch.tensor(cos).std()), rel=1e-6)


def test_bad_null_arguments(setting):
    _, stats, model = setting
    for bad in (1, -3, True, "many"):
        with pytest.raises(LeadTermsError, match=r"null"):
            unchecked(decompose)(model, stats, null=bad, per_head=True)
    with pytest.raises(LeadTermsError, match="reference must be None, a model or 'random'"):
        NullSpec(permutations=10, reference="untrained")  # a spec checks itself when built


def test_inner_projected_many_matches_one_at_a_time(monkeypatch):
    """The heads' cores formed once (and in blocks of heads and projections) give the same
    inner products as one ``inner_projected`` per map, and as the dense maps."""
    from tl_leadterms.adapters import sandwich
    from tl_leadterms.adapters.sandwich import Sandwich, project

    g = torch.Generator().manual_seed(1)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    L, R = rand(9, 5), rand(4, 7)
    s = Sandwich(L, rand(6, 5, 2), rand(6, 2, 4), R)
    Ts = [rand(9, 7) for _ in range(5)]
    dense = L @ s.A @ s.B @ R
    want = torch.stack([(dense * T).sum((-2, -1)) for T in Ts])
    projected = [project(T, L, R) for T in Ts]
    one = torch.stack([s.inner_projected(P) for P in projected])
    torch.testing.assert_close(s.inner_projected_many(projected), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(one, want, rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(sandwich, "_CORE_ELEMENTS", 2 * 5 * 4)  # two heads / maps per block
    torch.testing.assert_close(s.inner_projected_many(projected), want, rtol=1e-12, atol=1e-12)
