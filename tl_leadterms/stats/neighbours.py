"""Scorings of the association lists :meth:`CorpusStats.top` prints.

For a statistic ``M`` (``[k, k]``, rows = the query token) and a row token ``i``:

* ``"raw"`` — ``M_ij``, as the paper prints it (Fig. 5). On real corpora frequent tokens
  dominate every list: their rows and columns are large whatever ``i`` is.
* ``"cosine"`` — ``M_ij / (‖M_i,:‖ · ‖M_:,j‖)``: row and column normalised, so a neighbour is
  ranked by how much of *its* mass is shared with ``i``, not by its frequency. For the
  interchangeability ``Σ_B̄ = B̄ᵀB̄`` (a Gram matrix) it is ``Σ_ij / √(Σ_ii Σ_jj)``, the cosine
  of the two tokens' ``B̄`` columns.
* ``"ppmi"`` — positive pointwise mutual information of the positive part ``M⁺ = max(M, 0)``
  read as co-occurrence weights: ``max(0, log(M⁺_ij · S / (r_i · c_j)))`` with ``S = Σ M⁺``,
  ``r_i = Σ_j M⁺_ij``, ``c_j = Σ_i M⁺_ij`` (entries with ``M⁺_ij = 0`` score 0).

A token that never occurs in the corpus, or whose row is zero, has no associations:
:class:`Neighbours` is then empty and its ``note`` says why (no arbitrary zero-score list).

>>> import torch
>>> M = torch.tensor([[4.0, 1.0], [1.0, 1.0]])
>>> [round(float(x), 4) for x in scored_row(M, 0, "cosine", symmetric_gram=False)]
[0.2353, 0.1715]
"""

import math

import torch
from torch import Tensor

from tl_leadterms.errors import LeadTermsError, check_choice

__all__ = ["SCORINGS", "Neighbours", "scored_row"]

SCORINGS = ("raw", "cosine", "ppmi")


class Neighbours(list):
    """A list of ``Neighbour(token, token_id, score)`` with the scoring used and a ``note``
    (non-empty when the list is empty for a reason: the token never occurs, its row is 0)."""

    def __init__(self, items=(), *, scoring: str = "raw", note: str = "") -> None:
        super().__init__(items)
        self.scoring = scoring
        self.note = note

    def __repr__(self) -> str:
        return f"Neighbours({self.note})" if self.note else super().__repr__()


def _safe_inverse(x: Tensor) -> Tensor:
    return torch.where(x > 0, 1.0 / x.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(x))


def scored_row(M: Tensor, i: int, scoring: str, *, symmetric_gram: bool) -> Tensor:
    """Row ``i`` of ``M`` under ``scoring`` (see the module docstring)."""
    check_choice("scoring", scoring, SCORINGS)
    M = M.double()
    if scoring == "raw":
        return M[i]
    if scoring == "cosine":
        if symmetric_gram:
            diag = M.diagonal().clamp_min(0).sqrt()
            return M[i] * _safe_inverse(diag[i] * diag)
        rows, cols = M.norm(dim=1), M.norm(dim=0)
        return M[i] * _safe_inverse(rows[i] * cols)
    P = M.clamp_min(0)
    total, rows, cols = P.sum(), P.sum(1), P.sum(0)
    if not total > 0 or not rows[i] > 0:
        return torch.zeros_like(P[i])
    ratio = P[i] * total * _safe_inverse(rows[i] * cols)
    return torch.where(ratio > 0, ratio.clamp_min(1e-300).log().clamp_min(0), 0.0)


def exclusion_ids(exclude, tokenizer) -> list[int]:
    """``exclude`` as token ids: ``None``, ``"special"`` (the tokenizer's special tokens) or ids."""
    if exclude is None:
        return []
    if isinstance(exclude, str):
        if exclude != "special":
            raise LeadTermsError(
                f"exclude must be None, 'special' or a list of token ids, got {exclude!r}"
            )
        ids = getattr(tokenizer, "all_special_ids", None)
        if ids is None:
            raise LeadTermsError(
                "exclude='special' needs a tokenizer with special tokens (all_special_ids); pass "
                "tokenizer= or list the ids to exclude"
            )
        return [int(t) for t in ids]
    try:
        ids = [int(t) for t in exclude]
    except (TypeError, ValueError) as err:
        raise LeadTermsError(
            f"exclude must be None, 'special' or a list of token ids, got {exclude!r}"
        ) from err
    return ids


def no_associations(token: object, count: float, row: Tensor) -> str:
    """Why ``token`` has no neighbours ("" when it has some)."""
    if count == 0:
        return f"token {token!r} never occurs in the corpus: it has no associations"
    if not bool((row.abs() > 0).any()) or not math.isfinite(float(row.abs().max())):
        return f"token {token!r} has an all-zero row in this statistic: no associations"
    return ""
