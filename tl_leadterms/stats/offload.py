"""Parking a table on disk while a computation does not need it (``corpus_stats(offload=)``)."""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from tl_leadterms.atomic import scratch_file

__all__ = ["parked"]


@contextmanager
def parked(counts: Any, folder: str | os.PathLike | None) -> Iterator[None]:
    """Within the block ``counts.Phi_bar`` waits in a scratch file in ``folder`` (None: stays)."""
    if folder is None:
        yield
        return
    phi = counts.Phi_bar
    shape, dtype, device = phi.shape, phi.dtype, phi.device
    with scratch_file(Path(folder) / "Phi_bar.parked") as path:
        with path.open("wb") as f:
            f.write(memoryview(phi.contiguous().cpu().numpy()).cast("B"))
        counts.Phi_bar = phi = None  # freed: nothing else holds the table
        yield
        back = torch.empty(shape, dtype=dtype)
        with path.open("rb") as f:
            f.readinto(memoryview(back.numpy()).cast("B"))
        counts.Phi_bar = back.to(device)
