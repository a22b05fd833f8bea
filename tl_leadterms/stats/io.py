"""Saving and loading :class:`CorpusStats`: one safetensors file with JSON metadata.

The file holds the primary statistics (sparse bigram counts, unigram counts, the kept ids and those
of Φ̄, Ḡ, Q̄, Δ that were computed; layout: :mod:`.fileformat`); B̄ and Σ_B̄ are derived again on
load. Writes are atomic. From format version 2 a vocabulary hash and a SHA-256 of every tensor and
of the metadata (:mod:`.provenance`) are verified on load, naming the tensor that differs; version 1
files (no checksums) load with a warning.

``read_stats(path, want=(...))`` reads just the tables asked for (``top bigram`` reads the sparse
counts); :func:`scan_table` reads one dense table in verified row blocks (``top context`` never
holds Φ̄)."""

import json
import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from tl_leadterms.atomic import atomic_path
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.fileformat import (
    BLOCK_FORMAT,
    COUNTS,
    FLOATS,
    FORMAT,
    FORMAT_VERSION,
    PACKED,
    SQUARE,
    check_header,
    check_packed,
    check_tokenizer,
    compare_checksum,
    corrupt_file,
    is_packed,
    metadata_checksum,
    not_stored,
    pack,
    packed_names,
    read_header,
    rebuilt,
    stored_statistics,
    stored_sums,
    unpack,
    unreadable,
    wanted_names,
)
from tl_leadterms.stats.fileformat import check_tables as check_file_tables
from tl_leadterms.stats.neighbours import RowScorer, block_rows
from tl_leadterms.stats.provenance import TensorDigest, ids_vocab_hash, tensor_checksum
from tl_leadterms.stats.vocab import KeptVocab
from tl_leadterms.version import __version__

__all__ = [
    "BLOCK_FORMAT",
    "FORMAT",
    "ROW_BLOCK_BYTES",
    "check_header",
    "check_tables",
    "check_tokenizer",
    "corrupt_file",
    "read_file",
    "read_stats",
    "save_stats",
    "scan_table",
    "verify_checksums",
    "write_file",
]


def write_file(path: Path, tensors: dict[str, torch.Tensor], header: dict[str, Any]) -> None:
    """Write ``tensors`` and ``header`` (with the SHA-256 of every tensor and of the header
    added under ``checksums``) to one safetensors file, atomically."""
    if path.is_dir():
        raise LeadTermsError(f"{path} is a directory; pass a file path such as stats.safetensors.")
    header["checksums"] = {
        **{name: tensor_checksum(t) for name, t in tensors.items()},
        "metadata": metadata_checksum(header),
    }
    metadata = {"tl_leadterms": json.dumps(header)}
    size = sum(t.nbytes for t in tensors.values()) + len(metadata["tl_leadterms"]) + 4096
    with atomic_path(path, parents=True, size=size) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def _column_totals(rows: Callable[[int, int], torch.Tensor], k: int) -> dict[str, torch.Tensor]:
    """Squared column norms and positive column sums of a ``[k, k]`` matrix given by its row
    blocks ``rows(start, stop)``: the totals of :class:`.neighbours.RowScorer` fed the same
    blocks, so ``top`` scores with the very totals :meth:`CorpusStats.top` uses."""
    scorers = {part: RowScorer(k, (), scoring, symmetric_gram=False)
               for part, scoring in (("column_sq", "cosine"), ("column_pos", "ppmi"))}  # fmt: skip
    step = block_rows(k)
    for start in range(0, k, step):
        block = rows(start, min(k, start + step))
        for scorer in scorers.values():
            scorer.update(start, block)
    return {part: scorer.totals for part, scorer in scorers.items()}


def _gram_totals(stats: Any) -> dict[str, torch.Tensor]:
    """Of Σ_B̄: the shift ``s = u·Bᵀα``, the constant ``c = u²‖α‖²`` and the diagonal
    ``c − 2s_r + Σ_i S_ir²``, from the terms ``CentredBigram.gram`` sums (float64, the same
    operations in the same order; the diagonal rounded to the statistics' dtype)."""
    bigram = stats.bigram
    values, shift, constant = bigram.gram_terms()
    diagonal = constant - (shift + shift)
    diagonal.index_add_(0, bigram.cols, values * values)  # i ascending in each column
    return {"diagonal": diagonal.to(stats.dtype).double(), "shift": shift,
            "constant": torch.tensor([constant], dtype=torch.float64)}  # fmt: skip


def _score_totals(stats: Any, tables: list[str]) -> dict[str, torch.Tensor]:
    """The scoring totals of B̄, Σ_B̄ and ``tables`` (see :func:`.fileformat.totals_names`)."""
    k = stats.k
    found = {"B_bar": _column_totals(stats.bigram.row_block, k), "Sigma_B": _gram_totals(stats)}
    for name in tables:
        table = getattr(stats, name).detach().cpu()
        found[name] = _column_totals(lambda a, b, t=table: t[a:b], k)
    return {f"{name}/{part}": t.contiguous() for name, parts in found.items()
            for part, t in parts.items()}  # fmt: skip


def save_stats(stats: Any, path: str | os.PathLike) -> None:
    """Write ``stats`` to ``path`` (a ``.safetensors`` file), atomically.

    The sparse counts, Δ and the packed Φ̄ and Q̄ are written (see :mod:`.fileformat`); Ḡ,
    when Φ̄ is there, is rebuilt on load instead. The column totals the scorings of B̄, Σ_B̄,
    Φ̄ and Q̄ need are written too (``k`` floats each), so ``tl-leadterms top`` reads a row
    and them, not a table.
    """
    present = [name for name in FLOATS if stats.has(name)]
    rebuilt = ["G_bar"] if "G_bar" in present and "Phi_bar" in present else []
    tensors = {name: getattr(stats, name) for name in COUNTS}
    if stats.kept is not None:
        tensors["kept"] = stats.kept
    if "Delta" in present:
        tensors["Delta"] = stats.Delta
    tensors = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    for name in SQUARE:
        if name in present and name not in rebuilt:
            parts = pack(getattr(stats, name).detach().cpu().numpy())
            tensors.update({f"{name}/{part}": torch.from_numpy(a) for part, a in parts.items()})
    tensors.update(_score_totals(stats, [n for n in ("Phi_bar", "Q_bar") if n in present]))
    vocab_hash = stats.metadata.get("tokenizer_vocab_hash") or ids_vocab_hash(
        stats.d_vocab, stats.kept
    )
    header = {
        **{key: v for key, v in stats.metadata.items() if key != "rebuilt"},
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "library_version": stats.metadata.get("library_version", __version__),
        "d_vocab": stats.d_vocab,
        "n_ctx": stats.n_ctx,
        "n_sequences": stats.n_sequences,
        "n_kept": stats.k,
        "centre_vocab": stats.centre_vocab,
        "dtype": str(stats.dtype).removeprefix("torch."),
        "vocab_hash": vocab_hash,
        "statistics": ["B_bar", *present],
        "rebuilt": rebuilt,
    }
    write_file(Path(path), tensors, header)


def read_file(path: Path, names: set[str] | None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The tensors in ``names`` (None: all, each read on its own) and the header."""
    meta = read_header(path)
    try:
        with safe_open(path, framework="pt") as f:
            tensors = {
                name: f.get_tensor(name)
                for name in f.keys()  # noqa: SIM118 (a handle)
                if names is None or name in names
            }
    except (SafetensorError, OSError, ValueError) as err:
        raise unreadable(path, err) from err
    return tensors, meta


def check_tables(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Refuse tables (shapes, dtypes, counts, kept ids) that ``save`` could not have written
    for statistics of ``meta["n_sequences"]`` windows (dense tables; see
    :func:`.fileformat.check_tables`)."""
    arrays = {name: t.detach().cpu().numpy() for name, t in tensors.items()}
    packed = []
    for name in SQUARE:  # packed tables: their parts (values are checked when unpacked)
        names = packed_names(name)
        if all(n in arrays for n in names):
            parts = {part: arrays.pop(n) for part, n in zip(PACKED, names, strict=True)}
            check_packed(path, name, parts, meta["n_kept"])
            if not np.isfinite(parts["values"]).all() or not np.isfinite(parts["base"]).all():
                raise corrupt_file(path, f"{name} has NaN or infinite entries")
            arrays[name] = parts["base"]  # stands for the table in the dtype check
            packed.append(name)
    check_file_tables(path, {n: a for n, a in arrays.items() if n not in packed}, meta)
    floats = {arrays[n].dtype for n in (*SQUARE, "Delta") if n in arrays}
    if len(floats) > 1:
        names = sorted(f"torch.{d}" for d in floats)
        raise corrupt_file(path, f"the statistics have dtypes {names}")


def _tensor_names(meta: dict[str, Any], statistics: set[str] | None) -> set[str] | None:
    """The tensors to read for ``statistics`` (None: every tensor)."""
    if statistics is None:
        return None
    tables = statistics & set(FLOATS)
    if "G_bar" in tables and "G_bar" in rebuilt(meta):
        tables.add("Phi_bar")  # Ḡ is rebuilt from Φ̄
    names = {*COUNTS, "kept"}
    for name in tables:
        packed = is_packed(meta) and name in SQUARE
        names.update(packed_names(name) if packed else [name])
    return names


def _stored_sums(path: Path, meta: dict[str, Any], stacklevel: int) -> dict[str, Any] | None:
    """The verified checksums of the tensors (None, with a warning, for a format-1 file)."""
    if meta.get("format") == FORMAT and meta.get("format_version") == 1:
        warnings.warn(
            f"{path} is a format-1 statistics file without checksums: its content cannot be "
            "verified; save it again (or recompute it) to add them",
            stacklevel=stacklevel,
        )
    return stored_sums(path, meta)


def verify_checksums(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Compare the stored checksums with the metadata and every tensor read (naming the first
    that differs)."""
    sums = _stored_sums(path, meta, stacklevel=5)
    if sums is not None:
        for name, tensor in tensors.items():
            compare_checksum(path, sums, name, tensor_checksum(tensor))


def read_stats(
    path: str | os.PathLike,
    *,
    tokenizer: Any = None,
    d_vocab: int | None = None,
    device: torch.device | str | None = None,
    want: Iterable[str] | None = None,
    check_vocab: bool = True,
) -> dict[str, Any]:
    """Read statistics written by :func:`save_stats`, checked against the expectations, as the
    keywords of :class:`~tl_leadterms.stats.corpus.CorpusStats` (whose ``load`` builds it).

    Args:
        path: the ``.safetensors`` file.
        tokenizer: must be the vocabulary the statistics were counted with: no more tokens than
            ``d_vocab`` and, when the file records a tokenizer hash, the same hash.
        d_vocab: if given, must equal the file's.
        device: where the tensors go (default: the CPU).
        want: read just these statistics (``"B_bar"``, ``"Sigma_B"``, ``"Phi_bar"``,
            ``"G_bar"``, ``"Q_bar"``, ``"Delta"``); the sparse counts are always read. The
            others are absent from the result (accessing one raises). None reads everything.
        check_vocab: ``False`` skips the tokenizer comparison (for experts).
    """
    path = Path(path)
    names = wanted_names(want)
    meta = read_header(path)
    check_header(path, meta)
    tensors, _ = read_file(path, _tensor_names(meta, names))
    check_tables(path, tensors, meta)  # what is stored: counts, dense tables, packed parts
    verify_checksums(path, tensors, meta)
    for name in SQUARE:  # each packed table read replaces its parts
        pieces = packed_names(name)
        if all(n in tensors for n in pieces):
            parts = {part: tensors.pop(n).numpy() for part, n in zip(PACKED, pieces, strict=True)}
            tensors[name] = torch.from_numpy(unpack(parts, meta["n_kept"]))
    stored = stored_statistics(meta)
    held = [n for n in stored if n not in rebuilt(meta)]
    needed = [n for n in (*COUNTS, *held) if names is None or n in names]
    needed += ["Phi_bar"] if rebuilt(meta) and (names is None or "G_bar" in names) else []
    missing = [n for n in dict.fromkeys(needed) if n not in tensors]
    if missing:
        raise corrupt_file(path, f"missing tensors {missing}")
    absent = sorted(names & set(FLOATS) - set(stored)) if names is not None else []
    if absent:
        raise not_stored(path, absent, meta)
    if d_vocab is not None and d_vocab != meta["d_vocab"]:
        raise LeadTermsError(
            f"{path} was counted with d_vocab={meta['d_vocab']}, but d_vocab={d_vocab} was "
            "expected; use statistics computed with this tokenizer."
        )
    if tokenizer is not None and check_vocab:
        check_tokenizer(path, meta, tokenizer)
    kept = tensors.get("kept")
    device = "cpu" if device is None else device
    tensors = {name: v.to(device) for name, v in tensors.items()}
    vocab = KeptVocab(
        meta["d_vocab"], None if kept is None else kept.to(device), meta["centre_vocab"]
    )
    return dict(
        vocab=vocab,
        n_sequences=meta["n_sequences"],
        n_ctx=meta["n_ctx"],
        pair_codes=tensors["pair_codes"],
        pair_counts=tensors["pair_counts"],
        unigram_counts=tensors["unigram_counts"],
        Phi_bar=tensors.get("Phi_bar"),
        G_bar=tensors.get("G_bar"),
        Q_bar=tensors.get("Q_bar"),
        Delta=tensors.get("Delta"),
        metadata={
            key: v
            for key, v in meta.items()
            if key not in ("format", "format_version", "checksums")
        }
        | {"rebuilt": [n for n in rebuilt(meta) if names is None or n in names]},
        tokenizer=tokenizer,
    )


# -- one dense table in verified row blocks (``top`` on big files) ------------------------

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
        raise unreadable(path, err) from err


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

    The table is verified as :func:`read_stats` verifies it (shape and dtype, finite entries,
    and its SHA-256, computed over the blocks in order); a mismatch raises, naming the tensor,
    after the last block, so use what ``visit`` gathered only once this returns.

    >>> import tempfile, torch
    >>> from tl_leadterms import corpus_stats
    >>> stats = corpus_stats(torch.randint(0, 6, (8, 5)), d_vocab=6, progress=False)
    >>> path = tempfile.mkdtemp() + "/s.safetensors"; stats.save(path)
    >>> rows = []
    >>> scan_table(path, "Phi_bar", lambda start, block: rows.append(block), block_bytes=100)
    >>> [len(b) for b in rows], torch.equal(torch.cat(rows), stats.Phi_bar)
    ([2, 2, 2], True)
    """
    path = Path(path)
    if name not in _DENSE:
        raise LeadTermsError(f"scan_table reads one of {list(_DENSE)}, got {name!r}")
    meta = read_header(path)
    check_header(path, meta)
    if name not in stored_statistics(meta):
        raise not_stored(path, [name], meta)
    sums = _stored_sums(path, meta, stacklevel=3)
    k = meta["n_kept"]
    if name in rebuilt(meta):
        raise LeadTermsError(
            f"{path} does not store {name}: it is rebuilt from Φ̄ on load; use "
            f"CorpusStats.load(path, want=[{name!r}]).{name}"
        )
    if is_packed(meta):  # the packed parts are small: read, verified, unpacked in row blocks
        parts, _ = read_file(path, set(packed_names(name)))
        for part, tensor in parts.items():
            compare_checksum(path, sums, part, tensor_checksum(tensor))
        parts = {p: parts[f"{name}/{p}"].numpy() for p in PACKED}
        check_packed(path, name, parts, k)
        step = max(1, int(block_bytes or ROW_BLOCK_BYTES) // (k * parts["base"].itemsize))
        for start in range(0, k, step):
            stop = min(k, start + step)
            lo, hi = int(parts["rows"][start]), int(parts["rows"][stop])
            block = unpack({"base": parts["base"], "mask": parts["mask"][start:stop],
                            "values": parts["values"][lo:hi]}, stop - start, k)  # fmt: skip
            if not np.isfinite(block).all():
                raise corrupt_file(path, f"{name} has NaN or infinite entries")
            visit(start, torch.from_numpy(block))
        return
    shape, dtype = _open_slice(path, name)
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
