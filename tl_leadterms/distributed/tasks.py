"""What one Ray task does: pure functions of a shard (run again after a crash, same result).

Each function reads its shard's windows, feeds them through a fresh accumulator of
:mod:`tl_leadterms.stats` and returns it with a small info dict. Nothing touches shared state, so a
task Ray retries after its worker died adds its shard exactly once. Any error while reading or
counting a shard becomes one :class:`LeadTermsError` line naming the shard (not retried). The driver
wraps these with ``ray.remote``; this module does not import Ray."""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tl_leadterms.distributed.shards import Shard, WindowSpec
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.accumulate import AttentionAccumulator, ContextAccumulator
from tl_leadterms.stats.provenance import WindowsDigest
from tl_leadterms.stats.tables import padded_square
from tl_leadterms.stats.tokens import TokenSource
from tl_leadterms.stats.vocab import KeptVocab

__all__ = ["PassOptions", "attention_task", "context_task", "count_task", "merge_task"]


@dataclass(frozen=True)
class PassOptions:
    """Settings every shard task shares."""

    d_vocab: int
    window: WindowSpec
    batch_size: int | None = None
    accumulate_dtype: torch.dtype = torch.float64
    backend: str = "auto"
    q_targets: str = "centred"  # see tl_leadterms.stats.definitions
    last_target: str = "data"


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


@contextmanager
def shard_errors(shard: Shard) -> Iterator[None]:
    """Turn any failure inside a shard into a one-line LeadTermsError naming it."""
    try:
        yield
    except Exception as err:
        message = one_line(err)
        if not message.startswith(f"shard {shard.name}"):
            message = f"shard {shard.name}: {message}"
        raise LeadTermsError(message) from None


def use_task_cpus() -> None:
    """Give numba and torch the CPUs Ray reserved for this task (no oversubscription)."""
    import numba
    import ray

    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    n = max(1, int(cpus))
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    torch.set_num_threads(n)


def shard_batches(
    shard: Shard, options: PassOptions, dataset: Any, tokenizer: Any
) -> TokenSource | None:
    """The shard's validated batches, or None for a shard without windows."""
    windows = shard.windows(options.window, dataset=dataset, tokenizer=tokenizer)
    if len(windows) == 0:
        return None
    return TokenSource(windows, options.d_vocab, batch_size=options.batch_size)


def _info(shard: Shard, n_windows: int, n_ctx: int | None, start: float) -> dict[str, Any]:
    return {
        "shard": shard.name,
        "windows": int(n_windows),
        "n_ctx": n_ctx,
        "tokens": int(n_windows) * ((n_ctx or 0) + 1),
        "seconds": time.perf_counter() - start,
    }


def count_task(
    shard: Shard, options: PassOptions, dataset: Any = None, tokenizer: Any = None
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Token counts over the input positions of the shard (for ``vocab=<int>``)."""
    start = time.perf_counter()
    counts = torch.zeros(options.d_vocab, dtype=torch.long)
    n, n_ctx = 0, None
    with shard_errors(shard):
        source = shard_batches(shard, options, dataset, tokenizer)
        for batch in source or ():
            counts += torch.bincount(batch[:, :-1].reshape(-1), minlength=options.d_vocab)
            n, n_ctx = n + batch.shape[0], batch.shape[1] - 1
    return counts, _info(shard, n, n_ctx, start)


def context_task(
    shard: Shard, kept: KeptVocab, options: PassOptions, dataset: Any = None, tokenizer: Any = None
) -> tuple[ContextAccumulator, dict[str, Any]]:
    """Pass one over the shard: its :class:`ContextAccumulator`, compacted for shipping, and
    in the info the state of its windows' digest (the driver merges them into the
    statistics' ``windows_fingerprint``)."""
    use_task_cpus()
    start = time.perf_counter()
    with shard_errors(shard):
        acc = ContextAccumulator(
            kept,
            dtype=options.accumulate_dtype,
            backend=options.backend,
            last_target=options.last_target,
        )
        digest = WindowsDigest()  # which windows the shard held: the run's fingerprint
        for batch in shard_batches(shard, options, dataset, tokenizer) or ():
            acc.update(batch)
            digest.update(batch)
    info = _info(shard, acc.n_sequences, acc.n_ctx, start)
    info["windows_digest"] = digest.state()
    return acc, info  # pickling compacts the codes


def g_bar_table(g_bar: np.ndarray) -> torch.Tensor:
    """Ḡ as shipped (a numpy array, mapped read-only from the object store) copied once into
    the padded table an :class:`AttentionAccumulator` counts with, without a second copy."""
    dtype = torch.from_numpy(np.zeros(0, dtype=g_bar.dtype)).dtype
    table = padded_square(g_bar.shape[0], dtype, "cpu")
    table.numpy()[...] = g_bar
    return table


def attention_task(
    shard: Shard,
    kept: KeptVocab,
    g_bar: np.ndarray,
    options: PassOptions,
    dataset: Any = None,
    tokenizer: Any = None,
) -> tuple[AttentionAccumulator, dict[str, Any]]:
    """Pass two over the shard given the whole corpus' Ḡ: its :class:`AttentionAccumulator`."""
    use_task_cpus()
    start = time.perf_counter()
    with shard_errors(shard):
        acc = AttentionAccumulator(
            g_bar_table(g_bar),
            kept,
            backend=options.backend,
            dtype=options.accumulate_dtype,
            q_targets=options.q_targets,
            last_target=options.last_target,
        )
        for batch in shard_batches(shard, options, dataset, tokenizer) or ():
            acc.update(batch)
    # Ḡ went to every task once; it does not come back with each shard's sums
    return acc.drop_g_bar(), _info(shard, acc.n_sequences, acc.n_ctx, start)


def merge_task(first: Any, second: Any) -> tuple[Any, float]:
    """``first.merge(second)`` (accumulators) or their sum (count vectors), and the seconds."""
    use_task_cpus()
    start = time.perf_counter()
    merged = first + second if isinstance(first, torch.Tensor) else first.merge(second)
    return merged, time.perf_counter() - start
