"""Short CPU computations on one thread: :func:`one_thread`.

A bootstrap resample's statistics (:meth:`~tl_leadterms.stats.blocks.BlockStats.resample`) are
a few milliseconds of small numba kernels and torch operations, whose two OpenMP runtimes spin
against each other between such short regions: on two threads a resample costs about twice the
CPU time of one, for the same or a longer wall time (``benchmarks/bench_null_boot.py``;
docs/guides/performance.md). The bootstrap computes its resamples inside :func:`one_thread`.

>>> before = torch.get_num_threads()
>>> with one_thread():
...     torch.get_num_threads()
1
>>> torch.get_num_threads() == before
True
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["one_thread"]


def _numba_threads(n: int | None) -> int | None:
    """Set this thread's numba thread count to ``n`` (None: leave it); return the old one."""
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a dependency
        return None
    old = numba.get_num_threads()
    if n is not None:
        numba.set_num_threads(n)
    return old


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch (process-wide) and numba (this thread) on one thread inside the block; both
    thread counts are restored on the way out, an exception included."""
    torch_before = torch.get_num_threads()
    numba_before = _numba_threads(1)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(torch_before)
        _numba_threads(numba_before)
