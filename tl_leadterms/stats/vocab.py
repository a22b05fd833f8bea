"""Vocabulary restriction (the paper's Pythia protocol keeps the most frequent tokens).

Kept tokens are indexed by their position in ``kept``; every other token is encoded as the zero
vector, so it contributes nothing to any matrix but still counts as a position (``N·T`` and the
``1/t`` weights are unchanged). The centring constant ``u = 1/centre_vocab`` uses the full
``d_vocab`` by default, as the paper does; pass ``centre_vocab=len(kept)`` to centre against the
kept vocabulary instead.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Union

import numpy as np
import torch

from tl_leadterms.errors import LeadTermsError

__all__ = ["KeptVocab", "VocabSpec", "resolve_vocab"]


@dataclass(frozen=True)
class KeptVocab:
    """Which token ids the statistics keep, and the centring vocabulary size.

    Attributes:
        d_vocab: the tokenizer's full vocabulary size.
        kept: kept token ids in matrix order, or ``None`` for the full vocabulary.
        centre_vocab: ``|V|`` in the centring ``u = 1/|V|``.
    """

    d_vocab: int
    kept: torch.Tensor | None
    centre_vocab: int

    @property
    def k(self) -> int:
        """Size of the statistics' matrices."""
        return self.d_vocab if self.kept is None else int(self.kept.numel())

    @property
    def restricted(self) -> bool:
        return self.kept is not None

    def index_map(self, device: torch.device | str = "cpu") -> torch.Tensor | None:
        """``[d_vocab]`` map from token id to matrix index, ``k`` for dropped ids (None if full)."""
        if self.kept is None:
            return None
        m = torch.full((self.d_vocab,), self.k, dtype=torch.long, device=device)
        m[self.kept.to(device)] = torch.arange(self.k, device=device)
        return m

    def position(self, token_id: int) -> int:
        """Matrix index of ``token_id``; a clear error if it is out of range or not kept."""
        if not 0 <= token_id < self.d_vocab:
            raise LeadTermsError(f"token id {token_id} is outside [0, d_vocab={self.d_vocab}).")
        if self.kept is None:
            return token_id
        hits = (self.kept == token_id).nonzero()
        if hits.numel() == 0:
            raise LeadTermsError(
                f"token id {token_id} is not in the kept vocabulary ({self.k} tokens); "
                "recompute the statistics with a larger or different vocab= to include it."
            )
        return int(hits[0, 0])

    def token_id(self, index: int) -> int:
        """Token id of matrix index ``index``."""
        return index if self.kept is None else int(self.kept[index])


VocabSpec = Union[int, Iterable[int], torch.Tensor, np.ndarray, KeptVocab, None]  # noqa: UP007
"""What ``vocab=`` accepts: None, an int k, ordered token ids, or a :class:`KeptVocab`."""


def resolve_vocab(
    vocab: object,
    d_vocab: int,
    *,
    centre_vocab: int | None = None,
    token_counts: Callable[[], torch.Tensor] | None = None,
) -> KeptVocab:
    """Turn the user's ``vocab=`` argument into a :class:`KeptVocab`.

    Args:
        vocab: ``None`` (all tokens), a list of kept token ids (distinct, in range; their order
            is the matrices' order), or an int ``k``: the ``k`` most frequent tokens among the
            input positions (ties broken by smaller id), which needs ``token_counts``.
        d_vocab: full vocabulary size.
        centre_vocab: ``|V|`` for the centring; defaults to ``d_vocab``.
        token_counts: called once when ``vocab`` is an int: how often each id occurs at an
            input position (``[d_vocab]`` integers; see :func:`.tokens.token_counts`).
    """
    d_vocab = int(d_vocab)
    if isinstance(vocab, KeptVocab):  # checked like any other list of kept ids
        if vocab.d_vocab != d_vocab:
            raise LeadTermsError(
                f"the KeptVocab was made for d_vocab={vocab.d_vocab}, not d_vocab={d_vocab}."
            )
        if centre_vocab is not None and centre_vocab != vocab.centre_vocab:
            raise LeadTermsError(
                f"centre_vocab={centre_vocab} disagrees with the KeptVocab's "
                f"centre_vocab={vocab.centre_vocab}; pass one of them."
            )
        return resolve_vocab(vocab.kept, d_vocab, centre_vocab=vocab.centre_vocab)
    centre = d_vocab if centre_vocab is None else centre_vocab
    if isinstance(centre, bool) or not isinstance(centre, (int, np.integer)):
        raise LeadTermsError(f"centre_vocab must be a positive int or None, got {centre!r}.")
    if centre < 1:
        raise LeadTermsError(f"centre_vocab must be >= 1, got {centre}.")
    centre = int(centre)
    if vocab is None:
        return KeptVocab(d_vocab, None, centre)
    if isinstance(vocab, (int, np.integer)) and not isinstance(vocab, bool):
        if vocab < 1:
            raise LeadTermsError(f"vocab={vocab}: keep at least one token (vocab >= 1).")
        if token_counts is None:
            raise LeadTermsError("vocab=<int> needs the corpus to count token frequencies.")
        counts = token_counts().cpu()
        k = min(int(vocab), d_vocab)
        order = torch.sort(-counts, stable=True).indices  # most frequent first, ties by id
        return KeptVocab(d_vocab, order[:k].clone(), centre)
    if isinstance(vocab, (str, bytes, float, bool)) or not isinstance(vocab, Iterable):
        raise LeadTermsError(f"vocab must be None, an int k or a list of token ids, got {vocab!r}.")
    if isinstance(vocab, (set, frozenset)):
        raise LeadTermsError(
            "vocab is a set, which has no order, but the kept ids' order is the matrices' "
            "order; pass sorted(vocab) or a list."
        )
    if isinstance(vocab, torch.Tensor):
        vocab = vocab.detach().cpu()
    elif not isinstance(vocab, np.ndarray):
        vocab = list(vocab)  # also reads a generator once
    try:
        kept = torch.as_tensor(np.asarray(vocab))
    except (TypeError, ValueError, OverflowError) as err:
        raise LeadTermsError(f"vocab must be a list of integer token ids ({err}).") from err
    if kept.ndim != 1 or kept.numel() == 0 or kept.is_floating_point() or kept.dtype == torch.bool:
        raise LeadTermsError(
            f"vocab must be a non-empty 1-D list of integer token ids, got shape "
            f"{tuple(kept.shape)} and dtype {kept.dtype}."
        )
    kept = kept.long()
    bad = kept[(kept < 0) | (kept >= d_vocab)]
    if bad.numel():
        raise LeadTermsError(
            f"vocab contains token id {int(bad[0])}, outside [0, d_vocab={d_vocab}); keep only "
            "ids the tokenizer can produce."
        )
    uniq, counts = torch.unique(kept, return_counts=True)
    if (counts > 1).any():
        dup = int(uniq[counts > 1][0])
        raise LeadTermsError(
            f"vocab lists token id {dup} {int(counts[uniq == dup][0])} times; each kept id must "
            "appear once (its position is its matrix index)."
        )
    return KeptVocab(d_vocab, kept.clone(), centre)
