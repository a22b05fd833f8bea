"""Cut documents into the fixed-length windows that the statistics and models consume."""

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.protocols import Documents

__all__ = ["make_windows"]

_MODES = ("chunk", "truncate")


def _documents_as_ids(documents: Any, tokenizer: Any, text_column: str) -> Iterable[Sequence[int]]:
    if type(documents).__name__ in {"Dataset", "IterableDataset"}:
        columns = documents.column_names or []
        if "input_ids" in columns and tokenizer is None:
            return (row["input_ids"] for row in documents)
        if text_column not in columns:
            raise LeadTermsError(
                f"the dataset has columns {columns} but no {text_column!r} column; pass "
                "text_column= naming the text, or a dataset with 'input_ids'."
            )
        documents = (row[text_column] for row in documents)
        if tokenizer is None:
            raise LeadTermsError("documents are texts: pass tokenizer= to turn them into ids.")
    if isinstance(documents, (str, bytes)):
        raise LeadTermsError("documents must be a list of documents, not one string; wrap it.")
    docs = iter(documents)
    first = next(docs, None)
    if first is None:
        return []
    if isinstance(first, str):
        if tokenizer is None:
            raise LeadTermsError("documents are texts: pass tokenizer= to turn them into ids.")
        from tl_leadterms.data.tokenizers import document_ids

        return document_ids(itertools.chain([first], docs), tokenizer)  # a batch at a time
    return itertools.chain([first], docs)


def _document_ids(doc: Any, index: int) -> np.ndarray:
    """One document as a 1-D int64 array, or a clear error."""
    if isinstance(doc, (int, np.integer)) or (hasattr(doc, "ndim") and doc.ndim == 0):
        raise LeadTermsError(
            f"document {index} is a single token id ({doc!r}); documents are lists of ids. "
            "Wrap a single document in a list: make_windows([ids], ...)."
        )
    ids = doc.detach().cpu().numpy() if isinstance(doc, torch.Tensor) else np.asarray(doc)
    if ids.ndim != 1:
        raise LeadTermsError(
            f"document {index} has shape {ids.shape}; each document must be a 1-D list of ids."
        )
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise LeadTermsError(f"document {index} has dtype {ids.dtype}; token ids must be integers.")
    if ids.dtype == np.uint64 and ids.size and ids.max() > np.iinfo(np.int64).max:
        raise LeadTermsError(
            f"document {index} holds token id {int(ids.max())}, above any vocabulary (2**63 - 1 "
            "at most); remap the ids."
        )
    return ids.astype(np.int64, copy=False)


def make_windows(
    documents: Documents,
    *,
    n_ctx: int,
    mode: str = "chunk",
    tokenizer: Any = None,
    eos_id: int | None = None,
    text_column: str = "text",
    max_windows: int | None = None,
) -> torch.Tensor:
    """Turn documents into an int64 tensor of windows ``[n_windows, n_ctx + 1]``.

    Args:
        documents: lists of token ids, texts (with ``tokenizer``), or a ``datasets.Dataset``
            with a text column (with ``tokenizer``) or an ``input_ids`` column.
        n_ctx: ``T``; each window has ``T + 1`` tokens (inputs 1..T, targets 2..T+1).
        mode: ``"chunk"`` concatenates all documents (separated by ``eos_id`` when given) and
            cuts consecutive, non-overlapping windows, dropping the incomplete tail;
            ``"truncate"`` keeps each document of at least ``T + 1`` tokens, cut to its first
            ``T + 1`` (the paper's toy protocol), and skips shorter ones.
        tokenizer: a transformers tokenizer for text documents.
        eos_id: separator appended after each document in ``"chunk"`` mode (for texts, the
            tokenizer's ``eos_token_id`` is used when this is None).
        text_column: the text column of a dataset.
        max_windows: stop after this many windows.

    Example:
        >>> make_windows([[1, 2, 3, 4, 5], [6, 7]], n_ctx=2, eos_id=0).tolist()
        [[1, 2, 3], [4, 5, 0], [6, 7, 0]]
        >>> make_windows([[1, 2, 3, 4, 5], [6, 7]], n_ctx=2, mode="truncate").tolist()
        [[1, 2, 3]]
    """
    if mode not in _MODES:
        raise LeadTermsError(f"mode={mode!r} is not one of {_MODES}.")
    if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 1:
        raise LeadTermsError(
            f"n_ctx must be an int >= 1 (windows have n_ctx + 1 tokens), got {n_ctx!r}."
        )
    if max_windows is not None and max_windows < 1:
        raise LeadTermsError(f"max_windows must be >= 1 or None, got {max_windows!r}.")
    if eos_id is None and tokenizer is not None and mode == "chunk":
        eos_id = getattr(tokenizer, "eos_token_id", None)
    width = n_ctx + 1
    docs = _documents_as_ids(documents, tokenizer, text_column)
    windows: list[np.ndarray] = []
    n_docs, longest = 0, 0
    buffer: list[np.ndarray] = []
    buffered = 0
    for doc in docs:
        ids = _document_ids(doc, n_docs)
        n_docs += 1
        longest = max(longest, ids.size)
        if mode == "truncate":
            if ids.size >= width:
                windows.append(ids[:width])
        else:
            if eos_id is not None:
                ids = np.append(ids, eos_id)
            buffer.append(ids)
            buffered += ids.size
            if buffered >= width:
                flat = np.concatenate(buffer)
                n_full = flat.size // width
                windows.extend(flat[: n_full * width].reshape(n_full, width))
                buffer, buffered = [flat[n_full * width :]], flat.size - n_full * width
        if max_windows is not None and len(windows) >= max_windows:
            break
    if not windows:
        raise LeadTermsError(
            f"no window of {width} tokens could be made from {n_docs} document(s) (longest: "
            f"{longest} tokens, mode={mode!r}); use a smaller n_ctx, more text, or mode='chunk'."
        )
    out = torch.from_numpy(np.stack(windows[:max_windows] if max_windows else windows))
    return out.long()
