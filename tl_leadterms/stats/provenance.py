"""Provenance of statistics files: the vocabulary hash and content checksums.

* ``vocab_hash`` (metadata): the tokenizer's vocabulary hash
  (:func:`tl_leadterms.data.tokenizers.vocab_hash`) when the statistics were computed with a
  tokenizer; otherwise :func:`ids_vocab_hash`, ``"ids:"`` + a hash of ``d_vocab`` and the kept
  ids. Two statistics files over the same token ids have the same hash.
* ``checksums`` (metadata): SHA-256 of every tensor's dtype, shape and bytes, and of the rest of
  the metadata (canonical JSON), written by ``save`` and verified by ``load``, which names the
  tensor (or ``metadata``) that does not match.

>>> import torch
>>> ids_vocab_hash(100, None) == ids_vocab_hash(100, None) != ids_vocab_hash(101, None)
True
>>> tensor_checksum(torch.arange(3)) == tensor_checksum(torch.arange(3))
True
"""

import hashlib
import json
from typing import Any

import torch

__all__ = ["TensorDigest", "ids_vocab_hash", "metadata_checksum", "tensor_checksum"]

_CHUNK = 1 << 24  # elements hashed at a time (no full byte copy of a large table)


def ids_vocab_hash(d_vocab: int, kept: torch.Tensor | None) -> str:
    """``"ids:"`` + SHA-256 of ``d_vocab`` and the kept ids (in matrix order), for statistics
    computed from token ids without a tokenizer."""
    digest = hashlib.sha256(f"d_vocab={int(d_vocab)};kept=".encode())
    if kept is None:
        digest.update(b"all")
    else:
        digest.update(kept.detach().cpu().to(torch.int64).contiguous().numpy().tobytes())
    return "ids:" + digest.hexdigest()


class TensorDigest:
    """The checksum of :func:`tensor_checksum` fed in pieces: ``update`` with consecutive
    pieces of the tensor in memory order (e.g. its row blocks, in order), then ``hexdigest``.

    >>> t = torch.arange(12.0).reshape(4, 3)
    >>> d = TensorDigest(t.dtype, t.shape)
    >>> d.update(t[:3]); d.update(t[3:])
    >>> d.hexdigest() == tensor_checksum(t)
    True
    """

    def __init__(self, dtype: torch.dtype, shape: tuple[int, ...] | torch.Size) -> None:
        self._digest = hashlib.sha256(f"{dtype}{tuple(shape)}".encode())

    def update(self, piece: torch.Tensor) -> None:
        """Add the bytes of ``piece`` (the next elements of the tensor), in chunks."""
        flat = piece.detach().cpu().contiguous().reshape(-1)
        for start in range(0, flat.numel(), _CHUNK):
            self._digest.update(flat[start : start + _CHUNK].numpy().tobytes())

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def tensor_checksum(tensor: torch.Tensor) -> str:
    """SHA-256 (hex) of a tensor's dtype, shape and bytes, hashed in chunks."""
    digest = TensorDigest(tensor.dtype, tensor.shape)
    digest.update(tensor)
    return digest.hexdigest()


def metadata_checksum(metadata: dict[str, Any]) -> str:
    """SHA-256 (hex) of the metadata as canonical JSON (sorted keys), ``checksums`` left out."""
    rest = {key: value for key, value in metadata.items() if key != "checksums"}
    blob = json.dumps(rest, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()
