"""Saving and loading :class:`CorpusStats`: one safetensors file with JSON metadata.

The file holds the primary statistics (sparse bigram counts, unigram counts, Φ̄, Ḡ, Q̄, Δ and
the kept ids); B̄ and Σ_B̄ are derived again on load. Writes go to a temporary file in the same
folder and are renamed into place, so a crash never leaves a half-written file.
"""

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from tl_leadterms.atomic import atomic_path
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.stats.vocab import KeptVocab, resolve_vocab
from tl_leadterms.version import __version__

__all__ = ["load_stats", "save_stats"]

FORMAT = "tl_leadterms.CorpusStats"
FORMAT_VERSION = 1
_COUNTS = ("pair_codes", "pair_counts", "unigram_counts")
_FLOATS = ("Phi_bar", "G_bar", "Q_bar", "Delta")
_REQUIRED = (*_COUNTS, *_FLOATS)


def save_stats(stats: CorpusStats, path: str | os.PathLike) -> None:
    """Write ``stats`` to ``path`` (a ``.safetensors`` file), atomically."""
    path = Path(path)
    if path.is_dir():
        raise LeadTermsError(f"{path} is a directory; pass a file path such as stats.safetensors.")
    tensors = {name: getattr(stats, name) for name in _REQUIRED}
    if stats.kept is not None:
        tensors["kept"] = stats.kept
    tensors = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
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
    }
    with atomic_path(path, parents=True) as tmp:
        save_file(tensors, str(tmp), metadata={"tl_leadterms": json.dumps(header)})


def _read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    if not path.is_file():
        raise LeadTermsError(f"no statistics file at {path}; save one with stats.save(path).")
    try:
        with safe_open(path, framework="pt") as f:  # one read: header, then the tensors
            raw = (f.metadata() or {}).get("tl_leadterms")
            tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (a handle)
    except (SafetensorError, OSError, ValueError) as err:
        raise LeadTermsError(
            f"{path} is not a readable safetensors file ({err}); it is corrupt or not written by "
            "CorpusStats.save. Recompute the statistics."
        ) from err
    if raw is None:
        raise LeadTermsError(
            f"{path} is a safetensors file but has no tl_leadterms metadata; it was not written "
            "by CorpusStats.save."
        )
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError as err:
        raise LeadTermsError(
            f"{path}: the tl_leadterms metadata is not valid JSON ({err})."
        ) from err
    return tensors, meta


_META_INTS = ("d_vocab", "n_ctx", "n_sequences", "n_kept", "centre_vocab")


def _corrupt(path: Path, what: str) -> LeadTermsError:
    return LeadTermsError(
        f"{path}: {what}; the file is corrupt or was edited. Recompute the statistics."
    )


def _check(path: Path, tensors: dict[str, torch.Tensor], meta: Any) -> None:
    """Refuse anything CorpusStats.save could not have written."""
    if not isinstance(meta, dict):
        raise _corrupt(path, "the metadata is not a JSON object")
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise LeadTermsError(
            f"{path}: format {meta.get('format')!r} version {meta.get('format_version')!r} is not "
            f"{FORMAT!r} version {FORMAT_VERSION}; recompute the statistics with this version."
        )
    bad_meta = [key for key in _META_INTS if not isinstance(meta.get(key), int) or meta[key] < 1]
    if bad_meta:
        raise _corrupt(path, f"metadata {bad_meta} missing or not positive integers")
    missing = [name for name in _REQUIRED if name not in tensors]
    if missing:
        raise _corrupt(path, f"missing tensors {missing}")
    k, t = meta["n_kept"], meta["n_ctx"]
    expected = {"Phi_bar": (k, k), "G_bar": (k, k), "Q_bar": (k, k), "Delta": (t,)}
    expected["unigram_counts"] = (k,)
    if "kept" in tensors:
        expected["kept"] = (k,)
    elif k != meta["d_vocab"]:
        raise _corrupt(path, f"n_kept={k} differs from d_vocab={meta['d_vocab']} but no kept ids")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise _corrupt(
                path, f"{name} has shape {tuple(tensors[name].shape)}, the metadata says {shape}"
            )
    dtypes = {tensors[name].dtype for name in _FLOATS}
    if len(dtypes) != 1 or not dtypes <= {torch.float32, torch.float64}:
        raise _corrupt(path, f"the statistics have dtypes {sorted(map(str, dtypes))}")
    for name in _FLOATS:
        if not torch.isfinite(tensors[name]).all():
            raise _corrupt(path, f"{name} has NaN or infinite entries")
    for name in (*_COUNTS, *(("kept",) if "kept" in tensors else ())):
        if tensors[name].dtype != torch.int64 or tensors[name].ndim != 1:
            raise _corrupt(path, f"{name} is not a 1-D int64 tensor")
    codes, counts = tensors["pair_codes"], tensors["pair_counts"]
    if codes.shape != counts.shape:
        raise _corrupt(path, "pair_codes and pair_counts differ in length")
    if codes.numel() and (codes[0] < 0 or codes[-1] >= k * k or (codes.diff() <= 0).any()):
        raise _corrupt(path, f"pair_codes are not strictly increasing codes in [0, {k * k})")
    n_positions = meta["n_sequences"] * t
    if (counts <= 0).any() or counts.sum() > n_positions:
        raise _corrupt(path, "pair_counts are not positive counts of at most N·T pairs")
    unigram = tensors["unigram_counts"]
    if (unigram < 0).any() or unigram.sum() > n_positions:
        raise _corrupt(path, "unigram_counts are not counts of at most N·T positions")
    if "kept" in tensors:
        try:
            resolve_vocab(tensors["kept"], meta["d_vocab"])
        except LeadTermsError as err:
            raise _corrupt(path, f"invalid kept ids ({err})") from err


def load_stats(
    path: str | os.PathLike,
    *,
    tokenizer: Any = None,
    d_vocab: int | None = None,
    device: torch.device | str = "cpu",
) -> CorpusStats:
    """Load statistics written by :func:`save_stats`; check them against the expectations."""
    path = Path(path)
    tensors, meta = _read(path)
    _check(path, tensors, meta)
    if d_vocab is not None and d_vocab != meta["d_vocab"]:
        raise LeadTermsError(
            f"{path} was counted with d_vocab={meta['d_vocab']}, but d_vocab={d_vocab} was "
            "expected; use statistics computed with this tokenizer."
        )
    if tokenizer is not None:
        from tl_leadterms.data.tokenizers import vocab_hash

        stored = meta.get("tokenizer_vocab_hash")
        if stored is not None and stored != vocab_hash(tokenizer):
            raise LeadTermsError(
                f"{path} was counted with tokenizer {meta.get('tokenizer_name')!r} whose "
                "vocabulary differs from the tokenizer given; use the same tokenizer."
            )
    kept = tensors.get("kept")
    tensors = {name: v.to(device) for name, v in tensors.items()}
    vocab = KeptVocab(
        meta["d_vocab"], None if kept is None else kept.to(device), meta["centre_vocab"]
    )
    return CorpusStats(
        vocab=vocab,
        n_sequences=meta["n_sequences"],
        n_ctx=meta["n_ctx"],
        pair_codes=tensors["pair_codes"],
        pair_counts=tensors["pair_counts"],
        unigram_counts=tensors["unigram_counts"],
        Phi_bar=tensors["Phi_bar"],
        G_bar=tensors["G_bar"],
        Q_bar=tensors["Q_bar"],
        Delta=tensors["Delta"],
        metadata={key: v for key, v in meta.items() if key not in ("format", "format_version")},
        tokenizer=tokenizer,
    )
