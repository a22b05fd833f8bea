"""Saving and loading :class:`CorpusStats`: one safetensors file with JSON metadata.

The file holds the primary statistics (sparse bigram counts, unigram counts, the kept ids and
those of Φ̄, Ḡ, Q̄, Δ that were computed); B̄ and Σ_B̄ are derived again on load. Writes go
through the atomic writer, so a crash never leaves a half-written file.

Format version 2 adds provenance (:mod:`.provenance`): a vocabulary hash, and a SHA-256 of every
tensor and of the metadata, verified on load (a flipped bit or an edited count is refused, naming
the tensor). Version 1 files (no checksums) still load, with a warning.

``read_stats(path, want=(...))`` reads just the tables asked for (safetensors reads tensors one
by one from the file): ``top bigram`` reads the sparse counts. :func:`scan_table` reads one dense
table in row blocks, verified as it goes: ``top context`` keeps the rows it needs from Φ̄ and
never holds the table.
"""

import json
import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from tl_leadterms.atomic import atomic_path
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.jsontext import parse_json
from tl_leadterms.stats.provenance import (
    TensorDigest,
    ids_vocab_hash,
    metadata_checksum,
    tensor_checksum,
)
from tl_leadterms.stats.vocab import KeptVocab, resolve_vocab
from tl_leadterms.version import __version__

__all__ = [
    "ROW_BLOCK_BYTES",
    "check_header",
    "check_tables",
    "check_tokenizer",
    "corrupt_file",
    "read_stats",
    "read_file",
    "save_stats",
    "scan_table",
    "verify_checksums",
    "write_file",
]

FORMAT = "tl_leadterms.CorpusStats"
BLOCK_FORMAT = (
    "tl_leadterms.stats.blocks.BlockStats"  # statistics per block of windows (:mod:`.blocks`)
)
FORMAT_VERSION = 2
_VERSIONS = (1, 2)
_COUNTS = ("pair_codes", "pair_counts", "unigram_counts")
_FLOATS = ("Phi_bar", "G_bar", "Q_bar", "Delta")
_REQUIRED = (*_COUNTS, *_FLOATS)
_LARGEST = 1 << 53  # metadata integers above this are not exact in JSON readers


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


def save_stats(stats: Any, path: str | os.PathLike) -> None:
    """Write ``stats`` to ``path`` (a ``.safetensors`` file), atomically."""
    tensors = {
        name: getattr(stats, name) for name in _REQUIRED if name in _COUNTS or stats.has(name)
    }
    if stats.kept is not None:
        tensors["kept"] = stats.kept
    tensors = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    vocab_hash = stats.metadata.get("tokenizer_vocab_hash") or ids_vocab_hash(
        stats.d_vocab, stats.kept
    )
    header = {
        **stats.metadata,
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
        "statistics": ["B_bar", *(n for n in _FLOATS if stats.has(n))],
    }
    write_file(Path(path), tensors, header)


def read_file(path: Path, names: set[str] | None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The tensors in ``names`` (None: all, each read on its own) and the header."""
    if not path.is_file():
        raise LeadTermsError(f"no statistics file at {path}; save one with stats.save(path).")
    try:
        with safe_open(path, framework="pt") as f:  # one read: header, then the tensors
            raw = (f.metadata() or {}).get("tl_leadterms")
            tensors = {
                name: f.get_tensor(name)
                for name in f.keys()  # noqa: SIM118 (a handle)
                if names is None or name in names
            }
    except (SafetensorError, OSError, ValueError) as err:
        raise LeadTermsError(
            f"{path} is not a readable safetensors file ({err}); it is corrupt or not written by "
            "CorpusStats.save. Recompute the statistics."
        ) from err
    if raw is None:
        raise LeadTermsError(
            f"{path} is a safetensors file but has no tl_leadterms metadata; it was not written "
            "by CorpusStats.save or BlockStats.save."
        )
    meta = parse_json(raw, where=f"{path}: the tl_leadterms metadata")
    if not isinstance(meta, dict):
        raise LeadTermsError(f"{path}: the tl_leadterms metadata is not a JSON object.")
    return tensors, meta


_META_INTS = ("d_vocab", "n_ctx", "n_sequences", "n_kept", "centre_vocab")


def corrupt_file(path: Path, what: str) -> LeadTermsError:
    """The error for a file whose content ``what`` no writer of this library produces."""
    return LeadTermsError(
        f"{path}: {what}; the file is corrupt or was edited. Recompute the statistics."
    )


_OTHER = {
    BLOCK_FORMAT: "holds statistics per block of windows (BlockStats.save, tl-leadterms stats "
    "--blocks); load it with BlockStats.load (its .full() is the whole corpus)",
    FORMAT: "holds plain statistics (CorpusStats.save, tl-leadterms stats); load it with "
    "CorpusStats.load, or compute block statistics (block_stats, tl-leadterms stats --blocks B)",
}


def check_header(path: Path, meta: Any, fmt: str = FORMAT, versions=_VERSIONS) -> None:
    """Refuse metadata that the writer of format ``fmt`` could not have written (a file of the
    other format is named as such, with the loader to use)."""
    if not isinstance(meta, dict):
        raise corrupt_file(path, "the metadata is not a JSON object")
    if meta.get("format") in _OTHER and meta.get("format") != fmt:
        raise LeadTermsError(f"{path} {_OTHER[meta['format']]}")
    if meta.get("format") != fmt or meta.get("format_version") not in versions:
        raise LeadTermsError(
            f"{path}: format {meta.get('format')!r} version {meta.get('format_version')!r} is not "
            f"{fmt!r} version {max(versions)}; recompute the statistics with this version."
        )
    bad_meta = [
        key
        for key in _META_INTS
        if isinstance(meta.get(key), bool)
        or not isinstance(meta.get(key), int)
        or not 1 <= meta[key] < _LARGEST
    ]
    if bad_meta:
        raise corrupt_file(
            path, f"metadata {bad_meta} missing or not positive integers below 2**53"
        )
    if meta["n_sequences"] * meta["n_ctx"] >= _LARGEST:
        raise corrupt_file(path, "metadata n_sequences·n_ctx is not below 2**53")


def check_tables(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Refuse tables (shapes, dtypes, counts, kept ids) that ``save`` could not have written
    for statistics of ``meta["n_sequences"]`` windows."""
    missing = [name for name in _COUNTS if name not in tensors]
    if missing:
        raise corrupt_file(path, f"missing tensors {missing}")
    k, t = meta["n_kept"], meta["n_ctx"]
    expected = {"Phi_bar": (k, k), "G_bar": (k, k), "Q_bar": (k, k), "Delta": (t,)}
    expected["unigram_counts"] = (k,)
    if "kept" in tensors:
        expected["kept"] = (k,)
    elif k != meta["d_vocab"]:
        raise corrupt_file(
            path, f"n_kept={k} differs from d_vocab={meta['d_vocab']} but no kept ids"
        )
    for name, shape in expected.items():
        if name in tensors and tuple(tensors[name].shape) != shape:
            raise corrupt_file(
                path, f"{name} has shape {tuple(tensors[name].shape)}, the metadata says {shape}"
            )
    dtypes = {tensors[name].dtype for name in _FLOATS if name in tensors}
    if len(dtypes) > 1 or not dtypes <= {torch.float32, torch.float64}:
        raise corrupt_file(path, f"the statistics have dtypes {sorted(map(str, dtypes))}")
    for name in _FLOATS:
        if name in tensors and not torch.isfinite(tensors[name]).all():
            raise corrupt_file(path, f"{name} has NaN or infinite entries")
    for name in (*_COUNTS, *(("kept",) if "kept" in tensors else ())):
        if tensors[name].dtype != torch.int64 or tensors[name].ndim != 1:
            raise corrupt_file(path, f"{name} is not a 1-D int64 tensor")
    codes, counts = tensors["pair_codes"], tensors["pair_counts"]
    if codes.shape != counts.shape:
        raise corrupt_file(path, "pair_codes and pair_counts differ in length")
    if codes.numel() and (codes[0] < 0 or codes[-1] >= k * k or (codes.diff() <= 0).any()):
        raise corrupt_file(path, f"pair_codes are not strictly increasing codes in [0, {k * k})")
    n_positions = meta["n_sequences"] * t
    if (counts <= 0).any() or counts.sum() > n_positions:
        raise corrupt_file(path, "pair_counts are not positive counts of at most N·T pairs")
    unigram = tensors["unigram_counts"]
    if (unigram < 0).any() or unigram.sum() > n_positions:
        raise corrupt_file(path, "unigram_counts are not counts of at most N·T positions")
    if "kept" in tensors:
        try:
            resolve_vocab(tensors["kept"], meta["d_vocab"])
        except LeadTermsError as err:
            raise corrupt_file(path, f"invalid kept ids ({err})") from err


def _stored_statistics(meta: dict[str, Any]) -> tuple[str, ...]:
    """The dense tables the file says it holds (version 1: all of them)."""
    listed = meta.get("statistics")
    if meta.get("format_version") == 1 or not isinstance(listed, list):
        return _FLOATS
    return tuple(name for name in _FLOATS if name in listed)


def _wanted(want: Iterable[str] | None) -> set[str] | None:
    """Tensor names to read for the statistics in ``want`` (None: every tensor)."""
    if want is None:
        return None
    names = {want} if isinstance(want, str) else set(want)
    known = {"B_bar", "Sigma_B", *_FLOATS}
    if not names or not names <= known:
        raise LeadTermsError(f"want= names statistics among {sorted(known)}, got {want!r}")
    return {*_COUNTS, "kept", *(names & set(_FLOATS))}


def _stored_sums(path: Path, meta: dict[str, Any], stacklevel: int) -> dict[str, Any] | None:
    """The verified checksums of the tensors (None, with a warning, for a format-1 file)."""
    if meta.get("format") == FORMAT and meta.get("format_version") == 1:
        warnings.warn(
            f"{path} is a format-1 statistics file without checksums: its content cannot be "
            "verified; save it again (or recompute it) to add them",
            stacklevel=stacklevel,
        )
        return None
    sums = meta.get("checksums")
    if not isinstance(sums, dict) or sums.get("metadata") != metadata_checksum(meta):
        raise corrupt_file(
            path, "the metadata does not match its checksum (a count or a setting was edited)"
        )
    return sums


def _compare_checksum(path: Path, sums: dict[str, Any] | None, name: str, digest: str) -> None:
    if sums is not None and sums.get(name) != digest:
        raise corrupt_file(path, f"tensor {name} does not match its checksum")


def verify_checksums(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Compare the stored checksums with the metadata and every tensor read (naming the first
    that differs)."""
    sums = _stored_sums(path, meta, stacklevel=5)
    if sums is not None:
        for name, tensor in tensors.items():
            _compare_checksum(path, sums, name, tensor_checksum(tensor))


def check_tokenizer(path: Path, meta: dict[str, Any], tokenizer: Any) -> None:
    """Refuse a tokenizer of another vocabulary than the file's (size, recorded hash)."""
    from tl_leadterms.data.tokenizers import vocab_hash

    size = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    if size is not None and size > meta["d_vocab"]:
        raise LeadTermsError(
            f"{path} was counted with d_vocab={meta['d_vocab']} but the tokenizer has {size} "
            "tokens: these statistics are of another vocabulary; use the tokenizer they were "
            "computed with (or pass check_vocab=False / --allow-vocab-mismatch if you know better)"
        )
    stored = meta.get("tokenizer_vocab_hash")
    if stored is not None and stored != vocab_hash(tokenizer):
        raise LeadTermsError(
            f"{path} was counted with tokenizer {meta.get('tokenizer_name')!r} whose "
            "vocabulary differs from the tokenizer given (vocabulary hash); use the same "
            "tokenizer (or pass check_vocab=False / --allow-vocab-mismatch if you know better)"
        )


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
    names = _wanted(want)
    tensors, meta = read_file(path, names)
    check_header(path, meta)
    check_tables(path, tensors, meta)
    stored = _stored_statistics(meta)
    needed = [n for n in (*_COUNTS, *stored) if names is None or n in names]
    missing = [n for n in needed if n not in tensors]
    if missing:
        raise corrupt_file(path, f"missing tensors {missing}")
    absent = sorted(names & set(_FLOATS) - set(stored)) if names is not None else []
    if absent:
        raise LeadTermsError(
            f"{path} holds no {absent} (it has {['B_bar', *stored]}); recompute the statistics "
            "with all of them (tl-leadterms stats without --only; corpus_stats(want=None))"
        )
    verify_checksums(path, tensors, meta)
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
        },
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
    _, meta = read_file(path, set())
    check_header(path, meta)
    if name not in _stored_statistics(meta):
        raise LeadTermsError(
            f"{path} holds no {name} (it has {['B_bar', *_stored_statistics(meta)]}); recompute "
            "the statistics with it (tl-leadterms stats without --only; corpus_stats(want=None))"
        )
    sums = _stored_sums(path, meta, stacklevel=3)
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
    _compare_checksum(path, sums, name, digest.hexdigest())
