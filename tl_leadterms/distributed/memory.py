r"""The memory plan of a Ray run: what the driver holds and what each shard task holds.

As on one machine (:mod:`tl_leadterms.stats.memory`) the plan depends on ``k``, the dtypes and the
statistics asked for, not on the corpus. Each task asks Ray for its estimate as the ``memory``
resource, a task larger than every node is refused before any work starts
(:func:`check_task_fits`), and the driver's estimate is checked against its machine's memory. What
each holds, and why a local Ray needs room under ``ulimit -v`` (:func:`check_local_ray`):
docs/guides/distributed.md#the-memory-plan-of-a-ray-run.

Example:

>>> import torch
>>> plan = plan_ray_memory(50_304, k=5_000, dtype=torch.float32)
>>> round(plan.task_peak / 2**20), plan.driver.peak_stage
(511, 'pass two')
>>> plan_ray_memory(50_304, k=5_000, want=("B_bar", "Phi_bar")).task_stages.keys()
dict_keys(['pass one'])
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.memory import (
    ALL_STATISTICS,
    PENDING_PAIRS,
    WORKSPACE,
    MemoryPlan,
    column_blocks,
    format_bytes,
    memory_limits,
)

__all__ = ["RAY_PROCESSES", "RayMemoryPlan", "check_local_ray", "check_task_fits",
           "plan_ray_memory"]  # fmt: skip

RAY_PROCESSES = 1 << 30
"""Address space a local Ray's processes map besides the object store (Ray 2.60: 0.4-2 GiB)."""


@dataclass(frozen=True)
class RayMemoryPlan:
    """Estimated bytes of a Ray run.

    Attributes:
        driver: the driver's plan (a :class:`~tl_leadterms.stats.memory.MemoryPlan`).
        task_stages: pass name -> bytes one shard task holds at its peak.
    """

    driver: MemoryPlan
    task_stages: dict[str, int]

    @property
    def task_peak(self) -> int:
        return max(self.task_stages.values())

    def __str__(self) -> str:
        return f"{self.driver} on the driver; about {format_bytes(self.task_peak)} per shard task"


def plan_ray_memory(
    d_vocab: int,
    *,
    k: int | None = None,
    dtype: torch.dtype = torch.float64,
    want: tuple[str, ...] = ALL_STATISTICS,
    n_positions: int | None = None,
) -> RayMemoryPlan:
    """Estimate the memory of :func:`tl_leadterms.distributed.corpus_stats` (module docstring).

    Args:
        d_vocab: the vocabulary size; ``k`` the kept tokens (default ``d_vocab``).
        dtype: the result dtype (shards always sum in float64).
        want: the statistics asked for; only B̄ and Φ̄ stop after pass one.
        n_positions: ``N·T`` of the whole corpus if known (bounds the distinct bigrams).
    """
    k = d_vocab if k is None else min(k, d_vocab)
    cells = k * k
    d, a = cells * dtype.itemsize, cells * 8
    pairs = 16 * min(cells, n_positions or PENDING_PAIRS)
    rounding = d if d != a else 0
    driver = {"pass one": a + rounding + pairs}
    tasks = {"pass one": a + pairs + WORKSPACE}
    if any(s in want for s in ("G_bar", "Q_bar", "Delta")):
        # Φ̄, Ḡ, the column blocks, the shared Ḡ
        driver["Ḡ"] = 3 * d + column_blocks(k, dtype.itemsize) + pairs
    if any(s in want for s in ("Q_bar", "Delta")):
        driver["pass two"] = 3 * d + a + rounding + pairs
        tasks["pass two"] = a + d + WORKSPACE
    return RayMemoryPlan(MemoryPlan(k, dtype, torch.float64, tuple(want), driver), tasks)


def check_task_fits(plan: RayMemoryPlan, node_memory: Sequence[int | float]) -> None:
    """Refuse a run whose shard task needs more memory than any node offers Ray.

    ``node_memory`` is each live node's ``memory`` resource (bytes Ray may hand to tasks); a
    task asking for more would never be scheduled, so the run would wait forever.
    """
    if not node_memory or plan.task_peak <= max(node_memory):
        return
    raise LeadTermsError(
        f"each shard task needs about {format_bytes(plan.task_peak)} (k={plan.driver.k}) but "
        f"the largest Ray node offers {format_bytes(max(node_memory))} to tasks; keep fewer "
        f"tokens (vocab=, --keep, e.g. {max(1000, plan.driver.k // 2)}), compute only B̄ and "
        'Φ̄ (want=("B_bar", "Phi_bar")), or add nodes with more memory.'
    )


def check_local_ray() -> None:
    """Refuse to start a local Ray under an address-space limit its processes cannot start
    under (docs/guides/distributed.md#the-memory-plan-of-a-ray-run), in one line, before any of
    them starts."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    need = int(0.3 * memory_limits().get("free memory of this machine", 0)) + RAY_PROCESSES
    if soft != resource.RLIM_INFINITY and soft < need:
        raise LeadTermsError(
            f"a local Ray cannot start under the address-space limit of {format_bytes(soft)} "
            f"(ulimit -v), which its processes inherit: they map about {format_bytes(need)} (an "
            "object store of 30% of the free memory, and the processes); raise the limit (ulimit "
            "-v unlimited), or compute in this process (⟦tl_leadterms.corpus_stats|no --ray⟧)"
        )
