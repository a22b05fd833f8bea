"""Checkpoint sweeps on Ray: one task per checkpoint, each result handed back as it finishes.

:func:`~tl_leadterms.sweeps.run.sweep` with ``executor="ray"`` calls :func:`run_on_ray` with its
per-checkpoint function (``run_checkpoint``: load the model in the worker, run the analyses, free
the model, return a plain record). A task ships the checkpoint's description (a few hundred bytes)
and its record back (a few kB); the statistics and settings go into the object store once. The
driver calls ``on_result`` for each record as its task finishes (``ray.wait``), so a sweep that
appends there keeps every finished checkpoint when the driver is interrupted
(docs/guides/distributed.md#checkpoint-sweeps-on-ray). Ray is imported only when :func:`run_on_ray`
runs."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

from tl_leadterms.distributed.cluster import ray_session
from tl_leadterms.distributed.tasks import one_line, use_task_cpus
from tl_leadterms.errors import LeadTermsError

__all__ = ["RayExecutor", "call_task", "run_on_ray", "task_options"]

_CLUSTER_NAMES = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}


@dataclass(frozen=True)
class RayExecutor:
    """Where a sweep's Ray tasks run: ``sweep(..., executor=RayExecutor(...))``
    (``executor="ray"`` is ``RayExecutor()``).

    Args:
        address: the cluster: None (a local Ray with ``num_cpus`` CPUs), ``"auto"`` or
            ``"host:port"`` (a running one); a Ray already initialised here is used as it is.
        num_cpus: the CPUs of a local Ray (None: all).
        resources: what each task reserves (default ``{"num_gpus": 1}`` when the sweep's
            ``device`` is CUDA, else ``{"num_cpus": 1}``; custom names go under Ray's
            ``resources=``).
    """

    address: str | None = None
    num_cpus: int | None = None
    resources: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        task_options(self.resources)  # refuses a malformed request now, not in a task

    @classmethod
    def of(cls, executor: Any) -> "RayExecutor | None":
        """None for ``"local"``, a RayExecutor for ``"ray"`` or one given; else refused."""
        if executor == "local":
            return None
        if executor == "ray":
            return cls()
        if isinstance(executor, RayExecutor):
            return executor
        raise LeadTermsError(
            f"executor must be 'local', 'ray' or a RayExecutor(address=..., num_cpus=..., "
            f"resources=...), got {executor!r}"
        )


def task_options(resources: dict[str, Any] | None, device: str = "cpu") -> dict[str, Any]:
    """``resources`` as ``.options()`` keywords (custom names go under ``resources=``).

    Default: one GPU per task when ``device`` is CUDA, else one CPU.

    Example:
        >>> task_options(None, "cuda"), task_options({"num_cpus": 2, "big_node": 1})
        ({'num_gpus': 1}, {'num_cpus': 2, 'resources': {'big_node': 1}})
    """
    if resources is None:
        return {"num_gpus": 1} if str(device).startswith("cuda") else {"num_cpus": 1}
    if not isinstance(resources, dict) or not all(
        isinstance(k, str) and isinstance(v, Real) and not isinstance(v, bool) and v >= 0
        for k, v in resources.items()
    ):
        raise LeadTermsError(
            f"resources must map names to non-negative amounts, e.g. {{'num_gpus': 1}} or "
            f"{{'num_cpus': 2}}; got {resources!r}"
        )
    options = {k: v for k, v in resources.items() if k in _CLUSTER_NAMES}
    custom = {k: v for k, v in resources.items() if k not in _CLUSTER_NAMES}
    return {**options, "resources": custom} if custom else options


def _check_feasible(ray: Any, options: dict[str, Any]) -> None:
    """Refuse a request the cluster cannot meet (Ray would wait for it forever)."""
    have = ray.cluster_resources()
    wanted = {_CLUSTER_NAMES[k]: v for k, v in options.items() if k in _CLUSTER_NAMES}
    wanted.update(options.get("resources", {}))
    for name, amount in wanted.items():
        if have.get(name, 0) < amount:
            raise LeadTermsError(
                f"each sweep task asks for {amount} {name} but the Ray cluster has "
                f"{have.get(name, 0)}; pass RayExecutor(resources={{'num_cpus': 1}}) with "
                "device='cpu', or connect to a cluster that has them "
                "(RayExecutor(address='auto') or 'host:port')"
            )


def call_task(fn: Callable[..., Any], item: Any, shared: Sequence[Any]) -> Any:
    """What one Ray task runs: ``fn(item, *shared)`` with the task's CPUs as its threads."""
    use_task_cpus()
    return fn(item, *shared)


def _raise_failure(err: Exception, item: Any, ray: Any) -> None:
    """A failed task as the error the local sweep would raise (LeadTermsError: as it is)."""
    name = getattr(item, "label", repr(item))
    cause = getattr(err, "cause", None) if isinstance(err, ray.exceptions.RayTaskError) else None
    if isinstance(cause, LeadTermsError):
        raise LeadTermsError(str(cause)) from None
    if isinstance(cause, Exception):
        cause.add_note(f"(in the Ray task of checkpoint {name!r})")
        raise cause from None
    raise LeadTermsError(
        f"the Ray task of checkpoint {name!r} failed: {one_line(err)}; the finished "
        "checkpoints are kept, rerun to compute the rest"
    ) from None


def run_on_ray(
    fn: Callable[..., Any],
    items: Sequence[Any],
    shared: Sequence[Any],
    on_result: Callable[[Any], None],
    *,
    cluster: RayExecutor | None = None,
    device: str = "cpu",
    max_retries: int = 3,
) -> None:
    """Run ``fn(item, *shared)`` as one Ray task per item; ``on_result(value)`` as each finishes.

    ``shared`` is put into the object store once. ``on_result`` runs on the driver, in the order
    the tasks finish. If a task fails or the driver is interrupted (``KeyboardInterrupt``, an
    error in ``on_result``), the tasks not yet finished are cancelled and the error propagates;
    values already handed to ``on_result`` stay handed. A worker that dies is rerun up to
    ``max_retries`` times (``fn`` must be safe to run again). ``cluster`` (default
    ``RayExecutor()``) chooses the cluster as in
    :func:`~tl_leadterms.distributed.cluster.ray_session` and what each task reserves.
    """
    cluster = cluster or RayExecutor()
    options = task_options(cluster.resources, device)
    if not items:
        return
    with ray_session(cluster.address, cluster.num_cpus) as ray:
        _check_feasible(ray, options)
        remote = ray.remote(call_task).options(
            max_retries=max_retries, retry_exceptions=False, **options
        )
        shared_ref = ray.put(tuple(shared))  # once; every task gets the reference
        pending = {remote.remote(fn, item, shared_ref): item for item in items}
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                item = pending.pop(ready[0])
                try:
                    value = ray.get(ready[0])
                except ray.exceptions.RayError as err:
                    _raise_failure(err, item, ray)
                on_result(value)
        finally:
            for ref in pending:
                ray.cancel(ref)
