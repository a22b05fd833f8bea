r"""Degenerate statistics: a table that is zero up to rounding carries no direction.

On a corpus of one repeated token Q̄ and Δ are zero in exact arithmetic but hold rounding noise
(``max|Q̄| ≈ 4e-17``), and a cosine with that noise means nothing. :func:`negligible` is the test
``‖T‖_F <= TOLERANCE · eps · scale``, with ``eps`` that of the dtype the table was *summed* in and
``scale`` the size of the terms it sums: 1 for Φ̄, B̄ and Ḡ, ``max|Ḡ|`` for Q̄ and Δ (why:
docs/guides/corpus-statistics.md#degenerate-statistics).

Example:

>>> import torch
>>> negligible(torch.full((3, 3), 4e-17, dtype=torch.float64), scale=1.0)
True
>>> negligible(torch.full((3, 3), 1e-9, dtype=torch.float64), scale=1.0)
False
"""

import torch

from tl_leadterms.errors import LeadTermsError

__all__ = ["TOLERANCE", "degenerate", "degenerate_reason", "negligible"]

TOLERANCE = 1e3
_SYMBOL = {"Phi_bar": "Φ̄", "G_bar": "Ḡ", "Q_bar": "Q̄", "Delta": "Δ"}


def _eps(dtype: torch.dtype | str | None, fallback: torch.dtype) -> float:
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        dtype = fallback
    return torch.finfo(dtype).eps


def _norm(tensor: torch.Tensor, rows: int = 1024) -> float:
    """Frobenius norm in float64, a block of rows at a time (no full-size copy)."""
    flat = tensor.reshape(tensor.shape[0], -1) if tensor.ndim > 1 else tensor.reshape(1, -1)
    total = 0.0
    for start in range(0, flat.shape[0], rows):
        total += float(torch.linalg.vector_norm(flat[start : start + rows].double())) ** 2
    return total**0.5


def _max_abs(tensor: torch.Tensor) -> float:
    """``max|tensor|`` from one pass over the entries (NaN if one is NaN)."""
    if not tensor.numel():
        return 0.0
    low, high = torch.aminmax(tensor)
    return max(float(high), -float(low)) if not (low.isnan() or high.isnan()) else float("nan")


# Relative slack around the two bounds below, so that a decision taken from them never
# differs from the one the float64 norm would give through rounding of the norm itself.
_SLACK = 1e-9


def negligible(
    tensor: torch.Tensor, scale: float, *, summed_in: torch.dtype | str | None = None
) -> bool:
    """True if ``tensor`` is zero up to rounding: ``‖tensor‖_F <= TOLERANCE·eps·scale``.

    Decided from ``m = max|tensor|`` where it can be (one pass, no copy), since
    ``m <= ‖tensor‖_F <= √n·m`` for ``n`` entries: a real statistic has ``m`` far above the
    bound, a degenerate one ``√n·m`` below it. Only in between is the norm summed in float64.

    Args:
        tensor: a statistic (any shape).
        scale: the size of the terms the statistic sums (the module docstring);
            ``scale <= 0`` means every term was zero, so the tensor is negligible.
        summed_in: the dtype of the accumulation (default the tensor's own).
    """
    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        raise LeadTermsError(f"negligible needs a float tensor, got {type(tensor).__name__}")
    return _negligible(tensor, _max_abs(tensor), scale, summed_in)


def _negligible(tensor: torch.Tensor, largest: float, scale: float, summed_in) -> bool:
    """:func:`negligible` given ``largest = max|tensor|``."""
    if not scale > 0:
        return scale <= 0 or largest == 0
    bound = TOLERANCE * _eps(summed_in, tensor.dtype) * float(scale)
    if largest > bound * (1 + _SLACK):
        return False
    if largest * tensor.numel() ** 0.5 < bound * (1 - _SLACK):
        return True
    return _norm(tensor) <= bound  # also NaN: not negligible


def degenerate(
    tables: dict[str, torch.Tensor | None], summed_in: torch.dtype | str | None = None
) -> dict[str, bool]:
    """For each statistic present: whether it is :func:`negligible` at its natural scale (one
    max pass over each table; Ḡ's serves both its own test and the scale of Q̄ and Δ)."""
    present = {name: t for name, t in tables.items() if t is not None}
    for name, table in present.items():
        if not isinstance(table, torch.Tensor) or not table.is_floating_point():
            raise LeadTermsError(f"{name} must be a float tensor, got {type(table).__name__}")
    largest = {name: _max_abs(table) for name, table in present.items()}
    scales = {name: 1.0 for name in ("Phi_bar", "G_bar") if name in present}  # natural scales
    if "G_bar" in present:
        scales.update({name: largest["G_bar"] for name in ("Q_bar", "Delta") if name in present})
    return {
        name: _negligible(tables[name], largest[name], scale, summed_in)
        for name, scale in scales.items()
    }


def degenerate_reason(stats, name: str) -> str | None:
    """Why the statistic ``name`` of ``stats`` (a CorpusStats) means nothing, or None.

    This is what a score against it (a cosine, an implied ``s·η``) should report, as NaN with
    this reason, instead of a number. It reads ``stats.metadata["degenerate"]`` when the
    statistics recorded it, and tests the table otherwise.
    """
    recorded = stats.metadata.get("degenerate")
    if isinstance(recorded, dict) and name in recorded:
        is_degenerate = bool(recorded[name])
    elif stats.has(name) and stats.has("G_bar"):
        tables = {"G_bar": stats.G_bar, name: getattr(stats, name)}
        found = degenerate(tables, stats.metadata.get("accumulate_dtype"))
        is_degenerate = found.get(name, False)
    else:
        return None
    if not is_degenerate:
        return None
    symbol = _SYMBOL.get(name, name)
    return (
        f"{symbol} is zero up to rounding on this corpus (norm below {TOLERANCE:g}·eps of its "
        f"scale): it has no direction to compare with (e.g. every window repeats one token)"
    )
