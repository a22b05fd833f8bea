"""`sweep`: run analyses over a series of checkpoints, one model in memory at a time, resumable.

Checkpoints come as ``(label, model)`` pairs, local checkpoint folders of any architecture
:func:`~tl_leadterms.loading.checkpoint.load_model` reads, a series folder written by
:func:`~tl_leadterms.loading.series.train_neox_series`, or a Pythia name with ``steps``
(``load_model(name, checkpoint=step)``). With ``results=`` every
finished checkpoint is appended to a JSON-lines file as one complete line (flushed and
fsynced), so an interrupted sweep resumes where it stopped and never loses finished work.
"""

import gc
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.progress import progress_bar
from tl_leadterms.protocols import PathLike
from tl_leadterms.results.null import NullSpec
from tl_leadterms.results.uncertainty import Uncertainty, shorthands
from tl_leadterms.stats.blocks import BlockStats
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.sweeps.analyses import (
    DEFAULT,
    NAMES,
    analyse,
    choose_analyses,
    full_stats,
    settings,
    uncertainty_options,
)
from tl_leadterms.sweeps.inputs import (
    check_executor,
    check_loader_kwargs,
    checkpoint_id,
    find_checkpoints,
    results_path,
)
from tl_leadterms.sweeps.on_ray import RayExecutor, run_on_ray
from tl_leadterms.sweeps.results import ResultsFile
from tl_leadterms.sweeps.table import SweepTable

__all__ = ["NAMES", "RayExecutor", "SweepTable", "run_checkpoint", "sweep"]


def run_checkpoint(
    ckpt,
    stats: CorpusStats | BlockStats,
    chosen: list,
    settings: dict,
    path: Path | None = None,
    n_done: int = 0,
) -> dict[str, Any]:
    """Load one checkpoint, run the analyses, free it; its record for the results file.

    The unit of work of both executors: :func:`sweep` calls it in this process, and with
    ``executor="ray"`` one Ray task per checkpoint calls it in a worker, so the records agree
    (the null draws and bootstrap resamples are seeded, so they agree too).
    ``path`` and ``n_done`` only word the error of a checkpoint that cannot be loaded.
    """
    started = time.perf_counter()
    try:
        model = ckpt.load()
    except Exception as err:
        kept = f"; the {n_done} finished checkpoint(s) are kept in {str(path)!r}" if path else ""
        raise LeadTermsError(
            f"checkpoint {ckpt.label!r} ({ckpt.source}) could not be loaded: {err}{kept}"
        ) from err
    try:
        rows = analyse(model, stats, chosen, ckpt.label)
    finally:  # free a model loaded here even when an analysis fails
        if ckpt.owned:
            del model
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return {
        "checkpoint": ckpt.label,
        "step": ckpt.step,
        "source": ckpt.source,
        "seconds": time.perf_counter() - started,
        "settings": settings,
        "rows": rows,
    }


@shorthands
def sweep(
    checkpoints: PathLike | Iterable[Any],
    stats: CorpusStats | BlockStats,
    *,
    analyses: str | Sequence[str | Callable[..., Any] | tuple[Any, ...]] = DEFAULT,
    checkpoint_steps: Sequence[int] | None = None,
    results: PathLike | None = None,
    null: int | NullSpec | None = None,
    ci: float | None = None,
    uncertainty: Uncertainty | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
    loader_kwargs: dict[str, Any] | None = None,
    executor: str | RayExecutor = "local",
    **analysis_kwargs: Any,
) -> SweepTable:
    """Run ``analyses`` on every checkpoint and collect one tidy table.

    Args:
        checkpoints: ``(label, model)`` pairs (or ``(label, step, model_or_folder)``, as
            :func:`~tl_leadterms.loading.checkpoint.load_series` gives); a list of local checkpoint
            folders; a series folder (its ``step{N}`` sub-folders); or a hub name such as
            ``"pythia-1.4b"`` with ``checkpoint_steps``. Folders and hub checkpoints are loaded one
            at a time and freed after use.
        stats: :class:`~tl_leadterms.stats.CorpusStats` over the models' vocabulary, or a
            :class:`~tl_leadterms.stats.blocks.BlockStats` (needed for ``ci``; its whole-corpus
            statistics are scored, and callables get those).
        analyses: names ``"decompose"`` (rows ``cos_{weight}`` and ``explained_{weight}``),
            ``"covariance"`` (:func:`~tl_leadterms.covariance_similarity`'s ``attention``,
            ``value_post``, ``value_attn``) and ``"output"`` (:func:`~tl_leadterms.output_agreement`
            on held-out ``tokens=``, its scalars fitted unless a ``schedule`` is given: rows
            ``output_kl``, ``output_explained``, ``output_top1``, ``output_c_O``…, ``bigram_kl``…);
            callables ``f(model, stats)`` returning dicts with ``layer``, ``head``, ``score``,
            ``value``; or ``(label, name_or_callable, kwargs)`` tuples (e.g. one score under two
            settings side by side).
        checkpoint_steps: with a hub name, the ``checkpoint_value`` of each checkpoint; with local
            checkpoints, keep only these steps. (The leading terms' training run is the analyses'
            ``schedule`` keyword.)
        results: a ``.jsonl`` path: each finished checkpoint is appended as one line; a rerun skips
            the checkpoints already there (same settings required, ``null``/``ci`` included) and
            loads their rows.
        null: the named analyses' permutation null, as :func:`~tl_leadterms.decompose` takes it
            (shorthand for ``uncertainty.null``): rows gain ``null_mean``, ``null_sd``, ``excess``,
            ``z``, ``p`` (``decompose``: on its ``cos_*`` rows).
        ci: a confidence level (shorthand for ``uncertainty.ci``): rows gain
            ``lo``/``hi``/``corrected``; ``stats`` must be a ``BlockStats``.
        uncertainty: the whole :class:`~tl_leadterms.results.uncertainty.Uncertainty` of the named
            analyses; its ``seed`` seeds the draws given as counts, the same for every checkpoint,
            so a resumed or distributed sweep gives the same columns.
        device: where models are loaded and covariance products run (default: the CPU).
        progress: a tqdm bar over the checkpoints.
        loader_kwargs: extra keywords for :func:`~tl_leadterms.loading.checkpoint.load_model`
            (``fold_ln``, ``dtype``, ...), for folders and hub names alike.
        executor: ``"local"`` (this process, one checkpoint after the other), ``"ray"`` or a
            :class:`~tl_leadterms.sweeps.on_ray.RayExecutor` (its cluster and what each task
            reserves): one Ray task per checkpoint, each loading its model in the worker, every
            record appended to ``results`` as it arrives. Checkpoints must then be folders or hub
            names.
        **analysis_kwargs: keywords for the named analyses (each gets those it accepts, e.g.
            ``layers=[0, 1]``, ``per_head=True``, ``schedule=Schedule(lr=..., steps=...)`` or
            ``normalize="both", value_map="write"`` for covariance). ``theory=path`` keeps the
            covariance theory terms in a file, computed once (with a Ray executor, here before the
            tasks start, when ``device`` is usable here) and read by every checkpoint and task.

    Returns:
        A :class:`SweepTable`, one row per (checkpoint, layer, head, analysis, score)."""
    full_stats(stats)  # a CorpusStats or BlockStats, else a clear error
    steps = analysis_kwargs.get("steps")  # the leading terms' step count, not checkpoints
    if steps is not None and not isinstance(steps, int) and hasattr(steps, "__iter__"):
        raise LeadTermsError(
            f"steps={steps!r}: sweep's steps= is the training step count of the leading terms "
            "(an int, as decompose takes it); to choose checkpoints pass "
            f"checkpoint_steps={list(steps)!r}"
        )
    device = "cpu" if device is None else device
    loader_kwargs = check_loader_kwargs(loader_kwargs)
    cluster = RayExecutor.of(executor)
    common = {"layers": None, "per_head": False, "device": device, "progress": False}
    common.update(uncertainty_options(stats, Uncertainty.of(uncertainty, null=null, ci=ci)))
    chosen = choose_analyses(analyses, common, analysis_kwargs)
    todo = find_checkpoints(checkpoints, checkpoint_steps, device, loader_kwargs)
    check_executor(cluster, todo)
    # with Ray, a covariance analysis's theory=path is computed here, once, and read by every task
    for a in chosen if cluster is not None else ():
        if a.named and a.kwargs.get("theory") is not None:
            from tl_leadterms.analyses.covariance import prepare_theory

            prepare_theory(full_stats(stats), a.kwargs, device)
    kept = settings(chosen, stats)
    path = results_path(results)
    with ResultsFile(path, kept) as stored:
        found, status = _run(todo, stats, chosen, stored, cluster, device, progress)
        torn = stored.torn
    metadata = {
        "results": None if path is None else str(path),
        "status": status,
        "ignored_torn_lines": len(torn),
        "settings": kept,
    }
    return SweepTable.from_records([found[c.label] for c in todo], metadata=metadata)


def _run(todo, stats, chosen, stored: ResultsFile, cluster, device, progress: bool):
    """Reuse the stored records of unchanged checkpoints, compute the others; the records by
    label and each checkpoint's status (loaded, computed, recomputed)."""
    found: dict[str, dict] = {}
    status: dict[str, str] = {}
    missing, fingerprints = [], {}
    for ckpt in todo:  # fingerprints on the driver: a replaced checkpoint is recomputed
        fingerprint = checkpoint_id(ckpt)
        if stored.done(ckpt.label, fingerprint):
            found[ckpt.label], status[ckpt.label] = stored.record(ckpt.label), "loaded"
        else:
            missing.append(ckpt)
            fingerprints[ckpt.label] = fingerprint
    with progress_bar(total=len(missing), desc="sweep", disable=not progress) as bar:

        def finished(record: dict) -> None:
            label = record["checkpoint"]
            record["fingerprint"] = fingerprints[label]
            stored.append(record)  # locked, one fsynced line, as each record arrives
            found[label] = record
            status[label] = "recomputed" if label in stored.changed else "computed"
            bar.update(1)

        if cluster is not None:
            shared = (stats, chosen, stored.settings)  # put into the object store once
            run_on_ray(run_checkpoint, missing, shared, finished, cluster=cluster, device=device)
        else:
            for ckpt in missing:
                finished(run_checkpoint(ckpt, stats, chosen, stored.settings, stored.path,
                                        len(found)))  # fmt: skip
    return found, status
