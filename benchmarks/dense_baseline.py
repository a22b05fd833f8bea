"""Dense one-hot baseline for the corpus statistics (the formulation the paper's code used).

This is a speed BASELINE for benchmarks, not a test reference: everything is computed with
one-hot tensors X, Y of shape [b, T, V] and batched matmuls / einsums, including an explicit
T x T x T softmax-Jacobian tensor. No vocabulary restriction; ``u = 1 / d_vocab``.

Two passes over the corpus in batches of ``batch_size`` samples:

1. B_bar = (1/NT) sum X^T (Y - u),  Phi_bar = (1/NT) sum (Y - u)^T A_0 X;
   then Sigma_B = B_bar^T B_bar and G_bar = Sigma_B Phi_bar.
2. M = (Y - u) G_bar X^T,  Q[b, t, :] = J[t] M[b, t, :],  Q_bar = (1/NT) sum X^T Q X,
   Delta[d] = (1/NT) sum of the d-th sub-diagonal of Q.

(Using (Y - u) rather than Y in M is equivalent here: without restriction B_bar's rows sum to 0,
so 1^T G_bar = (B_bar 1)^T B_bar Phi_bar = 0 and the u-term vanishes.)

Run ``python benchmarks/dense_baseline.py --n 256 --t 200 --v 3000`` for a timing.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def uniform_causal_attention(n_ctx: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A_0 [T, T]: row t (1-based) is 1/t on columns 1..t."""
    mask = torch.tril(torch.ones(n_ctx, n_ctx, dtype=dtype))
    return mask / mask.sum(dim=1, keepdim=True)


def softmax_jacobian_tensor(n_ctx: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """J [T, T, T] with J[t] = (1/t)(diag(m_t) - m_t m_t^T / t), m_t the length-t prefix mask."""
    m = torch.tril(torch.ones(n_ctx, n_ctx, dtype=dtype))  # m[t] = prefix mask of row t
    t = torch.arange(1, n_ctx + 1, dtype=dtype)
    diag_m = torch.diag_embed(m)  # [T, T, T]
    outer = m.unsqueeze(2) * m.unsqueeze(1)  # [T, T, T]
    return (diag_m - outer / t[:, None, None]) / t[:, None, None]


class _StageClock:
    """Adds wall-clock seconds per stage into a dict (does nothing without one)."""

    def __init__(self, timings: dict[str, float] | None) -> None:
        self.timings = timings
        self._open: dict[str, float] = {}

    def start(self, name: str) -> None:
        self._open[name] = time.perf_counter()

    def stop(self, name: str) -> None:
        if self.timings is not None:
            elapsed = time.perf_counter() - self._open.pop(name)
            self.timings[name] = self.timings.get(name, 0.0) + elapsed

    def __call__(self, name: str) -> "_StageClock":
        self._name = name
        return self

    def __enter__(self) -> None:
        self.start(self._name)

    def __exit__(self, *exc: object) -> None:
        self.stop(self._name)


def _one_hot(tokens: torch.Tensor, d_vocab: int, dtype: torch.dtype) -> torch.Tensor:
    return F.one_hot(tokens.long(), d_vocab).to(dtype)


def dense_baseline_stats(
    tokens: torch.Tensor,
    d_vocab: int,
    *,
    batch_size: int = 32,
    dtype: torch.dtype = torch.float64,
    timings: dict[str, float] | None = None,
) -> dict[str, torch.Tensor]:
    """B_bar, Sigma_B, Phi_bar, G_bar, Q_bar, Delta from dense one-hot batches.

    ``tokens`` is [N, T+1]; matrices are V x V, ``Delta`` has length T. When ``timings`` is a
    dict, the seconds spent on each stage are added to it under "B_bar", "Phi_bar", "Sigma_B",
    "G_bar" and "Q_bar+Delta" (one-hot construction counts towards the stage that uses it).
    """
    clock = _StageClock(timings)
    if tokens.dim() != 2 or tokens.shape[1] < 2:
        raise ValueError("tokens must be [N, T+1] with T >= 1")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    n_samples = tokens.shape[0]
    n_ctx = tokens.shape[1] - 1
    NT = n_samples * n_ctx
    u = 1.0 / d_vocab
    A0 = uniform_causal_attention(n_ctx, dtype)

    # Pass 1: bigram and context statistics.
    B_sum = torch.zeros(d_vocab, d_vocab, dtype=dtype)
    Phi_sum = torch.zeros(d_vocab, d_vocab, dtype=dtype)
    for start in range(0, n_samples, batch_size):
        batch = tokens[start : start + batch_size]
        with clock("B_bar"):
            X = _one_hot(batch[:, :-1], d_vocab, dtype)  # [b, T, V]
            Yc = _one_hot(batch[:, 1:], d_vocab, dtype) - u  # [b, T, V]
            B_sum += torch.einsum("bti,btj->ij", X, Yc)
        with clock("Phi_bar"):
            A0X = torch.einsum("ts,bsv->btv", A0, X)  # [b, T, V]
            Phi_sum += torch.einsum("bti,btj->ij", Yc, A0X)
        del X, Yc, A0X
    B_bar = B_sum / NT
    Phi_bar = Phi_sum / NT
    with clock("Sigma_B"):
        Sigma_B = B_bar.T @ B_bar
    with clock("G_bar"):
        G_bar = Sigma_B @ Phi_bar

    # Pass 2: softmax-Jacobian statistics.
    clock.start("Q_bar+Delta")
    J = softmax_jacobian_tensor(n_ctx, dtype)  # [T, T, T]
    Q_sum = torch.zeros(d_vocab, d_vocab, dtype=dtype)
    Delta_sum = torch.zeros(n_ctx, dtype=dtype)
    for start in range(0, n_samples, batch_size):
        batch = tokens[start : start + batch_size]
        X = _one_hot(batch[:, :-1], d_vocab, dtype)  # [b, T, V]
        Yc = _one_hot(batch[:, 1:], d_vocab, dtype) - u
        M = torch.bmm(torch.matmul(Yc, G_bar), X.transpose(1, 2))  # [b, T, T]
        Q = torch.einsum("tij,btj->bti", J, M)  # [b, T, T]
        XtQ = torch.bmm(X.transpose(1, 2), Q)  # [b, V, T]
        Q_sum += torch.einsum("bvt,btw->vw", XtQ, X)
        for d in range(n_ctx):
            Delta_sum[d] += torch.diagonal(Q, offset=-d, dim1=1, dim2=2).sum()
        del X, Yc, M, Q, XtQ
    Q_bar = Q_sum / NT
    Delta = Delta_sum / NT
    clock.stop("Q_bar+Delta")

    return {
        "B_bar": B_bar,
        "Sigma_B": Sigma_B,
        "Phi_bar": Phi_bar,
        "G_bar": G_bar,
        "Q_bar": Q_bar,
        "Delta": Delta,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Time the dense one-hot baseline.")
    parser.add_argument("--n", type=int, default=256, help="number of samples N")
    parser.add_argument("--t", type=int, default=200, help="context length T")
    parser.add_argument("--v", type=int, default=3000, help="vocabulary size V")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, args.v, (args.n, args.t + 1), generator=gen)
    start = time.perf_counter()
    stats = dense_baseline_stats(tokens, args.v, batch_size=args.batch_size)
    elapsed = time.perf_counter() - start
    print(f"dense baseline N={args.n} T={args.t} V={args.v}: {elapsed:.2f} s")
    print({k: tuple(v.shape) for k, v in stats.items()})


if __name__ == "__main__":
    main()
