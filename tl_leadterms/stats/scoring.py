"""The scorings of association lists and their defaults, in numpy (:func:`score`) or in plain
Python floats (:func:`score_row`, for ``tl-leadterms top``, which imports no numpy); the
formulas are in :mod:`tl_leadterms.stats.neighbours`, whose torch row scorer computes the same,
operation for operation.

The default is the readable list: ``scoring="cosine"`` (a neighbour ranks by the share of its
own mass it has with the word, not by its frequency) with the tokenizer's special tokens left
out (``exclude="special"``). The paper's raw scores are ``scoring="raw"``; ``exclude=()``
keeps every token.

>>> import numpy as np
>>> m = np.array([[4.0, 1.0], [1.0, 1.0]])
>>> [round(float(x), 4) for x in score(m[0], "cosine", column_sq=(m**2).sum(0))]
[0.2353, 0.1715]
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tl_leadterms.errors import LeadTermsError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DEFAULT_EXCLUDE", "DEFAULT_SCORING", "SCORINGS", "best", "score", "score_row",
           "single_token_id"]  # fmt: skip

SCORINGS = ("raw", "cosine", "ppmi")
DEFAULT_SCORING = "cosine"
DEFAULT_EXCLUDE = "special"


def _inverse(x: np.ndarray) -> np.ndarray:
    import numpy as np

    out = np.zeros_like(x, dtype=np.float64)
    np.divide(1.0, x, out=out, where=x > 0)
    return out


def score(
    row: np.ndarray,
    scoring: str,
    *,
    column_sq: np.ndarray | None = None,
    column_pos: np.ndarray | None = None,
    diagonal: np.ndarray | None = None,
    index: int | None = None,
) -> np.ndarray:
    """Row ``row`` (float64) of a statistic under ``scoring``, given the column totals it needs:
    ``column_sq`` (squared column norms) for ``"cosine"``, or ``diagonal`` and the row's
    ``index`` for the cosine of a Gram matrix (Σ_B̄); ``column_pos`` (positive column sums)
    for ``"ppmi"``."""
    import numpy as np

    row = np.asarray(row, dtype=np.float64)
    if scoring == "raw":
        return row.copy()
    if scoring == "cosine" and diagonal is not None:
        d = np.sqrt(np.clip(diagonal, 0, None))
        return row * _inverse(d[index] * d)
    if scoring == "cosine":
        return row * _inverse(np.linalg.norm(row) * np.sqrt(column_sq))
    positive = np.clip(row, 0, None)
    total, row_sum = column_pos.sum(), positive.sum()
    if not total > 0 or not row_sum > 0:
        return np.zeros_like(positive)
    ratio = positive * total * _inverse(row_sum * column_pos)
    logs = np.log(np.clip(ratio, 1e-300, None)).clip(0)
    return np.where(ratio > 0, logs, 0.0)


_TINY = sys.float_info.min  # torch.finfo(torch.float64).tiny


def _inv(x: float) -> float:
    """``neighbours._safe_inverse`` of one float64."""
    return 1.0 / max(x, _TINY) if x > 0 else 0.0


def score_row(
    row: Sequence[float],
    scoring: str,
    totals: Sequence[float],
    *,
    index: int | None = None,
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
