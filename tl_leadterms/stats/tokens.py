"""Token input for the statistics: accept the shapes users have, validate them once, batch them.

A corpus is a set of windows of ``T + 1`` token ids (``X`` = tokens ``1..T``, ``Y`` = tokens
``2..T+1``), in any of the forms of docs/guides/corpus-statistics.md#what-goes-in. The statistics
need two passes (``Q̄`` and ``Δ`` depend on ``Ḡ`` of the whole corpus), so :class:`TokenSource` is
re-iterable: a one-shot iterator is read once into memory (windows are small next to the tables).
"""

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch

from tl_leadterms.errors import LeadTermsError

__all__ = ["TokenSource", "check_batch", "id_range", "token_counts"]

_DEFAULT_PAIRS_PER_BATCH = 1 << 21


def default_batch_size(n_ctx: int) -> int:
    """Sequences per batch so that one batch holds about two million (query, key) pairs."""
    return max(1, _DEFAULT_PAIRS_PER_BATCH // (n_ctx * (n_ctx + 1) // 2))


def check_batch(
    batch: Any, d_vocab: int, *, n_ctx: int | None = None, where: str = "batch 0"
) -> torch.Tensor:
    """Validate one batch of windows and return it as a ``[b, T + 1]`` int64 tensor.

    Raises :class:`LeadTermsError` naming the offending value for float or boolean tokens,
    a wrong number of dimensions, windows shorter than 2 tokens, a window length that differs
    from ``n_ctx + 1``, and token ids outside ``[0, d_vocab)``.
    """
    if isinstance(batch, np.ndarray):
        if batch.dtype == object:
            raise LeadTermsError(
                f"{where}: got a ragged numpy array (dtype=object); all windows must have the "
                "same length T + 1. Use tl_leadterms.make_windows to cut documents into windows."
            )
        batch = torch.from_numpy(np.ascontiguousarray(batch))
    elif isinstance(batch, (list, tuple)):
        if len(batch) == 0:
            raise LeadTermsError(
                f"{where}: an empty batch; drop it or give it at least one window."
            )
        lengths = {len(row) for row in batch} if all(hasattr(r, "__len__") for r in batch) else {}
        if len(lengths) > 1:
            raise LeadTermsError(
                f"{where}: windows have different lengths {sorted(lengths)}; all windows must "
                "have the same length T + 1. Use tl_leadterms.make_windows to cut documents "
                "into windows."
            )
        try:
            batch = torch.as_tensor(np.asarray(batch))
        except (OverflowError, TypeError, ValueError) as err:
            raise LeadTermsError(
                f"{where}: cannot read the windows as an integer array ({err}); pass lists of "
                "int token ids, a numpy array or a tensor."
            ) from err
    elif not isinstance(batch, torch.Tensor):
        raise LeadTermsError(
            f"{where}: expected token ids as a torch.Tensor, numpy array or list of lists, got "
            f"{type(batch).__name__}."
        )
    if batch.dtype == torch.bool or batch.is_floating_point() or batch.is_complex():
        raise LeadTermsError(
            f"{where}: token ids must be integers, got dtype {batch.dtype}. Convert with "
            "tokens.long() after checking the values are whole token ids."
        )
    if batch.ndim != 2:
        raise LeadTermsError(
            f"{where}: expected a 2-D array [n_sequences, T + 1], got shape {tuple(batch.shape)}. "
            "Stack windows of equal length (tl_leadterms.make_windows does this)."
        )
    if batch.shape[1] < 2:
        raise LeadTermsError(
            f"{where}: windows have {batch.shape[1]} token(s); each window needs at least 2 "
            "tokens (T + 1 with T >= 1: inputs are tokens 1..T, targets tokens 2..T+1)."
        )
    if n_ctx is not None and batch.shape[1] != n_ctx + 1:
        raise LeadTermsError(
            f"{where}: windows have length {batch.shape[1]} but earlier windows had length "
            f"{n_ctx + 1}; all windows must have the same length T + 1."
        )
    if batch.numel():
        lo, hi = id_range(batch)
        if lo < 0 or hi >= d_vocab:
            bad = lo if lo < 0 else hi
            row, col = np.argwhere(batch.numpy(force=True) == bad)[0].tolist()
            raise LeadTermsError(
                f"{where}: token id {bad} at [{row}, {col}] is outside [0, d_vocab={d_vocab}). "
                "Pass the tokenizer's full vocabulary size as d_vocab, or remap the ids."
            )
    return batch.long()


def id_range(ids: torch.Tensor) -> tuple[int, int]:
    """The smallest and largest of integer ``ids``, exactly: uint16-64 (torch has no min/max
    for them) in their own dtype, before an int64 cast could wrap one above 2**63 - 1."""
    unsigned = ids.dtype in (torch.uint16, torch.uint32, torch.uint64)
    values = ids.numpy(force=True) if unsigned else ids
    return int(values.min()), int(values.max())


def _is_dataset(obj: Any) -> bool:
    return type(obj).__name__ in {"Dataset", "IterableDataset"} and hasattr(obj, "column_names")


def _looks_like_rows(obj: Any) -> bool:
    """True for a list of sequences of ints (one 2-D batch), False for a list of batches."""
    if not isinstance(obj, (list, tuple)) or not obj:
        return False
    first = next((item for item in obj if not hasattr(item, "__len__") or len(item)), obj[0])
    if isinstance(first, (torch.Tensor, np.ndarray)):
        return first.ndim == 1
    if isinstance(first, (list, tuple)):
        return not first or isinstance(first[0], (int, np.integer))
    return False


class TokenSource:
    """A re-iterable, validated view of a corpus of token windows.

    Iterating yields int64 tensors of shape ``[b, T + 1]`` on ``device`` with ``b <=
    batch_size``. ``n_ctx`` (= ``T``) is known after the first batch has been read.
    """

    def __init__(
        self,
        tokens: Any,
        d_vocab: object,  # validated below: users pass numpy ints too
        *,
        batch_size: object = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if isinstance(d_vocab, bool) or not isinstance(d_vocab, (int, np.integer)) or d_vocab < 1:
            raise LeadTermsError(f"d_vocab must be a positive int, got {d_vocab!r}.")
        if batch_size is not None and (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, (int, np.integer))
            or batch_size < 1
        ):
            raise LeadTermsError(f"batch_size must be a positive int or None, got {batch_size!r}.")
        self.d_vocab = int(d_vocab)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.device = torch.device(device)
        self.n_ctx: int | None = None
        self.n_sequences: int | None = None
        self._kind, self._data = self._classify(tokens)
        if isinstance(self._data, (torch.Tensor, np.ndarray)) and self._data.ndim != 2:
            check_batch(self._data, self.d_vocab, where="tokens")  # raises with the shape

    @staticmethod
    def _classify(tokens: Any) -> tuple[str, Any]:
        if isinstance(tokens, (torch.Tensor, np.ndarray)) or _looks_like_rows(tokens):
            return "array", tokens
        if _is_dataset(tokens):
            if "input_ids" not in tokens.column_names:
                raise LeadTermsError(
                    f"the dataset has columns {tokens.column_names} but no 'input_ids' column; "
                    "tokenize it first (e.g. with tl_leadterms.make_windows)."
                )
            if type(tokens).__name__ == "IterableDataset":  # streamed: keep rows for pass two
                return "array", [example["input_ids"] for example in tokens]
            return "dataset", tokens
        if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Iterable):
            raise LeadTermsError(
                f"cannot read token windows from a {type(tokens).__name__}; pass a 2-D integer "
                "tensor/array [n_sequences, T + 1], an iterable of such batches, or a "
                "datasets.Dataset with an 'input_ids' column."
            )
        if isinstance(tokens, Iterator):  # one-shot (a generator): keep its batches for pass two
            return "batches", list(tokens)
        return "batches", tokens

    def _step(self) -> int:
        first = self._data[0]["input_ids"] if self._kind == "dataset" else self._data[0]
        return self.batch_size or default_batch_size(max(len(first) - 1, 1))

    def _raw_batches(self) -> Iterator[Any]:
        if self._kind in ("array", "dataset"):  # sliceable: cut batches of `step` rows
            n = len(self._data)
            step = self._step() if n else 1
            for start in range(0, n, step):
                chunk = self._data[start : start + step]
                yield chunk["input_ids"] if self._kind == "dataset" else chunk
        else:
            yield from self._data

    def __iter__(self) -> Iterator[torch.Tensor]:
        n_seen = 0
        for i, raw in enumerate(self._raw_batches()):
            if isinstance(raw, (list, tuple)) and not raw:
                continue  # an empty batch adds nothing
            where = f"batch {i}" if self._kind == "batches" else f"sequences from {n_seen}"
            batch = check_batch(raw, self.d_vocab, n_ctx=self.n_ctx, where=where)
            if self.n_ctx is None:
                self.n_ctx = batch.shape[1] - 1
            if batch.shape[0] == 0:
                continue
            n_seen += batch.shape[0]
            step = self.batch_size or default_batch_size(batch.shape[1] - 1)
            if self._kind == "batches" and batch.shape[0] > step:  # bound the per-batch memory
                yield from (b.to(self.device) for b in batch.split(step))
            else:
                yield batch.to(self.device)
        if n_seen == 0:
            raise LeadTermsError(
                "the corpus is empty: no token windows were found. Pass at least one window of "
                "T + 1 >= 2 tokens."
            )
        self.n_sequences = n_seen

    def __len__(self) -> int:
        """Number of batches when it is known without reading the corpus."""
        if self._kind in ("array", "dataset"):
            n = len(self._data)
            return -(-n // self._step()) if n else 0
        try:
            return len(self._data)
        except TypeError:
            return 0


def token_counts(batches: Iterable[torch.Tensor], d_vocab: int) -> torch.Tensor:
    """How often each id occurs at an input position (all but the last of each window) of
    validated ``[b, T + 1]`` batches: ``[d_vocab]`` int64, on the CPU."""
    counts = torch.zeros(d_vocab, dtype=torch.long)
    for batch in batches:
        counts += torch.bincount(batch[:, :-1].reshape(-1).cpu(), minlength=d_vocab)
    return counts
