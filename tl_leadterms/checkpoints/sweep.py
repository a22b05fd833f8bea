"""`sweep`: run analyses over a series of checkpoints, one model in memory at a time, resumable.

Checkpoints come as ``(label, model)`` pairs, local checkpoint folders of any architecture
:func:`~tl_leadterms.checkpoints.loading.load_model` reads, a series folder written by
:func:`~tl_leadterms.checkpoints.series.train_neox_series`, or a Pythia name with ``steps``
(``load_model(name, checkpoint=step)``). With ``results=`` every
finished checkpoint is appended to a JSON-lines file as one complete line (flushed and
fsynced), so an interrupted sweep resumes where it stopped and never loses finished work.
"""

import gc
import hashlib
import inspect
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
from tqdm.auto import tqdm

from tl_leadterms.checkpoints.fingerprint import checkpoint_fingerprint
from tl_leadterms.checkpoints.loading import checkpoint_step, load_model, load_series
from tl_leadterms.checkpoints.sweep_results import ResultsFile, jsonable
from tl_leadterms.checkpoints.sweep_table import SweepTable
from tl_leadterms.errors import LeadTermsError, check_choice
from tl_leadterms.stats.corpus import CorpusStats

__all__ = ["EXECUTORS", "SweepTable", "run_checkpoint", "sweep"]

NAMES = ("decompose", "covariance")
EXECUTORS = ("local", "ray")
_FORMAT = 1
_NOT_SETTINGS = ("device", "progress", "batch_size")


class _Checkpoint(NamedTuple):
    label: str
    step: int | None
    source: str  # where it comes from, for messages
    load: Callable[[], Any]
    owned: bool  # loaded here (freed after use) or handed in by the caller


class _Analysis(NamedTuple):
    label: str
    fn: Callable[..., Any]
    kwargs: dict[str, Any]


def _decompose(model, stats, **kwargs) -> list[dict[str, Any]]:
    from tl_leadterms.analyzers.decompose import decompose

    rows = []
    for r in decompose(model, stats, **kwargs).rows:
        for score, key in (
            (f"cos_{r['weight']}", "cosine"),
            (f"explained_{r['weight']}", "explained"),
        ):
            rows.append({"layer": r["layer"], "head": r["head"], "score": score, "value": r[key]})
    return rows


def _covariance(model, stats, **kwargs) -> list[dict[str, Any]]:
    from tl_leadterms.analyzers.covariance import covariance_similarity

    return covariance_similarity(model, stats, **kwargs).rows


_BUILTIN = {"decompose": _decompose, "covariance": _covariance}
_TARGETS = {"decompose": "decompose", "covariance": "covariance_similarity"}


def _accepts(name: str) -> set[str]:
    """Keyword names the built-in analysis ``name`` takes."""
    import importlib

    module = importlib.import_module(f"tl_leadterms.analyzers.{name}")
    fn = inspect.unwrap(getattr(module, _TARGETS[name]))
    return set(inspect.signature(fn).parameters) - {"model", "stats"}


def _analyses(analyses: object, common: dict[str, Any], extra: dict[str, Any]) -> list[_Analysis]:
    if isinstance(analyses, str) or callable(analyses):
        analyses = (analyses,)
    if not isinstance(analyses, (list, tuple)) or not analyses:
        raise LeadTermsError(
            f"analyses must be a non-empty list of names {NAMES}, callables f(model, stats) "
            f"or (label, name_or_callable, kwargs) tuples, got {analyses!r}"
        )
    out = []
    for item in analyses:
        label, fn, kwargs = None, item, {}
        if isinstance(item, tuple):
            if len(item) != 3 or not isinstance(item[0], str) or not isinstance(item[2], dict):
                raise LeadTermsError(
                    f"an analysis tuple is (label, name_or_callable, kwargs dict), got {item!r}"
                )
            label, fn, kwargs = item[0], item[1], dict(item[2])
        if isinstance(fn, str):
            if fn not in _BUILTIN:
                raise LeadTermsError(
                    f"unknown analysis {fn!r}; use one of {NAMES} or pass a callable "
                    "f(model, stats) returning dicts with layer, head, score, value"
                )
            accepted = _accepts(fn)
            merged = {k: v for k, v in common.items() if k in accepted}
            merged.update({k: v for k, v in extra.items() if k in accepted})
            merged.update(kwargs)
            out.append(_Analysis(label or fn, _BUILTIN[fn], merged))
        elif callable(fn):
            name = label or getattr(fn, "__name__", type(fn).__name__)
            out.append(_Analysis(name, fn, kwargs))
        else:
            raise LeadTermsError(f"analysis {item!r} is neither a name in {NAMES} nor callable")
    labels = [a.label for a in out]
    if len(set(labels)) != len(labels):
        raise LeadTermsError(
            f"analysis labels must be unique, got {labels}; label them with tuples"
        )
    named = [a[1] if isinstance(a, tuple) else a for a in analyses]
    named = [n for n in named if isinstance(n, str)]
    unused = [k for k in extra if not any(k in _accepts(n) for n in named)]
    if unused:
        raise LeadTermsError(
            f"keyword(s) {unused} are not taken by any of the analyses {named}; check the "
            "spelling, or pass them in a (label, name, kwargs) tuple"
        )
    return out


def _step_from_name(name: str) -> int | None:
    digits = name[len(name.rstrip("0123456789")) :]
    return int(digits) if digits else None


# the loaders are partials of load_model, not closures: a Ray task pickles them by reference


def _local(folder: Path, device: str, loader_kwargs: dict[str, Any]) -> _Checkpoint:
    load = partial(load_model, folder, device=device, **loader_kwargs)
    return _Checkpoint(folder.name, checkpoint_step(folder), str(folder), load, True)


def _hub(name: str, step: int, device: str, loader_kwargs: dict[str, Any]) -> _Checkpoint:
    load = partial(load_model, name, checkpoint=step, device=device, **loader_kwargs)
    return _Checkpoint(f"step{step}", step, f"{name} checkpoint={step}", load, True)


def _from_items(items, device: str, loader_kwargs: dict[str, Any]) -> list[_Checkpoint]:
    """Checkpoints from a list of folders, (label, model) pairs or (label, step, model) triples."""
    found = []
    for item in items:
        if isinstance(item, (str, os.PathLike)):
            found.append(_local(Path(item), device, loader_kwargs))
        elif isinstance(item, tuple) and len(item) in (2, 3) and isinstance(item[0], str):
            label, obj = item[0], item[-1]
            step = item[1] if len(item) == 3 else _step_from_name(label)
            if isinstance(obj, (str, os.PathLike)):
                found.append(_local(Path(obj), device, loader_kwargs)._replace(label=label))
            else:
                found.append(_Checkpoint(label, step, label, lambda m=obj: m, False))
        else:
            raise LeadTermsError(
                f"checkpoint {item!r} is not a folder, a (label, model) pair or a "
                "(label, step, model_or_folder) triple"
            )
    return found


def _checkpoints(checkpoints: object, steps: object, device, loader_kwargs) -> list[_Checkpoint]:
    if steps is not None and (
        isinstance(steps, (str, bytes))
        or not hasattr(steps, "__iter__")
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in steps)
    ):
        raise LeadTermsError(f"steps must be None or a list of ints, got {steps!r}")
    if isinstance(checkpoints, (str, os.PathLike)):
        path = Path(checkpoints)
        if path.is_dir():
            if (path / "config.json").is_file():
                found = [_local(path, device, loader_kwargs)]
            else:
                found = [_local(f, device, loader_kwargs) for _, _, f in load_series(path)]
        elif isinstance(checkpoints, str) and steps is not None:
            return [_hub(checkpoints, s, device, loader_kwargs) for s in steps]
        else:
            raise LeadTermsError(
                f"{str(checkpoints)!r} is not a folder; pass local checkpoint folders, a series "
                "folder, (label, model) pairs, or a hub name with steps=[...] "
                "(e.g. sweep('pythia-160m', stats, steps=[1, 2, 4]))"
            )
    elif hasattr(checkpoints, "__iter__"):
        found = _from_items(checkpoints, device, loader_kwargs)
    else:
        raise LeadTermsError(
            f"checkpoints must be a list of (label, model) pairs or folders, a series folder or "
            f"a hub name with steps, got {type(checkpoints).__name__}"
        )
    if steps is not None:
        wanted = set(steps)
        missing = wanted - {c.step for c in found}
        if missing:
            raise LeadTermsError(f"no checkpoint for steps {sorted(missing)} among the given ones")
        found = [c for c in found if c.step in wanted]
    labels = [c.label for c in found]
    if not found or len(set(labels)) != len(labels):
        raise LeadTermsError(f"checkpoint labels must be unique and non-empty, got {labels}")
    return found


def _check_rows(rows: Any, analysis: str, label: str) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        if not isinstance(r, dict) or not {"layer", "score", "value"} <= set(r):
            raise LeadTermsError(
                f"analysis {analysis!r} returned {r!r} for checkpoint {label!r}; each row must be "
                "a dict with layer, head, score and value"
            )
        value = r["value"]
        if isinstance(value, torch.Tensor):
            value = value.detach().item()
        out.append(
            {
                "layer": r["layer"],
                "head": r.get("head"),
                "score": str(r["score"]),
                "value": float(value) if value is not None else float("nan"),
            }
        )
    return out


def _fingerprint(stats: CorpusStats) -> str:
    """A content hash of the statistics (sparse counts, kept ids, Δ) for the resume check."""
    digest = hashlib.sha256()
    parts = [stats.pair_codes, stats.pair_counts, stats.unigram_counts, stats.Delta]
    if stats.kept is not None:
        parts.append(stats.kept)
    for part in parts:
        digest.update(part.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _checkpoint_fingerprint(ckpt: _Checkpoint) -> str:
    """What was analysed: a model handed in, a local folder, or a hub name and step."""
    if not ckpt.owned:
        return checkpoint_fingerprint(ckpt.load())
    return checkpoint_fingerprint(Path(ckpt.source) if Path(ckpt.source).is_dir() else ckpt.source)


def _analyse(model, stats: CorpusStats, chosen: list, ckpt) -> list[dict[str, Any]]:
    from tl_leadterms.checks import check_vocab

    check_vocab(
        stats,
        d_vocab=getattr(getattr(model, "cfg", None), "d_vocab", None),
        tokenizer=getattr(model, "tokenizer", None),
        what=f"checkpoint {ckpt.label!r}",
    )
    rows = []
    for a in chosen:
        with torch.no_grad():
            found = a.fn(model, stats, **a.kwargs)
        rows.extend({"analysis": a.label, **r} for r in _check_rows(found, a.label, ckpt.label))
    return rows


def _check_arguments(stats: object, loader_kwargs: object, per_head: object) -> dict[str, Any]:
    """Refuse a wrong ``stats``, ``loader_kwargs`` or ``per_head``; the loader keywords."""
    if not isinstance(stats, CorpusStats):
        raise LeadTermsError(
            f"stats must be a CorpusStats (from tl_leadterms.corpus_stats), got "
            f"{type(stats).__name__}"
        )
    if loader_kwargs is None:
        loader_kwargs = {}
    if not isinstance(loader_kwargs, dict):
        raise LeadTermsError(f"loader_kwargs must be a dict or None, got {loader_kwargs!r}")
    if "device" in loader_kwargs or "checkpoint" in loader_kwargs:
        raise LeadTermsError(
            "loader_kwargs may not hold device or checkpoint; pass device= and steps= to sweep"
        )
    if not isinstance(per_head, bool):
        raise LeadTermsError(f"per_head must be True or False, got {per_head!r}")
    return loader_kwargs


def _check_executor(executor: str, todo: list[_Checkpoint], *ray_only: object) -> None:
    if executor == "local" and any(x is not None for x in ray_only):
        raise LeadTermsError(
            "resources=, address= and num_cpus= choose the Ray cluster; pass executor='ray' "
            "with them, or drop them for a sweep in this process"
        )
    held = [c.label for c in todo if not c.owned]
    if executor == "ray" and held:
        raise LeadTermsError(
            f"checkpoints {held} are models held by this process, but a Ray worker loads its "
            "own model: pass checkpoint folders, a series folder or a hub name with steps"
        )


def _settings(chosen: list[_Analysis], stats: CorpusStats) -> dict[str, Any]:
    """What a resumed sweep must share with the results file: the analyses and statistics."""
    return jsonable(
        {
            "format": _FORMAT,
            # where and how fast it ran does not change the rows: resume on any device
            "analyses": {
                a.label: {k: v for k, v in a.kwargs.items() if k not in _NOT_SETTINGS}
                for a in chosen
            },
            "stats": {
                "d_vocab": stats.d_vocab,
                "k": stats.k,
                "n_ctx": stats.n_ctx,
                "n_sequences": stats.n_sequences,
                "content": _fingerprint(stats),  # same shape, other corpus: no resume
            },
        }
    )


def _results_path(results: object) -> Path | None:
    """The results file, checked writable now rather than after the first checkpoint's work."""
    if results is None:
        return None
    path = Path(results)
    if path.is_dir():
        raise LeadTermsError(
            f"results={str(path)!r} is a folder; pass a file path like 'sweep.jsonl'"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.open("a").close()
    except OSError as err:
        raise LeadTermsError(f"cannot write the results file {str(path)!r}: {err}") from err
    return path


def run_checkpoint(
    ckpt,
    stats: CorpusStats,
    chosen: list,
    settings: dict,
    path: Path | None = None,
    n_done: int = 0,
) -> dict[str, Any]:
    """Load one checkpoint, run the analyses, free it; its record for the results file.

    The unit of work of both executors: :func:`sweep` calls it in this process, and with
    ``executor="ray"`` one Ray task per checkpoint calls it in a worker, so the records agree.
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
        rows = _analyse(model, stats, chosen, ckpt)
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


def sweep(
    checkpoints: object,
    stats: object,
    *,
    analyses: object = NAMES,
    steps: object = None,
    results: object = None,
    layers: object = None,
    per_head: bool = False,
    device: str = "cpu",
    progress: bool = True,
    loader_kwargs: object = None,
    executor: str = "local",
    resources: dict[str, Any] | None = None,
    address: str | None = None,
    num_cpus: int | None = None,
    **analysis_kwargs: Any,
) -> SweepTable:
    """Run ``analyses`` on every checkpoint and collect one tidy table.

    Args:
        checkpoints: ``(label, model)`` pairs (or ``(label, step, model_or_folder)``, as
            :func:`~tl_leadterms.checkpoints.loading.load_series` gives); a list of local
            checkpoint folders; a series folder (its ``step{N}`` sub-folders); or a hub name such
            as ``"pythia-1.4b"`` with ``steps``. Folders and hub checkpoints are loaded one at a
            time and freed after use, so memory holds one model.
        stats: :class:`~tl_leadterms.stats.CorpusStats` over the models' vocabulary.
        analyses: names ``"decompose"`` (rows ``cos_{weight}`` and ``explained_{weight}``) and
            ``"covariance"`` (:func:`~tl_leadterms.analyzers.covariance.covariance_similarity`'s
            ``attention``, ``value_post``, ``value_attn``), callables ``f(model, stats)``
            returning dicts with ``layer``, ``head``, ``score``, ``value``, or
            ``(label, name_or_callable, kwargs)`` tuples (e.g. the covariance score under two
            settings side by side).
        steps: with a hub name, the ``checkpoint_value`` of each checkpoint; with local
            checkpoints, keep only these steps.
        results: a ``.jsonl`` path: each finished checkpoint is appended as one line; a rerun
            skips the checkpoints already there (same settings required) and loads their rows.
        layers, per_head: passed to the named analyses.
        device: where models are loaded and covariance products run.
        progress: a tqdm bar over the checkpoints.
        loader_kwargs: extra keywords for :func:`~tl_leadterms.checkpoints.loading.load_model`
            (``fold_ln``, ``dtype``, ...), for folders and hub names alike.
        executor: ``"local"`` (this process, one checkpoint after the other) or ``"ray"``: one
            Ray task per checkpoint (see :func:`tl_leadterms.distributed.sweep.run_on_ray`),
            each loading its model in the worker; every record is appended to ``results`` as it
            arrives, so an interrupted Ray sweep resumes like a local one. Checkpoints must be
            folders or hub names (a worker cannot load a model held by this process).
        resources, address, num_cpus: with ``executor="ray"``: what each task reserves
            (default ``{"num_gpus": 1}`` when ``device`` is CUDA, else ``{"num_cpus": 1}``), and
            the cluster (``None``: a local Ray with ``num_cpus`` CPUs; ``"auto"`` or
            ``"host:port"``: a running one; a Ray already initialised here is used as it is).
        **analysis_kwargs: keywords for the named analyses (each gets those it accepts, e.g.
            ``normalize="both", value_map="write"`` for covariance).

    Returns:
        A :class:`SweepTable`, one row per (checkpoint, layer, head, analysis, score).
    """
    loader_kwargs = _check_arguments(stats, loader_kwargs, per_head)
    check_choice("executor", executor, EXECUTORS)
    common = {"layers": layers, "per_head": per_head, "device": device, "progress": False}
    chosen = _analyses(analyses, common, analysis_kwargs)
    todo = _checkpoints(checkpoints, steps, device, loader_kwargs)
    _check_executor(executor, todo, resources, address, num_cpus)
    settings = _settings(chosen, stats)
    path = _results_path(results)
    with ResultsFile(path, settings) as stored:
        found: dict[str, dict] = {}
        status: dict[str, str] = {}
        missing, fingerprints = [], {}
        for ckpt in todo:  # fingerprints on the driver: a replaced checkpoint is recomputed
            fingerprint = _checkpoint_fingerprint(ckpt)
            if stored.done(ckpt.label, fingerprint):
                found[ckpt.label], status[ckpt.label] = stored.record(ckpt.label), "loaded"
            else:
                missing.append(ckpt)
                fingerprints[ckpt.label] = fingerprint
        with tqdm(total=len(missing), desc="sweep", disable=not progress) as bar:

            def finished(record: dict) -> None:
                label = record["checkpoint"]
                record["fingerprint"] = fingerprints[label]
                stored.append(record)  # locked, one fsynced line, as each record arrives
                found[label] = record
                status[label] = "recomputed" if label in stored.changed else "computed"
                bar.update(1)

            if executor == "ray":
                from tl_leadterms.distributed.sweep import run_on_ray

                shared = (stats, chosen, settings)  # put into the object store once
                ray_at = {"address": address, "num_cpus": num_cpus, "device": device}
                run_on_ray(run_checkpoint, missing, shared, finished, resources=resources, **ray_at)
            else:
                for ckpt in missing:
                    finished(run_checkpoint(ckpt, stats, chosen, settings, path, len(found)))
        torn = stored.torn
    records = [found[c.label] for c in todo]
    metadata = {
        "results": None if path is None else str(path),
        "status": status,
        "ignored_torn_lines": len(torn),
        "settings": settings,
    }
    return SweepTable.from_records(records, metadata=metadata)
