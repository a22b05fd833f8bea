"""Null baselines: is a score larger than it would be if the theory's tokens meant nothing?

Two baselines, asked for with ``null=`` on :func:`~tl_leadterms.decompose`,
:func:`~tl_leadterms.covariance_similarity` and :func:`~tl_leadterms.attention_agreement`
(docs/guides/meaningful-scores.md#a-permutation-null):

* **permutation null**: the theory's kept tokens relabelled by ``R`` random permutations (rows
  and columns together; the model side reused), each score recomputed, giving
  :data:`NULL_COLUMNS` (:func:`summarize`): ``z`` and ``p`` say *whether*, ``excess`` *how much*;
* **reference model**: the architecture at random initialisation (``reference="random"``:
  :func:`random_reference`) or a model the user gives, in a ``reference`` column.

A table's rows get ``q``, their Benjamini–Hochberg q-values (:func:`qvalues`), and one
``verdict`` (:func:`verdict`, :func:`add_verdicts`) that every view reads: they grey the rows in
:data:`FAINT` and say when the null is too small to decide (:func:`reach_note`;
docs/guides/effect-sizes.md#one-rule-for-every-view).

>>> NullSpec.of(20)
NullSpec(permutations=20, seed=0, reference=None, negligible=0.01)
>>> s = summarize(0.9, torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64))
>>> round(s["null_mean"], 3), round(s["z"], 1), s["p"], round(s["excess"], 3)
(0.2, 7.0, 0.25, 0.7)
>>> round(s["excess_share"], 4)  # 0.7 of the 0.8 above the null
0.875
>>> qvalues([0.01, 0.04, 0.03, float("nan")])
[0.03, 0.04, 0.04, nan]
>>> rows = [{"p": 0.01, "excess": 0.3}, {"p": 0.01, "excess": 0.004}, {"p": 0.4, "excess": 0.1}]
>>> [r["verdict"] for r in add_verdicts(rows, NullSpec(99))]
['stands out', 'negligible', 'not distinguished']
>>> [r["verdict"] for r in add_verdicts([{"p": 0.1, "excess": 0.3}], NullSpec(9))]
['unreachable']
"""

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tl_leadterms.checks import check_count, check_spec
from tl_leadterms.errors import LeadTermsError

__all__ = [
    "FAINT",
    "NEGLIGIBLE",
    "NULL_COLUMNS",
    "Q_LEVEL",
    "VERDICTS",
    "NullSpec",
    "add_verdicts",
    "dimmed",
    "permutations",
    "qvalues",
    "random_reference",
    "reach_note",
    "summarize",
    "verdict",
]

NULL_COLUMNS = ("score", "null_mean", "null_sd", "z", "p", "excess", "excess_share")
#: the false-discovery rate at which a row "stands out" (``q`` at or below it)
Q_LEVEL = 0.05
#: an excess over the null below this (in absolute value, in the score's units) is negligible
#: whatever its q: a cosine of 0.01 is a cosine² of 1e-4 of a map's variance
#: (docs/guides/effect-sizes.md argues it against the nulls' spreads at real sizes)
NEGLIGIBLE = 0.01
#: the words of :func:`verdict`, in the order tables explain them
VERDICTS = ("stands out", "negligible", "not distinguished", "unreachable")
#: the verdicts whose rows every view greys (fades)
FAINT = ("negligible", "not distinguished")


def dimmed(row: dict | None) -> bool:
    """Whether every view dims the row: its ``verdict`` is one of :data:`FAINT` (no verdict:
    never)."""
    return row is not None and row.get("verdict") in FAINT


@dataclass(frozen=True)
class NullSpec:
    """What null to compute: ``permutations`` draws from ``seed``; an optional ``reference``
    model (a model, or ``"random"`` for a random-init copy of the scored model); the
    ``negligible`` excess of :func:`verdict` (default :data:`NEGLIGIBLE`)."""

    permutations: int = 100
    seed: int = 0
    reference: Any = None
    negligible: float = NEGLIGIBLE

    def __post_init__(self) -> None:
        check_count("null permutations", self.permutations, minimum=2)
        check_count("null seed", self.seed, minimum=0)
        if type(self.negligible) not in (int, float) or not 0 <= self.negligible < 1:
            raise LeadTermsError(f"NullSpec.negligible must be a number in [0, 1), got "
                                 f"{self.negligible!r}")  # fmt: skip
        if isinstance(self.reference, str) and self.reference != "random":
            raise LeadTermsError(
                f"NullSpec.reference must be None, a model or 'random', got {self.reference!r}"
            )

    @classmethod
    def of(cls, null: Any) -> "NullSpec | None":
        """``None``, an int ``R`` (permutations) or a :class:`NullSpec`, checked."""
        return None if null is None else check_spec("null", null, cls, "permutations")

    def reference_model(self, model: Any) -> Any:
        """The reference model to score (None when none was asked for)."""
        if self.reference is None:
            return None
        if isinstance(self.reference, str):
            return random_reference(model, self.seed)
        return self.reference


def permutations(k: int, count: int, seed: int) -> Tensor:
    """``[count, k]`` independent uniform permutations of ``range(k)`` from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(k, generator=g) for _ in range(count)])


def summarize(score: float, draws: Tensor, upper: float | None = 1.0) -> dict[str, float]:
    """:data:`NULL_COLUMNS` of one score against its draws.

    ``excess = score − null_mean``; ``excess_share = max(excess, 0) / (upper − null_mean)``,
    the share of the room above the null the score takes up, in ``[0, 1]`` (0 for a score
    below its null; NaN when ``upper`` is None or the room is below :data:`NEGLIGIBLE`: there
    every excess is negligible). NaN draws (e.g. a weight with no token labels) give NaN
    columns.
    """
    draws = draws.double()
    if not math.isfinite(score) or not torch.isfinite(draws).all():
        nan = math.nan
        return {"score": score, **dict.fromkeys(NULL_COLUMNS[1:], nan)}
    mean, sd = float(draws.mean()), float(draws.std(correction=1))
    z = (score - mean) / sd if sd > 0 else (math.inf if score > mean else math.nan)
    p = (1 + int((draws >= score).sum())) / (draws.numel() + 1)
    room = math.nan if upper is None else upper - mean
    share = min(max(score - mean, 0.0) / room, 1.0) if room >= NEGLIGIBLE else math.nan
    return {"score": score, "null_mean": mean, "null_sd": sd, "z": z, "p": p,
            "excess": score - mean, "excess_share": share}  # fmt: skip


def qvalues(p: list[float]) -> list[float]:
    """Benjamini–Hochberg q-values of ``p`` (NaN entries stay NaN and are not counted).

    ``q_(i) = min_{j ≥ i} p_(j)·m/j`` over the ``m`` finite p-values sorted ascending, capped
    at 1: the smallest false-discovery rate at which the row would be called significant.
    """
    finite = [(float(v), i) for i, v in enumerate(p) if _finite(v)]
    out = [math.nan] * len(p)
    m = len(finite)
    running = 1.0
    for rank, (value, i) in reversed(list(enumerate(sorted(finite), start=1))):
        running = min(running, value * m / rank)
        out[i] = running
    return out


def verdict(row: dict, permutations: int, negligible: float = NEGLIGIBLE,
            alpha: float = Q_LEVEL) -> str | None:  # fmt: skip
    """The one reading of a row (its ``excess``, ``p``, ``q``) of a null of ``permutations``
    draws, in this order: ``"negligible"`` (``|excess| < negligible``, whatever ``q``),
    ``"unreachable"`` (no row can reach ``q ≤ alpha``: ``1/(R + 1) > alpha``; or the row beat
    every draw and ``q > alpha`` still), ``"stands out"`` (``q ≤ alpha``, positive excess),
    ``"not distinguished"``; None without a finite ``p``."""
    p, q, excess = (row.get(c) for c in ("p", "q", "excess"))
    if not _finite(p):
        return None
    if not _finite(excess) or abs(excess) < negligible:
        return "negligible"
    floor, level = 1.0 / (permutations + 1), alpha * (1 + 1e-9)  # q = 0.05 is 0.05000…01
    q = q if _finite(q) else p
    if floor > level or (q > level and p <= floor * (1 + 1e-9)):
        return "unreachable"
    return "stands out" if q <= level and excess > 0 else "not distinguished"


def add_verdicts(rows: list[dict], spec: "NullSpec") -> list[dict]:
    """Add ``q`` (Benjamini–Hochberg over the rows that have ``p``) and their :func:`verdict`."""
    tested = [r for r in rows if "p" in r]
    for r, value in zip(tested, qvalues([r["p"] for r in tested]), strict=True):
        r["q"] = value
        r["verdict"] = verdict(r, spec.permutations, spec.negligible)
    return rows


def reach_note(rows: list[dict], permutations: int | None = None, alpha: float = Q_LEVEL
               ) -> str | None:  # fmt: skip
    """One line when rows are ``"unreachable"`` (else None): how small the null is and what
    ``null=`` would decide them; ``permutations``: the ``R`` (default: from their ``p``).

    >>> reach_note([{"p": 0.1, "q": 0.1, "verdict": "unreachable"}], 9)  # doctest: +ELLIPSIS
    'null of 9 permutations: no row can reach q ≤ 0.05 (the smallest ... = 0.1); pass null=99'
    """
    stuck = [r for r in rows if r.get("verdict") == "unreachable"]
    if not stuck:
        return None
    m = sum(_finite(r.get("p")) for r in rows)
    floor = 1 / (permutations + 1) if permutations else min(r["p"] for r in stuck)
    R = permutations or round(1 / floor) - 1
    need = max(99, math.ceil(m / (len(stuck) * alpha)) - 1)
    need = next((n for n in (99, 199, 499, 999, 1999, 4999, 9999) if n >= need), need)
    if floor > alpha:
        return (f"null of {R} permutations: no row can reach q ≤ {alpha} (the smallest "
                f"attainable p is 1/(R + 1) = {floor:.3g}); pass null={need}")  # fmt: skip
    q = min(r["q"] for r in stuck if _finite(r.get("q")))
    return (f"null of {R} permutations over {m} rows: {len(stuck)} beat every permutation "
            f"(p = {floor:.3g}) yet reach only q = {q:.3g} > {alpha} after the correction; "
            f"pass null={need} to decide them")  # fmt: skip


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@torch.no_grad()
def random_reference(model: Any, seed: int = 0, init_range: float | None = None) -> Any:
    """A copy of ``model`` at random initialisation (the "untrained" reference).

    Every trainable parameter with two or more dimensions (embeddings, attention and MLP
    weights) is redrawn from ``N(0, init_range²)`` (default: ``cfg.initializer_range``, else
    0.02) with a seeded generator; biases, LayerNorm scales and frozen parameters (such as the
    paper model's one-hot embeddings) keep their values. The model passed in is not touched.
    """
    ref = copy.deepcopy(model)
    std = init_range
    if std is None:
        std = getattr(getattr(model, "cfg", None), "initializer_range", None) or 0.02
    g = torch.Generator(device="cpu").manual_seed(seed)
    for param in ref.parameters():
        if param.requires_grad and param.dim() >= 2:
            param.copy_(torch.randn(param.shape, generator=g, dtype=torch.float64) * std)
    return ref
