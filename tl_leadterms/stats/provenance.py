"""Provenance of statistics files: the vocabulary hash and content checksums.

``vocab_hash`` (the tokenizer's :func:`tl_leadterms.data.tokenizers.vocab_hash`, else
:func:`ids_vocab_hash`), ``checksums`` (SHA-256 of every tensor and of the rest of the metadata,
verified by ``load``) and ``windows_fingerprint`` (an order-free digest of the windows read, which
:func:`tl_leadterms.train` records on the model too): docs/guides/corpus-statistics.md#provenance.

>>> import torch
>>> ids_vocab_hash(100, None) == ids_vocab_hash(100, None) != ids_vocab_hash(101, None)
True
>>> tensor_checksum(torch.arange(3)) == tensor_checksum(torch.arange(3))
True
>>> w = torch.tensor([[1, 2, 3], [4, 5, 6]])
>>> windows_fingerprint(w) == windows_fingerprint(w.flip(0)) != windows_fingerprint(w[:1])
True
>>> windows_fingerprint(w)[:14]
'windows:v1:2x3'
"""

import hashlib

import numpy as np
import torch

from tl_leadterms.stats.fileformat import metadata_checksum

__all__ = [
    "TensorDigest",
    "WindowsDigest",
    "ids_vocab_hash",
    "metadata_checksum",
    "tensor_checksum",
    "windows_fingerprint",
]

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


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, element-wise on ``uint64`` (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def window_hashes(windows: torch.Tensor) -> np.ndarray:
    """One 64-bit hash per window (row) of ``windows`` ``[n, L]`` (non-negative ids): the
    ids chained through the splitmix64 finaliser, position by position, so a window's hash
    depends on every id and its place."""
    x = windows.detach().to("cpu", torch.int64).numpy().astype(np.uint64)
    with np.errstate(over="ignore"):
        h = _mix(np.full(x.shape[0], np.uint64(x.shape[1]), dtype=np.uint64) ^ _GOLDEN)
        for t in range(x.shape[1]):
            h = _mix(h ^ (x[:, t] + _GOLDEN))
    return h


class WindowsDigest:
    """:func:`windows_fingerprint` fed batch by batch (any order, any batch sizes).

    >>> w = torch.randint(0, 9, (10, 4), generator=torch.Generator().manual_seed(0))
    >>> d = WindowsDigest(); d.update(w[6:]); d.update(w[:6])
    >>> d.hexdigest() == windows_fingerprint(w)
    True
    >>> shard = WindowsDigest(); shard.update(w[:3]); rest = WindowsDigest(); rest.update(w[3:])
    >>> rest.merge(shard.state()); rest.hexdigest() == windows_fingerprint(w)
    True
    """

    def __init__(self) -> None:
        self.n, self.length, self._sum = 0, None, np.uint64(0)

    def update(self, batch: torch.Tensor) -> None:
        """Add the windows ``[b, L]`` of ``batch`` (every batch of one corpus has one ``L``)."""
        if batch.shape[0] == 0:
            return
        self.length = int(batch.shape[1]) if self.length is None else self.length
        with np.errstate(over="ignore"):
            self._sum = np.uint64(self._sum + window_hashes(batch).sum(dtype=np.uint64))
        self.n += int(batch.shape[0])

    def state(self) -> tuple[int, int | None, int]:
        """``(windows, length, hash sum)``: what :meth:`merge` needs from another digest (three
        numbers, cheap to ship from a worker)."""
        return self.n, self.length, int(self._sum)

    def merge(self, state: tuple[int, int | None, int]) -> None:
        """Add the windows another digest saw, given by its :meth:`state` (a shard's windows:
        the merged digest equals one fed every shard's windows)."""
        n, length, total = state
        if n == 0:
            return
        if self.length is not None and length != self.length:
            raise ValueError(f"windows of length {length} merged into a digest of {self.length}")
        self.length = length
        with np.errstate(over="ignore"):
            self._sum = np.uint64(self._sum + np.uint64(total))
        self.n += int(n)

    def hexdigest(self) -> str:
        """``"windows:v1:{n}x{L}:{16 hex digits}"``: the number of windows, their length and
        the sum (mod 2⁶⁴) of their hashes, so the same multiset of windows gives the same
        digest in any order."""
        return f"windows:v1:{self.n}x{self.length or 0}:{int(self._sum):016x}"


def windows_fingerprint(windows: torch.Tensor) -> str:
    """The order-free digest of the windows ``[n, L]`` (see :class:`WindowsDigest`)."""
    digest = WindowsDigest()
    digest.update(torch.as_tensor(windows))
    return digest.hexdigest()
