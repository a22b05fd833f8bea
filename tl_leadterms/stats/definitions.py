"""Two choices in the definition of Q̄ and Δ that matter under a vocabulary restriction.

**Which target rows score the keys** (``q_targets``). docs/math.md#statistics writes
``Q_n[t, ·] = J_t · row t of (Y_n − u) Ḡ X_nᵀ`` with ``J_t = (1/t)(I − 11ᵀ/t)`` the softmax
Jacobian at uniform attention, ``u = 1/centre_vocab``. Row ``t`` of ``(Y_n − u) Ḡ X_nᵀ`` is::

    g_{ntj} = Ḡ[y_t, x_j] − u·(1ᵀḠ)[x_j]      kept target y_t, kept key x_j
    g_{ntj} =           − u·(1ᵀḠ)[x_j]        dropped target y_t (a zero one-hot row of Y)
    g_{ntj} = 0                                dropped key x_j (a zero one-hot row of X)

* ``"centred"`` (the default) is exactly that: the dense computation with restricted one-hot ``X``,
  ``Y`` and ``R = Y − u·1`` over the kept coordinates, as the paper's ``pythia.py`` does.
* ``"one-hot"`` keeps ``g_{ntj} = Ḡ[y_t, x_j]`` (0 if either token is dropped): the row of
  ``Y Ḡ Xᵀ``, the ``−u·1ᵀḠ`` term left out.

The two agree whenever ``1ᵀḠ = 1ᵀΣ_B̄ Φ̄ = 0``, as for the full vocabulary centred with its own size
(``B̄1 = 0``, so ``1ᵀΣ_B̄ = (B̄1)ᵀB̄ = 0``); the term is then skipped and those statistics are
unchanged bit for bit. Otherwise Q̄ differs by several percent (relative Frobenius; 7% on a 30-token
Markov corpus keeping every third token). Since ``J_t`` removes any constant, only the key-dependent
``−u·(1ᵀḠ)[x_j]`` matters: ``"centred"`` adds one per-key vector ``h = −u·1ᵀḠ`` (``h = 0`` at a
dropped key) to every looked-up ``g``.

**The last target of each window** (``last_target``). ``"data"`` (the default) uses the corpus as it
is. ``"paper-code"`` replaces the last target ``y_T`` of every window by token id 0 before anything
is counted (B̄, Φ̄ and so Ḡ, Q̄, Δ all change), as the paper's ``pythia.py`` does; inputs
``x_1..x_T`` are untouched (``covariance_similarity(..., protocol="paper-code")`` reproduces that
script).

Both choices are recorded in :attr:`CorpusStats.metadata` (``"q_targets"``, ``"last_target"``) and
kept by save/load."""

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


def _shift_vanishes(vocab: KeptVocab) -> bool:
    """True when ``1ᵀḠ = 0`` holds exactly in exact arithmetic (full vocabulary, own centring)."""
    return not vocab.restricted and vocab.centre_vocab == vocab.d_vocab


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
    """Whether :func:`key_shift` is a vector (False: it is None for these settings)."""
    return q_targets != "one-hot" and not _shift_vanishes(vocab)


def key_shift(G_bar: torch.Tensor, vocab: KeptVocab, q_targets: str) -> torch.Tensor | None:
    """``[k + 1]`` per-key term ``h = −u·(1ᵀḠ)`` added to every ``g`` (``h[k] = 0``), or None.

    None under ``"one-hot"`` and wherever the term vanishes (:func:`_shift_vanishes`). The column
    sums are taken in float64 (:func:`column_sums`) and rounded once to ``G_bar``'s dtype; a run
    computes it once for every accumulator of pass two (``AttentionAccumulator(..., shift=)``).

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
