"""The scorings of association lists and their defaults, in plain Python floats
(:func:`score_row`, for ``tl-leadterms top``, which imports neither numpy nor torch); the torch
row scorer of :mod:`tl_leadterms.stats.neighbours` computes the same, operation for operation
(the formulas and defaults: docs/guides/corpus-statistics.md#the-scorings).

>>> m = [[4.0, 1.0], [1.0, 1.0]]
>>> column_sq = [sum(r[j] ** 2 for r in m) for j in range(2)]
>>> [round(x, 4) for x in score_row(m[0], "cosine", column_sq)]
[0.2353, 0.1715]
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

from tl_leadterms.errors import LeadTermsError

__all__ = ["DEFAULT_EXCLUDE", "DEFAULT_SCORING", "MEANINGS", "SCORINGS", "best", "score_row",
           "single_token_id"]  # fmt: skip

SCORINGS = ("raw", "cosine", "ppmi")
DEFAULT_SCORING = "cosine"
DEFAULT_EXCLUDE = "special"
#: what a neighbour ``j`` of word ``i`` scores under each scoring, in words (for a legend)
MEANINGS = {
    "cosine": "M_ij / (‖row i‖·‖column j‖): the share of each neighbour's own mass it has with "
    "the word, so a frequent token does not top every list (for Σ_B̄ the cosine of the two "
    "tokens' B̄ columns)",
    "ppmi": "max(0, log of how much more often than chance the word and the neighbour go "
    "together in M's positive part)",
    "raw": "the statistic's entry M_ij as the paper prints it (frequent tokens top every list)",
}


_TINY = sys.float_info.min  # torch.finfo(torch.float64).tiny


def _inv(x: float) -> float:
    """``neighbours._safe_inverse`` of one float64."""
    return 1.0 / max(x, _TINY) if x > 0 else 0.0


def score_row(
    row: Sequence[float], scoring: str, totals: Sequence[float], *, index: int | None = None
) -> list[float]:
    """:class:`~tl_leadterms.stats.neighbours.RowScorer`'s ``scored`` in Python floats: row
    ``row`` of a statistic under ``scoring`` given its column ``totals`` (squared column norms
    for ``"cosine"``, positive column sums for ``"ppmi"``; with ``index`` the row's position,
    the diagonal of a Gram matrix for its cosine). The same operations in the same order as the
    torch scorer, so only its two reductions (the row norm, the sum of the totals) may differ
    in the last bit.

    >>> [round(x, 4) for x in score_row([4.0, 1.0], "cosine", [17.0, 2.0])]
    [0.2353, 0.1715]
    """
    if scoring == "raw":
        return list(row)
    if scoring == "cosine" and index is not None:
        d = [math.sqrt(max(t, 0.0)) for t in totals]
        di = d[index]
        return [r * _inv(di * dj) for r, dj in zip(row, d, strict=True)]
    if scoring == "cosine":
        norm = math.hypot(*row)
        return [r * _inv(norm * math.sqrt(t)) for r, t in zip(row, totals, strict=True)]
    positive = [max(r, 0.0) for r in row]
    total, row_sum = math.fsum(totals), math.fsum(positive)
    if not total > 0 or not row_sum > 0:
        return [0.0] * len(positive)
    out = []
    for p, t in zip(positive, totals, strict=True):
        ratio = p * total * _inv(row_sum * t)
        out.append(max(math.log(max(ratio, 1e-300)), 0.0) if ratio > 0 else 0.0)
    return out


def best(scores: Sequence[float], n: int) -> list[int]:
    """The positions of the ``n`` largest finite ``scores``, best first, equal scores in index
    order (as :func:`tl_leadterms.stats.neighbours.best` ranks them).

    >>> best([0.5, -float("inf"), 2.0, 0.5], 3)
    [2, 0, 3]
    """
    finite = [j for j, x in enumerate(scores) if math.isfinite(x)]
    return sorted(finite, key=lambda j: -scores[j])[:n]


def single_token_id(word: str, tokenizer: Any) -> int:
    """The id of ``word`` when the tokenizer reads it as exactly one known token; a
    :class:`~tl_leadterms.errors.LeadTermsError` naming the problem otherwise (torch-free, so
    the command line's ``top`` and :meth:`CorpusStats.top` share it)."""
    ids = tokenizer.encode(word, add_special_tokens=False)
    if len(ids) != 1:
        raise LeadTermsError(
            f"{word!r} is {len(ids)} tokens ({ids}) for this tokenizer; pass a single token or "
            "its id."
        )
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is not None and ids[0] == unk and word != getattr(tokenizer, "unk_token", None):
        raise LeadTermsError(
            f"{word!r} is not in the tokenizer's vocabulary (it encodes to the unknown token "
            f"{tokenizer.unk_token!r}); pick a word the tokenizer knows"
        )
    return int(ids[0])
