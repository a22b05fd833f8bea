"""Bootstrap confidence intervals over corpus blocks, for the scores of the analyzers.

``decompose(model, blocks, ci=0.95)`` (and :func:`~tl_leadterms.covariance_similarity`,
:func:`~tl_leadterms.head_atlas`) take a :class:`~tl_leadterms.stats.blocks.BlockStats` from
:func:`~tl_leadterms.stats.blocks.block_stats` in place of the statistics: the scores are those
of the whole corpus (:meth:`BlockStats.full`), and ``ci=`` adds ``lo``/``hi``: the percentile
interval of the same score over ``R`` bootstrap resamples of the blocks (``bootstrap=R`` or a
:class:`BootstrapSpec`, default ``R = 50``, seeded). The model side is computed once; each
resample only rebuilds the theory side (its basis maps, Gram matrices and projections). How a
resample's statistics are formed, and the approximation of pass two, is documented in
:mod:`tl_leadterms.stats.blocks`.

>>> lo, hi = interval(torch.arange(101, dtype=torch.float64)[:, None], 0.9)
>>> float(lo[0]), float(hi[0])
(5.0, 95.0)
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tl_leadterms.checks import check_count, check_level
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.blocks import BlockStats
from tl_leadterms.stats.corpus import CorpusStats

__all__ = ["Bootstrap", "BootstrapSpec", "add_interval", "interval", "resolve_bootstrap"]


@dataclass(frozen=True)
class BootstrapSpec:
    """``resamples`` bootstrap resamples of the blocks, drawn from ``seed``."""

    resamples: int = 50
    seed: int = 0

    @classmethod
    def of(cls, bootstrap: Any) -> "BootstrapSpec":
        if isinstance(bootstrap, BootstrapSpec):
            spec = bootstrap
        elif isinstance(bootstrap, bool) or not isinstance(bootstrap, int):
            raise LeadTermsError(
                f"bootstrap must be a number of resamples (int >= 2) or a BootstrapSpec, got "
                f"{bootstrap!r}"
            )
        else:
            spec = cls(resamples=bootstrap)
        check_count("bootstrap resamples", spec.resamples, minimum=2)
        check_count("bootstrap seed", spec.seed, minimum=0)
        return spec


@dataclass(frozen=True)
class Bootstrap:
    """What an analyzer needs to add ``lo``/``hi``: the blocks, the level and the draws."""

    blocks: BlockStats
    level: float
    spec: BootstrapSpec

    def resamples(self) -> Iterator[CorpusStats]:
        """The ``R`` resampled statistics, one at a time (seeded)."""
        generator = torch.Generator().manual_seed(self.spec.seed)
        for _ in range(self.spec.resamples):
            yield self.blocks.resample(generator)

    def metadata(self) -> dict[str, Any]:
        return {"level": self.level, "resamples": self.spec.resamples, "seed": self.spec.seed,
                "blocks": self.blocks.n_blocks, "method": "percentile",
                "pass_two": "block sums with the full-corpus G_bar (first order)"}  # fmt: skip


def resolve_bootstrap(stats: Any, ci: Any, bootstrap: Any) -> tuple[Any, Bootstrap | None]:
    """``(statistics to score, Bootstrap or None)`` from ``stats``, ``ci`` and ``bootstrap``.

    ``stats`` may be a :class:`BlockStats` (its full-corpus statistics are scored); ``ci`` needs
    one.
    """
    level = check_level("ci", ci)
    spec = BootstrapSpec.of(bootstrap)
    if isinstance(stats, BlockStats):
        full = stats.full()
        return full, None if level is None else Bootstrap(stats, level, spec)
    if level is not None:
        raise LeadTermsError(
            f"ci={ci} needs statistics kept per block of windows: pass "
            "stats=tl_leadterms.block_stats(tokens, d_vocab, blocks=20) instead of a "
            f"{type(stats).__name__} (corpus_stats keeps no blocks to resample)."
        )
    return stats, None


def interval(draws: Tensor, level: float) -> tuple[Tensor, Tensor]:
    """Percentile interval per column of ``draws`` ``[R, n]``; NaN where a draw is NaN."""
    draws = draws.double()
    tail = (1.0 - level) / 2
    q = torch.tensor([tail, 1.0 - tail], dtype=torch.float64)
    bounds = torch.quantile(draws, q, dim=0)  # NaN propagates
    return bounds[0], bounds[1]


def add_interval(rows: list[dict], draws: Tensor, boot: Bootstrap) -> None:
    """Write ``lo``/``hi``/``ci_level`` into ``rows`` from ``draws`` ``[R, len(rows)]``."""
    lo, hi = interval(draws, boot.level)
    for row, a, b in zip(rows, lo.tolist(), hi.tolist(), strict=True):
        row.update({"lo": a, "hi": b, "ci_level": boot.level})
