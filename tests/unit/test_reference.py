"""Sanity tests of the plain reference implementations in ``tests/reference.py``.

These check the reference against hand-computed numbers, counting loops, structural identities,
the gradient-descent dynamics of the paper model, and the dense benchmark baseline.
"""

from __future__ import annotations

import importlib.util
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from tests.factories import markov_tokens

REPO_ROOT = Path(__file__).resolve().parents[2]


def _load_module(name: str, relative_path: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / relative_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ref = _load_module("_tl_leadterms_test_reference", "tests/reference.py")
dense_baseline = _load_module("_tl_leadterms_dense_baseline", "benchmarks/dense_baseline.py")

KEYS = ("B_bar", "Sigma_B", "Phi_bar", "G_bar", "Q_bar", "Delta")


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def frac_tensor(rows) -> torch.Tensor:
    return torch.tensor([[float(Fraction(x)) for x in row] for row in rows], dtype=torch.float64)


def rel_err(approx: torch.Tensor, exact: torch.Tensor) -> float:
    return float(torch.linalg.norm(approx - exact) / torch.linalg.norm(exact))


def assert_close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-13) -> None:
    torch.testing.assert_close(a, b, rtol=0.0, atol=atol)


@pytest.fixture(scope="module")
def corpus():
    d_vocab, n_samples, n_ctx = 14, 12, 9
    tokens = markov_tokens(n_samples, n_ctx + 1, d_vocab, seed=1)
    return tokens, d_vocab


@pytest.fixture(scope="module")
def corpus_stats(corpus):
    tokens, d_vocab = corpus
    return ref.dense_corpus_stats(tokens, d_vocab)


# --------------------------------------------------------------------------------------------
# Hand-computed example: N=1, T=2, V=3, tokens z = (0, 1, 1)
# --------------------------------------------------------------------------------------------
#
# X = (e0, e1), Y = (e1, e1), NT = 2, u = 1/3, A_0 = [[1, 0], [1/2, 1/2]].
# B_bar   = 1/2 (e0^T (e1 - u) + e1^T (e1 - u)): rows 0 and 1 = (-1/6, 1/3, -1/6), row 2 = 0.
# Sigma_B = (1/18) v v^T with v = (1, -2, 1).
# Phi_bar = 1/2 [(e1 - u)^T e0 + (e1 - u)^T (e0 + e1)/2]: col 0 = -v/4, col 1 = -v/12, col 2 = 0.
# G_bar   = Sigma_B Phi_bar, Sigma_B v = v/3: col 0 = -v/12, col 1 = -v/36, col 2 = 0.
# Q_1: t=1 is 0. t=2: y=1, x=(0, 1): g = (G[1,0], G[1,1]) = (1/6, 1/18), mean 1/9,
#      Q[2,1] = (1/2)(1/18) = 1/36, Q[2,2] = -1/36.
# Q_bar = 1/2 (1/36 e1^T e0 - 1/36 e1^T e1): Q_bar[1,0] = 1/72, Q_bar[1,1] = -1/72.
# Delta = 1/2 (Q[1,1] + Q[2,2], Q[2,1]) = (-1/72, 1/72).
#
# Restricted to kept = [1, 0] (reversed order, token 2 dropped), centre_vocab = 3 (default):
# B_bar' = [[1/3, -1/6], [1/3, -1/6]], Sigma_B' = [[2/9, -1/9], [-1/9, 1/18]],
# Phi_bar' = [[1/6, 1/2], [-1/12, -1/4]], G_bar' = Sigma_B' Phi_bar' =
#   [[5/108, 5/36], [-5/216, -5/72]].
# q_targets="one-hot" (rows of Y G X^T):
# Q_1: t=2: y = token 1 -> pos 0, x = (token 0 -> pos 1, token 1 -> pos 0):
#   g = (G'[0,1], G'[0,0]) = (15/108, 5/108), mean 10/108, Q[2,1] = 5/216, Q[2,2] = -5/216.
# Q_bar' = 1/2 (5/216 at [pos(1), pos(0)] = [0,1]; -5/216 at [0,0]) = [[-5/432, 5/432], [0, 0]].
# Delta' = (-5/432, 5/432).
# q_targets="centred" (rows of (Y - u) G X^T, the default): 1^T G_bar' = (5/216, 5/72) != 0, so
#   g gains -u (1^T G_bar')[x_j] = (-5/216, -5/648) for x = (pos 1, pos 0):
#   g = (15/108 - 5/216, 5/108 - 5/648) = (75/648, 25/648), mean 50/648,
#   Q[2,1] = 25/1296, Q[2,2] = -25/1296; Q_bar' = [[-25/2592, 25/2592], [0, 0]],
#   Delta' = (-25/2592, 25/2592).

HAND_TOKENS = torch.tensor([[0, 1, 1]])


def test_hand_example_unrestricted():
    stats = ref.dense_corpus_stats(HAND_TOKENS, 3)
    expected = {
        "B_bar": frac_tensor([["-1/6", "1/3", "-1/6"], ["-1/6", "1/3", "-1/6"], [0, 0, 0]]),
        "Sigma_B": frac_tensor(
            [["1/18", "-1/9", "1/18"], ["-1/9", "2/9", "-1/9"], ["1/18", "-1/9", "1/18"]]
        ),
        "Phi_bar": frac_tensor([["-1/4", "-1/12", 0], ["1/2", "1/6", 0], ["-1/4", "-1/12", 0]]),
        "G_bar": frac_tensor([["-1/12", "-1/36", 0], ["1/6", "1/18", 0], ["-1/12", "-1/36", 0]]),
        "Q_bar": frac_tensor([[0, 0, 0], ["1/72", "-1/72", 0], [0, 0, 0]]),
        "Delta": torch.tensor([-1 / 72, 1 / 72], dtype=torch.float64),
    }
    assert set(stats) == set(KEYS)
    for key in KEYS:
        assert stats[key].dtype == torch.float64
        assert_close(stats[key], expected[key])
    Q_1 = ref.sample_Q(HAND_TOKENS[0], stats["G_bar"], 3)
    assert_close(Q_1, frac_tensor([[0, 0], ["1/36", "-1/36"]]))


RESTRICTED_Q = {  # the hand-derived Q_bar', Delta' of each q_targets (see above)
    "one-hot": (frac_tensor([["-5/432", "5/432"], [0, 0]]), [-5 / 432, 5 / 432]),
    "centred": (frac_tensor([["-25/2592", "25/2592"], [0, 0]]), [-25 / 2592, 25 / 2592]),
}


@pytest.mark.parametrize("q_targets", ["centred", "one-hot"])
def test_hand_example_restricted(q_targets):
    stats = ref.dense_corpus_stats(HAND_TOKENS, 3, kept=[1, 0], q_targets=q_targets)
    Q_bar, Delta = RESTRICTED_Q[q_targets]
    expected = {
        "B_bar": frac_tensor([["1/3", "-1/6"], ["1/3", "-1/6"]]),
        "Sigma_B": frac_tensor([["2/9", "-1/9"], ["-1/9", "1/18"]]),
        "Phi_bar": frac_tensor([["1/6", "1/2"], ["-1/12", "-1/4"]]),
        "G_bar": frac_tensor([["5/108", "5/36"], ["-5/216", "-5/72"]]),
        "Q_bar": Q_bar,
        "Delta": torch.tensor(Delta, dtype=torch.float64),
    }
    for key in KEYS:
        assert_close(stats[key], expected[key])
    # the einsum reference of the paper's code gives the centred values
    if q_targets == "centred":
        dense = ref.paper_code_stats(HAND_TOKENS, 3, kept=[1, 0])
        for key in KEYS:
            assert_close(dense[key], expected[key])
    # Explicit centre_vocab equal to the default gives the same result.
    again = ref.dense_corpus_stats(HAND_TOKENS, 3, kept=[1, 0], centre_vocab=3, q_targets=q_targets)
    for key in KEYS:
        assert_close(again[key], stats[key], atol=0.0)


# --------------------------------------------------------------------------------------------
# Structural identities
# --------------------------------------------------------------------------------------------


def test_shapes_and_dtypes(corpus, corpus_stats):
    tokens, d_vocab = corpus
    n_ctx = tokens.shape[1] - 1
    for key in ("B_bar", "Sigma_B", "Phi_bar", "G_bar", "Q_bar"):
        assert corpus_stats[key].shape == (d_vocab, d_vocab)
        assert corpus_stats[key].dtype == torch.float64
    assert corpus_stats["Delta"].shape == (n_ctx,)
    kept = [5, 0, 11, 3]
    restricted = ref.dense_corpus_stats(tokens, d_vocab, kept=kept)
    for key in ("B_bar", "Sigma_B", "Phi_bar", "G_bar", "Q_bar"):
        assert restricted[key].shape == (len(kept), len(kept))
    assert restricted["Delta"].shape == (n_ctx,)


def test_row_and_column_sums(corpus_stats):
    s = corpus_stats
    # B_bar 1 = (1/NT) sum X^T (Y - u) 1 = (1/NT) sum X^T (1 - V u) 1 = 0.
    assert_close(s["B_bar"].sum(dim=1), torch.zeros(s["B_bar"].shape[0], dtype=torch.float64))
    # 1^T Phi_bar = (1/NT) sum 1^T (Y - u)^T A_0 X = 0 since each row of Y - u sums to 0.
    assert_close(s["Phi_bar"].sum(dim=0), torch.zeros(s["Phi_bar"].shape[1], dtype=torch.float64))
    # Sigma_B symmetric positive semi-definite, G_bar = Sigma_B Phi_bar.
    assert_close(s["Sigma_B"], s["Sigma_B"].T, atol=0.0)
    assert float(torch.linalg.eigvalsh(s["Sigma_B"]).min()) > -1e-14
    assert_close(s["G_bar"], s["Sigma_B"] @ s["Phi_bar"])
    # Non-degenerate statistics.
    for key in KEYS:
        assert float(s[key].abs().max()) > 1e-6


def test_Q_rows_sum_to_zero(corpus, corpus_stats):
    tokens, d_vocab = corpus
    n_ctx = tokens.shape[1] - 1
    for n in range(tokens.shape[0]):
        Q_n = ref.sample_Q(tokens[n], corpus_stats["G_bar"], d_vocab)
        assert_close(Q_n.sum(dim=1), torch.zeros(n_ctx, dtype=torch.float64))
        assert float(Q_n[0, 0]) == 0.0  # position t = 1 contributes nothing
        assert torch.equal(torch.triu(Q_n, diagonal=1), torch.zeros_like(Q_n))  # causal
    # Hence Q_bar rows sum to 0 (all tokens kept) and sum_d Delta[d] = 0.
    assert_close(corpus_stats["Q_bar"].sum(dim=1), torch.zeros(d_vocab, dtype=torch.float64))
    assert abs(float(corpus_stats["Delta"].sum())) < 1e-14
    # With a restriction Q_n rows still sum to 0 over all key positions, so sum Delta = 0.
    restricted = ref.dense_corpus_stats(tokens, d_vocab, kept=[2, 7, 4, 9, 0])
    assert abs(float(restricted["Delta"].sum())) < 1e-14


def test_first_query_position_irrelevant():
    """Changing only z_1 changes Q_1 of position t = 1 by nothing (Q_n[1, 1] = 0 always)."""
    d_vocab = 6
    tokens = markov_tokens(3, 6, d_vocab, seed=5)
    stats = ref.dense_corpus_stats(tokens, d_vocab)
    for first in range(d_vocab):
        modified = tokens[0].clone()
        modified[0] = first
        assert float(ref.sample_Q(modified, stats["G_bar"], d_vocab)[0, 0]) == 0.0


# --------------------------------------------------------------------------------------------
# Entry formulas by counting loops
# --------------------------------------------------------------------------------------------


def _positions(kept, d_vocab):
    if kept is None:
        kept = list(range(d_vocab))
    return {tok: i for i, tok in enumerate(kept)}, len(kept)


@pytest.mark.parametrize(
    ("kept", "centre_vocab"), [(None, None), ([8, 1, 13, 4, 6], None), ([3, 9, 2], 7)]
)
def test_B_bar_by_counting(corpus, kept, centre_vocab):
    tokens, d_vocab = corpus
    n_samples, n_ctx = tokens.shape[0], tokens.shape[1] - 1
    NT = n_samples * n_ctx
    inv_centre = 1.0 / (centre_vocab or d_vocab)
    pos, k = _positions(kept, d_vocab)
    pair_count = [[0] * d_vocab for _ in range(d_vocab)]
    alpha = [0] * d_vocab
    for n in range(n_samples):
        for t in range(n_ctx):
            cur, nxt = int(tokens[n, t]), int(tokens[n, t + 1])
            pair_count[cur][nxt] += 1
            alpha[cur] += 1
    expected = torch.zeros(k, k, dtype=torch.float64)
    for i_tok, i in pos.items():
        for j_tok, j in pos.items():
            expected[i, j] = pair_count[i_tok][j_tok] / NT - (alpha[i_tok] / NT) * inv_centre
    stats = ref.dense_corpus_stats(tokens, d_vocab, kept=kept, centre_vocab=centre_vocab)
    assert_close(stats["B_bar"], expected)


@pytest.mark.parametrize(
    ("kept", "centre_vocab"), [(None, None), ([8, 1, 13, 4, 6], None), ([3, 9, 2], 7)]
)
def test_Phi_bar_by_counting(corpus, kept, centre_vocab):
    tokens, d_vocab = corpus
    n_samples, n_ctx = tokens.shape[0], tokens.shape[1] - 1
    NT = n_samples * n_ctx
    inv_centre = 1.0 / (centre_vocab or d_vocab)
    pos, k = _positions(kept, d_vocab)
    joint = [[0.0] * d_vocab for _ in range(d_vocab)]  # sum (1/t) [y_t = i][x_m = j]
    context = [0.0] * d_vocab  # sum (1/t) [x_m = j]
    for n in range(n_samples):
        for t in range(1, n_ctx + 1):
            y_t = int(tokens[n, t])
            for m in range(1, t + 1):
                x_m = int(tokens[n, m - 1])
                joint[y_t][x_m] += 1.0 / t
                context[x_m] += 1.0 / t
    expected = torch.zeros(k, k, dtype=torch.float64)
    for i_tok, i in pos.items():
        for j_tok, j in pos.items():
            mu_j = context[j_tok] * inv_centre / NT
            expected[i, j] = joint[i_tok][j_tok] / NT - mu_j
    stats = ref.dense_corpus_stats(tokens, d_vocab, kept=kept, centre_vocab=centre_vocab)
    assert_close(stats["Phi_bar"], expected)


@pytest.mark.parametrize(
    ("kept", "centre_vocab"), [(None, None), ([8, 1, 13, 4, 6], None), ([3, 9, 2], 7)]
)
@pytest.mark.parametrize("q_targets", ["centred", "one-hot"])
def test_Q_bar_and_Delta_by_lookup_loops(corpus, kept, centre_vocab, q_targets):
    """Q_bar / Delta from g_ntj by table look-up.

    one-hot: g = G_bar[y_t, x_j] (0 if a token is not kept); centred: minus u (1^T G_bar)[x_j]
    for every target, kept or not (0 if x_j is not kept).
    """
    tokens, d_vocab = corpus
    n_samples, n_ctx = tokens.shape[0], tokens.shape[1] - 1
    NT = n_samples * n_ctx
    u = 1.0 / (centre_vocab or d_vocab) if q_targets == "centred" else 0.0
    pos, k = _positions(kept, d_vocab)
    stats = ref.dense_corpus_stats(
        tokens, d_vocab, kept=kept, centre_vocab=centre_vocab, q_targets=q_targets
    )
    G = stats["G_bar"].tolist()
    column_sums = [sum(G[i][j] for i in range(k)) for j in range(k)]

    def g(target_tok, context_tok):
        if context_tok not in pos:
            return 0.0
        j = pos[context_tok]
        looked_up = G[pos[target_tok]][j] if target_tok in pos else 0.0
        return looked_up - u * column_sums[j]

    Q_bar = [[0.0] * k for _ in range(k)]
    Delta = [0.0] * n_ctx
    for n in range(n_samples):
        x = [int(v) for v in tokens[n, :-1]]
        y = [int(v) for v in tokens[n, 1:]]
        for t in range(1, n_ctx + 1):
            values = [g(y[t - 1], x[j - 1]) for j in range(1, t + 1)]
            mean = sum(values) / t
            for j in range(1, t + 1):
                q = (values[j - 1] - mean) / t
                Delta[t - j] += q / NT
                if x[t - 1] in pos and x[j - 1] in pos:
                    Q_bar[pos[x[t - 1]]][pos[x[j - 1]]] += q / NT
    assert_close(stats["Q_bar"], torch.tensor(Q_bar, dtype=torch.float64), atol=1e-15)
    assert_close(stats["Delta"], torch.tensor(Delta, dtype=torch.float64), atol=1e-15)
    assert float(stats["Q_bar"].abs().max()) > 0.0


# --------------------------------------------------------------------------------------------
# Restriction consistency
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("centre_vocab", [None, 5])
def test_restriction_submatrices(corpus, centre_vocab):
    tokens, d_vocab = corpus
    kept = [9, 2, 13, 0, 6, 4]
    full = ref.dense_corpus_stats(tokens, d_vocab, centre_vocab=centre_vocab)
    part = ref.dense_corpus_stats(tokens, d_vocab, kept=kept, centre_vocab=centre_vocab)
    idx = torch.tensor(kept)
    assert_close(part["B_bar"], full["B_bar"][idx][:, idx])
    assert_close(part["Phi_bar"], full["Phi_bar"][idx][:, idx])
    # Sigma_B and G_bar are products of the restricted k x k matrices (not sub-matrices).
    assert_close(part["Sigma_B"], part["B_bar"].T @ part["B_bar"])
    assert_close(part["G_bar"], part["Sigma_B"] @ part["Phi_bar"])
    # Keeping every token (in a permuted order) is a pure permutation of the unrestricted result.
    perm = torch.randperm(d_vocab, generator=torch.Generator().manual_seed(3)).tolist()
    permuted = ref.dense_corpus_stats(tokens, d_vocab, kept=perm, centre_vocab=centre_vocab)
    p = torch.tensor(perm)
    for key in ("B_bar", "Sigma_B", "Phi_bar", "G_bar", "Q_bar"):
        assert_close(permuted[key], full[key][p][:, p])
    assert_close(permuted["Delta"], full["Delta"])


def test_invalid_inputs():
    tokens = torch.tensor([[0, 1, 2]])
    with pytest.raises(ValueError):
        ref.dense_corpus_stats(tokens, 2)  # token id out of range
    with pytest.raises(ValueError):
        ref.dense_corpus_stats(tokens, 3, kept=[0, 0])
    with pytest.raises(ValueError):
        ref.dense_corpus_stats(tokens.float(), 3)


@pytest.mark.parametrize("batch_size", [1, 5, 32])
def test_dense_baseline_matches_reference(corpus, corpus_stats, batch_size):
    tokens, d_vocab = corpus
    stats = dense_baseline.dense_baseline_stats(tokens, d_vocab, batch_size=batch_size)
    assert set(stats) == set(KEYS)
    for key in KEYS:
        assert stats[key].dtype == torch.float64
        assert_close(stats[key], corpus_stats[key], atol=1e-14)


def test_dense_baseline_hand_example():
    stats = dense_baseline.dense_baseline_stats(HAND_TOKENS, 3)
    reference = ref.dense_corpus_stats(HAND_TOKENS, 3)
    for key in KEYS:
        assert_close(stats[key], reference[key])
