"""Reading one dense table of a statistics file in verified row blocks (``top`` on big files)."""

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.io import (
    check_header,
    compare_checksum,
    corrupt_file,
    read_file,
    stored_statistics,
    stored_sums,
)
from tl_leadterms.stats.provenance import TensorDigest

__all__ = ["ROW_BLOCK_BYTES", "scan_table"]

_DENSE = ("Phi_bar", "G_bar", "Q_bar")
ROW_BLOCK_BYTES = 32 << 20  # bytes of one row block read by scan_table
_ITEMSIZE = {"F32": 4, "F64": 8}


def _open_slice(path: Path, name: str, rows: slice | None = None) -> Any:
    """``(shape, dtype)`` of tensor ``name``, or with ``rows`` that row block as a tensor.

    The file is opened for each block, so its memory map (whose touched pages count as
    resident memory) never holds more than one block.
    """
    try:
        with safe_open(path, framework="pt") as f:
            part = f.get_slice(name)
            return (tuple(part.get_shape()), part.get_dtype()) if rows is None else part[rows]
    except (SafetensorError, OSError, ValueError) as err:
        raise LeadTermsError(
            f"{path} is not a readable safetensors file ({err}); it is corrupt or not written by "
            "CorpusStats.save. Recompute the statistics."
        ) from err


def scan_table(
    path: str | os.PathLike,
    name: str,
    visit: Callable[[int, torch.Tensor], None],
    *,
    block_bytes: int | None = None,
) -> None:
    """Read the table ``name`` (``"Phi_bar"``, ``"G_bar"`` or ``"Q_bar"``) of a statistics file
    in row blocks of at most ``block_bytes`` (default :data:`ROW_BLOCK_BYTES`), in order,
    calling ``visit(start, block)`` for each; memory stays at one block whatever the table's
    size.

    The table is verified as :func:`load_stats` verifies it (shape and dtype, finite entries,
    and its SHA-256, computed over the blocks in order); a mismatch raises, naming the tensor,
    after the last block, so use what ``visit`` gathered only once this returns.

    >>> import tempfile, torch
    >>> from tl_leadterms import corpus_stats
    >>> stats = corpus_stats(torch.randint(0, 6, (8, 5)), 6, progress=False)
    >>> path = tempfile.mkdtemp() + "/s.safetensors"; stats.save(path)
    >>> rows = []
    >>> scan_table(path, "Phi_bar", lambda start, block: rows.append(block), block_bytes=100)
    >>> [len(b) for b in rows], torch.equal(torch.cat(rows), stats.Phi_bar)
    ([2, 2, 2], True)
    """
    path = Path(path)
    if name not in _DENSE:
        raise LeadTermsError(f"scan_table reads one of {list(_DENSE)}, got {name!r}")
    _, meta = read_file(path, set())
    check_header(path, meta)
    if name not in stored_statistics(meta):
        raise LeadTermsError(
            f"{path} holds no {name} (it has {['B_bar', *stored_statistics(meta)]}); recompute the "
            "statistics with it (tl-leadterms stats without --only; corpus_stats(want=None))"
        )
    sums = stored_sums(path, meta, stacklevel=3)
    shape, dtype = _open_slice(path, name)
    k = meta["n_kept"]
    if shape != (k, k) or dtype not in _ITEMSIZE:
        raise corrupt_file(
            path, f"{name} has shape {shape} and dtype {dtype}, not ({k}, {k}) floats"
        )
    step = max(1, int(block_bytes or ROW_BLOCK_BYTES) // (k * _ITEMSIZE[dtype]))
    digest = TensorDigest(getattr(torch, {"F32": "float32", "F64": "float64"}[dtype]), shape)
    for start in range(0, k, step):
        block = _open_slice(path, name, slice(start, start + step))
        if not torch.isfinite(block).all():
            raise corrupt_file(path, f"{name} has NaN or infinite entries")
        digest.update(block)
        visit(start, block)
    compare_checksum(path, sums, name, digest.hexdigest())
