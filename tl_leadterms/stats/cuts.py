"""Where :func:`~tl_leadterms.stats.blocks.block_stats` cuts a corpus into blocks of windows.

Equal blocks by default; with an end-of-document token (``eos_id``), each equal cut is moved to
where a document ends (:func:`document_bounds`), so that as little of a document as the windows
allow lies in two blocks (a document split between neighbours makes them dependent, and the
bootstrap then underestimates the sampling noise).

>>> equal_bounds(10, 3)
[(0, 3), (3, 7), (7, 10)]
>>> windows = torch.tensor([[5, 5, 5], [5, 5, 1], [5, 5, 5], [5, 5, 5], [5, 1, 5], [5, 5, 5]])
>>> tails = window_tails(windows, 1)
>>> tails.tolist()[:2], document_bounds(tails, 2)
([1073741824, 0], [(0, 2), (2, 6)])
"""

import itertools
from typing import Any

import torch
from torch import Tensor

from tl_leadterms.errors import LeadTermsError

__all__ = ["check_eos", "document_bounds", "equal_bounds", "window_tails"]

#: a window with no end of document in it: never a clean place to cut after
NO_END = 1 << 30


def equal_bounds(n: int, blocks: int) -> list[tuple[int, int]]:
    """``blocks`` contiguous ``[start, stop)`` ranges of about equal size over ``n`` windows."""
    edges = [round(i * n / blocks) for i in range(blocks + 1)]
    return list(itertools.pairwise(edges))


def window_tails(batch: Any, eos_id: int) -> Tensor:
    """``[b]``: per window of ``batch``, how many of its tokens follow its last ``eos_id``
    (those tokens begin the document that the next window continues); :data:`NO_END` for a
    window without one."""
    ends = torch.as_tensor(batch) == eos_id
    width = ends.shape[1]
    last = width - 1 - ends.flip(1).to(torch.int8).argmax(1)  # the last eos (if any)
    return torch.where(ends.any(1), width - 1 - last, NO_END).cpu()


def document_bounds(tails: Tensor, blocks: int) -> list[tuple[int, int]]:
    """Block bounds cut where documents end: each of the equal cuts is moved, within half a
    block either way, to just after the window whose tail (:func:`window_tails`) holds the
    fewest tokens of the next document (0: the window ends with the end of a document, a clean
    cut), the nearest such window on a tie; a cut with no end of document within reach stays
    where it was."""
    n = tails.shape[0]
    half = n // (2 * blocks)
    edges = [0]
    for i in range(1, blocks):
        equal = round(i * n / blocks)
        lo = max(edges[-1] + 1, equal - half)
        hi = min(n - (blocks - i), equal + half)
        cuts = torch.arange(lo, hi + 1)
        tail = tails[cuts - 1]
        if bool((tail < NO_END).any()):
            distance = (cuts - equal).abs()
            score = tail * (2 * half + 2) + distance  # the tail first, then the distance
            edges.append(int(cuts[int(score.argmin())]))
        else:
            edges.append(min(max(equal, lo), hi))
    edges.append(n)
    return list(itertools.pairwise(edges))


def check_eos(eos_id: Any, d_vocab: int) -> int | None:
    """The end-of-document id the blocks are cut at (None: equal blocks), checked."""
    if eos_id is None:
        return None
    if isinstance(eos_id, bool) or not isinstance(eos_id, int) or not 0 <= eos_id < d_vocab:
        raise LeadTermsError(
            f"⟦eos_id=|--eos-id ⟧{eos_id!r} is not a token id of this corpus (0 <= id < "
            f"{d_vocab}); pass the id that ends each document in the windows (e.g. the "
            "tokenizer's eos_token_id), or ⟦None|no --eos-id⟧ for equal blocks."
        )
    return eos_id
