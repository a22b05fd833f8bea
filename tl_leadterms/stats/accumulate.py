"""Streaming, mergeable accumulators for the two passes over a corpus (docs/math.md#statistics,
docs/math.md#fast-algebra).

Pass one (:class:`ContextAccumulator`) counts bigram pairs, unigrams and the context map Φ̄; pass
two (:class:`AttentionAccumulator`) needs Ḡ of the whole corpus and accumulates Q̄ and Δ. Both have
``update(batch)``, ``merge(other)`` and ``result()``: shards counted separately and merged equal the
whole corpus. Pickled accumulators carry their tables as numpy arrays, which pickle protocol 5 hands
over out of band.

Every (query ``t``, key ``m <= t``) pair of a window is one update of a flat ``k·k + 1`` table
(:mod:`.tables`): on the CPU by the fused numba kernels of :mod:`.kernels`, elsewhere by one
vectorised ``index_add_``; no one-hot tensor is built."""

from dataclasses import dataclass
from typing import Any

import torch

from tl_leadterms.errors import LeadTermsError, check_choice
from tl_leadterms.stats.definitions import Q_TARGETS, LastTarget, QTargets, key_shift, shift_needed
from tl_leadterms.stats.passes import PassBase, PassShape
from tl_leadterms.stats.tables import (
    add_counts,
    as_numpy,
    flat_parts,
    kernels,
    padded_flat,
    padded_view,
    pair_codes,
)
from tl_leadterms.stats.vocab import KeptVocab

__all__ = ["AttentionAccumulator", "ContextAccumulator", "ContextCounts"]

_COMPACT_AT = 1 << 24  # pending bigram codes kept before they are counted


@dataclass
class ContextCounts:
    """Result of pass one: raw counts and the centred context map."""

    pair_codes: torch.Tensor  # distinct flat codes x*k + y of kept bigrams
    pair_counts: torch.Tensor  # their counts (int64)
    unigram_counts: torch.Tensor  # [k] counts of each kept token among input positions
    Phi_bar: torch.Tensor  # [k, k] target x context
    n_sequences: int
    n_ctx: int


class ContextAccumulator(PassBase):
    """Pass one: bigram pair counts, unigram counts and the context map Φ̄.

    ``Φ̄[i, j] = (1/NT) Σ_n Σ_t (1/t) Σ_{m<=t} [y_t = i][x_m = j] − μ_j``, with
    ``μ_j = (u/NT) Σ_n Σ_m [x_m = j] Σ_{t>=m} 1/t``.

    ``last_target="paper-code"`` counts every window with its last target replaced by token 0
    (the paper's ``pythia.py``; see :mod:`.definitions`).
    """

    what = "ContextAccumulator"

    def __init__(
        self,
        vocab: KeptVocab,
        *,
        n_ctx: int | None = None,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
        backend: str = "auto",
        last_target: LastTarget = "data",
    ) -> None:
        super().__init__(vocab, n_ctx, dtype, device, backend, last_target)
        k = vocab.k
        dev = self.shape.device
        self._phi = torch.zeros(k * k + 1, dtype=dtype, device=dev)
        self._mu = torch.zeros(k + 1, dtype=torch.float64, device=dev)
        self._unigram = torch.zeros(k + 1, dtype=torch.long, device=dev)
        self._pending: list[torch.Tensor] = []
        self._n_pending = 0
        self._codes = torch.zeros(0, dtype=torch.long, device=dev)
        self._counts = torch.zeros(0, dtype=torch.long, device=dev)

    def update(self, batch: torch.Tensor) -> "ContextAccumulator":
        """Add a ``[b, T + 1]`` batch of token windows (ids are checked first)."""
        idx, layout = self._prepare(batch)
        b = idx.shape[0]
        x, y = idx[:, :-1], idx[:, 1:]
        x_row, x_col = flat_parts(x, self.vocab)
        y_row, y_col = flat_parts(y, self.vocab)
        # Φ: pair (target y_t, context x_m) with weight 1/t, for every m <= t.
        if self.backend == "numba":
            kernels().context_pass(as_numpy(x), as_numpy(y), self._phi.numpy(), self.vocab.k)
        else:
            codes = pair_codes(y_row, x_col.index_select(1, layout.key), layout, self.vocab)
            self._phi.index_add_(0, codes, layout.repeated_inv_t(b))
        flat_x = x.reshape(-1)
        self._mu.index_add_(0, flat_x, layout.repeated_tail(b))
        self._unigram += torch.bincount(flat_x, minlength=self.vocab.k + 1)
        # Bigrams (x_t, y_t), kept in sparse form: at most N·T distinct pairs.
        bigram = (x_row + y_col).reshape(-1).long()
        if self.vocab.restricted:
            bigram = bigram[bigram < self.vocab.k * self.vocab.k]
        self._pending.append(bigram)
        self._n_pending += bigram.numel()
        if self._n_pending >= _COMPACT_AT:
            self._compact_pending()
        self.n_sequences += b
        return self

    def _compact_pending(self) -> None:
        if not self._pending:
            return
        codes, counts = torch.unique(torch.cat(self._pending), return_counts=True)
        self._codes, self._counts = add_counts(self._codes, self._counts, codes, counts)
        self._pending, self._n_pending = [], 0

    def merge(self, other: "ContextAccumulator") -> "ContextAccumulator":
        """Add another shard's counts into this one (in place) and return self."""
        self._check_merge(other)
        self._phi += other._phi.to(self._phi.device)
        self._mu += other._mu.to(self._mu.device)
        self._unigram += other._unigram.to(self._unigram.device)
        other._compact_pending()
        self._compact_pending()
        dev = self._codes.device
        self._codes, self._counts = add_counts(
            self._codes, self._counts, other._codes.to(dev), other._counts.to(dev)
        )
        self.n_sequences += other.n_sequences
        return self

    def result(self, *, release: bool = False, dtype: torch.dtype | None = None) -> ContextCounts:
        """Counts so far and the centred Φ̄ (in ``dtype``, default the accumulation dtype).

        By default Φ̄ is a new tensor and the accumulator stays usable. With ``release=True``
        Φ̄ is computed in the accumulator's own table (one ``[k, k]`` table less at peak) and
        the accumulator is finished: further ``update``/``merge``/``result`` calls fail.
        """
        self._check_nonempty()
        self._compact_pending()
        k, nt = self.vocab.k, self.n_positions
        mu = self._mu[:k] / (nt * self.vocab.centre_vocab)
        table = padded_view(self._phi, k)
        phi = table.div_(nt) if release else table / nt
        if release:
            self._release()
        phi -= mu.to(phi.dtype)
        if dtype is not None:
            phi = phi.to(dtype)
        return ContextCounts(
            pair_codes=self._codes.clone(),
            pair_counts=self._counts.clone(),
            unigram_counts=self._unigram[:k].clone(),
            Phi_bar=phi,
            n_sequences=self.n_sequences,
            n_ctx=self.n_ctx,
        )


def _checked_shift(shift: Any, G_bar: torch.Tensor, vocab: KeptVocab, q_targets: str):
    """The per-key term for ``AttentionAccumulator(shift=)``: computed for ``"auto"``, else
    the caller's, refused when it cannot be :func:`key_shift` of these settings."""
    if isinstance(shift, str) and shift == "auto":
        return key_shift(G_bar, vocab, q_targets)
    needed = shift_needed(vocab, q_targets)
    if shift is None and not needed:
        return None
    k = vocab.k
    if not needed or not isinstance(shift, torch.Tensor) or shift.shape != (k + 1,):
        want = f"a [{k + 1}] tensor from key_shift(G_bar, vocab, q_targets)" if needed else "None"
        got = shift if not isinstance(shift, torch.Tensor) else f"a tensor {tuple(shift.shape)}"
        raise LeadTermsError(
            f"shift={got!r} does not fit q_targets={q_targets!r} with this vocabulary: it must "
            f"be {want}, or 'auto' to compute it."
        )
    return shift


def _zeroed_table(table: torch.Tensor | None, size: int, shape: PassShape) -> torch.Tensor:
    """The first ``size`` entries of ``table`` zeroed, or a new zero table when there is none
    (or it is too small, of another dtype or on another device)."""
    same = table is not None and (table.dtype, table.device) == (shape.dtype, shape.device)
    if not (same and table.ndim == 1 and table.numel() >= size and table.is_contiguous()):
        return torch.zeros(size, dtype=shape.dtype, device=shape.device)
    return table[:size].zero_()


class AttentionAccumulator(PassBase):
    """Pass two: the attention statistic Q̄ and the positional statistic Δ, given Ḡ.

    For query t and key j <= t, g = row t of (Y_n − u)ḠX_nᵀ, ḡ_t = (1/t) Σ_{j<=t} g and Q[t, j] = (g
    − ḡ_t)/t; Q̄ = (1/NT) Σ X_nᵀ Q_n X_n and Δ[d] = (1/NT) Σ_n Σ_t Q_n[t, t − d]. Under a
    restriction ``q_targets`` chooses g (:mod:`.definitions`); ``last_target`` must be the one pass
    one was counted with.

    ``rows=(lo, hi)`` restricts it to the queries whose matrix index is in ``[lo, hi)`` (index ``k``
    stands for a dropped token and counts for Δ only): its result is rows ``lo..min(hi, k)-1`` of Q̄
    and the Δ of those queries; row ranges covering ``[0, k]`` add up to the whole (``corpus_stats``
    bounds memory so).

    When several accumulators share one Ḡ: ``shift`` is the per-key term
    :func:`~.definitions.key_shift` of this Ḡ, vocabulary and ``q_targets`` (default ``"auto"``:
    computed here, a ``[k, k]`` reduction), and ``table`` a flat float tensor of this dtype and
    device whose first ``rows·k + 1`` entries become the accumulation table (zeroed here, cheaper
    than a fresh one); the accumulator then owns it until it is finished."""

    what = "AttentionAccumulator"

    def __init__(
        self,
        G_bar: torch.Tensor,
        vocab: KeptVocab,
        *,
        n_ctx: int | None = None,
        device: torch.device | str | None = None,
        backend: str = "auto",
        dtype: torch.dtype | None = None,
        rows: tuple[int, int] | None = None,
        q_targets: QTargets = "centred",
        last_target: LastTarget = "data",
        shift: torch.Tensor | str | None = "auto",
        table: torch.Tensor | None = None,
    ) -> None:
        k = vocab.k
        self.q_targets = check_choice("q_targets", q_targets, Q_TARGETS)
        lo, hi = rows if rows is not None else (0, k + 1)
        if not 0 <= lo < hi <= k + 1:
            raise LeadTermsError(
                f"rows={rows!r} is not a range (lo, hi) with 0 <= lo < hi <= k + 1 = {k + 1}."
            )
        self.rows = (int(lo), int(hi))
        self._n_rows = min(hi, k) - lo
        if G_bar.shape != (k, k):
            raise LeadTermsError(
                f"G_bar has shape {tuple(G_bar.shape)} but the vocabulary has {k} kept tokens; "
                "pass the Ḡ computed from this corpus' pass-one statistics."
            )
        device = G_bar.device if device is None else torch.device(device)
        if device.type == G_bar.device.type and device.index is None:
            device = G_bar.device  # "cuda" means the Ḡ's own "cuda:i": no copy
        super().__init__(vocab, n_ctx, dtype or G_bar.dtype, device, backend, last_target)
        shift = _checked_shift(shift, G_bar, vocab, self.q_targets)  # [k + 1] −u·1ᵀḠ, or None
        self._shift = None if shift is None else shift.to(self.shape.device)
        self._g = padded_flat(G_bar)
        if self._g is None or self._g.device != self.shape.device:
            self._g = torch.zeros(k * k + 1, dtype=G_bar.dtype, device=self.shape.device)
            self._g[: k * k] = G_bar.reshape(-1)
        self._q = _zeroed_table(table, self._n_rows * k + 1, self.shape)  # last slot: pad
        self._delta: torch.Tensor | None = None

    @property
    def table(self) -> torch.Tensor:
        """The flat accumulation table (``result(release=True)`` returns a view of it). Once
        that result has been copied out, it may be handed to a new accumulator's ``table=``."""
        return self._q

    def drop_g_bar(self) -> "AttentionAccumulator":
        """Forget Ḡ (a ``[k, k]`` table) and return self: the sums can still be merged and
        finished, not updated. A shard task calls it so that Ḡ, which every task was given,
        does not travel back with each shard's sums; merging then trusts that every shard
        was counted with the same Ḡ."""
        self._g = None
        return self

    def update(self, batch: torch.Tensor, weights: torch.Tensor | None = None
               ) -> "AttentionAccumulator":  # fmt: skip
        """Add a ``[b, T + 1]`` batch of token windows (ids are checked first); ``weights``
        (``[b]`` non-negative integers, default 1): window ``i`` counted ``weights[i]`` times,
        as if it were repeated (a bootstrap resample's multiplicities)."""
        if weights is not None:
            weights = torch.as_tensor(weights)
            if (weights.dim() != 1 or weights.shape[0] != len(batch)
                    or weights.dtype.is_floating_point or bool((weights < 0).any())):  # fmt: skip
                raise LeadTermsError(
                    f"weights must be {len(batch)} non-negative integers (one per window), got "
                    f"shape {tuple(weights.shape)} and dtype {weights.dtype}"
                )
        if self._g is None:
            raise LeadTermsError(
                "this AttentionAccumulator was shipped without Ḡ (drop_g_bar); it can be merged "
                "and finished but not updated. Build a new one from Ḡ to count more windows."
            )
        idx, layout = self._prepare(batch)
        b, t = idx.shape[0], layout.n_ctx
        x, y = idx[:, :-1], idx[:, 1:]
        if self._delta is None:
            self._delta = torch.zeros(t, dtype=self._q.dtype, device=self._q.device)
        if self.backend == "numba":
            k = self.vocab.k
            q_np, delta_np = self._q.numpy(), self._delta.numpy()
            shift = None if self._shift is None else self._shift.numpy()
            w = None if weights is None else weights.to(torch.float64).numpy()
            kernels().attention_pass(
                as_numpy(x), as_numpy(y), self._g.numpy(), q_np, delta_np, k, self.rows, shift, w
            )
            self.n_sequences += b if weights is None else int(weights.sum())
            return self
        _, x_col = flat_parts(x, self.vocab)
        y_row, _ = flat_parts(y, self.vocab)
        lo, hi = self.rows
        k, pad = self.vocab.k, self._n_rows * self.vocab.k
        in_rows = (x >= lo) & (x < hi)
        x_row = torch.where(in_rows & (x < k), (x - lo) * k, pad).to(x_col.dtype)
        key_part = x_col.index_select(1, layout.key)
        g = self._g.index_select(0, pair_codes(y_row, key_part, layout, self.vocab)).view(b, -1)
        if self._shift is not None:  # + h[x_j] for every target, kept or dropped
            g += self._shift.index_select(0, x.reshape(-1)).view(b, t).index_select(1, layout.key)
        g = g.to(self._q.dtype)
        g_mean = torch.segment_reduce(g, "sum", lengths=layout.row_lengths(b), axis=1)
        g_mean *= layout.inv_pos
        q = g.sub_(g_mean.index_select(1, layout.query)).mul_(layout.inv_t)
        if weights is not None:  # each window's terms counted weights[i] times
            q.mul_(weights.to(q.device, q.dtype)[:, None])
        codes = x_row.index_select(1, layout.query).add_(key_part).clamp_(max=pad)
        self._q.index_add_(0, codes.view(-1), q.view(-1))
        if self.rows != (0, k + 1):  # Δ of this range's queries only
            q.mul_(in_rows.index_select(1, layout.query))
        self._delta.index_add_(0, layout.offset, q.sum(0))  # Δ[t - m] += Σ_batch q
        self.n_sequences += b if weights is None else int(weights.sum())
        return self

    def merge(self, other: "AttentionAccumulator") -> "AttentionAccumulator":
        """Add another shard's sums into this one (in place) and return self."""
        self._check_merge(other)
        if self.rows != other.rows:
            raise LeadTermsError(
                f"cannot merge AttentionAccumulators over different query rows: {self.rows} vs "
                f"{other.rows}; merge shards of the same row range."
            )
        if self.q_targets != other.q_targets:
            raise LeadTermsError(
                f"cannot merge AttentionAccumulators with q_targets={self.q_targets!r} and "
                f"{other.q_targets!r}; build every shard with the same q_targets=."
            )
        shipped = self._g is None or other._g is None  # see drop_g_bar
        if not shipped and not torch.equal(self._g, other._g.to(self._g.device)):
            raise LeadTermsError(
                "cannot merge AttentionAccumulators built from different Ḡ; pass two of every "
                "shard must use the Ḡ of the whole corpus (merge the pass-one shards first)."
            )
        self._q += other._q.to(self._q.device)
        if other._delta is not None:
            if self._delta is None:
                self._delta = torch.zeros_like(other._delta, device=self._q.device)
            self._delta += other._delta.to(self._delta.device)
        self.n_sequences += other.n_sequences
        return self

    def result(
        self, *, release: bool = False, dtype: torch.dtype | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q_bar [rows, k], Delta [T])`` normalised by N·T (in ``dtype``, default accumulation).

        ``Q_bar`` is ``[k, k]`` unless the accumulator covers a row range only. New tensors by
        default; ``release=True`` reuses the accumulator's table for Q̄ and finishes the accumulator
        (see :meth:`ContextAccumulator.result`)."""
        self._check_nonempty()
        k, nt = self.vocab.k, self.n_positions
        table = self._q[: self._n_rows * k].view(self._n_rows, k)
        q_bar = table.div_(nt) if release else table / nt
        if release:
            self._release()
        delta = self._delta / nt
        if dtype is not None:
            q_bar, delta = q_bar.to(dtype), delta.to(dtype)
        return q_bar, delta
