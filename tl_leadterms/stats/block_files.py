"""The block statistics file: :meth:`BlockStats.save <tl_leadterms.stats.blocks.BlockStats.save>`
and :meth:`~tl_leadterms.stats.blocks.BlockStats.load`.

One ``.safetensors`` file: each block's tables under ``block{b}/`` (``pair_codes``,
``pair_counts``, ``unigram_counts``, ``Phi_bar``, ``Q_bar``, ``Delta`` and, from format version
2, its ``windows``), the full-corpus ``G_bar``, the kept ids, and a header with the block bounds,
the metadata, the vocabulary hash and the SHA-256 of every tensor and of the header, verified on
reading as :func:`~tl_leadterms.stats.io.read_stats` verifies plain files (format
``tl_leadterms.stats.blocks.BlockStats``; each loader names the other for a file of the other
kind).
"""

import itertools
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tl_leadterms.stats.accumulate import ContextCounts
from tl_leadterms.stats.io import (
    BLOCK_FORMAT,
    check_header,
    check_tables,
    check_tokenizer,
    corrupt_file,
    read_file,
    verify_checksums,
    write_file,
)
from tl_leadterms.stats.provenance import ids_vocab_hash
from tl_leadterms.stats.vocab import KeptVocab
from tl_leadterms.version import __version__

__all__ = ["BLOCK_FORMAT_VERSION", "read_block_stats", "write_block_stats"]

BLOCK_FORMAT_VERSION = 2  # 2: each block's windows (exact resamples); 1 still loads
_TABLES = ("pair_codes", "pair_counts", "unigram_counts", "Phi_bar", "Q_bar", "Delta")


def write_block_stats(blocks: Any, path: str | os.PathLike) -> None:
    """Write ``blocks`` (a :class:`~tl_leadterms.stats.blocks.BlockStats`) to ``path`` (a
    ``.safetensors`` file), atomically (see the module)."""
    tensors: dict[str, Tensor] = {}
    for b, (counts, q_bar, delta) in enumerate(
        zip(blocks.counts, blocks.Q_bars, blocks.Deltas, strict=True)
    ):
        tables = [counts.pair_codes, counts.pair_counts, counts.unigram_counts, counts.Phi_bar,
                  q_bar, delta]  # fmt: skip
        tensors.update({f"block{b}/{name}": t for name, t in zip(_TABLES, tables, strict=True)})
        if blocks.windows is not None:
            tensors[f"block{b}/windows"] = blocks.windows[b].to(torch.int32)
    tensors["G_bar"] = blocks.full().G_bar
    vocab = blocks.vocab
    if vocab.kept is not None:
        tensors["kept"] = vocab.kept
    tensors = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    meta = blocks.metadata
    header = {
        **meta,
        "format": BLOCK_FORMAT,
        "format_version": BLOCK_FORMAT_VERSION if blocks.windows is not None else 1,
        "library_version": meta.get("library_version", __version__),
        "d_vocab": vocab.d_vocab,
        "n_ctx": blocks.counts[0].n_ctx,
        "n_sequences": int(blocks.sizes.sum()),
        "n_kept": vocab.k,
        "centre_vocab": vocab.centre_vocab,
        "dtype": str(tensors["G_bar"].dtype).removeprefix("torch."),
        "vocab_hash": meta.get("tokenizer_vocab_hash") or ids_vocab_hash(vocab.d_vocab, vocab.kept),
        "blocks": blocks.n_blocks,
        "bounds": [[a, z] for a, z in blocks.bounds],
    }
    write_file(Path(path), tensors, header)


def _bounds(path: Path, meta: dict[str, Any]) -> list[tuple[int, int]]:
    """The block bounds of the header: contiguous non-empty ranges covering every window."""
    bounds, count = meta.get("bounds"), meta.get("blocks")
    pairs = bounds if isinstance(bounds, list) else []
    ints = all(
        isinstance(p, list) and len(p) == 2 and all(type(x) is int for x in p) for p in pairs
    )
    edges = [p[0] for p in pairs] + [pairs[-1][1]] if pairs and ints else []
    if not (
        type(count) is int
        and count >= 2
        and len(pairs) == count
        and ints
        and edges[0] == 0
        and edges[-1] == meta["n_sequences"]
        and all(p[0] < p[1] for p in pairs)
        and all(a[1] == z[0] for a, z in itertools.pairwise(pairs))
    ):
        raise corrupt_file(
            path, f"the metadata's blocks/bounds ({count!r}, {bounds!r}) are not at least 2 "
            f"contiguous window ranges covering the {meta['n_sequences']} windows"
        )  # fmt: skip
    return [(a, z) for a, z in pairs]


def _block_tables(path: Path, tensors: dict[str, Tensor], meta: dict[str, Any], b: int,
                  size: int) -> dict[str, Tensor]:  # fmt: skip
    """Block ``b``'s tables, checked as a plain file's (the full Ḡ with block 0)."""
    tables = {name: tensors.get(f"block{b}/{name}") for name in _TABLES}
    missing = [f"block{b}/{name}" for name, t in tables.items() if t is None]
    if missing:
        raise corrupt_file(path, f"missing tensors {missing}")
    extra = {"kept": tensors["kept"]} if "kept" in tensors else {}
    if b == 0:
        extra["G_bar"] = tensors["G_bar"]
    check_tables(path, {**tables, **extra}, {**meta, "n_sequences": size})
    return tables


def read_block_stats(
    path: str | os.PathLike, *, tokenizer: Any = None, check_vocab: bool = True
) -> dict[str, Any]:
    """The arguments of :class:`~tl_leadterms.stats.blocks.BlockStats` read from a file that
    :func:`write_block_stats` wrote: the header, the bounds, every block's tables and the
    SHA-256 of every tensor are checked (a flipped bit is refused, naming the tensor);
    ``tokenizer`` as in :func:`~tl_leadterms.stats.io.read_stats`."""
    path = Path(path)
    tensors, meta = read_file(path, None)
    check_header(path, meta, BLOCK_FORMAT, (1, BLOCK_FORMAT_VERSION))
    verify_checksums(path, tensors, meta)
    bounds = _bounds(path, meta)
    names = _TABLES + (("windows",) if meta["format_version"] >= 2 else ())
    expected = {f"block{b}/{n}" for b in range(len(bounds)) for n in names} | {"G_bar", "kept"}
    unknown = sorted(set(tensors) - expected)
    if unknown or "G_bar" not in tensors:
        raise corrupt_file(path, f"tensors {unknown or ['G_bar']} do not fit {len(bounds)} blocks")
    tables = [_block_tables(path, tensors, meta, b, z - a) for b, (a, z) in enumerate(bounds)]
    windows = None
    if meta["format_version"] >= 2:
        windows = [_block_windows(path, tensors, meta, b, z - a) for b, (a, z) in enumerate(bounds)]
    if tokenizer is not None and check_vocab:
        check_tokenizer(path, meta, tokenizer)
    n_ctx = meta["n_ctx"]
    counts = [
        ContextCounts(t["pair_codes"], t["pair_counts"], t["unigram_counts"], t["Phi_bar"], z - a,
                      n_ctx)
        for t, (a, z) in zip(tables, bounds, strict=True)
    ]  # fmt: skip
    vocab = KeptVocab(meta["d_vocab"], tensors.get("kept"), meta["centre_vocab"])
    dropped = ("format", "format_version", "checksums", "bounds")
    metadata = {key: v for key, v in meta.items() if key not in dropped}
    return {"counts": counts, "Q_bars": [t["Q_bar"] for t in tables],
            "Deltas": [t["Delta"] for t in tables], "bounds": bounds, "vocab": vocab,
            "G_bar": tensors["G_bar"], "metadata": metadata, "tokenizer": tokenizer,
            "windows": windows}  # fmt: skip


def _block_windows(path: Path, tensors: dict[str, Tensor], meta: dict[str, Any], b: int,
                   size: int) -> Tensor:  # fmt: skip
    """Block ``b``'s windows: ``[size, T + 1]`` integer ids in ``[0, d_vocab)``."""
    w = tensors.get(f"block{b}/windows")
    shape = (size, meta["n_ctx"] + 1)
    if w is None or w.dtype not in (torch.int32, torch.int64) or tuple(w.shape) != shape:
        found = None if w is None else (tuple(w.shape), str(w.dtype))
        raise corrupt_file(path, f"block{b}/windows is {found}, not {shape} integer ids")
    if w.numel() and (int(w.min()) < 0 or int(w.max()) >= meta["d_vocab"]):
        raise corrupt_file(path, f"block{b}/windows has ids outside [0, {meta['d_vocab']})")
    return w
