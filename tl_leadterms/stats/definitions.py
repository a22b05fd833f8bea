"""Two choices in the definition of Q̄ and Δ that matter under a vocabulary restriction: which
target rows score the keys (``q_targets``: ``"centred"``, the default and the paper's code, or
``"one-hot"``, the ``−u·1ᵀḠ`` term left out) and the last target of each window (``last_target``:
``"data"``, the default, or ``"paper-code"``, token 0 as the paper's ``pythia.py`` writes it). Both
are set out in docs/guides/corpus-statistics.md#q_targets-and-the-last-target, recorded in
:attr:`CorpusStats.metadata` (``"q_targets"``, ``"last_target"``) and kept by save/load."""

from typing import Literal, get_args

import torch

from tl_leadterms.stats.vocab import KeptVocab

__all__ = [
    "LAST_TARGETS",
    "Q_TARGETS",
    "LastTarget",
    "QTargets",
    "apply_last_target",
    "column_sums",
    "key_shift",
    "shift_needed",
]

QTargets = Literal["centred", "one-hot"]
LastTarget = Literal["data", "paper-code"]
Q_TARGETS: tuple[str, ...] = get_args(QTargets)
LAST_TARGETS: tuple[str, ...] = get_args(LastTarget)

PAPER_CODE_LAST_TOKEN = 0  # the token id the paper's code writes into every window's last target


def apply_last_target(batch: torch.Tensor, last_target: str) -> torch.Tensor:
    """The ``[b, T + 1]`` batch with its last column set to token 0 under ``"paper-code"``.

    >>> apply_last_target(torch.tensor([[3, 4, 5]]), "paper-code").tolist()
    [[3, 4, 0]]
    """
    if last_target == "data":
        return batch
    out = batch.clone()
    out[:, -1] = PAPER_CODE_LAST_TOKEN
    return out


def column_sums(matrix: torch.Tensor, rows: int = 256) -> torch.Tensor:
    """``1ᵀM`` in float64: row blocks widened to float64 and summed, the block sums added (about ten
    times faster than ``matrix.sum(0, dtype=torch.float64)`` on a ``[k, k]`` float32 table; one
    block of ``rows`` rows is the only temporary).

    >>> column_sums(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), rows=1).tolist()
    [4.0, 6.0]
    """
    out = torch.zeros(matrix.shape[1], dtype=torch.float64, device=matrix.device)
    for start in range(0, matrix.shape[0], rows):
        out += matrix[start : start + rows].to(torch.float64).sum(0)
    return out


def shift_needed(vocab: KeptVocab, q_targets: str) -> bool:
    """Whether :func:`key_shift` is a vector (False: it is None for these settings): not under
    ``"one-hot"``, nor where ``1ᵀḠ = 0`` exactly (the full vocabulary centred with its own size)."""
    return q_targets != "one-hot" and (vocab.restricted or vocab.centre_vocab != vocab.d_vocab)


def key_shift(G_bar: torch.Tensor, vocab: KeptVocab, q_targets: str) -> torch.Tensor | None:
    """``[k + 1]`` per-key term ``h = −u·(1ᵀḠ)`` added to every ``g`` (``h[k] = 0``), or None.

    None where the term vanishes (:func:`shift_needed`). The column sums are taken in float64
    (:func:`column_sums`) and rounded once to ``G_bar``'s dtype; a run computes it once for every
    accumulator of pass two (``AttentionAccumulator(..., shift=)``).

    >>> v = KeptVocab(4, torch.tensor([0, 2]), 4)
    >>> key_shift(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), v, "centred").tolist()
    [-1.0, -1.5, 0.0]
    """
    if not shift_needed(vocab, q_targets):
        return None
    k = vocab.k
    shift = torch.zeros(k + 1, dtype=G_bar.dtype, device=G_bar.device)
    shift[:k] = (-column_sums(G_bar) / vocab.centre_vocab).to(G_bar.dtype)
    return shift
