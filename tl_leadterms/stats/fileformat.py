"""The statistics file's layout and checks, without torch (numpy is imported by the functions that
use it; ``tl-leadterms top`` checks a file through this module with the standard library alone).

A file is one safetensors file with JSON metadata under ``tl_leadterms``: the sparse bigram
counts, Δ, and from format version 3 each ``[k, k]`` table (Φ̄, Q̄) packed by :func:`pack`; every
tensor has a SHA-256 (:func:`array_checksum`), and so has the metadata. The layout in full:
docs/guides/corpus-statistics.md#the-statistics-file.

>>> import numpy as np
>>> m = np.array([[0.0, 2.0, 0.0], [0.0, 0.0, -1.0]])
>>> parts = pack(m)
>>> parts["values"].tolist(), parts["rows"].tolist()
([2.0, -1.0], [0, 1, 2])
>>> row = unpack_row(parts["base"], parts["mask"][1], parts["values"][1:2], 3)
>>> bool((unpack(parts, 2, 3) == m).all()), row.tolist()
(True, [0.0, 0.0, -1.0])
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.jsontext import parse_json

if TYPE_CHECKING:  # numpy is imported by the functions that use it: ``top`` reads without it
    import numpy as np

__all__ = [
    "BLOCK_FORMAT",
    "FORMAT",
    "FORMAT_VERSION",
    "PACKED",
    "array_checksum",
    "check_header",
    "check_tables",
    "check_tokenizer",
    "corrupt_file",
    "metadata_checksum",
    "not_stored",
    "pack",
    "packed_names",
    "read_header",
    "stored_statistics",
    "stored_sums",
    "unpack",
    "unpack_row",
    "wanted_names",
]

FORMAT = "tl_leadterms.CorpusStats"
#: the name block files carry since format 1 (the class now lives in tl_leadterms.stats.blocks)
BLOCK_FORMAT = "tl_leadterms.BlockStats"  # statistics per block of windows (:mod:`.blocks`)
FORMAT_VERSION = 3
VERSIONS = (1, 2, 3)
COUNTS = ("pair_codes", "pair_counts", "unigram_counts")
FLOATS = ("Phi_bar", "G_bar", "Q_bar", "Delta")
SQUARE = ("Phi_bar", "G_bar", "Q_bar")
PACKED = ("base", "mask", "values", "rows")  # the parts of a packed table
_LARGEST = 1 << 53  # metadata integers above this are not exact in JSON readers
_META_INTS = ("d_vocab", "n_ctx", "n_sequences", "n_kept", "centre_vocab")
#: the tensors of the column totals a scoring needs, per statistic (see :data:`TOTALS`)
TOTALS = {
    "B_bar": ("column_sq", "column_pos"),
    "Phi_bar": ("column_sq", "column_pos"),
    "Q_bar": ("column_sq", "column_pos"),
    "Sigma_B": ("diagonal", "shift", "constant"),
}


def wanted_names(want: Any) -> set[str] | None:
    """The statistics ``want`` names (one name or several; None: every one), checked."""
    if want is None:
        return None
    known = ("B_bar", "Sigma_B", *FLOATS)
    try:
        names = {want} if isinstance(want, str) else set(want)
    except TypeError:
        names = set()  # not a collection of names: refused below
    if not names or not names <= set(known):
        raise LeadTermsError(
            f"want= names statistics among {known}, got {want!r}; None means all of them"
        )
    return names


def totals_names(name: str) -> list[str]:
    """The tensor names of the scoring totals of statistic ``name`` (``Phi_bar/column_sq`` ...).

    Computed on save as :meth:`CorpusStats.top` computes them (float64): the squared column norms
    and positive column sums of B̄, Φ̄ and Q̄, and of Σ_B̄ its diagonal, the shift ``u·Bᵀα`` and the
    constant ``u²‖α‖²`` from which one row of Σ_B̄ is summed as the Gram kernel sums it;
    ``tl-leadterms top`` reads one row and these ``k``-vectors, not the table. Files without them
    still load (``top`` computes the totals)."""
    return [f"{name}/{part}" for part in TOTALS[name]]


def _bits_of() -> dict:
    import numpy as np

    return {np.dtype(np.float64): np.int64, np.dtype(np.float32): np.int32}


# -- checksums (the same digests as provenance.tensor_checksum) -----------------------------
def array_checksum(array: np.ndarray) -> str:
    """SHA-256 (hex) of an array's dtype, shape and bytes: ``tensor_checksum`` of the same
    tensor (whose dtype prints as ``torch.<name>``)."""
    import numpy as np

    digest = hashlib.sha256(f"torch.{array.dtype.name}{tuple(array.shape)}".encode())
    digest.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
    return digest.hexdigest()


def metadata_checksum(metadata: dict[str, Any]) -> str:
    """SHA-256 (hex) of the metadata as canonical JSON (sorted keys), ``checksums`` left out."""
    rest = {key: value for key, value in metadata.items() if key != "checksums"}
    blob = json.dumps(rest, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# -- packed tables ---------------------------------------------------------------------------
def packed_names(name: str) -> list[str]:
    """The tensor names of table ``name`` packed (``Phi_bar/base`` ...)."""
    return [f"{name}/{part}" for part in PACKED]


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(_bits_of()[a.dtype])


def pack(table: np.ndarray) -> dict[str, np.ndarray]:
    """``table`` (``[k, k]`` float) as ``base``, ``mask``, ``values``, ``rows``: per column the
    commoner of 0 and the column's minimum is the base, and only other entries are kept."""
    import numpy as np

    table = np.ascontiguousarray(table)
    if table.ndim != 2 or table.dtype not in _bits_of():
        raise LeadTermsError(
            f"pack takes a 2-D float32/float64 table, got {table.shape} {table.dtype}"
        )
    zero = np.zeros(table.shape[1], dtype=table.dtype)
    low = table.min(0) if table.size else zero
    bits = _bits(table)
    use_low = (bits == _bits(low)).sum(0) > (bits == _bits(zero)).sum(0)
    base = np.where(use_low, low, zero).astype(table.dtype)
    differs = bits != _bits(base)[None, :]
    rows = np.zeros(table.shape[0] + 1, dtype=np.int64)
    np.cumsum(differs.sum(1), out=rows[1:])
    return {"base": base, "mask": np.packbits(differs, axis=1), "values": table[differs],
            "rows": rows}  # fmt: skip


def unpack(parts: dict[str, np.ndarray], k: int, columns: int | None = None) -> np.ndarray:
    """The table ``pack`` packed into ``parts`` (``k`` rows, ``columns`` columns, default k)."""
    import numpy as np

    columns = k if columns is None else columns
    differs = np.unpackbits(parts["mask"], axis=1, count=columns).view(bool)
    table = np.broadcast_to(parts["base"], (k, columns)).copy()
    table[differs] = parts["values"]
    return table


def unpack_row(base: np.ndarray, mask_row: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """One row of a packed table from its mask row and values (``values[rows[i]:rows[i+1]]``)."""
    import numpy as np

    row = base.copy()
    row[np.unpackbits(mask_row, count=k).view(bool)] = values
    return row


def check_packed(path: Path, name: str, parts: dict[str, np.ndarray], k: int) -> None:
    """Refuse the parts of a packed ``[k, k]`` table that :func:`pack` could not have written."""
    import numpy as np

    base, mask, values, rows = (parts[p] for p in PACKED)
    if base.shape != (k,) or base.dtype not in _bits_of() or values.dtype != base.dtype:
        raise corrupt_file(path, f"{name}/base and {name}/values are not [{k}] and [n] floats")
    if mask.dtype != np.uint8 or mask.shape != (k, -(-k // 8)) or rows.shape != (k + 1,):
        raise corrupt_file(
            path, f"{name}/mask or {name}/rows does not have the shape of a {k}×{k} table"
        )
    per_row = np.unpackbits(mask, axis=1, count=k).sum(1, dtype=np.int64)
    if rows.dtype != np.int64 or rows[0] != 0 or (np.diff(rows) != per_row).any():
        raise corrupt_file(path, f"{name}/rows does not count the entries of {name}/mask")
    if values.shape != (int(rows[-1]),):
        raise corrupt_file(path, f"{name}/values has {values.size} entries, {name}/rows {rows[-1]}")


# -- the metadata and the tables -----------------------------------------------------------
def corrupt_file(path: Path, what: str) -> LeadTermsError:
    """The error for a file whose content ``what`` no writer of this library produces."""
    return LeadTermsError(
        f"{path}: {what}; the file is corrupt or was edited. Recompute the statistics."
    )


def unreadable(path: Path, err: BaseException | str) -> LeadTermsError:
    return LeadTermsError(
        f"{path} is not a readable safetensors file ({err}); it is corrupt or not written by "
        "CorpusStats.save. Recompute the statistics."
    )


_MAX_HEADER = 100_000_000  # safetensors' own limit on its JSON header


def read_safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header of a safetensors file and where its tensor bytes start, read with the
    standard library (8-byte little-endian length, then the JSON object), every tensor entry
    checked against the file's size as safetensors checks it."""
    import os
    import struct

    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise ValueError("shorter than its 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > min(size - 8, _MAX_HEADER):
                raise ValueError(f"header length {n} runs past the end of the file")
            header = json.loads(f.read(n).decode("utf-8"))
    except (OSError, ValueError) as err:  # json's and utf-8's errors are ValueErrors
        raise unreadable(path, err) from err
    if not isinstance(header, dict):
        raise unreadable(path, "the header is not a JSON object")
    room = size - 8 - n
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise unreadable(path, "the header's __metadata__ is not a map of strings")
            continue
        try:
            lo, hi = (int(x) for x in entry["data_offsets"])
            ok = isinstance(entry["dtype"], str) and isinstance(entry["shape"], list)
            ok = ok and 0 <= lo <= hi <= room
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise unreadable(path, f"tensor {name!r} lies outside the file or has no layout")
    return header, 8 + n


def read_header(path: Path) -> dict[str, Any]:
    """The ``tl_leadterms`` metadata of a safetensors file (nothing else is read)."""
    if not path.is_file():
        raise LeadTermsError(
            f"no statistics file at {path}; ⟦save one with stats.save(path)|write one with "
            "tl-leadterms stats INPUTS -o FILE⟧."
        )
    header, _ = read_safetensors_header(path)
    raw = header.get("__metadata__", {}).get("tl_leadterms")
    if raw is None:
        raise LeadTermsError(
            f"{path} is a safetensors file but has no tl_leadterms metadata; it was not written "
            "by CorpusStats.save or BlockStats.save."
        )
    meta = parse_json(raw, where=f"{path}: the tl_leadterms metadata")
    if not isinstance(meta, dict):
        raise LeadTermsError(f"{path}: the tl_leadterms metadata is not a JSON object.")
    return meta


_OTHER = {
    BLOCK_FORMAT: "holds statistics per block of windows (⟦BlockStats.save|tl-leadterms stats "
    "--blocks⟧); ⟦load it with BlockStats.load (its .full() is the whole corpus)|every command "
    "reads it⟧",
    FORMAT: "holds plain statistics (⟦CorpusStats.save|tl-leadterms stats⟧); ⟦load it with "
    "CorpusStats.load, or compute block statistics (block_stats)|compute block statistics "
    "with tl-leadterms stats --blocks B⟧",
}


def check_header(path: Path, meta: Any, fmt: str = FORMAT, versions=VERSIONS) -> None:
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


def check_tokenizer(path: Path, meta: dict[str, Any], tokenizer: Any) -> None:
    """Refuse a tokenizer of another vocabulary than the file's (size, recorded hash; a
    :class:`~tl_leadterms.stats.filetop.FileTokenizer` too)."""
    from tl_leadterms.data.tokenizers import vocab_hash  # tokenizers only: no transformers

    size = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    if size is not None and size > meta["d_vocab"]:
        raise LeadTermsError(
            f"{path} was counted with d_vocab={meta['d_vocab']} but the tokenizer has {size} "
            "tokens: these statistics are of another vocabulary; use the tokenizer they were "
            "computed with (or pass ⟦check_vocab=False|--allow-vocab-mismatch⟧ if you know better)"
        )
    stored = meta.get("tokenizer_vocab_hash")
    if stored is not None and stored != vocab_hash(tokenizer):
        raise LeadTermsError(
            f"{path} was counted with tokenizer {meta.get('tokenizer_name')!r} whose "
            "vocabulary differs from the tokenizer given (vocabulary hash); use the same "
            "tokenizer (or pass ⟦check_vocab=False|--allow-vocab-mismatch⟧ if you know better)"
        )


def stored_statistics(meta: dict[str, Any]) -> tuple[str, ...]:
    """The dense statistics the file holds or rebuilds (version 1: all of them)."""
    listed = meta.get("statistics")
    if meta.get("format_version") == 1 or not isinstance(listed, list):
        return FLOATS
    return tuple(name for name in FLOATS if name in listed)


def not_stored(path: Path, names: list[str], meta: dict[str, Any]) -> LeadTermsError:
    """The error for statistics ``names`` that the file does not hold."""
    return LeadTermsError(
        f"{path} holds no {names} (it has {['B_bar', *stored_statistics(meta)]}); recompute the "
        "statistics with them (⟦corpus_stats(want=None)|tl-leadterms stats without --only⟧)"
    )


def is_packed(meta: dict[str, Any]) -> bool:
    """Whether the file's ``[k, k]`` tables are packed (format version 3 and later)."""
    return meta.get("format_version", 0) >= 3


def rebuilt(meta: dict[str, Any]) -> tuple[str, ...]:
    """The statistics the file lists but does not hold: rebuilt on load (Ḡ from Φ̄)."""
    return tuple(meta.get("rebuilt", ())) if is_packed(meta) else ()


def stored_sums(path: Path, meta: dict[str, Any]) -> dict[str, Any] | None:
    """The verified checksums of the tensors (None for a format-1 file, which has none)."""
    if meta.get("format") == FORMAT and meta.get("format_version") == 1:
        return None
    sums = meta.get("checksums")
    if not isinstance(sums, dict) or sums.get("metadata") != metadata_checksum(meta):
        raise corrupt_file(
            path, "the metadata does not match its checksum (a count or a setting was edited)"
        )
    return sums


def compare_checksum(path: Path, sums: dict[str, Any] | None, name: str, digest: str) -> None:
    if sums is not None and sums.get(name) != digest:
        raise corrupt_file(path, f"tensor {name} does not match its checksum")


def check_tables(path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Refuse tables (shapes, dtypes, counts, kept ids) that ``save`` could not have written
    for statistics of ``meta["n_sequences"]`` windows. ``arrays`` are numpy arrays (a CPU
    tensor's ``.numpy()`` is a view); dense tables only, packed ones after unpacking."""
    import numpy as np

    missing = [name for name in COUNTS if name not in arrays]
    if missing:
        raise corrupt_file(path, f"missing tensors {missing}")
    k, t = meta["n_kept"], meta["n_ctx"]
    expected = {"Phi_bar": (k, k), "G_bar": (k, k), "Q_bar": (k, k), "Delta": (t,)}
    expected["unigram_counts"] = (k,)
    if "kept" in arrays:
        expected["kept"] = (k,)
    elif k != meta["d_vocab"]:
        raise corrupt_file(
            path, f"n_kept={k} differs from d_vocab={meta['d_vocab']} but no kept ids"
        )
    for name, shape in expected.items():
        if name in arrays and tuple(arrays[name].shape) != shape:
            raise corrupt_file(
                path, f"{name} has shape {tuple(arrays[name].shape)}, the metadata says {shape}"
            )
    dtypes = {arrays[name].dtype for name in FLOATS if name in arrays}
    if len(dtypes) > 1 or not dtypes <= set(_bits_of()):
        raise corrupt_file(
            path, f"the statistics have dtypes {sorted('torch.' + d.name for d in dtypes)}"
        )
    for name in FLOATS:
        if name in arrays and not np.isfinite(arrays[name]).all():
            raise corrupt_file(path, f"{name} has NaN or infinite entries")
    for name in (*COUNTS, *(("kept",) if "kept" in arrays else ())):
        if arrays[name].dtype != np.int64 or arrays[name].ndim != 1:
            raise corrupt_file(path, f"{name} is not a 1-D int64 tensor")
    check_counts(path, arrays, meta)


def check_counts(path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """The sparse counts and kept ids (int64, 1-D) against the metadata."""
    import numpy as np

    k, n_positions = meta["n_kept"], meta["n_sequences"] * meta["n_ctx"]
    codes, counts = arrays["pair_codes"], arrays["pair_counts"]
    if codes.shape != counts.shape:
        raise corrupt_file(path, "pair_codes and pair_counts differ in length")
    if codes.size and (codes[0] < 0 or codes[-1] >= k * k or (np.diff(codes) <= 0).any()):
        raise corrupt_file(path, f"pair_codes are not strictly increasing codes in [0, {k * k})")
    if (counts <= 0).any() or counts.sum() > n_positions:
        raise corrupt_file(path, "pair_counts are not positive counts of at most N·T pairs")
    unigram = arrays["unigram_counts"]
    if (unigram < 0).any() or unigram.sum() > n_positions:
        raise corrupt_file(path, "unigram_counts are not counts of at most N·T positions")
    kept = arrays.get("kept")
    if kept is not None:
        d_vocab = meta["d_vocab"]
        if kept.size and (kept.min() < 0 or kept.max() >= d_vocab):
            raise corrupt_file(path, f"invalid kept ids (not all in [0, {d_vocab}))")
        if np.unique(kept).size != kept.size:
            raise corrupt_file(path, "invalid kept ids (repeated ids)")
