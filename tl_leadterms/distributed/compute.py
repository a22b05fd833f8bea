"""`corpus_stats` on Ray: one task per shard for each pass, accumulators merged as a tree fixed by
the shard order (reproducible sums), driven by :func:`tl_leadterms.stats.driver.run_passes` as on
one machine (docs/guides/distributed.md)."""

from collections.abc import Callable, Iterable
from typing import Any

import torch

from tl_leadterms.distributed.cluster import ray_session
from tl_leadterms.distributed.memory import check_task_fits, plan_ray_memory
from tl_leadterms.distributed.shards import Shard, WindowSpec, plan_shards
from tl_leadterms.distributed.tasks import (
    PassOptions,
    attention_task,
    context_task,
    count_task,
    merge_task,
    one_line,
)
from tl_leadterms.errors import LeadTermsError, positive_int
from tl_leadterms.progress import progress_bar, write_line
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.stats.definitions import LastTarget, QTargets
from tl_leadterms.stats.driver import PassPlan, pass_plan, run_passes
from tl_leadterms.stats.memory import check_memory as check_memory_fits
from tl_leadterms.stats.provenance import WindowsDigest
from tl_leadterms.stats.vocab import KeptVocab, VocabSpec

__all__ = ["RayExecutor", "corpus_stats"]


class _Pass:
    """Submit one pass (a task per shard, a merge tree), follow it, return the merged value."""

    def __init__(
        self, ray: Any, task: Callable, *, cpus: int, retries: int, memory: int | None = None
    ) -> None:
        options = {"num_cpus": cpus, "max_retries": retries, "retry_exceptions": False}
        if memory:  # Ray's scheduler then runs no more tasks on a node than its memory holds
            options["memory"] = int(memory)
        self.ray = ray
        self.leaf = ray.remote(task).options(num_returns=2, **options)
        self.merge = ray.remote(merge_task).options(num_returns=2, **options)

    def get(self, refs: Any) -> Any:
        """``ray.get`` with a shard's failure as one LeadTermsError line.

        The other shards' tasks are not cancelled: they are short and pure, their results are
        dropped with their refs, and cancelling tasks while their replies arrive can abort the
        driver (a failed internal check in Ray 2.x's task manager)."""
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayTaskError as err:
            cause = getattr(err, "cause", None) or err
            raise LeadTermsError(one_line(cause)) from None

    def run(self, shards: list[Shard], args: tuple, desc: str, progress: bool) -> tuple:
        leaves = [self.leaf.remote(shard, *args) for shard in shards]
        values, infos = [v for v, _ in leaves], [i for _, i in leaves]
        level, merge_seconds = values, []
        while len(level) > 1:  # a fixed pairwise tree: Ray runs each merge when its inputs exist
            pairs = [self.merge.remote(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
            merge_seconds += [s for _, s in pairs]
            level = [v for v, _ in pairs] + ([level[-1]] if len(level) % 2 else [])
        done = self._follow(infos, desc, progress)
        return self.get(level[0]), done, self.get(merge_seconds)

    def _follow(self, infos: list, desc: str, progress: bool) -> list[dict]:
        """Wait for the shards in finishing order, with a progress bar of shards and tokens."""
        done: dict[Any, dict] = {}
        pending, tokens = list(infos), 0
        with progress_bar(total=len(infos), desc=desc, unit="shard", disable=not progress) as bar:
            while pending:
                ready, pending = self.ray.wait(pending, num_returns=1)
                info = self.get(ready[0])
                done[ready[0]] = info
                tokens += info["tokens"]
                bar.set_postfix(tokens=f"{tokens:,}", refresh=False)
                bar.update(1)
        infos_in_order = [done[ref] for ref in infos]
        _check_same_width(infos_in_order)
        return infos_in_order


def _check_same_width(infos: list[dict]) -> None:
    widths = {info["n_ctx"]: info["shard"] for info in infos if info["n_ctx"] is not None}
    if len(widths) > 1:
        (t1, s1), (t2, s2) = list(widths.items())[:2]
        raise LeadTermsError(
            f"shards have windows of different lengths: T = {t1} in shard {s1}, T = {t2} in "
            f"shard {s2}; every window must have T + 1 tokens (pass n_ctx= to cut documents)."
        )
    if not any(info["windows"] for info in infos):
        raise LeadTermsError(
            f"the corpus is empty: no shard of {len(infos)} held a window of T + 1 >= 2 tokens."
        )


def corpus_stats(
    source: Any,
    *,
    d_vocab: int,
    vocab: VocabSpec = None,
    centre_vocab: int | None = None,
    n_ctx: int | None = None,
    mode: str = "chunk",
    eos_id: int | None = None,
    text_column: str = "text",
    tokenizer: Any = None,
    dtype: torch.dtype = torch.float64,
    batch_size: int | None = None,
    shard_size: int | None = None,
    num_shards: int | None = None,
    address: str | None = None,
    num_cpus: int | None = None,
    cpus_per_task: int = 1,
    max_retries: int = 3,
    backend: str = "auto",
    progress: bool = True,
    q_targets: QTargets = "centred",
    last_target: LastTarget = "data",
    want: Iterable[str] | None = None,
    check_memory: bool = True,
) -> CorpusStats:
    """:func:`tl_leadterms.corpus_stats` on a Ray cluster, one task per shard.

    Args:
        source: ``.npy``/``.pt`` token arrays, parquet/arrow files or folders of them, text
            files (with ``tokenizer``), a list of :class:`~tl_leadterms.distributed.shards.Shard`,
            or a ``datasets.Dataset``; how each becomes windows: :mod:`.shards`.
        d_vocab, vocab, centre_vocab, dtype, batch_size, backend, tokenizer: as in
            :func:`tl_leadterms.corpus_stats` (``vocab=<int>`` adds a counting pass). Sums are
            accumulated in float64 and rounded once to ``dtype``.
        q_targets, last_target, want: as in :func:`tl_leadterms.corpus_stats`
            (``want=("B_bar", "Phi_bar")`` stops after pass one).
        n_ctx, mode, eos_id, text_column: how documents become windows (``make_windows``);
            ``n_ctx=None`` takes windows as they are.
        shard_size: windows per shard for ``.npy`` files, rows per shard for a dataset.
        num_shards: shards of a dataset (default: ``shard_size`` rows each, else the
            cluster's CPU count).
        address, num_cpus: ``None`` starts a local Ray with ``num_cpus`` CPUs (stopped at the end);
            ``"auto"`` or ``"host:port"`` connects to a running cluster. A Ray already
            initialised in this process is used as it is.
        cpus_per_task: CPUs each shard task reserves (its numba/torch threads).
        max_retries: times Ray reruns a task whose worker died (data errors are not retried).
        progress: tqdm bars counting finished shards and tokens (and the memory plan).
        check_memory: plan the memory first (:mod:`.memory`, the guide's "What travels, and
            memory"); ``False`` skips the plan.

    Returns:
        A :class:`~tl_leadterms.CorpusStats` equal (to rounding) to the single-process one. Its
        ``timings`` add to those of :func:`tl_leadterms.corpus_stats` the per-shard infos
        ``"pass1_shards"``/``"pass2_shards"`` and the merge seconds
        ``"pass1_merges"``/``"pass2_merges"``.
    """
    d_vocab = positive_int("d_vocab", d_vocab)
    positive_int("cpus_per_task", cpus_per_task)
    plan = pass_plan(
        dtype=dtype, backend=backend, q_targets=q_targets, last_target=last_target, want=want,
        progress=progress,
    )  # fmt: skip
    window = WindowSpec(n_ctx, mode, eos_id, text_column)
    with ray_session(address, num_cpus) as ray:
        executor = RayExecutor(
            ray, cpus_per_task=cpus_per_task, max_retries=max_retries, progress=plan.progress
        )
        executor.plan(source, tokenizer, window, shard_size, num_shards, batch_size)
        return run_passes(
            executor,
            d_vocab,
            plan,
            vocab=vocab,
            centre_vocab=centre_vocab,
            check_memory=check_memory,
            tokenizer=tokenizer,
        )


class RayExecutor:
    """The passes as Ray tasks, one per shard, merged as a tree (a :class:`PassExecutor`).

    Pass two runs once over all query rows (shards always sum in float64; the driver rounds
    once), so ``split_rows`` is False.
    """

    split_rows = False

    def __init__(self, ray: Any, *, cpus_per_task: int, max_retries: int, progress: bool) -> None:
        self.ray, self.cpus, self.retries = ray, cpus_per_task, max_retries
        self.progress = progress  # also for the counting pass, which comes before any plan
        self.memory: dict[str, int] = {}  # pass -> bytes each of its tasks reserves
        self.timings: dict[str, Any] = {}
        self.windows = WindowsDigest()  # filled from the shards of pass one

    def plan(self, source, tokenizer, window: WindowSpec, shard_size, num_shards, batch_size):
        """List the shards and put what every task shares into the object store once."""
        dataset = source if type(source).__name__ == "Dataset" else None
        if dataset is not None and num_shards is None and shard_size is None:
            num_shards = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        self.shards = plan_shards(
            source, n_ctx=window.n_ctx, shard_size=shard_size, num_shards=num_shards
        )
        self.window, self.batch_size = window, batch_size
        self.shared = (  # put once; every task gets the refs
            None if dataset is None else self.ray.put(dataset),
            None if tokenizer is None else self.ray.put(tokenizer),
        )

    def _pass(self, task: Callable, name: str, args: tuple, options, desc: str) -> tuple:
        runner = _Pass(
            self.ray, task, cpus=self.cpus, retries=self.retries, memory=self.memory.get(name)
        )
        return runner.run(self.shards, (*args, options, *self.shared), desc, self.progress)

    def _options(self, d_vocab: int, plan: PassPlan | None = None) -> PassOptions:
        if plan is None:
            return PassOptions(d_vocab, self.window, self.batch_size)
        chosen = (plan.accumulate_dtype, plan.backend, plan.q_targets, plan.last_target)
        return PassOptions(d_vocab, self.window, self.batch_size, *chosen)

    def token_counts(self, d_vocab: int) -> torch.Tensor:
        return self._pass(count_task, "count", (), self._options(d_vocab), "count")[0]

    def check_memory(
        self, d_vocab: int, kept: KeptVocab, plan: PassPlan, *, offload: bool, refuse: bool
    ) -> None:
        if not refuse:
            return
        memory = plan_ray_memory(d_vocab, k=kept.k, dtype=plan.dtype, want=plan.statistics)
        check_memory_fits(memory.driver)
        nodes = self.ray.nodes()
        check_task_fits(memory, [n["Resources"].get("memory", 0) for n in nodes if n["Alive"]])
        self.memory = dict(memory.task_stages)  # the counting pass reserves nothing
        if plan.progress:
            write_line(str(memory))

    def context_pass(self, kept: KeptVocab, plan: PassPlan) -> Any:
        options = self._options(kept.d_vocab, plan)
        first, shards, self.timings["pass1_merges"] = self._pass(
            context_task, "pass one", (kept,), options, "pass 1/2: B̄, Φ̄"
        )
        self.windows = WindowsDigest()  # the shards' windows, as one process would digest them
        for info in shards:
            self.windows.merge(info.pop("windows_digest"))
        self.timings["pass1_shards"] = shards
        return first

    def attention_pass(self, kept, g_bar, plan: PassPlan, rows) -> Any:
        options = self._options(kept.d_vocab, plan)
        g_ref = self.ray.put(g_bar.cpu().numpy())  # once in the object store; tasks map it
        second, self.timings["pass2_shards"], self.timings["pass2_merges"] = self._pass(
            attention_task, "pass two", (kept, g_ref), options, "pass 2/2: Q̄, Δ"
        )
        return second

    def provenance(self) -> dict[str, Any]:
        return {"distributed": f"ray, {len(self.shards)} shards",
                "windows_fingerprint": self.windows.hexdigest()}  # fmt: skip
