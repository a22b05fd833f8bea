"""What a :func:`~tl_leadterms.sweeps.run.sweep` is given, checked before any work.

The checkpoints (``(label, model)`` pairs, folders, a series folder or a hub name with steps)
become :class:`Checkpoint` records whose loaders are ``functools.partial`` objects of
:func:`~tl_leadterms.loading.checkpoint.load_model`, not closures, so that a Ray task pickles
them by reference. The results path, the loader keywords and the executor's options are refused
here, before the first model is loaded.

>>> checkpoint_step_of("step128"), checkpoint_step_of("final")
(128, None)
"""

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.loading.checkpoint import checkpoint_step, load_model, load_series
from tl_leadterms.sweeps.fingerprint import checkpoint_fingerprint
from tl_leadterms.sweeps.results import check_results_path

__all__ = [
    "Checkpoint",
    "check_executor",
    "check_loader_kwargs",
    "checkpoint_id",
    "checkpoint_step_of",
    "find_checkpoints",
    "results_path",
]


class Checkpoint(NamedTuple):
    """One checkpoint of a sweep: its label, step (None when unknown), where it comes from (for
    messages), how to load it, and whether it is loaded here (freed after use) or handed in."""

    label: str
    step: int | None
    source: str
    load: Callable[[], Any]
    owned: bool


def checkpoint_step_of(name: str) -> int | None:
    """The step a label such as ``"step128"`` ends in (None without trailing digits)."""
    digits = name[len(name.rstrip("0123456789")) :]
    return int(digits) if digits else None


def _local(folder: Path, device: str, loader_kwargs: dict[str, Any]) -> Checkpoint:
    load = partial(load_model, folder, device=device, **loader_kwargs)
    return Checkpoint(folder.name, checkpoint_step(folder), str(folder), load, True)


def _hub(name: str, step: int, device: str, loader_kwargs: dict[str, Any]) -> Checkpoint:
    load = partial(load_model, name, checkpoint=step, device=device, **loader_kwargs)
    return Checkpoint(f"step{step}", step, f"{name} checkpoint={step}", load, True)


def _from_items(items, device: str, loader_kwargs: dict[str, Any]) -> list[Checkpoint]:
    """Checkpoints from a list of folders, (label, model) pairs or (label, step, model) triples."""
    found = []
    for item in items:
        if isinstance(item, (str, os.PathLike)):
            found.append(_local(Path(item), device, loader_kwargs))
        elif isinstance(item, tuple) and len(item) in (2, 3) and isinstance(item[0], str):
            label, obj = item[0], item[-1]
            step = item[1] if len(item) == 3 else checkpoint_step_of(label)
            if isinstance(obj, (str, os.PathLike)):
                found.append(_local(Path(obj), device, loader_kwargs)._replace(label=label))
            else:
                found.append(Checkpoint(label, step, label, lambda m=obj: m, False))
        else:
            raise LeadTermsError(
                f"checkpoint {item!r} is not a folder, a (label, model) pair or a "
                "(label, step, model_or_folder) triple"
            )
    return found


def _check_steps(steps: object) -> None:
    if steps is not None and (
        isinstance(steps, (str, bytes))
        or not hasattr(steps, "__iter__")
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in steps)
    ):
        raise LeadTermsError(f"checkpoint_steps must be None or a list of ints, got {steps!r}")


def find_checkpoints(
    checkpoints: object, steps: object, device: str, loader_kwargs: dict[str, Any]
) -> list[Checkpoint]:
    """The checkpoints of a sweep, in order, filtered to ``steps`` (see ``sweep``)."""
    _check_steps(steps)
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
                "folder, (label, model) pairs, or a hub name with checkpoint_steps=[...] "
                "(e.g. sweep('pythia-160m', stats, checkpoint_steps=[1, 2, 4]))"
            )
    elif hasattr(checkpoints, "__iter__"):
        found = _from_items(checkpoints, device, loader_kwargs)
    else:
        raise LeadTermsError(
            f"checkpoints must be a list of (label, model) pairs or folders, a series folder or "
            f"a hub name with checkpoint_steps, got {type(checkpoints).__name__}"
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


def checkpoint_id(ckpt: Checkpoint) -> str:
    """What was analysed: a model handed in, a local folder, or a hub name and step."""
    if not ckpt.owned:
        return checkpoint_fingerprint(ckpt.load())
    return checkpoint_fingerprint(Path(ckpt.source) if Path(ckpt.source).is_dir() else ckpt.source)


def check_loader_kwargs(loader_kwargs: object) -> dict[str, Any]:
    """``loader_kwargs`` as a dict, refusing ``device`` and ``checkpoint`` (sweep's own)."""
    if loader_kwargs is None:
        return {}
    if not isinstance(loader_kwargs, dict):
        raise LeadTermsError(f"loader_kwargs must be a dict or None, got {loader_kwargs!r}")
    if "device" in loader_kwargs or "checkpoint" in loader_kwargs:
        raise LeadTermsError(
            "loader_kwargs may not hold device or checkpoint; pass device= and checkpoint_steps= "
            "to sweep"
        )
    return loader_kwargs


def check_executor(cluster: Any, todo: list[Checkpoint]) -> None:
    """Refuse models held here with a Ray executor (``cluster``; None: this process)."""
    held = [c.label for c in todo if not c.owned]
    if cluster is not None and held:
        raise LeadTermsError(
            f"checkpoints {held} are models held by this process, but a Ray worker loads its "
            "own model: pass checkpoint folders, a series folder or a hub name with "
            "checkpoint_steps"
        )


def results_path(results: object) -> Path | None:
    """The results file, checked writable now rather than after the first checkpoint's work."""
    if results is None:
        return None
    path = Path(results)
    check_results_path(path)  # a FIFO, device or folder, before any open that could block
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.open("a").close()
    except OSError as err:
        raise LeadTermsError(f"cannot write the results file {str(path)!r}: {err}") from err
    return path
