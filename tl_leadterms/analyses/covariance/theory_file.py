"""Theory terms saved beside the statistics: computed once, read by every later process
(docs/guides/pythia-protocol.md#theory-terms-computed-once).

A *theory file* (safetensors, written atomically) keeps the ``O(k³)`` covariance terms
(:class:`~.algebra.TheoryTerms`) of the attention and value theories, with the checksum of the
statistics (:func:`stats_checksum`), the settings (``protocol``, ``dtype``, ``gemm_dtype``,
device type) and a SHA-256 of every tensor and of the metadata. A file is read only for the
statistics and settings it was written for, else a :class:`~tl_leadterms.errors.LeadTermsError`
names what differs; terms read are the ones written, bit for bit. :func:`theory_path` names a
sidecar next to a statistics file.

Example:
    >>> import tempfile, pathlib, torch
    >>> from tl_leadterms import corpus_stats
    >>> tokens = torch.randint(0, 12, (32, 9), generator=torch.Generator().manual_seed(0))
    >>> stats = corpus_stats(tokens, d_vocab=12, progress=False)
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "stats.theory.safetensors"
    >>> fresh = theory_for(stats, path)  # computed, then written
    >>> again = load_theory(path, stats)  # read back, verified
    >>> again.value_terms.norm2 == fresh.value_terms.norm2
    True
    >>> load_theory(path, stats, protocol="paper-code")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tl_leadterms.errors.LeadTermsError: ...protocol='theorem'...
"""

import hashlib
import json
import os
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from tl_leadterms.analyses.covariance.algebra import (
    VALUE_NAME,
    Theory,
    TheoryTerms,
    attention_name,
    remember_terms,
)
from tl_leadterms.analyses.covariance.options import Protocol, fill
from tl_leadterms.atomic import atomic_path
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.jsontext import parse_json
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.stats.provenance import metadata_checksum, tensor_checksum
from tl_leadterms.version import __version__

__all__ = [
    "FORMAT",
    "load_theory",
    "prepare_theory",
    "save_theory",
    "stats_checksum",
    "theory_for",
    "theory_path",
]

FORMAT = "tl_leadterms.TheoryTerms"
FORMAT_VERSION = 1
_PARTS = ("attention", "value")
_CHECKSUMS: "weakref.WeakKeyDictionary[CorpusStats, str]" = weakref.WeakKeyDictionary()


def _table_digest(name: str, table: torch.Tensor) -> bytes:
    flat = table.detach().cpu().contiguous().reshape(-1)
    digest = hashlib.sha256(f"{name}\0{flat.dtype}\0{tuple(table.shape)}\0".encode())
    digest.update(memoryview(flat.numpy()).cast("B"))  # hashlib releases the GIL here
    return digest.digest()


def stats_checksum(stats: CorpusStats) -> str:
    """SHA-256 (hex) of what the theory matrices ``Q̄`` and ``B̄Φ̄`` are built from (the sizes,
    the kept ids, the sparse counts, ``Φ̄`` and ``Q̄``), once per statistics object.

    >>> import torch
    >>> from tl_leadterms import corpus_stats
    >>> tokens = torch.randint(0, 12, (32, 9), generator=torch.Generator().manual_seed(0))
    >>> a = corpus_stats(tokens, d_vocab=12, progress=False)
    >>> b = corpus_stats(tokens[:16], d_vocab=12, progress=False)
    >>> stats_checksum(a) == stats_checksum(a), stats_checksum(a) == stats_checksum(b)
    (True, False)
    """
    if stats in _CHECKSUMS:
        return _CHECKSUMS[stats]
    digest = hashlib.sha256(FORMAT.encode())
    sizes = {"d_vocab": stats.d_vocab, "k": stats.k, "n_ctx": stats.n_ctx,
             "n_sequences": stats.n_sequences, "centre_vocab": stats.centre_vocab}  # fmt: skip
    digest.update(json.dumps(sizes, sort_keys=True).encode())
    kept = stats.kept
    tables = {"kept": kept if kept is not None else torch.empty(0, dtype=torch.int64),
              "pair_codes": stats.pair_codes, "pair_counts": stats.pair_counts,
              "unigram_counts": stats.unigram_counts, "Phi_bar": stats.Phi_bar,
              "Q_bar": stats.Q_bar}  # fmt: skip
    with ThreadPoolExecutor(max_workers=2) as pool:  # Φ̄ and Q̄ (the bulk) side by side
        for part in pool.map(_table_digest, tables, tables.values()):
            digest.update(part)
    _CHECKSUMS[stats] = digest.hexdigest()
    return _CHECKSUMS[stats]


def theory_path(stats_path: str | os.PathLike, *, protocol: str = "theorem",
                dtype: torch.dtype = torch.float64, gemm_dtype: torch.dtype | None = None,
                device: str = "cpu") -> Path:  # fmt: skip
    """The sidecar of a statistics file for one setting: ``stats.safetensors`` ->
    ``stats.theory-theorem-float64.safetensors`` (``-gemm-float32``, ``-cuda`` appended when
    those are set), in the same folder.

    >>> theory_path("runs/stats.safetensors", dtype=torch.float32).as_posix()
    'runs/stats.theory-theorem-float32.safetensors'
    """
    path = Path(stats_path)
    name = f"{path.name.removesuffix('.safetensors')}.theory-{protocol}-{_dtype_name(dtype)}"
    if gemm_dtype is not None and gemm_dtype != dtype:
        name += f"-gemm-{_dtype_name(gemm_dtype)}"
    if torch.device(device).type != "cpu":
        name += f"-{torch.device(device).type}"
    return path.with_name(name + ".safetensors")


def _dtype_name(dtype: torch.dtype | None) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")


def _settings(protocol: str, device, dtype: torch.dtype, gemm_dtype) -> dict[str, Any]:
    gemm = dtype if gemm_dtype is None else gemm_dtype
    return {"protocol": protocol, "attention": attention_name(protocol), "value": VALUE_NAME,
            "dtype": _dtype_name(dtype), "gemm_dtype": _dtype_name(gemm),
            "device": torch.device(device).type}  # fmt: skip


def _described(stats: CorpusStats) -> dict[str, Any]:
    return {"checksum": stats_checksum(stats), "d_vocab": stats.d_vocab, "k": stats.k,
            "n_ctx": stats.n_ctx, "n_sequences": stats.n_sequences}  # fmt: skip


def save_theory(path: str | os.PathLike, stats: CorpusStats, theory: Theory) -> Path:
    """Write ``theory``'s terms (computed from ``stats``) to ``path``, atomically; returns it."""
    path = Path(path)
    if path.is_dir():
        raise LeadTermsError(
            f"{path} is a directory; pass a file path such as stats.theory.safetensors"
        )
    tensors: dict[str, torch.Tensor] = {}
    for part, terms in zip(_PARTS, (theory.attention_terms, theory.value_terms), strict=True):
        tensors[f"{part}.scale"] = terms.scale
        tensors[f"{part}.mean"] = terms.mean
        tensors[f"{part}.w"] = terms.w
        tensors[f"{part}.scalars"] = torch.tensor([terms.norm2, terms.centred_norm2, terms.a],
                                                  dtype=torch.float64)  # fmt: skip
    tensors = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    header: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "library_version": __version__,
        "statistics": _described(stats),
        "settings": _settings(theory.protocol, theory.device, theory.dtype, theory.gemm_dtype),
    }
    header["checksums"] = {**{n: tensor_checksum(t) for n, t in tensors.items()},
                           "metadata": metadata_checksum(header)}  # fmt: skip
    size = sum(t.nbytes for t in tensors.values()) + 65536
    with atomic_path(path, parents=True, size=size) as tmp:
        save_file(tensors, str(tmp), metadata={"tl_leadterms": json.dumps(header)})
    return path


def _corrupt(path: Path, what: str) -> LeadTermsError:
    return LeadTermsError(
        f"{path} is not a readable theory file ({what}); delete it and rerun to recompute the "
        "theory terms"
    )


def _read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    if not path.is_file():
        raise LeadTermsError(
            f"no theory file at {path}; write one with save_theory(path, stats, theory), or pass "
            "theory=path to covariance_similarity, which writes it when it is missing"
        )
    try:
        with safe_open(str(path), framework="pt") as f:
            text = (f.metadata() or {}).get("tl_leadterms")
            tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError) as err:
        raise _corrupt(path, f"safetensors could not read it: {err}") from None
    if text is None:
        raise _corrupt(path, "no tl_leadterms metadata")
    meta = parse_json(text, where=str(path))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise _corrupt(path, f"its format is {found!r}, not {FORMAT!r}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise LeadTermsError(
            f"{path} is a theory file of format version {meta.get('format_version')!r}; this "
            f"library (version {__version__}) reads version {FORMAT_VERSION}: delete it and "
            "rerun to recompute the theory terms"
        )
    sums = meta.get("checksums")
    if not isinstance(sums, dict) or sums.get("metadata") != metadata_checksum(meta):
        raise _corrupt(path, "the metadata does not match its checksum")
    names = {f"{p}.{f}" for p in _PARTS for f in ("scale", "mean", "w", "scalars")}
    if set(tensors) != names:
        raise _corrupt(path, f"it holds tensors {sorted(tensors)}, not {sorted(names)}")
    for name, tensor in tensors.items():
        if sums.get(name) != tensor_checksum(tensor):
            raise _corrupt(path, f"tensor {name} does not match its checksum")
    return tensors, meta


def _check_match(path: Path, meta: dict[str, Any], stats: CorpusStats, wanted: dict) -> None:
    """Refuse a file written for other statistics or other settings, naming the difference."""
    stored = meta.get("statistics", {})
    mine = _described(stats)
    if stored.get("checksum") != mine["checksum"]:
        sizes = ", ".join(f"{k}={stored.get(k)}" for k in ("d_vocab", "k", "n_ctx", "n_sequences"))
        ours = ", ".join(f"{k}={mine[k]}" for k in ("d_vocab", "k", "n_ctx", "n_sequences"))
        raise LeadTermsError(
            f"{path} holds the theory terms of other statistics (checksum "
            f"{str(stored.get('checksum'))[:12]}…, {sizes}) than these ({mine['checksum'][:12]}…, "
            f"{ours}); pass theory= a file of their own (theory_path(stats_file)), or delete "
            f"{path} to recompute"
        )
    settings = meta.get("settings", {})
    differ = [k for k in wanted if settings.get(k) != wanted[k]]
    if differ:
        stored_s = ", ".join(f"{k}={settings.get(k)!r}" for k in differ)
        wanted_s = ", ".join(f"{k}={wanted[k]!r}" for k in differ)
        raise LeadTermsError(
            f"{path} holds theory terms computed with {stored_s}, but {wanted_s} was asked for; "
            "pass those settings, or theory= another file for these (theory_path(stats_file, "
            "protocol=..., dtype=...) names one per setting)"
        )


def _terms(tensors: dict[str, torch.Tensor], part: str, device, dtype) -> TheoryTerms:
    norm2, centred, a = tensors[f"{part}.scalars"].tolist()

    def get(field: str) -> torch.Tensor:
        t = tensors[f"{part}.{field}"]
        if t.dtype != dtype:
            raise LeadTermsError(f"{part}.{field} is {t.dtype}, the metadata says {dtype}")
        return t.to(device)

    return TheoryTerms(get("scale"), get("mean"), norm2, centred, get("w"), a)


def load_theory(path: str | os.PathLike, stats: CorpusStats, *, protocol: str = "theorem",
                device="cpu", dtype: torch.dtype = torch.float64,
                gemm_dtype: torch.dtype | None = None) -> Theory:  # fmt: skip
    """The :class:`~.algebra.Theory` of ``stats`` with its terms read from ``path``.

    The file must have been written for these statistics (same :func:`stats_checksum`) and
    settings, else a :class:`LeadTermsError` names what differs. The terms also enter this
    process's cache, so later calls with ``stats`` neither read nor recompute them.
    """
    path = Path(path)
    device = torch.device(device)
    tensors, meta = _read(path)
    _check_match(path, meta, stats, _settings(protocol, device, dtype, gemm_dtype))
    try:
        att, val = (_terms(tensors, part, device, dtype) for part in _PARTS)
    except LeadTermsError as err:
        raise _corrupt(path, str(err)) from None
    if att.scale.numel() != stats.k or val.scale.numel() != stats.k:
        raise _corrupt(path, f"its terms have {att.scale.numel()} rows, not k={stats.k}")
    remember_terms(stats, attention_name(protocol), dtype, device, gemm_dtype, att)
    remember_terms(stats, VALUE_NAME, dtype, device, gemm_dtype, val)
    return Theory.of(stats, protocol, device, dtype, gemm_dtype)  # the matrices, cached terms


def theory_for(stats: CorpusStats, path: str | os.PathLike, *, protocol: str = "theorem",
               device="cpu", dtype: torch.dtype = torch.float64,
               gemm_dtype: torch.dtype | None = None) -> Theory:  # fmt: skip
    """The theory of ``stats`` with its terms from ``path`` when that file exists (verified as
    :func:`load_theory` does), else computed (or taken from this process's cache) and written
    to ``path`` for the next process."""
    path = Path(path)
    if path.exists():
        return load_theory(path, stats, protocol=protocol, device=device, dtype=dtype,
                           gemm_dtype=gemm_dtype)  # fmt: skip
    theory = Theory.of(stats, protocol, device, dtype, gemm_dtype)
    save_theory(path, stats, theory)
    return theory


def prepare_theory(stats: CorpusStats, kwargs: dict[str, Any], device) -> bool:
    """Before a distributed sweep: write the theory file ``kwargs["theory"]`` of a covariance
    analysis (its keywords ``kwargs``) here, once, when it is missing and ``device`` is usable
    in this process, so that every task reads it instead of computing the terms itself.
    Returns whether the file is there now (an existing file is verified by each task)."""
    path = Path(kwargs["theory"])
    if path.exists():
        return True
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and not torch.cuda.is_available():
        return False  # the tasks compute it on their GPUs (each writes it atomically)
    given = {k: kwargs[k] for k in ("dtype", "gemm_dtype") if k in kwargs}
    run = fill(kwargs.get("compute"), "compute", **given)
    gemm = None if run.gemm_dtype == run.dtype else run.gemm_dtype
    theory_for(stats, path, protocol=Protocol.of(kwargs.get("protocol", "theorem")).orientation,
               device=device, dtype=run.dtype, gemm_dtype=gemm)  # fmt: skip
    return True
