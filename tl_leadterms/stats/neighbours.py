"""Scorings of the association lists :meth:`CorpusStats.top` prints.

For a statistic ``M`` (``[k, k]``, rows = the query token), row ``i`` is scored ``"raw"`` (as the
paper prints it), ``"cosine"`` (row and column normalised) or ``"ppmi"`` (positive pointwise mutual
information of ``M``'s positive part); the formulas and the defaults (:data:`DEFAULT_SCORING`,
:data:`DEFAULT_EXCLUDE`): docs/guides/corpus-statistics.md#the-scorings. A token that never occurs,
or whose row is zero, has no associations: :class:`Neighbours` is then empty and its ``note`` says
why.

>>> import torch
>>> M = torch.tensor([[4.0, 1.0], [1.0, 1.0]])
>>> [round(float(x), 4) for x in scored_row(M, 0, "cosine", symmetric_gram=False)]
[0.2353, 0.1715]
"""

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from tl_leadterms.errors import LeadTermsError, check_choice
from tl_leadterms.stats.scoring import DEFAULT_EXCLUDE, DEFAULT_SCORING, SCORINGS

__all__ = [
    "DEFAULT_EXCLUDE",
    "DEFAULT_SCORING",
    "SCORINGS",
    "Neighbours",
    "RowScorer",
    "best",
    "fed_scorer",
    "row_blocks",
    "scored_row",
]


class Neighbours(list):
    """A list of ``Neighbour(token, token_id, score)`` with the scoring used and a ``note``
    (non-empty when the list is empty for a reason: the token never occurs, its row is 0)."""

    def __init__(self, items=(), *, scoring: str = DEFAULT_SCORING, note: str = "") -> None:
        super().__init__(items)
        self.scoring = scoring
        self.note = note

    def __repr__(self) -> str:
        return f"Neighbours({self.note})" if self.note else super().__repr__()


def _safe_inverse(x: Tensor) -> Tensor:
    return torch.where(x > 0, 1.0 / x.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(x))


_BLOCK_ELEMENTS = 1 << 22  # entries of a row block (32 MiB in float64)


def block_rows(k: int) -> int:
    """Rows of one row block of a ``[k, k]`` matrix fed to :class:`RowScorer` (its column
    totals are sums over these blocks, so whoever records them uses the same)."""
    return max(1, _BLOCK_ELEMENTS // max(k, 1))


class RowScorer:
    """Rows ``indices`` of a ``[k, k]`` statistic under ``scoring``, from its row blocks.

    Feed every row block once, in any order, with ``update(start, block)``; it keeps the rows asked
    for and the column totals the scoring needs (squared column norms for ``"cosine"``, the diagonal
    for the Gram cosine, positive column sums for ``"ppmi"``), never the whole matrix. Then
    ``scored(i)`` and ``raw(i)``; :func:`scored_row` is this on a matrix in memory.

    >>> M = torch.tensor([[4.0, 1.0], [1.0, 1.0]])
    >>> scorer = RowScorer(2, [0], "cosine", symmetric_gram=False)
    >>> scorer.update(1, M[1:]); scorer.update(0, M[:1])
    >>> [round(float(x), 4) for x in scorer.scored(0)]
    [0.2353, 0.1715]
    """

    def __init__(self, k: int, indices, scoring: str, *, symmetric_gram: bool) -> None:
        check_choice("scoring", scoring, SCORINGS)
        self.k, self.scoring, self.symmetric_gram = k, scoring, symmetric_gram
        self.indices = {int(i) for i in indices}
        self.rows: dict[int, Tensor] = {}
        self._totals = torch.zeros(k, dtype=torch.float64)  # per column (diagonal: per row)

    def update(self, start: int, block: Tensor) -> None:
        """Take rows ``start ... start + len(block) - 1`` of the matrix."""
        block = block.double()
        n = block.shape[0]
        for i in self.indices & set(range(start, start + n)):
            self.rows[i] = block[i - start].clone()
        if self.scoring == "cosine" and self.symmetric_gram:
            self._totals[start : start + n] = block.diagonal(offset=start)
        elif self.scoring == "cosine":
            self._totals += block.square().sum(0)
        elif self.scoring == "ppmi":
            self._totals += block.clamp_min(0).sum(0)

    @property
    def totals(self) -> Tensor:
        """The column totals read so far (float64 ``[k]``; the diagonal for the Gram cosine,
        nothing for ``"raw"``)."""
        return self._totals

    def raw(self, i: int) -> Tensor:
        """Row ``i`` as stored (float64)."""
        if i not in self.rows:
            raise LeadTermsError(f"row {i} was not asked for or not read (rows {self.indices})")
        return self.rows[i]

    def scored(self, i: int, row: Tensor | None = None) -> Tensor:
        """Row ``i`` under the scoring (see the module docstring); ``row``: row ``i`` itself,
        when it was not kept (a scorer of every row keeps none of them)."""
        return self.scored_block(i, (self.raw(i) if row is None else row)[None])[0]

    def scored_block(self, start: int, block: Tensor) -> Tensor:
        """Rows ``start, start + 1, ...`` (``block``) under the scoring, entry for entry what
        :meth:`scored` gives each: a row's own reductions (its norm, its sum) are taken row by
        row, the elementwise rest on the whole block at once."""
        block = block.double()
        if self.scoring == "raw":
            return block.clone()
        if self.scoring == "cosine" and self.symmetric_gram:
            diag = self._totals.clamp_min(0).sqrt()
            return block * _safe_inverse(diag[start : start + len(block), None] * diag)
        if self.scoring == "cosine":
            norms = torch.stack([row.norm() for row in block])[:, None]
            return block * _safe_inverse(norms * self._totals.sqrt())
        return torch.stack([self._ppmi(row) for row in block])

    def _ppmi(self, row: Tensor) -> Tensor:
        P = row.clamp_min(0)
        total, row_sum = self._totals.sum(), P.sum()
        if not total > 0 or not row_sum > 0:
            return torch.zeros_like(P)
        ratio = P * total * _safe_inverse(row_sum * self._totals)
        return torch.where(ratio > 0, ratio.clamp_min(1e-300).log().clamp_min(0), 0.0)


def row_blocks(M: Any) -> Iterator[tuple[int, Tensor]]:
    """``(start, rows)`` of a ``[k, k]`` matrix in :func:`block_rows` blocks; ``M`` is a tensor
    or anything with ``row_block(start, stop)`` (:class:`~.algebra.CentredBigram`: its dense
    rows, entry for entry, without the ``[k, k]`` table)."""
    k = M.shape[1] if isinstance(M, Tensor) else M.k
    for start in range(0, k, block_rows(k)):
        stop = min(k, start + block_rows(k))
        yield start, (M[start:stop] if isinstance(M, Tensor) else M.row_block(start, stop))


def fed_scorer(M: Any, indices, scoring: str, *, symmetric_gram: bool) -> RowScorer:
    """A :class:`RowScorer` that has read every row block of ``M`` (see :func:`row_blocks`)."""
    k = M.shape[1] if isinstance(M, Tensor) else M.k
    scorer = RowScorer(k, indices, scoring, symmetric_gram=symmetric_gram)
    for start, block in row_blocks(M):
        scorer.update(start, block)
    return scorer


def scored_row(M: Tensor, i: int, scoring: str, *, symmetric_gram: bool) -> Tensor:
    """Row ``i`` of ``M`` under ``scoring`` (see the module docstring), read in row blocks."""
    return fed_scorer(M, [i], scoring, symmetric_gram=symmetric_gram).scored(i)


def best(row: Tensor, k: int) -> list[tuple[float, int]]:
    """The ``k`` largest finite entries of ``row`` as ``(score, index)``, best first (equal
    scores in index order, as ``tl-leadterms top`` lists them).

    Only the entries at or above the ``k``-th largest (``topk`` finds it) are sorted, not the
    whole row.

    >>> best(torch.tensor([0.5, -float("inf"), 2.0]), 5)
    [(2.0, 2), (0.5, 0)]
    >>> best(torch.tensor([0.0, 3.0, 0.0, 0.0, 1.0]), 3)  # ties at the cut: lower index first
    [(3.0, 1), (1.0, 4), (0.0, 0)]
    """
    n = min(k, int(torch.isfinite(row).sum()))
    if n == 0:
        return []
    cut = row.topk(n).values[-1]
    idx = (row >= cut).nonzero().flatten()  # in index order
    scores, order = torch.sort(row[idx], descending=True, stable=True)  # ties: lower index
    return list(zip(scores[:n].tolist(), idx[order[:n]].tolist(), strict=True))


def exclusion_ids(exclude, tokenizer) -> list[int]:
    """``exclude`` as token ids: ``None`` or ``()`` (none), ``"special"`` (the tokenizer's
    special tokens; none when there is no tokenizer, as for statistics of bare token ids) or
    ids.

    >>> exclusion_ids("special", None), exclusion_ids((), None), exclusion_ids([3, 1], None)
    ([], [], [3, 1])
    """
    if exclude is None:
        return []
    if isinstance(exclude, str):
        if exclude != "special":
            raise LeadTermsError(
                f"exclude must be 'special', None or a list of token ids, got {exclude!r}"
            )
        ids = getattr(tokenizer, "all_special_ids", None) if tokenizer is not None else None
        return [int(t) for t in ids or ()]
    try:
        return [int(t) for t in exclude]
    except (TypeError, ValueError) as err:
        raise LeadTermsError(
            f"exclude must be None, 'special' or a list of token ids, got {exclude!r}"
        ) from err


def no_associations(token: object, count: int, zero_row: bool) -> str:
    """Why ``token`` has no neighbours ("" when it has some): it never occurs, or its row is
    zero (``zero_row``: no entry above 0 in absolute value, or a non-finite one)."""
    if count == 0:
        return f"token {token!r} never occurs in the corpus: it has no associations"
    if zero_row:
        return f"token {token!r} has an all-zero row in this statistic: no associations"
    return ""
