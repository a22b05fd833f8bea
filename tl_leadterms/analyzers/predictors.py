"""Next-token predictors built from corpus statistics: the leading-term model and two baselines.

:class:`LeadingPredictor` evaluates the paper model whose weights are their leading terms
(docs/math.md#leading-terms) without building that model: the three maps ``Q̄``, ``Φ̄ᵀB̄ᵀ`` and
``B̄`` are held once (not once per layer) and the first layer, whose input is one-hot, is read by
gathers (``X Q̄ Xᵀ`` is ``Q̄[x_t, x_j]``, ``X Φ̄ᵀB̄ᵀ`` is a row gather), so a one-layer model costs
``O(n·T²·k)`` plus one ``[n·T, k] × [k, k]`` product for the output, and each further layer two
more such products. The coefficients are arguments (tensors allowed), so they can be fitted by
autograd.

Tokens outside a restricted vocabulary (kept index ``k``) are zero one-hot rows, as in the
statistics. Their next-token probability is reported as one *bucket*: each dropped token gets
the mean logit that the zero row sums of the full-vocabulary ``B̄`` imply (the sum of its
logits over all tokens is zero), so the bucket's logit is ``log(d_vocab − k) − Σ_kept logits /
(d_vocab − k)``.

>>> import torch
>>> from tl_leadterms import corpus_stats
>>> stats = corpus_stats(torch.randint(0, 9, (8, 6)), d_vocab=9, progress=False)
>>> pred = LeadingPredictor(stats, dtype=torch.float64)
>>> x = torch.tensor([[1, 2, 3]])
>>> logits = pred.logits(x, 0.5, 0.0, 0.0, n_layers=2)  # no value term: the bigram predictor
>>> torch.allclose(logits, 0.5 * stats.B_bar[x])
True
"""

import math

import torch
from jaxtyping import Float, Int
from torch import Tensor

from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import term

__all__ = ["LeadingPredictor", "unigram_log_probs", "with_bucket"]

# positions x kept tokens per chunk of windows: bounds the [n, T, k] residual stream
_CHUNK_ELEMENTS = 2**24


def _padded(M: Tensor, dtype: torch.dtype, device) -> Tensor:
    """``M`` with a zero row (and column, for a matrix) appended for the dropped tokens."""
    M = M.to(device=device, dtype=dtype)
    if M.dim() == 1:
        return torch.cat([M, M.new_zeros(1)])
    return torch.nn.functional.pad(M, (0, 1, 0, 1))


class LeadingPredictor:
    """The leading-term model of ``stats`` as a function of its three coefficients.

    Args:
        stats: corpus statistics (with ``Q_bar``, ``Phi_bar``, ``Delta``).
        dtype: compute precision (float32 by default; the statistics are usually float64).
        device: where to compute.
        permutation: optional ``[k]`` relabelling of the theory's tokens (the null): every map
            is re-indexed by it on rows and columns.
    """

    def __init__(self, stats: CorpusStats, *, dtype=torch.float32, device=None,
                 permutation: Tensor | None = None) -> None:  # fmt: skip
        device = torch.device(device) if device is not None else stats.device
        maps = {w: term(w).target.build(stats) for w in ("W", "V", "W_O")}
        if permutation is not None:
            perm = permutation.to(maps["W"].device)
            maps = {w: M[perm][:, perm] for w, M in maps.items()}
        self.Q = _padded(maps["W"], dtype, device)  # Q̄ [query, key]
        self.R = _padded(maps["V"], dtype, device)  # Φ̄ᵀB̄ᵀ [context, current]
        self.B = _padded(maps["W_O"], dtype, device)  # B̄ [current, next]
        self.Delta = stats.Delta.to(device=device, dtype=dtype)
        self.k, self.d_vocab = stats.k, stats.d_vocab
        self.dtype, self.device = dtype, device

    def _bias(self, T: int, c_W) -> Tensor:
        """``c_W·DM(Δ)`` with the causal mask, ``[T, T]``."""
        if self.Delta.shape[0] < T:
            pad = self.Delta.new_zeros(T - self.Delta.shape[0])
            delta = torch.cat([self.Delta, pad])
        else:
            delta = self.Delta
        offset = torch.arange(T, device=self.device)[:, None] - torch.arange(T, device=self.device)
        bias = c_W * delta[offset.clamp(min=0)]
        return bias.masked_fill(offset < 0, -math.inf)

    def logits(
        self, x: Int[Tensor, "n T"], c_O, c_V, c_W, *, n_layers: int = 1
    ) -> Float[Tensor, "n T k"]:
        """Next-token logits over the kept tokens for kept indices ``x`` (``k`` = dropped).

        Windows are processed in chunks; the coefficients may be tensors that require grad.
        """
        n, T = x.shape
        chunk = max(1, _CHUNK_ELEMENTS // (T * (self.k + 1)))
        parts = [self._chunk(x[i : i + chunk].to(self.device), c_O, c_V, c_W, n_layers)
                 for i in range(0, n, chunk)]  # fmt: skip
        return torch.cat(parts)

    def bigram_logits(self, x: Int[Tensor, "n T"], c_O) -> Float[Tensor, "n T k"]:
        """The ``W_O`` term alone, ``c_O·B̄[x_t]`` (what :meth:`logits` gives with ``c_V = 0``)."""
        return (c_O * self.B[x.to(self.device)])[..., : self.k]

    def _chunk(self, x: Tensor, c_O, c_V, c_W, n_layers: int) -> Tensor:
        bias = self._bias(x.shape[1], c_W)
        scores = c_W * self.Q[x[:, :, None], x[:, None, :]] + bias  # layer 1: gathers only
        H = c_V * (torch.softmax(scores, dim=-1) @ self.R[x])  # h^(1) − X
        for _ in range(1, n_layers):
            hQ = self.Q[x] + H @ self.Q
            keys = hQ.gather(2, x[:, None, :].expand(-1, x.shape[1], -1))  # ⟨hQ_t, e_{x_j}⟩
            scores = c_W * (keys + hQ @ H.transpose(1, 2)) + bias
            H = H + c_V * (torch.softmax(scores, dim=-1) @ (self.R[x] + H @ self.R))
        return (c_O * (self.B[x] + H @ self.B))[..., : self.k]


def with_bucket(logits: Float[Tensor, "... k"], d_vocab: int) -> Float[Tensor, "... outcomes"]:
    """Log-probabilities over the kept tokens plus, when ``k < d_vocab``, the dropped bucket."""
    k = logits.shape[-1]
    dropped = d_vocab - k
    if dropped > 0:
        mean = -logits.sum(-1, keepdim=True) / dropped
        logits = torch.cat([logits, mean + math.log(dropped)], dim=-1)
    return torch.log_softmax(logits, dim=-1)


def unigram_log_probs(stats: CorpusStats, dtype=torch.float32, device=None) -> Tensor:
    """``log`` of the add-one smoothed unigram over the kept tokens (and the bucket).

    The counts are the input-position frequencies ``α``; the bucket holds every position whose
    token is not kept.
    """
    counts = stats.unigram_counts.to(torch.float64)
    if stats.k < stats.d_vocab:
        counts = torch.cat([counts, (stats.n_positions - counts.sum()).reshape(1)])
    probs = (counts + 1.0) / (counts.sum() + counts.numel())
    return probs.log().to(dtype=dtype, device=device or stats.device)
