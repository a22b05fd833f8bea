"""Leading terms against autograd GD of the paper model (tests/reference.py)."""

import math

import pytest
import torch

from tests.conftest import unchecked
from tests.reference import gd_train
from tests.unit.test_stats import markov_windows
from tl_leadterms import LeadTermsError, coefficients, corpus_stats, leading_terms, step_bound

V, T, N, LAYERS = 40, 16, 64, 2


@pytest.fixture(scope="module")
def corpus():
    tokens = markov_windows(N, T, V, seed=1)
    return tokens, corpus_stats(tokens, d_vocab=V, progress=False)


def rel_err(actual: torch.Tensor, predicted: torch.Tensor) -> float:
    return float((actual - predicted).norm() / actual.norm())


def test_coefficients_are_the_binomial_closed_forms():
    for s in range(0, 12):
        lr = 0.37
        c = coefficients(lr=lr, steps=s)
        assert c["W_O"] == pytest.approx(s * lr)
        assert c["V"] == pytest.approx(s * (s - 1) / 2 * lr**2)
        quartic = s * (s - 1) * (s - 2) * (3 * s - 1) / 24  # docs/math.md#leading-terms
        assert c["W"] == pytest.approx(quartic * lr**4) and c["P"] == c["W"]


def test_one_step_writes_exactly_eta_b_bar(corpus):
    tokens, stats = corpus
    lr = 0.3
    params = gd_train(tokens, V, LAYERS, lr, 1)
    lt = leading_terms(stats, lr=lr, steps=1, n_layers=LAYERS)
    torch.testing.assert_close(params["W_O"], lt.W_O, rtol=0, atol=1e-15)
    for name in ("V", "W", "P"):
        for layer in range(LAYERS):
            assert not params[name][layer].any()
            assert not getattr(lt, name)[layer].any()


@pytest.mark.parametrize(("lr", "steps"), [(0.1, 5), (0.05, 10), (0.125, 4)])
def test_all_four_weights_match_gd_at_small_s_eta(corpus, lr, steps):
    tokens, stats = corpus
    assert steps * lr <= 0.5
    params = gd_train(tokens, V, LAYERS, lr, steps)
    lt = leading_terms(stats, lr=lr, steps=steps, n_layers=LAYERS)
    assert rel_err(params["W_O"], lt.W_O) < 1e-2
    for layer in range(LAYERS):
        for name in ("V", "W", "P"):
            err = rel_err(params[name][layer], getattr(lt, name)[layer])
            assert err < 1e-2, f"{name}[{layer}] relative error {err:.2e}"


def test_orientation_matters(corpus):
    # The transposed statistics are clearly worse predictors: orientation is pinned.
    tokens, stats = corpus
    params = gd_train(tokens, V, LAYERS, 0.1, 5)
    lt = leading_terms(stats, lr=0.1, steps=5, n_layers=LAYERS)
    assert rel_err(params["W"][0], lt.W[0].T) > 10 * rel_err(params["W"][0], lt.W[0])
    assert rel_err(params["V"][0], lt.V[0].T) > 10 * rel_err(params["V"][0], lt.V[0])
    assert rel_err(params["W_O"], lt.W_O.T) > 10 * rel_err(params["W_O"], lt.W_O)


def test_value_term_is_phi_t_b_t(corpus):
    _, stats = corpus
    lt = leading_terms(stats, lr=0.2, steps=3)
    torch.testing.assert_close(lt.V[0], 3 * 0.2**2 * stats.Phi_bar.T @ stats.B_bar.T)


def test_step_bound_and_conditions(corpus):
    _, stats = corpus
    lr = 0.01
    expected = min(1 / (12 * LAYERS), 5 / (8 * math.sqrt(T))) / lr
    assert step_bound(lr=lr, n_layers=LAYERS, n_ctx=T) == pytest.approx(expected)
    inside = leading_terms(stats, lr=lr, steps=int(expected), n_layers=LAYERS)
    outside = leading_terms(stats, lr=lr, steps=int(expected) + 1, n_layers=LAYERS)
    assert inside.within_bound and not outside.within_bound
    # L = 2 > sqrt(16)/4 = 1, T = 16 < 60, |V| = 40 < 500: all three hypotheses unmet here
    assert inside.conditions == {"L <= sqrt(T)/4": False, "T >= 60": False, "|V| >= 500": False}
    assert inside.error_bounds["W_O"] == pytest.approx(3 * (int(expected) * lr) ** 2)
    assert "OUTSIDE" in repr(outside) and "unmet conditions" in repr(inside)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0, "steps": 3}, "lr must be a finite number > 0"),
        ({"lr": float("nan"), "steps": 3}, "lr must be a finite number > 0"),
        ({"lr": 0.1, "steps": -1}, "steps must be an integer"),
        ({"lr": 0.1, "steps": 2.5}, "steps must be an integer"),
        ({"lr": 0.1, "steps": 2, "n_layers": 0}, "n_layers must be"),
    ],
)
def test_bad_arguments(corpus, kwargs, match):
    _, stats = corpus
    with pytest.raises(LeadTermsError, match=match):
        unchecked(leading_terms)(stats, **kwargs)


def test_requires_corpus_stats():
    with pytest.raises(LeadTermsError, match="must be a CorpusStats"):
        unchecked(leading_terms)(torch.zeros(3, 3), lr=0.1, steps=2)
