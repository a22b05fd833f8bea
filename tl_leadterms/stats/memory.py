r"""The memory plan of :func:`~tl_leadterms.stats.corpus_stats`, made before any table exists.

The statistics are ``[k, k]`` tables, so their memory depends on ``k``, the dtypes and the
statistics asked for, not on the corpus size. :func:`plan_memory` adds up what is alive at the peak
of each stage (docs/guides/performance.md#the-memory-plan-stage-by-stage); :func:`check_memory`
refuses, in one line naming the estimate, the available memory and the fixes, a plan that does not
fit what the machine (or its cgroup limit) has available.

Example:

>>> import torch
>>> plan = plan_memory(50_304, dtype=torch.float32, accumulate_dtype=torch.float32,
...                    want=("B_bar", "Phi_bar"))
>>> round(plan.peak / 2**30, 1), plan.peak_stage
(10.2, 'pass one')
>>> full = plan_memory(50_304, k=20_000, dtype=torch.float32)
>>> round(full.peak / 2**30, 1), full.peak_stage
(6.3, 'pass two')
"""

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.algebra import block_columns, fused_scratch_bytes

__all__ = [
    "ALL_STATISTICS",
    "PENDING_PAIRS",
    "WORKSPACE",
    "MemoryPlan",
    "available_memory",
    "check_memory",
    "column_blocks",
    "format_bytes",
    "memory_limits",
    "plan_block_memory",
    "plan_memory",
]

#: every statistic ``corpus_stats`` can compute, in the order of the passes
ALL_STATISTICS = ("B_bar", "Phi_bar", "G_bar", "Q_bar", "Delta")
#: bigram codes buffered before they are counted (accumulate.py); also the distinct pairs
#: assumed when the corpus size is not known
PENDING_PAIRS = 1 << 24
WORKSPACE = 64 << 20  #: one batch of windows and its pair codes


def column_blocks(k: int, itemsize: int) -> int:
    """Bytes of Ḡ's column-block temporaries: three ``[k, width]`` blocks of the blockwise
    products (torch backend), or two packed ``[k, width]`` blocks per thread of the fused
    kernel (numba; at most one thread per CPU), whichever is larger."""
    blockwise = 3 * k * block_columns(k, itemsize) * itemsize
    fused = fused_scratch_bytes(k, itemsize, os.cpu_count() or 1)
    return max(blockwise, fused)


def format_bytes(n: int | float) -> str:
    """``n`` bytes in GiB (or MiB below 1 GiB), e.g. ``'6.1 GiB'``.

    >>> format_bytes(3 * 2**30), format_bytes(5 * 2**20)
    ('3.0 GiB', '5.0 MiB')
    """
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


@dataclass(frozen=True)
class MemoryPlan:
    """Estimated bytes alive at the peak of each stage of ``corpus_stats``.

    Attributes:
        k: side of the tables.
        dtype, accumulate_dtype: result and accumulation dtypes.
        statistics: the statistics asked for (B̄ and Φ̄ always come with pass one).
        stages: stage name -> estimated bytes at its peak (only the stages that run).
        blocks: the number of blocks of block statistics (None: plain statistics).
    """

    k: int
    dtype: torch.dtype
    accumulate_dtype: torch.dtype
    statistics: tuple[str, ...]
    stages: dict[str, int]
    blocks: int | None = None

    @property
    def peak(self) -> int:
        """The largest stage estimate, in bytes."""
        return max(self.stages.values())

    @property
    def peak_stage(self) -> str:
        return max(self.stages, key=self.stages.__getitem__)

    def __str__(self) -> str:
        dt = str(self.dtype).removeprefix("torch.")
        acc = str(self.accumulate_dtype).removeprefix("torch.")
        blocks = f"{self.blocks} blocks, " if self.blocks else ""
        return (
            f"memory plan: about {format_bytes(self.peak)} at peak ({self.peak_stage}; k={self.k}, "
            f"{blocks}{dt} summed in {acc}, {', '.join(self.statistics)})"
        )


def plan_memory(
    d_vocab: int,
    *,
    k: int | None = None,
    dtype: torch.dtype = torch.float64,
    accumulate_dtype: torch.dtype | None = None,
    want: tuple[str, ...] = ALL_STATISTICS,
    n_positions: int | None = None,
    offload: bool = False,
) -> MemoryPlan:
    """Estimate the memory of ``corpus_stats`` (see the module docstring for the model).

    Args:
        d_vocab: the vocabulary size; ``k`` the kept tokens (default ``d_vocab``).
        dtype, accumulate_dtype: as for ``corpus_stats`` (accumulation defaults to float64).
        want: the statistics asked for (see :data:`ALL_STATISTICS`).
        n_positions: ``N·T`` if known; bounds the sparse bigram counts (at most ``N·T``
            distinct pairs; unknown: assumed ``2**24``, 256 MiB of codes and counts).
        offload: Φ̄ waits on disk during pass two (``corpus_stats(offload=...)``).
    """
    k = d_vocab if k is None else min(k, d_vocab)
    acc = accumulate_dtype or torch.float64
    cells = k * k
    d, a = cells * dtype.itemsize, cells * acc.itemsize
    distinct = min(cells, n_positions if n_positions is not None else PENDING_PAIRS)
    pairs = 16 * distinct + 8 * 4 * min(PENDING_PAIRS, n_positions or PENDING_PAIRS)
    stages = {"pass one": a + (d if acc != dtype else 0) + pairs + WORKSPACE}
    if any(s in want for s in ("G_bar", "Q_bar", "Delta")):
        stages["Ḡ"] = 2 * d + column_blocks(k, dtype.itemsize) + 16 * distinct + WORKSPACE
    if any(s in want for s in ("Q_bar", "Delta")):
        groups = max(1, acc.itemsize // dtype.itemsize)
        table = math.ceil((k + 1) / groups) * k * acc.itemsize
        phi = 0 if offload else d
        stages["pass two"] = phi + d + table + (d if groups > 1 else 0) + 16 * distinct
        stages["pass two"] += WORKSPACE
        if offload:  # Φ̄ read back beside Ḡ and Q̄
            stages["results"] = 3 * d + 16 * distinct
    return MemoryPlan(k, dtype, acc, tuple(want), stages)


def plan_block_memory(
    k: int, blocks: int, *, dtype: torch.dtype = torch.float64, n_positions: int = 0
) -> MemoryPlan:
    """Estimate the memory of :func:`~tl_leadterms.stats.blocks.block_stats` with ``blocks``
    blocks over ``k`` kept tokens and ``n_positions`` tokens of windows (the module docstring).

    >>> print(plan_block_memory(3000, 50))  # doctest: +ELLIPSIS
    memory plan: about 7.0 GiB at peak (results; k=3000, 50 blocks, float64 summed in float64, ...
    """
    d, a = k * k * dtype.itemsize, k * k * 8
    stages = {
        "pass one": blocks * a + WORKSPACE,
        "pass two": blocks * (a + d) + 2 * d + 4 * n_positions + WORKSPACE,
        "results": 2 * blocks * d + 4 * d + 4 * n_positions,
    }
    return MemoryPlan(k, dtype, torch.float64, ALL_STATISTICS, stages, blocks)


def _proc_bytes(file: str, field: str) -> int | None:
    """A ``field: N kB`` line of a ``/proc`` file, in bytes (None where there is none)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(file).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return None


def _cgroup_room() -> int | None:
    """Room left under the tightest cgroup memory limit on this process's path (cgroup v2:
    ``memory.max`` of its own group and every parent; v1: ``memory.limit_in_bytes``)."""
    base = Path("/sys/fs/cgroup")
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    rooms = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        v2 = parts[0] == "0" and parts[1] == ""
        if not v2 and "memory" not in parts[1].split(","):
            continue
        group = (base if v2 else base / "memory") / parts[2].lstrip("/")
        files = ("memory.max", "memory.current") if v2 else (
            "memory.limit_in_bytes", "memory.usage_in_bytes")  # fmt: skip
        for folder in (group, *group.parents):
            if not str(folder).startswith(str(base)):
                break
            try:
                limit = (folder / files[0]).read_text().strip()
                used = int((folder / files[1]).read_text())
            except (OSError, ValueError):
                continue
            if limit.isdigit() and int(limit) < 1 << 60:  # v1's "no limit" is a huge number
                rooms.append(max(0, int(limit) - used))
    return min(rooms) if rooms else None


def _rlimit_room() -> dict[str, int]:
    """Room under this process's own limits: address space (``ulimit -v``, RLIMIT_AS, as batch
    schedulers set it) and data (RLIMIT_DATA), each minus what the process already maps."""
    try:
        import resource
    except ImportError:
        return {}
    rooms = {}
    for name, limit, used in (
        ("address-space limit (ulimit -v)", resource.RLIMIT_AS, "VmSize"),
        ("data-segment limit (ulimit -d)", resource.RLIMIT_DATA, "VmData"),
    ):
        soft = resource.getrlimit(limit)[0]
        now = _proc_bytes("/proc/self/status", used)
        if soft != resource.RLIM_INFINITY and now is not None:
            rooms[name] = max(0, soft - now)
    return rooms


def memory_limits() -> dict[str, int]:
    """Every known bound on what this process may still allocate, in bytes, by name: the
    machine's ``MemAvailable`` (or psutil's), the cgroup limit, and the process's own
    address-space and data limits. :func:`available_memory` is the smallest."""
    found = {}
    free = _proc_bytes("/proc/meminfo", "MemAvailable")
    if free is None:
        try:
            import psutil

            free = int(psutil.virtual_memory().available)
        except (ImportError, AttributeError, OSError):
            free = None
    if free is not None:
        found["free memory of this machine"] = free
    room = _cgroup_room()
    if room is not None:
        found["cgroup memory limit"] = room
    found.update(_rlimit_room())
    return found


def available_memory() -> int | None:
    """Bytes this process may still allocate: the smallest of :func:`memory_limits` (None
    where none is known)."""
    limits = memory_limits()
    return min(limits.values()) if limits else None


def check_memory(plan: MemoryPlan, available: int | None = None) -> None:
    """Refuse ``plan`` when its peak exceeds the available memory (one-line LeadTermsError).

    ``available`` defaults to :func:`available_memory` (nothing is refused where it is unknown).
    """
    if available is None:
        available = available_memory()
    if available is None or plan.peak <= available:
        return
    # name the bound that binds (the process's own mappings move a little between readings)
    limits = memory_limits()
    near = [n for n, room in limits.items() if abs(room - available) < 64 << 20]
    binding = min(near, key=lambda n: abs(limits[n] - available)) if near else None
    where = "available on this machine"
    if binding not in (None, "free memory of this machine"):
        where = f"allowed by the {binding}"
    fixes = [f"fewer blocks (--blocks / blocks=, e.g. {max(2, plan.blocks // 4)})"] if (
        plan.blocks) else []  # fmt: skip
    if plan.k > 1000:
        fixes.append(f"keep fewer tokens (--keep / vocab=, e.g. {max(1000, plan.k // 3)})")
    if plan.dtype == torch.float64:
        fixes.append("--dtype float32 (dtype=torch.float32)")
    elif plan.accumulate_dtype == torch.float64:
        fixes.append("--accumulate-dtype float32 (accumulate_dtype=torch.float32, less exact)")
    if not plan.blocks and any(s in plan.statistics for s in ("G_bar", "Q_bar", "Delta")):
        fixes.append('only B̄ and Φ̄ (--only B_bar Phi_bar / want=("B_bar", "Phi_bar"))')
    fixes.append("a machine with more memory" + ("" if plan.blocks else
                 " (check_memory=False / --no-memory-check to try)"))  # fmt: skip
    raise LeadTermsError(
        f"the statistics need about {format_bytes(plan.peak)} at peak ({plan.peak_stage}, "
        f"k={plan.k}, {f'{plan.blocks} blocks, ' if plan.blocks else ''}"
        f"{str(plan.dtype).removeprefix('torch.')}) but only "
        f"{format_bytes(available)} is {where}; " + "; or ".join(fixes)
    )


def rss_bytes() -> int | None:
    """Resident memory of this process now (Linux ``/proc/self/status``), for benchmarks."""
    return _proc_bytes("/proc/self/status", "VmRSS")
