"""The plain-torch paper model of tests/reference.py: forward pass and early GD steps."""

import pytest
import torch

from tests.factories import markov_tokens
from tests.unit.test_reference import assert_close, ref, rel_err

# --------------------------------------------------------------------------------------------
# Paper model
# --------------------------------------------------------------------------------------------


def _loop_forward(tokens_in: torch.Tensor, params: dict, d_vocab: int) -> torch.Tensor:
    """Explicit per-position loop version of the paper model's forward pass."""
    n_samples, n_ctx = tokens_in.shape
    out = torch.zeros(n_samples, n_ctx, d_vocab, dtype=torch.float64)
    for n in range(n_samples):
        h = torch.zeros(n_ctx, d_vocab, dtype=torch.float64)
        for t in range(n_ctx):
            h[t, int(tokens_in[n, t])] = 1.0
        for W, V, P in zip(params["W"], params["V"], params["P"], strict=True):
            new_h = h.clone()
            for t in range(n_ctx):
                scores = torch.stack([h[t] @ W @ h[j] + P[t - j] for j in range(t + 1)])
                weights = torch.exp(scores - scores.max())
                weights = weights / weights.sum()
                for j in range(t + 1):
                    new_h[t] = new_h[t] + weights[j] * (h[j] @ V)
            h = new_h
        out[n] = h @ params["W_O"]
    return out


def test_paper_forward_matches_loop():
    d_vocab, n_ctx, n_layers = 5, 4, 2
    gen = torch.Generator().manual_seed(11)
    params = {
        "W_O": torch.randn(d_vocab, d_vocab, generator=gen, dtype=torch.float64),
        "W": [torch.randn(d_vocab, d_vocab, generator=gen, dtype=torch.float64) for _ in range(2)],
        "V": [
            0.5 * torch.randn(d_vocab, d_vocab, generator=gen, dtype=torch.float64)
            for _ in range(n_layers)
        ],
        "P": [torch.randn(n_ctx, generator=gen, dtype=torch.float64) for _ in range(n_layers)],
    }
    tokens_in = torch.randint(0, d_vocab, (3, n_ctx), generator=gen)
    fast = ref.paper_forward(tokens_in, params, d_vocab)
    assert fast.shape == (3, n_ctx, d_vocab)
    assert_close(fast, _loop_forward(tokens_in, params, d_vocab), atol=1e-12)


def test_zero_params_and_loss_at_init():
    params = ref.zero_params(7, 5, 3)
    assert params["W_O"].shape == (7, 7)
    assert [p.shape for p in params["W"]] == [(7, 7)] * 3
    assert [p.shape for p in params["V"]] == [(7, 7)] * 3
    assert [p.shape for p in params["P"]] == [(5,)] * 3
    tokens = markov_tokens(4, 6, 7, seed=2)
    _, losses = ref.gd_train(tokens, 7, 3, lr=0.1, steps=1, return_losses=True)
    assert abs(losses[0] - float(torch.log(torch.tensor(7.0, dtype=torch.float64)))) < 1e-14


N_GD, T_GD, V_GD, L_GD = 16, 8, 12, 2


@pytest.fixture(scope="module")
def gd_setup():
    tokens = markov_tokens(N_GD, T_GD + 1, V_GD, seed=7)
    stats = ref.dense_corpus_stats(tokens, V_GD)
    return tokens, stats


def _assert_all_zero(tensors):
    for p in tensors:
        assert torch.count_nonzero(p) == 0


def test_gd_one_step(gd_setup):
    tokens, stats = gd_setup
    lr = 0.7
    params = ref.gd_train(tokens, V_GD, L_GD, lr=lr, steps=1)
    assert_close(params["W_O"], lr * stats["B_bar"], atol=1e-12)
    _assert_all_zero(params["W"] + params["V"] + params["P"])


def test_gd_two_steps(gd_setup):
    tokens, stats = gd_setup
    lr = 0.05
    params = ref.gd_train(tokens, V_GD, L_GD, lr=lr, steps=2)
    expected_V = lr**2 * stats["Phi_bar"].T @ stats["B_bar"].T
    for V in params["V"]:
        assert rel_err(V, expected_V) < 1e-2
    _assert_all_zero(params["W"] + params["P"])
    assert rel_err(params["W_O"], 2 * lr * stats["B_bar"]) < 5e-2


@pytest.mark.parametrize(("lr", "tol"), [(0.05, 2e-2), (0.01, 4e-3)])
def test_gd_three_steps(gd_setup, lr, tol):
    tokens, stats = gd_setup
    params, losses = ref.gd_train(tokens, V_GD, L_GD, lr=lr, steps=3, return_losses=True)
    assert losses[0] > losses[1] > losses[2]
    for W, P in zip(params["W"], params["P"], strict=True):
        assert torch.count_nonzero(W) > 0
        assert torch.count_nonzero(P) > 0
        assert rel_err(W, 2 * lr**4 * stats["Q_bar"]) < tol
        assert rel_err(P, 2 * lr**4 * stats["Delta"]) < tol


def test_gd_error_shrinks_with_lr(gd_setup):
    """The leading-term error is O(lr): it shrinks roughly linearly as lr decreases."""
    tokens, stats = gd_setup
    errors = []
    for lr in (0.04, 0.01):
        params = ref.gd_train(tokens, V_GD, L_GD, lr=lr, steps=3)
        errors.append(rel_err(params["W"][0], 2 * lr**4 * stats["Q_bar"]))
    assert errors[1] < 0.5 * errors[0]


# --------------------------------------------------------------------------------------------
# Dense benchmark baseline agrees with the reference
# --------------------------------------------------------------------------------------------
