"""Token arrays for ``tl-leadterms stats``, streamed from disk.

Token arrays are never read whole: a ``.npy`` file is memory-mapped (``np.load(mmap_mode="r")``)
and a ``.pt`` file loaded with ``mmap=True``; :class:`ArrayWindows` cuts them into batches that
are widened to int64 one at a time, so peak memory does not depend on the file size.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tl_leadterms.cli.inputs import first_line
from tl_leadterms.errors import LeadTermsError

__all__ = ["ArrayWindows", "open_token_array"]


def open_token_array(path: Path) -> Any:
    """A ``[n, T + 1]`` integer array from a ``.npy`` or ``.pt`` file, mapped, not read."""
    import numpy as np
    import torch

    try:
        if path.suffix == ".npy":
            data = np.load(path, mmap_mode="r", allow_pickle=False)
        else:
            data = torch.load(path, weights_only=True, mmap=True, map_location="cpu")
    except Exception as err:  # pickle, zip and numpy format errors
        raise LeadTermsError(
            f"cannot read token ids from {str(path)!r} ({first_line(err)})"
        ) from err
    if isinstance(data, np.ndarray):
        ok = data.ndim == 2 and np.issubdtype(data.dtype, np.integer)
        shape, dtype = data.shape, data.dtype
    elif isinstance(data, torch.Tensor):
        ok = data.ndim == 2 and not (data.is_floating_point() or data.is_complex())
        ok = ok and data.dtype != torch.bool
        shape, dtype = tuple(data.shape), data.dtype
    else:
        raise LeadTermsError(
            f"{str(path)!r} holds a {type(data).__name__}, not an array; token files must hold "
            "one integer array of shape [n_sequences, T + 1] (save it with np.save/torch.save)"
        )
    if not ok:
        raise LeadTermsError(
            f"{str(path)!r} holds a {tuple(shape)} {dtype} array; token files must hold integer "
            "ids of shape [n_sequences, T + 1]"
        )
    return data


def _wide(dtype: Any) -> Any:
    """int64, or uint64 for uint64 ids: widened there, an id above 2**63 - 1 would wrap to a
    negative one (the statistics' check names the id as given)."""
    import numpy as np

    return np.uint64 if dtype == np.uint64 else np.int64


def _read_rows(array: Any, start: int, n: int) -> Any:
    """Rows ``start .. start + n`` of a mapped ``.npy`` array as int64, through a map of those
    rows alone that is closed at once: the pages of the whole file read over a pass would
    otherwise stay resident as long as its map lives (a growth with the number of windows)."""
    import numpy as np

    part = np.memmap(array.filename, dtype=array.dtype, mode="r", shape=(n, array.shape[1]),
                     offset=array.offset + start * array.strides[0])  # fmt: skip
    try:
        return np.array(part, dtype=_wide(array.dtype))
    finally:
        del part


class ArrayWindows:
    """Re-iterable batches of windows from mapped arrays, at most ``max_windows`` in all.

    Each batch is a slice of at most ``batch`` rows, widened to int64 on its own, so the
    statistics' two passes stream the files without holding them.
    """

    def __init__(self, arrays: list[Any], max_windows: int | None, batch: int) -> None:
        widths = {int(a.shape[1]) for a in arrays}
        if len(widths) != 1:
            raise LeadTermsError(f"the token arrays have different widths T + 1 = {sorted(widths)}")
        self.arrays = arrays
        self.width = widths.pop()
        self.batch = batch
        total = sum(int(a.shape[0]) for a in arrays)
        self.n_windows = total if max_windows is None else min(total, max_windows)

    def __iter__(self) -> Iterator[Any]:
        import numpy as np
        import torch

        left = self.n_windows
        for array in self.arrays:
            for start in range(0, int(array.shape[0]), self.batch):
                if left <= 0:
                    return
                n = min(self.batch, left, int(array.shape[0]) - start)
                left -= n
                if isinstance(array, np.memmap) and array.flags.c_contiguous:
                    yield torch.from_numpy(_read_rows(array, start, n))
                    continue
                chunk = array[start : start + n]
                if isinstance(chunk, np.ndarray):
                    yield torch.from_numpy(np.array(chunk, dtype=_wide(chunk.dtype)))  # one batch
                else:
                    yield chunk.to(torch.int64)

    def __len__(self) -> int:
        return sum(-(-min(int(a.shape[0]), self.n_windows) // self.batch) for a in self.arrays)
