"""The scorings of association lists and their defaults, in numpy alone (the formulas are in
:mod:`tl_leadterms.stats.neighbours`, whose torch row scorer computes the same).

The default is the readable list: ``scoring="cosine"`` (a neighbour ranks by the share of its
own mass it has with the word, not by its frequency) with the tokenizer's special tokens left
out (``exclude="special"``). The paper's raw scores are ``scoring="raw"``; ``exclude=()``
keeps every token.

>>> import numpy as np
>>> m = np.array([[4.0, 1.0], [1.0, 1.0]])
>>> [round(float(x), 4) for x in score(m[0], "cosine", column_sq=(m**2).sum(0))]
[0.2353, 0.1715]
"""

from typing import Any

import numpy as np

from tl_leadterms.errors import LeadTermsError

__all__ = ["DEFAULT_EXCLUDE", "DEFAULT_SCORING", "SCORINGS", "score", "single_token_id"]

SCORINGS = ("raw", "cosine", "ppmi")
DEFAULT_SCORING = "cosine"
DEFAULT_EXCLUDE = "special"


def _inverse(x: np.ndarray) -> np.ndarray:
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
