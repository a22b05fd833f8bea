"""Plain, literal reference implementations used as test oracles.

Everything here is written directly from the formulas (row-vector convention) and optimised for
obvious correctness, not speed. It deliberately imports nothing from ``tl_leadterms``.

Notation (positions are 1-based in the formulas, 0-based in the code):

* A sample has ``T + 1`` tokens ``z_1 .. z_{T+1}``. ``X`` (T x V) is the one-hot of ``z_1..z_T``
  and ``Y`` (T x V) the one-hot of ``z_2..z_{T+1}``. ``N`` samples, ``NT = N * T`` positions.
* ``u = 1 / centre_vocab`` (``centre_vocab`` defaults to the full ``d_vocab``).
* ``A_0`` is uniform causal attention: row ``t`` has ``1/t`` on columns ``1..t``.

Corpus statistics (see :func:`dense_corpus_stats`)::

    B_bar   = (1/NT) sum_n X_n^T (Y_n - u)              [current token x next token]
    Sigma_B = B_bar^T B_bar
    Phi_bar = (1/NT) sum_n (Y_n - u)^T A_0 X_n          [target token x context token]
    G_bar   = Sigma_B Phi_bar
    M_n     = (Y_n - u) G_bar X_n^T                     (q_targets="centred", the default)
    M_n     = Y_n G_bar X_n^T                           (q_targets="one-hot": G_bar[y_t, x_j])
    Q_n[t, j] = (1/t) (M_n[t, j] - mean_{j' <= t} M_n[t, j'])   for j <= t, else 0
    Q_bar   = (1/NT) sum_n X_n^T Q_n X_n                [query token x key token]
    Delta[d] = (1/NT) sum_n sum_{t > d} Q_n[t, t - d]   d = 0 .. T-1

With a vocabulary restriction ``kept``, tokens not in ``kept`` get a zero one-hot row (in both X
and Y) and the columns are the kept tokens in ``kept`` order, so all matrices are k x k.
``N``, ``T``, ``NT``, ``A_0`` and ``u`` are unchanged by the restriction. ``Y_n - u`` subtracts
``u`` from every entry of the restricted ``Y_n`` (zero rows included), so with ``kept`` the
centred ``M_n[t, j] = G_bar[y_t, x_j] - u (1^T G_bar)[x_j]`` for a kept ``y_t`` and
``-u (1^T G_bar)[x_j]`` for a dropped one; for the full vocabulary ``1^T G_bar = 0`` and the two
``q_targets`` agree. ``last_target="paper-code"`` first sets ``z_{T+1}`` of every sample to 0.
:func:`paper_code_stats` computes the same statistics a second, independent way: one-hot
einsums over the whole corpus with an explicit ``T x T x T`` softmax-Jacobian tensor.

The paper model (see :func:`paper_forward`) is an attention-only transformer with one-hot
embeddings, zero-initialised parameters and no LayerNorm / MLP / biases / scaling::

    h^(0) = X
    h^(l) = h^(l-1) + softmax(Mask(h^(l-1) W^(l) h^(l-1)^T + DM(P^(l)))) h^(l-1) V^(l)
    F(X)  = h^(L) W_O

Import as ``from tests.reference import ...`` (with the repository root on ``sys.path``, e.g.
``python -m pytest``) or load this file by path with ``importlib``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

STAT_KEYS = ("B_bar", "Sigma_B", "Phi_bar", "G_bar", "Q_bar", "Delta")


# --------------------------------------------------------------------------------------------
# Corpus statistics
# --------------------------------------------------------------------------------------------


def _check_tokens(tokens: torch.Tensor, d_vocab: int) -> None:
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        raise ValueError("tokens must be a 2-D tensor [N, T+1]")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError("tokens must be an integer tensor")
    if tokens.shape[0] < 1 or tokens.shape[1] < 2:
        raise ValueError("tokens must have N >= 1 samples of length T + 1 >= 2")
    if int(tokens.min()) < 0 or int(tokens.max()) >= d_vocab:
        raise ValueError("token ids must lie in [0, d_vocab)")


def _check_kept(kept: list[int] | None, d_vocab: int) -> None:
    if kept is None:
        return
    kept = [int(k) for k in kept]
    if len(kept) == 0:
        raise ValueError("kept must be non-empty")
    if len(set(kept)) != len(kept):
        raise ValueError("kept must contain distinct token ids")
    if min(kept) < 0 or max(kept) >= d_vocab:
        raise ValueError("kept token ids must lie in [0, d_vocab)")


def one_hot_rows(
    token_ids: torch.Tensor, d_vocab: int, kept: list[int] | None = None
) -> torch.Tensor:
    """One-hot matrix (len x V, or len x k with ``kept``) in float64.

    Row ``t`` is ``e_{token_ids[t]}``. With ``kept``: rows of tokens not in ``kept`` are set to
    zero, then the kept columns are selected in ``kept`` order.
    """
    length = token_ids.shape[0]
    full = torch.zeros(length, d_vocab, dtype=torch.float64)
    for t in range(length):
        full[t, int(token_ids[t])] = 1.0
    if kept is None:
        return full
    kept_set = {int(k) for k in kept}
    for t in range(length):
        if int(token_ids[t]) not in kept_set:
            full[t, :] = 0.0
    columns = torch.tensor([int(k) for k in kept], dtype=torch.long)
    return full[:, columns]


def uniform_causal_attention(n_ctx: int) -> torch.Tensor:
    """A_0 (T x T, float64): row t (1-based) has 1/t on columns 1..t and 0 elsewhere."""
    A0 = torch.zeros(n_ctx, n_ctx, dtype=torch.float64)
    for t in range(1, n_ctx + 1):
        for j in range(1, t + 1):
            A0[t - 1, j - 1] = 1.0 / t
    return A0


def softmax_jacobian_rows(M: torch.Tensor) -> torch.Tensor:
    """Apply J_t = (1/t)(I - 11^T/t) (on the prefix 1..t) to each row t of the T x T matrix M.

    Returns Q with Q[t, j] = (1/t) (M[t, j] - mean_{j' <= t} M[t, j']) for j <= t and 0 for
    j > t (1-based t, j). Entries of M above the diagonal are ignored.
    """
    n_ctx = M.shape[0]
    Q = torch.zeros(n_ctx, n_ctx, dtype=torch.float64)
    for t in range(1, n_ctx + 1):
        prefix = M[t - 1, :t]
        prefix_mean = prefix.sum() / t
        for j in range(1, t + 1):
            Q[t - 1, j - 1] = (M[t - 1, j - 1] - prefix_mean) / t
    return Q


def sample_Q(
    sample_tokens: torch.Tensor,
    G_bar: torch.Tensor,
    d_vocab: int,
    *,
    kept: list[int] | None = None,
    u: float = 0.0,
) -> torch.Tensor:
    """Q_n (T x T) for one sample ``sample_tokens`` [T+1], given the composed matrix G_bar.

    Scores the rows of ``(Y - u) G_bar X^T``: ``u = 0`` (the default) gives
    ``M[t, j] = G_bar[y_t, x_j]`` (0 if y_t or x_j is not kept), ``u = 1/centre_vocab`` the
    centred targets.
    """
    X = one_hot_rows(sample_tokens[:-1], d_vocab, kept)
    Y = one_hot_rows(sample_tokens[1:], d_vocab, kept)
    M = (Y - u) @ G_bar @ X.T
    return softmax_jacobian_rows(M)


def dense_corpus_stats(
    tokens: torch.Tensor,
    d_vocab: int,
    *,
    kept: list[int] | None = None,
    centre_vocab: int | None = None,
    q_targets: str = "centred",
    last_target: str = "data",
) -> dict[str, torch.Tensor]:
    """Literal per-sample computation of B_bar, Sigma_B, Phi_bar, G_bar, Q_bar, Delta (float64).

    ``tokens`` is a LongTensor [N, T+1]. Matrices are V x V (or k x k with ``kept``, indexed by
    position in ``kept``); ``Delta`` has length T. ``u = 1 / centre_vocab`` with ``centre_vocab``
    defaulting to ``d_vocab`` (not ``len(kept)``). ``q_targets``: ``"centred"`` scores rows of
    ``(Y - u) G_bar X^T``, ``"one-hot"`` rows of ``Y G_bar X^T``. ``last_target="paper-code"``
    sets the last token of every sample to 0 first.
    """
    _check_tokens(tokens, d_vocab)
    _check_kept(kept, d_vocab)
    if q_targets not in ("centred", "one-hot") or last_target not in ("data", "paper-code"):
        raise ValueError("q_targets must be centred/one-hot, last_target data/paper-code")
    if last_target == "paper-code":
        tokens = tokens.clone()
        tokens[:, -1] = 0
    if centre_vocab is None:
        centre_vocab = d_vocab
    if int(centre_vocab) < 1:
        raise ValueError("centre_vocab must be a positive integer")
    u = 1.0 / float(centre_vocab)

    n_samples = tokens.shape[0]
    n_ctx = tokens.shape[1] - 1
    NT = n_samples * n_ctx
    k = d_vocab if kept is None else len(kept)
    A0 = uniform_causal_attention(n_ctx)

    # First pass: B_bar and Phi_bar.
    B_sum = torch.zeros(k, k, dtype=torch.float64)
    Phi_sum = torch.zeros(k, k, dtype=torch.float64)
    for n in range(n_samples):
        X = one_hot_rows(tokens[n, :-1], d_vocab, kept)
        Y = one_hot_rows(tokens[n, 1:], d_vocab, kept)
        Y_centred = Y - u  # subtract the scalar u from every entry (zero rows included)
        B_sum = B_sum + X.T @ Y_centred
        Phi_sum = Phi_sum + Y_centred.T @ A0 @ X
    B_bar = B_sum / NT
    Phi_bar = Phi_sum / NT
    Sigma_B = B_bar.T @ B_bar
    G_bar = Sigma_B @ Phi_bar

    # Second pass: Q_bar and Delta (need the corpus-level G_bar).
    Q_sum = torch.zeros(k, k, dtype=torch.float64)
    Delta_sum = torch.zeros(n_ctx, dtype=torch.float64)
    for n in range(n_samples):
        X = one_hot_rows(tokens[n, :-1], d_vocab, kept)
        u_q = u if q_targets == "centred" else 0.0
        Q_n = sample_Q(tokens[n], G_bar, d_vocab, kept=kept, u=u_q)
        Q_sum = Q_sum + X.T @ Q_n @ X
        for d in range(n_ctx):
            for t in range(d + 1, n_ctx + 1):  # 1-based t > d, key position t - d >= 1
                Delta_sum[d] = Delta_sum[d] + Q_n[t - 1, t - d - 1]
    Q_bar = Q_sum / NT
    Delta = Delta_sum / NT

    return {
        "B_bar": B_bar,
        "Sigma_B": Sigma_B,
        "Phi_bar": Phi_bar,
        "G_bar": G_bar,
        "Q_bar": Q_bar,
        "Delta": Delta,
    }


def paper_code_stats(
    tokens: torch.Tensor,
    d_vocab: int,
    *,
    kept: list[int] | None = None,
    centre_vocab: int | None = None,
    last_target: str = "data",
) -> dict[str, torch.Tensor]:
    """The six statistics as dense one-hot einsums over the whole corpus (float64).

    Written straight from the formulas with restricted one-hot ``X``, ``Y`` ([N, T, k]) and
    ``R = Y - u`` (u subtracted from every entry)::

        B_bar = sum_n X_n^T R_n / NT          Phi_bar = sum_n R_n^T A_0 X_n / NT
        G_bar = B_bar^T B_bar Phi_bar         M_n = R_n G_bar X_n^T
        J[t, j, j'] = (1/t)(delta_jj' - 1/t) for j, j' <= t (else 0)
        Q_n[t, j] = sum_j' J[t, j, j'] M_n[t, j']
        Q_bar = sum_n X_n^T Q_n X_n / NT      Delta[d] = sum_n sum_t Q_n[t, t - d] / NT

    ``last_target="paper-code"`` sets the last token of every sample to 0 first.
    """
    _check_tokens(tokens, d_vocab)
    _check_kept(kept, d_vocab)
    if last_target == "paper-code":
        tokens = tokens.clone()
        tokens[:, -1] = 0
    u = 1.0 / float(centre_vocab or d_vocab)
    n_samples, n_ctx = tokens.shape[0], tokens.shape[1] - 1
    NT = n_samples * n_ctx
    columns = torch.arange(d_vocab) if kept is None else torch.tensor(kept)
    X = F.one_hot(tokens[:, :-1].long(), d_vocab).double()[..., columns]  # dropped: zero rows
    Y = F.one_hot(tokens[:, 1:].long(), d_vocab).double()[..., columns]
    R = Y - u
    t = torch.arange(1, n_ctx + 1, dtype=torch.float64)
    causal = torch.tril(torch.ones(n_ctx, n_ctx, dtype=torch.float64))  # [t, j]: j <= t
    A0 = causal / t[:, None]
    prefix = causal[:, :, None] * causal[:, None, :]  # [t, j, j']: both keys in the prefix
    J = (torch.eye(n_ctx, dtype=torch.float64)[None] - 1.0 / t[:, None, None]) * prefix
    J = J / t[:, None, None]
    B_bar = torch.einsum("nti,ntj->ij", X, R) / NT
    Phi_bar = torch.einsum("nti,ts,nsj->ij", R, A0, X) / NT
    Sigma_B = B_bar.T @ B_bar
    G_bar = Sigma_B @ Phi_bar
    M = torch.einsum("nti,ij,nsj->nts", R, G_bar, X)
    Q = torch.einsum("tjs,nts->ntj", J, M)
    Q_bar = torch.einsum("nta,ntj,njb->ab", X, Q, X) / NT
    offset = torch.arange(n_ctx)[:, None] - torch.arange(n_ctx)[None, :]  # t - j
    Delta = torch.stack([(Q.sum(0) * (offset == d)).sum() for d in range(n_ctx)]) / NT
    return {
        "B_bar": B_bar,
        "Sigma_B": Sigma_B,
        "Phi_bar": Phi_bar,
        "G_bar": G_bar,
        "Q_bar": Q_bar,
        "Delta": Delta,
    }


# --------------------------------------------------------------------------------------------
# Paper model and full-batch gradient descent
# --------------------------------------------------------------------------------------------


def zero_params(
    d_vocab: int, n_ctx: int, n_layers: int, dtype: torch.dtype = torch.float64
) -> dict:
    """All-zero parameters: W_O (V x V); per layer W (V x V), V (V x V), P (n_ctx,)."""
    return {
        "W_O": torch.zeros(d_vocab, d_vocab, dtype=dtype),
        "W": [torch.zeros(d_vocab, d_vocab, dtype=dtype) for _ in range(n_layers)],
        "V": [torch.zeros(d_vocab, d_vocab, dtype=dtype) for _ in range(n_layers)],
        "P": [torch.zeros(n_ctx, dtype=dtype) for _ in range(n_layers)],
    }


def relative_position_bias(P: torch.Tensor, n_ctx: int) -> torch.Tensor:
    """DM(P) (T x T): DM[t, t - d] = P[d] on and below the diagonal, 0 above it.

    Built by indexing so that it is differentiable with respect to ``P``.
    """
    query = torch.arange(n_ctx).unsqueeze(1)
    key = torch.arange(n_ctx).unsqueeze(0)
    offset = query - key  # d = t - j
    below_or_on_diagonal = offset >= 0
    values = P[offset.clamp(min=0)]
    return torch.where(below_or_on_diagonal, values, torch.zeros_like(values))


def paper_forward(tokens_in: torch.Tensor, params: dict, d_vocab: int) -> torch.Tensor:
    """Logits F(X) = h^(L) W_O, shape [N, T, V], for input tokens ``tokens_in`` [N, T]."""
    W_O = params["W_O"]
    n_ctx = tokens_in.shape[1]
    X = F.one_hot(tokens_in.long(), d_vocab).to(W_O.dtype)  # [N, T, V]
    causal = torch.tril(torch.ones(n_ctx, n_ctx, dtype=torch.bool))  # key j <= query t
    h = X
    for W, V, P in zip(params["W"], params["V"], params["P"], strict=True):
        scores = h @ W @ h.transpose(1, 2)  # scores[n, t, j] = h_t W h_j^T
        scores = scores + relative_position_bias(P, n_ctx)
        scores = scores.masked_fill(~causal, float("-inf"))
        attention = torch.softmax(scores, dim=-1)
        h = h + attention @ h @ V
    return h @ W_O


def paper_loss(tokens: torch.Tensor, params: dict, d_vocab: int) -> torch.Tensor:
    """Mean cross-entropy over all N*T positions; ``tokens`` is [N, T+1]."""
    logits = paper_forward(tokens[:, :-1], params, d_vocab)
    targets = tokens[:, 1:].long()
    return F.cross_entropy(logits.reshape(-1, d_vocab), targets.reshape(-1), reduction="mean")


def _flatten(params: dict) -> list[torch.Tensor]:
    return [params["W_O"], *params["W"], *params["V"], *params["P"]]


def _unflatten(flat: list[torch.Tensor], n_layers: int) -> dict:
    return {
        "W_O": flat[0],
        "W": list(flat[1 : 1 + n_layers]),
        "V": list(flat[1 + n_layers : 1 + 2 * n_layers]),
        "P": list(flat[1 + 2 * n_layers : 1 + 3 * n_layers]),
    }


def gd_train(
    tokens: torch.Tensor,
    d_vocab: int,
    n_layers: int,
    lr: float,
    steps: int,
    dtype: torch.dtype = torch.float64,
    *,
    return_losses: bool = False,
):
    """Full-batch plain gradient descent from zero init: params <- params - lr * grad.

    Returns the params dict (detached tensors); with ``return_losses=True`` returns
    ``(params, losses)`` where ``losses[s]`` is the loss evaluated before update ``s``
    (length ``steps``).
    """
    _check_tokens(tokens, d_vocab)
    n_ctx = tokens.shape[1] - 1
    flat = _flatten(zero_params(d_vocab, n_ctx, n_layers, dtype))
    losses: list[float] = []
    for _ in range(steps):
        leaves = [p.detach().clone().requires_grad_(True) for p in flat]
        loss = paper_loss(tokens, _unflatten(leaves, n_layers), d_vocab)
        grads = torch.autograd.grad(loss, leaves)
        losses.append(float(loss.detach()))
        flat = [p.detach() - lr * g.detach() for p, g in zip(leaves, grads, strict=True)]
    params = _unflatten([p.detach() for p in flat], n_layers)
    if return_losses:
        return params, losses
    return params


# -- bootstrap intervals ------------------------------------------------------------------------


def resample_quantile(values, q):
    """The quantile ``q`` of resample scores: Hyndman and Fan's type 8 ("median_unbiased" in
    numpy), along the last axis."""
    import numpy as np

    return np.quantile(np.asarray(values), q, axis=-1, method="median_unbiased")


def expansion_factor(level: float, blocks: int, resamples: int | None = None) -> float:
    """``t_ν(1 − α/2) / z(1 − α/2)`` with ``1/ν = 1/(B − 1) + p(1 − p)/(R·z²·φ(z)²)``,
    ``p = (1 − level)/2`` (the second term left out without ``resamples``)."""
    from scipy import stats

    upper = 1 - (1 - level) / 2
    z = stats.norm.ppf(upper)
    inverse = 1 / (blocks - 1)
    if resamples is not None:
        p = 1 - upper
        inverse += p * (1 - p) / (resamples * z**2 * stats.norm.pdf(z) ** 2)
    return float(stats.t.ppf(upper, 1 / inverse) / z)
