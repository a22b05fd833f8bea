"""The one driver of the two passes of the corpus statistics, wherever the passes run.

:func:`run_passes` resolves the kept vocabulary, plans the memory, runs pass one (bigram and unigram
counts, Φ̄), forms Ḡ = Σ_B̄Φ̄ exactly from the sparse counts, runs pass two (Q̄ and Δ, in query-row
groups when the accumulation dtype is wider than the result) and assembles the :class:`CorpusStats`
with its provenance. The passes run in an *executor* (:class:`PassExecutor`):
:class:`~tl_leadterms.stats.compute.LocalExecutor` in this process,
:class:`~tl_leadterms.distributed.compute.RayExecutor` as one Ray task per shard; both compute the
same numbers."""

import itertools
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from tl_leadterms.atomic import scratch_file
from tl_leadterms.errors import LeadTermsError, check_choice
from tl_leadterms.stats import algebra
from tl_leadterms.stats.accumulate import AttentionAccumulator, ContextAccumulator
from tl_leadterms.stats.corpus import CorpusStats, check_stats_dtype
from tl_leadterms.stats.definitions import LAST_TARGETS, Q_TARGETS
from tl_leadterms.stats.degenerate import degenerate
from tl_leadterms.stats.fileformat import wanted_names
from tl_leadterms.stats.memory import ALL_STATISTICS
from tl_leadterms.stats.provenance import ids_vocab_hash
from tl_leadterms.stats.vocab import KeptVocab, resolve_vocab
from tl_leadterms.version import __version__

__all__ = [
    "PassExecutor",
    "PassPlan",
    "composed_from_counts",
    "pass_plan",
    "resolve_want",
    "run_passes",
    "tokenizer_provenance",
]


@dataclass(frozen=True)
class PassPlan:
    """What every pass shares: the dtypes, the backend asked for and the definition choices.

    Attributes:
        dtype: the dtype of the results.
        accumulate_dtype: the dtype the sums are accumulated in (rounded once to ``dtype``).
        backend: ``"auto"``, ``"numba"`` or ``"torch"``.
        q_targets, last_target: the definition choices of :mod:`tl_leadterms.stats.definitions`.
        statistics: the statistics to compute, in pass order (:func:`resolve_want`).
        progress: whether the passes show progress bars.
    """

    dtype: torch.dtype
    accumulate_dtype: torch.dtype
    backend: str
    q_targets: str
    last_target: str
    statistics: tuple[str, ...]
    progress: bool


@runtime_checkable
class PassExecutor(Protocol):
    """Where the two passes run. :func:`run_passes` calls these in this order.

    ``split_rows``: whether pass two may run in query-row groups (several passes, so that a wider
    accumulation table costs no memory beyond one result table). ``timings``: the executor's own
    timing details, copied into the result's."""

    split_rows: bool
    timings: dict[str, Any]

    def token_counts(self, d_vocab: int) -> torch.Tensor:
        """How often each id occurs at an input position (for ``vocab=<int>``)."""

    def check_memory(
        self, d_vocab: int, kept: KeptVocab, plan: PassPlan, *, offload: bool, refuse: bool
    ) -> None:
        """Estimate the peak memory (shown with the progress bars); with ``refuse``, raise a
        :class:`LeadTermsError` naming the estimate and the fixes when the run does not fit."""

    def context_pass(self, kept: KeptVocab, plan: PassPlan) -> ContextAccumulator:
        """Pass one over the whole corpus."""

    def attention_pass(
        self, kept: KeptVocab, g_bar: torch.Tensor, plan: PassPlan, rows: tuple[int, int] | None
    ) -> AttentionAccumulator:
        """Pass two over the whole corpus, for the query rows ``rows`` (None: all)."""

    def provenance(self) -> dict[str, Any]:
        """Metadata entries of this executor (for example the number of shards)."""


def tokenizer_provenance(tokenizer: Any) -> dict[str, Any]:
    """The tokenizer's name and vocabulary hash, as every statistics file records them."""
    if tokenizer is None:
        return {}
    from tl_leadterms.data.tokenizers import vocab_hash

    return {
        "tokenizer_name": getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__,
        "tokenizer_vocab_hash": vocab_hash(tokenizer),
    }


def composed_from_counts(
    counts, vocab, *, progress: bool = False, backend: str = "auto"
) -> torch.Tensor:
    """Ḡ = Σ_B̄ Φ̄ from pass-one counts (sparse bigram operator times dense context map)."""
    bigram = algebra.CentredBigram(
        counts.pair_codes,
        counts.pair_counts,
        counts.unigram_counts,
        counts.n_sequences * counts.n_ctx,
        vocab.centre_vocab,
        counts.Phi_bar.dtype,
        backend=backend,
    )
    return bigram.composed(counts.Phi_bar, progress=progress)


def resolve_want(want: Iterable[str] | str | None) -> tuple[str, ...]:
    """The statistics ``corpus_stats`` computes for ``want`` (None: all), in pass order.

    B̄ (and Σ_B̄) and Φ̄ always come with pass one; Ḡ comes with any of Ḡ, Q̄, Δ; Q̄ and Δ come
    together from pass two.

    >>> resolve_want(["Phi_bar"]), resolve_want(("Delta",))
    (('B_bar', 'Phi_bar'), ('B_bar', 'Phi_bar', 'G_bar', 'Q_bar', 'Delta'))
    """
    names = wanted_names(want)
    if names is None or names & {"Q_bar", "Delta"}:
        return ALL_STATISTICS
    return ("B_bar", "Phi_bar", "G_bar") if "G_bar" in names else ("B_bar", "Phi_bar")


class _Clock:
    """Wall-clock seconds per stage, into ``timings``."""

    def __init__(self) -> None:
        self.timings: dict[str, Any] = {}

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[stage] = time.perf_counter() - start


@contextmanager
def _parked(counts: Any, folder: str | os.PathLike | None) -> Iterator[None]:
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


def pass_plan(
    *,
    dtype: Any = torch.float64,
    accumulate_dtype: Any = None,
    backend: str = "auto",
    q_targets: Any = "centred",
    last_target: Any = "data",
    want: Any = None,
    progress: bool = True,
) -> PassPlan:
    """The :class:`PassPlan` of these options of :func:`corpus_stats`, each one checked."""
    for name, value in (("dtype", dtype), ("accumulate_dtype", accumulate_dtype or dtype)):
        check_stats_dtype(value, name)
    check_choice("q_targets", q_targets, Q_TARGETS)
    check_choice("last_target", last_target, LAST_TARGETS)
    return PassPlan(
        dtype=dtype,
        accumulate_dtype=accumulate_dtype or torch.float64,
        backend=backend,
        q_targets=q_targets,
        last_target=last_target,
        statistics=resolve_want(want),
        progress=bool(progress),
    )


def _attention_pass(executor: PassExecutor, g_bar, kept, n_sequences: int, plan: PassPlan):
    """Pass two, in query-row groups when the executor allows it; ``(Q̄, Δ)`` rounded once."""
    # query-row ranges over [0, k], so that a wider accumulation table is no larger than Q̄
    n = max(1, plan.accumulate_dtype.itemsize // plan.dtype.itemsize) if executor.split_rows else 1
    groups = list(itertools.pairwise([round(i * (kept.k + 1) / n) for i in range(n + 1)]))
    q_bar = None if len(groups) == 1 else torch.empty_like(g_bar)
    delta = 0
    for rows in groups:
        acc = executor.attention_pass(kept, g_bar, plan, None if len(groups) == 1 else rows)
        if acc.n_sequences != n_sequences:
            raise LeadTermsError(
                f"the corpus gave {n_sequences} windows in pass one but {acc.n_sequences} in "
                "pass two; both passes must read the same windows. Pass a tensor, a list of "
                "batches or a deterministic re-iterable (no shuffling or sampling loader)."
            )
        block, part = acc.result(release=True)  # in the accumulation dtype, in the table
        if q_bar is None:
            q_bar = block.to(plan.dtype)
        else:
            q_bar[rows[0] : rows[0] + block.shape[0]] = block  # rounds once, no extra block
        del acc, block
        delta = delta + part  # Δ of all groups summed before its one rounding
    return q_bar, delta.to(plan.dtype)


def run_passes(
    executor: PassExecutor,
    d_vocab: int,
    plan: PassPlan,
    *,
    vocab: Any = None,
    centre_vocab: Any = None,
    check_memory: bool = True,
    offload: str | os.PathLike | None = None,
    tokenizer: Any = None,
) -> CorpusStats:
    """Both passes through ``executor``, with the options of :func:`corpus_stats` (``plan`` from
    :func:`pass_plan`; ``vocab`` and ``centre_vocab`` are checked by :func:`.resolve_vocab`).

    Returns the :class:`CorpusStats`, whose ``timings`` hold the seconds of ``"vocab"``,
    ``"pass1"``, ``"G_bar"``, ``"pass2"`` and ``"degenerate"`` and the executor's own details.
    """
    progress = plan.progress
    clock = _Clock()
    with clock("vocab"):
        count = lambda: executor.token_counts(d_vocab)  # noqa: E731 (read only for vocab=<int>)
        kept = resolve_vocab(vocab, d_vocab, centre_vocab=centre_vocab, token_counts=count)
    offload_phi = offload is not None and "Q_bar" in plan.statistics
    executor.check_memory(d_vocab, kept, plan, offload=offload_phi, refuse=check_memory)
    with clock("pass1"):
        first = executor.context_pass(kept, plan)
        counts = first.result(release=True, dtype=plan.dtype)  # reuses the table if dtypes agree
    used_backend = first.backend
    del first
    g_bar = q_bar = delta = None
    if "G_bar" in plan.statistics:
        with clock("G_bar"):
            g_bar = composed_from_counts(counts, kept, progress=progress, backend=used_backend)
    if "Q_bar" in plan.statistics:
        plan = replace(plan, backend=used_backend)
        with clock("pass2"), _parked(counts, offload):
            q_bar, delta = _attention_pass(executor, g_bar, kept, counts.n_sequences, plan)
    tables = {"Phi_bar": counts.Phi_bar, "G_bar": g_bar, "Q_bar": q_bar, "Delta": delta}
    metadata = {
        "library_version": __version__,
        "d_vocab": int(d_vocab),
        "n_ctx": counts.n_ctx,
        "n_sequences": counts.n_sequences,
        "n_kept": kept.k,
        "centre_vocab": kept.centre_vocab,
        "dtype": str(plan.dtype).removeprefix("torch."),
        "accumulate_dtype": str(plan.accumulate_dtype).removeprefix("torch."),
        "backend": used_backend,
        "q_targets": plan.q_targets,
        "last_target": plan.last_target,
        **executor.provenance(),
        **tokenizer_provenance(tokenizer),
        "statistics": ["B_bar", *(name for name, table in tables.items() if table is not None)],
    }
    with clock("degenerate"):  # the test of which tables are zero up to rounding
        metadata["degenerate"] = degenerate(tables, plan.accumulate_dtype)
    # the vocabulary hash: of the tokenizer, else of d_vocab and the kept ids
    metadata["vocab_hash"] = metadata.get("tokenizer_vocab_hash") or ids_vocab_hash(
        kept.d_vocab, kept.kept
    )
    stats = CorpusStats(
        vocab=kept,
        n_sequences=counts.n_sequences,
        n_ctx=counts.n_ctx,
        pair_codes=counts.pair_codes,
        pair_counts=counts.pair_counts,
        unigram_counts=counts.unigram_counts,
        **tables,
        metadata=metadata,
        tokenizer=tokenizer,
    )
    stats.timings = {**clock.timings, **executor.timings}
    return stats
