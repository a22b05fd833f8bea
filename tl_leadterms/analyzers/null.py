"""Null baselines: is a score larger than it would be if the theory's tokens meant nothing?

Two baselines, asked for with the ``null=`` keyword of :func:`~tl_leadterms.decompose`,
:func:`~tl_leadterms.covariance_similarity` and :func:`~tl_leadterms.attention_agreement`:

* **permutation null** — the theory's kept tokens are relabelled by ``R`` random permutations
  (rows and columns together, so the statistic keeps its spectrum, sparsity and value
  distribution but loses its link to the model's tokens), and each score is recomputed. The
  model side is reused: a permutation is a re-indexing of the theory (or, equivalently, of the
  model's token factor), never a new forward pass or a new Gram matrix. Each score gets
  ``null_mean``, ``null_sd`` (``ddof=1``), ``z = (score − null_mean)/null_sd`` and the one-sided
  empirical ``p = (1 + #{null ≥ score}) / (R + 1)`` (never 0: with ``R = 20`` the smallest
  attainable p is 1/21 ≈ 0.048, so ask for ``R ≥ 100`` to reach p < 0.01).
* **reference model** — the same architecture at random initialisation (``reference="random"``:
  :func:`random_reference`), or a model the user gives (e.g. the step-0 checkpoint), scored the
  same way; its score appears in a ``reference`` column.

>>> NullSpec.of(20)
NullSpec(permutations=20, seed=0, reference=None)
>>> s = summarize(0.9, torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64))
>>> round(s["null_mean"], 3), round(s["z"], 1), s["p"]
(0.2, 7.0, 0.25)
"""

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tl_leadterms.checks import check_count
from tl_leadterms.errors import LeadTermsError

__all__ = ["NULL_COLUMNS", "NullSpec", "permutations", "random_reference", "summarize"]

NULL_COLUMNS = ("score", "null_mean", "null_sd", "z", "p")


@dataclass(frozen=True)
class NullSpec:
    """What null to compute: ``permutations`` draws from ``seed``; an optional ``reference``
    model (a model, or ``"random"`` for a random-init copy of the scored model)."""

    permutations: int = 100
    seed: int = 0
    reference: Any = None

    @classmethod
    def of(cls, null: Any) -> "NullSpec | None":
        """``None``, an int ``R`` (permutations) or a :class:`NullSpec`, checked."""
        if null is None:
            return None
        if isinstance(null, NullSpec):
            spec = null
        elif isinstance(null, bool) or not isinstance(null, int):
            raise LeadTermsError(
                f"null must be None, a number of permutations (int >= 2) or a NullSpec, "
                f"got {null!r}"
            )
        else:
            spec = cls(permutations=null)
        check_count("null permutations", spec.permutations, minimum=2)
        check_count("null seed", spec.seed, minimum=0)
        if isinstance(spec.reference, str) and spec.reference != "random":
            raise LeadTermsError(
                f"NullSpec.reference must be None, a model or 'random', got {spec.reference!r}"
            )
        return spec

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


def summarize(score: float, draws: Tensor) -> dict[str, float]:
    """``score``, ``null_mean``, ``null_sd``, ``z``, ``p`` of one score against its draws.

    NaN draws (e.g. a weight with no token labels) give NaN columns.
    """
    draws = draws.double()
    if not math.isfinite(score) or not torch.isfinite(draws).all():
        nan = math.nan
        return {"score": score, "null_mean": nan, "null_sd": nan, "z": nan, "p": nan}
    mean, sd = float(draws.mean()), float(draws.std(correction=1))
    z = (score - mean) / sd if sd > 0 else (math.inf if score > mean else math.nan)
    p = (1 + int((draws >= score).sum())) / (draws.numel() + 1)
    return {"score": score, "null_mean": mean, "null_sd": sd, "z": z, "p": p}


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
