"""What both accumulators of :mod:`.accumulate` share: the pass's shape (vocabulary, window
length, dtype, device, backend), the validation of batches and merges, and pickling (tables
travel as numpy arrays, which pickle protocol 5 hands over out of band).
"""

from dataclasses import dataclass
from typing import Any

import torch

from tl_leadterms.errors import LeadTermsError, check_choice
from tl_leadterms.stats.definitions import LAST_TARGETS, apply_last_target
from tl_leadterms.stats.tables import PairLayout, code_dtype, resolve_backend
from tl_leadterms.stats.tokens import check_batch
from tl_leadterms.stats.vocab import KeptVocab

__all__ = ["PassBase", "PassShape", "Shipped"]


class Shipped:
    """A tensor of a pickled accumulator, travelling as a numpy array.

    Pickle protocol 5 hands numpy buffers over out of band, so Ray's object store maps them
    without a copy (a pickled torch tensor is copied twice and is several times slower to ship).
    """

    def __init__(self, tensor: torch.Tensor) -> None:
        self.device = tensor.device
        self.array = tensor.detach().cpu().numpy()

    def tensor(self) -> torch.Tensor:
        # a buffer mapped from an object store is read-only; the accumulator writes its tables
        array = self.array if self.array.flags.writeable else self.array.copy()
        return torch.from_numpy(array).to(self.device)


@dataclass
class PassShape:
    vocab: KeptVocab
    n_ctx: int | None
    dtype: torch.dtype
    device: torch.device
    last_target: str = "data"

    def check_compatible(self, other: "PassShape", what: str) -> None:
        same_kept = (self.vocab.kept is None and other.vocab.kept is None) or (
            self.vocab.kept is not None
            and other.vocab.kept is not None
            and torch.equal(self.vocab.kept.cpu(), other.vocab.kept.cpu())
        )
        mine = (self.vocab.d_vocab, self.vocab.centre_vocab, self.dtype)
        theirs = (other.vocab.d_vocab, other.vocab.centre_vocab, other.dtype)
        if mine != theirs or not same_kept:
            raise LeadTermsError(
                f"cannot merge {what}s with different vocabularies or dtypes: (d_vocab, "
                f"centre_vocab, dtype) {mine} vs {theirs}, kept vocab equal: {same_kept}. Count "
                "every shard with the same d_vocab, vocab=, centre_vocab= and dtype=."
            )
        if self.last_target != other.last_target:
            raise LeadTermsError(
                f"cannot merge {what}s counted with last_target={self.last_target!r} and "
                f"{other.last_target!r}; count every shard with the same last_target=."
            )
        if None not in (self.n_ctx, other.n_ctx) and self.n_ctx != other.n_ctx:
            raise LeadTermsError(
                f"cannot merge {what}s over windows of different lengths: T = {self.n_ctx} vs "
                f"{other.n_ctx}."
            )


class PassBase:
    """Shared bookkeeping: the window length, the index map and the pair layout."""

    what = "accumulator"

    def __init__(
        self,
        vocab: KeptVocab,
        n_ctx: int | None,
        dtype: torch.dtype,
        device,
        backend: str,
        last_target: str = "data",
    ) -> None:
        if dtype not in (torch.float32, torch.float64):
            raise LeadTermsError(
                f"a {self.what} accumulates in torch.float32 or torch.float64, got {dtype}."
            )
        check_choice("last_target", last_target, LAST_TARGETS)
        self.shape = PassShape(vocab, n_ctx, dtype, torch.device(device), last_target)
        self.backend = resolve_backend(backend, self.shape.device)
        self.n_sequences = 0
        self._index = vocab.index_map(self.shape.device)
        self._layout: PairLayout | None = None

    def __getstate__(self) -> dict[str, Any]:
        self._compact_pending()
        return {
            name: Shipped(value) if isinstance(value, torch.Tensor) else value
            for name, value in self.__dict__.items()
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            self.__dict__[name] = value.tensor() if isinstance(value, Shipped) else value

    def _compact_pending(self) -> None:
        """Fold buffered work into the tables (before pickling); nothing by default."""

    @property
    def vocab(self) -> KeptVocab:
        return self.shape.vocab

    @property
    def n_ctx(self) -> int | None:
        return self.shape.n_ctx

    @property
    def n_positions(self) -> int:
        return self.n_sequences * (self.n_ctx or 0)

    @property
    def last_target(self) -> str:
        """``"data"`` or ``"paper-code"`` (see :mod:`.definitions`)."""
        return self.shape.last_target

    def _prepare(self, batch: Any) -> tuple[torch.Tensor, PairLayout]:
        """Validate a ``[b, T + 1]`` batch; return it in matrix indices (dropped = ``k``).

        The ids are checked here too (not only by ``corpus_stats``): the fused kernels write
        where the ids point, so an out-of-range id must never reach them.
        """
        self._check_open()
        batch = check_batch(
            batch, self.vocab.d_vocab, n_ctx=self.shape.n_ctx, where=f"{self.what}.update"
        )
        t = batch.shape[1] - 1
        if self.shape.n_ctx is None:
            self.shape.n_ctx = t
        if self._layout is None:
            self._layout = PairLayout(
                t, self.shape.dtype, self.shape.device, code_dtype(self.vocab)
            )
        batch = apply_last_target(batch.to(self.shape.device), self.shape.last_target)
        idx = batch if self._index is None else self._index[batch]
        return idx, self._layout

    def _check_merge(self, other: "PassBase") -> None:
        if type(other) is not type(self):
            raise LeadTermsError(f"cannot merge a {type(other).__name__} into a {self.what}.")
        self._check_open()
        other._check_open()
        self.shape.check_compatible(other.shape, self.what)
        if self.shape.n_ctx is None:
            self.shape.n_ctx = other.shape.n_ctx
            self._layout = other._layout

    def _release(self) -> None:
        self._released = True

    def _check_open(self) -> None:
        if getattr(self, "_released", False):
            raise LeadTermsError(
                f"this {self.what} was finished by result(release=True); its table now holds "
                "the result. Use a new accumulator, or call result() without release."
            )

    def _check_nonempty(self) -> None:
        self._check_open()
        if self.n_sequences == 0:
            raise LeadTermsError(
                f"the {self.what} has seen no windows; call update() with at least one batch "
                "(an empty corpus has no statistics)."
            )
