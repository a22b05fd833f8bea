"""Scoring a layer's heads against the predicted attention, all heads at once.

For one layer, ``actual`` holds every head's pattern ``[H, B, q, k]`` and ``scores`` the
predicted scores ``X Q̄ Xᵀ + DM(Δ)`` ``[B, q, k]`` (``−inf`` above the diagonal). Per head:

* the mean Jensen-Shannon divergence between its rows and ``S(c·scores)``, with ``c`` fixed or
  fitted: a log-spaced scan shared by all heads (one softmax per grid point), widened a decade
  at a time while some head's best value sits at an end, then a golden-section search per head
  run for all heads together; ``JS = ½Σp log p + ½Σq log q − Σm log m`` with the ``p log p``
  part computed once;
* the mean Spearman correlation of its rows with the scores, from average ranks found by
  sorting (``O(n log n)`` per row; ties share their mean rank); the scores' ranks are shared.

Only query rows ``2..T`` count: the first query attends to itself alone.
"""

import itertools
import math

import torch
from torch import Tensor

__all__ = ["LayerScores", "average_ranks", "score_layer", "score_ranks"]

GRID_STEP = 2  # grid points per decade of c in the first scan (one per decade when widening)
GRID_START = (-3.0, 6.0)  # log10 c of the first scan
GRID_LIMIT = (-12.0, 15.0)  # the furthest the scan widens
_FLAT = 1e-9  # relative change of the loss over a decade below which a limit is reached
_GOLDEN_ITERATIONS = 22  # one new JS evaluation each; shrinks the bracket by 0.618^22 ≈ 2.5e-5


def average_ranks(x: Tensor, valid: Tensor) -> Tensor:
    """0-based average ranks of ``x`` along the last axis among the ``valid`` entries."""
    filled = x.masked_fill(~valid, math.inf).contiguous()
    ordered = filled.sort(-1).values
    below = torch.searchsorted(ordered, filled, side="left")
    upto = torch.searchsorted(ordered, filled, side="right")
    return (below + (upto - below - 1) / 2).to(torch.float64)


def _centred_ranks(x: Tensor, valid: Tensor, n: Tensor) -> Tensor:
    return torch.where(valid, average_ranks(x, valid) - (n - 1) / 2, 0.0)


def score_ranks(scores: Tensor) -> Tensor:
    """Centred average ranks of predicted scores ``[B, q, k]`` over each row's valid keys, for
    :meth:`LayerScores.rank_correlation` (query rows ``2..T``, as the layer keeps them)."""
    scores = scores[..., 1:, :].to(torch.float64)
    valid = torch.isfinite(scores)
    return _centred_ranks(scores, valid, valid.sum(-1, keepdim=True).to(torch.float64))


def _entropy_part(p: Tensor) -> Tensor:
    """``Σ p log p`` over the last axis (0·log 0 = 0)."""
    return torch.xlogy(p, p).sum(-1)


def _row_blocks(valid: Tensor, n_blocks: int = 4) -> list[tuple[slice, int]]:
    """Contiguous blocks of query rows, each with the number of keys its rows can reach."""
    reach = valid.flatten(0, -3).any(0)  # [rows, keys]: any sequence has this key valid
    last = torch.where(reach, torch.arange(reach.shape[-1]), -1).amax(-1) + 1  # per row
    n = reach.shape[0]
    edges = sorted({round(i * n / n_blocks) for i in range(n_blocks + 1)})
    return [
        (slice(a, b), max(1, int(last[a:b].max()))) for a, b in itertools.pairwise(edges) if b > a
    ]


class LayerScores:
    """The per-head agreement of one layer; see the module docstring."""

    def __init__(self, actual: Tensor, scores: Tensor, dtype: torch.dtype = torch.float64) -> None:
        self.actual = actual[..., 1:, :].to(dtype)  # [H, B, q-1, k]
        self.scores = scores[..., 1:, :].to(dtype)  # [B, q-1, k]
        self.valid = torch.isfinite(self.scores)
        finite = self.scores.masked_fill(~self.valid, 0.0)
        bias = torch.zeros_like(finite).masked_fill(~self.valid, torch.finfo(dtype).min / 4)
        # causal rows: a block of rows only needs the keys up to its last valid one, so the JS
        # sums run over about 5/8 of the [q, k] square (blocks of rows, each cut to its width)
        self._blocks = [
            (finite[..., rows, :width], bias[..., rows, :width], self.actual[..., rows, :width])
            for rows, width in _row_blocks(self.valid)
        ]
        self._n_rows = self.scores.shape[-3] * self.scores.shape[-2]  # B · (q − 1)
        self._p_log_p = _entropy_part(self.actual).mean((-2, -1))  # [H], mean over rows
        self._actual_ranks: Tensor | None = None

    def js(self, scale: Tensor | float) -> Tensor:
        """Mean JS divergence per head at per-head scales ``scale`` ``[H]`` (or one scalar)."""
        scale = torch.as_tensor(scale, dtype=self.scores.dtype).reshape(-1, 1, 1, 1)
        q_log_q = m_log_m = 0.0
        for finite, bias, actual in self._blocks:
            # masked keys get a finite, hugely negative logit: q = 0 there, q·log q = 0 exactly
            log_q = torch.log_softmax(scale * finite + bias, dim=-1)
            q = log_q.exp()
            q_log_q = q_log_q + (q * log_q).sum((-3, -2, -1))
            m = 0.5 * (actual + q)
            m_log_m = m_log_m + torch.xlogy(m, m).sum((-3, -2, -1))
        total = 0.5 * self._p_log_p + (0.5 * q_log_q - m_log_m) / self._n_rows
        return total.clamp(min=0.0)

    def rank_correlation(self, ranks: Tensor | None = None) -> Tensor:
        """Mean Spearman correlation per head over rows with at least 3 keys ``[H]``.

        ``ranks``: :func:`score_ranks` of other predicted scores with the same causal mask (a
        permutation null's draw); the pattern's ranks are computed once and reused.
        """
        n = self.valid.sum(-1, keepdim=True).to(torch.float64)
        rs = _centred_ranks(self.scores, self.valid, n) if ranks is None else ranks
        if self._actual_ranks is None:
            self._actual_ranks = _centred_ranks(self.actual, self.valid.expand_as(self.actual), n)
        ra = self._actual_ranks
        num = (ra * rs).sum(-1)
        den = (ra.square().sum(-1) * rs.square().sum(-1)).sqrt()
        rho = torch.where((n.squeeze(-1) >= 3) & (den > 0), num / den.clamp(min=1e-300), math.nan)
        counted = ~rho.isnan()
        total = torch.where(counted, rho, 0.0).sum((-2, -1))
        count = counted.sum((-2, -1))
        return torch.where(count > 0, total / count.clamp(min=1), math.nan)

    def fit_scale(self, coarse: "LayerScores | None" = None) -> tuple[Tensor, Tensor]:
        """Per head the ``c`` minimising the mean JS divergence, and whether it hit the limit.

        ``coarse`` (the same layer in a cheaper dtype) runs the grid scan; the golden-section
        refinement always runs on this one.
        """
        scan_js = (coarse or self).js
        exponents: list[float] = []
        losses: list[Tensor] = []

        def scan(lo: float, hi: float, per_decade: int) -> None:
            for e in torch.linspace(lo, hi, round((hi - lo) * per_decade) + 1).tolist():
                e = round(e, 6)
                if e not in exponents:
                    exponents.append(e)
                    losses.append(scan_js(10.0**e))

        low, high = GRID_START
        scan(low, high, GRID_STEP)
        while True:
            order = sorted(range(len(exponents)), key=exponents.__getitem__)
            grid = torch.tensor([exponents[i] for i in order], dtype=torch.float64)
            table = torch.stack([losses[i] for i in order], dim=-1).double()  # [H, grid]
            best_index = table.argmin(-1)
            best = grid[best_index]
            # a head whose loss no longer changes towards a limit has reached it (c → 0 is
            # uniform attention, c → ∞ the argmax): widening further cannot move its optimum
            flat_low = (table[:, 0] - table[:, 1]).abs() <= _FLAT * table[:, 0] + 1e-15
            flat_high = (table[:, -1] - table[:, -2]).abs() <= _FLAT * table[:, -1] + 1e-15
            if bool(((best <= low) & ~flat_low).any()) and low > GRID_LIMIT[0]:
                low -= 1.0
                scan(low, low, 1)
            elif bool(((best >= high) & ~flat_high).any()) and high < GRID_LIMIT[1]:
                high += 1.0
                scan(high, high, 1)
            else:
                break
        at_bound = (best <= low) | (best >= high)
        # the bracket: the best grid point's neighbours
        left = grid[(best_index - 1).clamp(min=0)] * math.log(10)
        right = grid[(best_index + 1).clamp(max=len(grid) - 1)] * math.log(10)
        return self._golden(left.to(self.scores.dtype), right.to(self.scores.dtype)), at_bound

    def _golden(self, low: Tensor, high: Tensor) -> Tensor:
        """Golden-section search of ``log c`` in ``[low, high]`` per head, all heads at once,
        one JS evaluation (for every head) per iteration."""
        ratio = (math.sqrt(5) - 1) / 2
        a, b = high - ratio * (high - low), low + ratio * (high - low)
        fa, fb = self.js(a.exp()), self.js(b.exp())
        for _ in range(_GOLDEN_ITERATIONS):
            left = fa < fb  # the minimum lies in [low, b]
            high = torch.where(left, b, high)
            low = torch.where(left, low, a)
            new = torch.where(left, high - ratio * (high - low), low + ratio * (high - low))
            f_new = self.js(new.exp())
            a, b, fa, fb = (
                torch.where(left, new, b),
                torch.where(left, a, new),
                torch.where(left, f_new, fb),
                torch.where(left, fa, f_new),
            )
        return (0.5 * (low + high)).exp()


def score_layer(
    actual: Tensor, scores: Tensor, scale: float | None, layer: LayerScores | None = None
) -> list[dict]:
    """Per head: JS divergence, rank correlation and the scale used (fixed or fitted).

    ``layer``: the :class:`LayerScores` of ``actual`` and ``scores`` when already built.
    """
    layer = LayerScores(actual, scores) if layer is None else layer
    n_heads = layer.actual.shape[0]
    if scale is None:  # the grid scan in float32 (half the time), the refinement in float64
        scales, at_bound = layer.fit_scale(coarse=LayerScores(actual, scores, torch.float32))
    else:
        scales = torch.full((n_heads,), float(scale), dtype=torch.float64)
        at_bound = torch.zeros(n_heads, dtype=torch.bool)
    js, rho = layer.js(scales), layer.rank_correlation()
    return [
        {"js_divergence": float(js[h]), "rank_correlation": float(rho[h]),
         "scale": float(scales[h]), "scale_at_bound": bool(at_bound[h])}
        for h in range(n_heads)
    ]  # fmt: skip
