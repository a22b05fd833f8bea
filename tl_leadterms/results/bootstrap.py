"""Bootstrap confidence intervals over corpus blocks, for the scores of the analyzers.

``decompose(model, blocks, ci=0.95)`` (and :func:`~tl_leadterms.covariance_similarity`,
:func:`~tl_leadterms.head_atlas`, :func:`~tl_leadterms.sweep`) take a
:class:`~tl_leadterms.stats.blocks.BlockStats` from :func:`~tl_leadterms.stats.blocks.block_stats`:
the scores are those of the whole corpus (:meth:`BlockStats.full`), and ``ci=`` adds columns
from ``R`` bootstrap resamples of the blocks (``bootstrap=R`` or a :class:`BootstrapSpec`,
default ``R = 50``, seeded, each resample's pass two exact):

* ``lo``, ``hi``: the interval, inside ``[−1, 1]``, of non-zero width whenever the resamples vary;
* ``corrected``: the bias-corrected estimate of the distribution-level score, always between
  ``lo`` and ``hi`` (tables print the interval beside it, not beside the raw score);
* ``noise_share`` (``decompose`` and ``head_atlas``;
  :func:`~tl_leadterms.results.intervals.noise_share`): tables mark the interval from
  :data:`~tl_leadterms.results.marks.WIDE_NOISE_SHARE` on.

Statistics of the model's training windows get no interval (``metadata["ci"]`` says why;
docs/guides/intervals.md#which-question-a-score-answers). The methods and their coverage:
:mod:`tl_leadterms.results.intervals`. The model side is computed once; each resample rebuilds
only the theory side (:meth:`Bootstrap.resamples`)."""

import math
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tl_leadterms.checks import check_bool, check_choice, check_count, check_spec
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.intervals import DEFAULT_METHOD, METHODS, interval, noise_share
from tl_leadterms.results.marks import WIDE_MARK, is_wide
from tl_leadterms.stats.blocks import BlockStats
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.threads import one_thread

#: the columns ``ci=`` adds to a row of every analysis (``decompose`` adds ``noise_share`` too)
CI_COLUMNS = ("lo", "hi", "corrected", "ci_level")
#: what ``corrected`` (the point an interval is built around) estimates
ESTIMATE = "the distribution-level score (bias-corrected estimate; column corrected)"

__all__ = [
    "CI_COLUMNS",
    "Bootstrap",
    "BootstrapSpec",
    "add_interval",
    "add_noise_share",
    "ci_cell",
    "ci_header",
    "ci_note",
]


@dataclass(frozen=True)
class BootstrapSpec:
    """``resamples`` bootstrap resamples of the blocks, drawn from ``seed``; ``method`` one of
    :data:`METHODS` (default ``"inverted"``, see the module docstring); ``exact`` (default True):
    each resample's pass two with its own Ḡ, ``False`` for the first-order shortcut; ``expand``
    (default True): each side of the interval widened by ``t_ν/z`` for ``B`` blocks and ``R``
    resamples (:func:`~tl_leadterms.results.intervals.expansion`; not for ``"bca"``);
    ``calibration`` (``"calibrated"`` only): ``(F, S)``, the bootstrap's own bootstrap of ``S``
    resamples of each of the first ``F`` resamples (``F ≤ resamples``)."""

    resamples: int = 50
    seed: int = 0
    method: str = DEFAULT_METHOD
    exact: bool = True
    expand: bool = True
    calibration: tuple[int, int] = (6, 12)

    def __post_init__(self) -> None:
        check_count("bootstrap resamples", self.resamples, minimum=2)
        check_count("bootstrap seed", self.seed, minimum=0)
        check_choice("bootstrap method", self.method, METHODS)
        check_bool("bootstrap exact", self.exact)
        check_bool("bootstrap expand", self.expand)
        first, _ = _pair("bootstrap calibration", self.calibration)
        if self.method == "calibrated" and first > self.resamples:
            raise LeadTermsError(
                f"bootstrap calibration {self.calibration!r} resamples the first {first} of "
                f"{self.resamples} resamples; give at most {self.resamples}, or more resamples."
            )

    @classmethod
    def of(cls, bootstrap: Any) -> "BootstrapSpec":
        """An int ``R`` (resamples) or a :class:`BootstrapSpec`, checked."""
        return check_spec("bootstrap", bootstrap, cls, "resamples")


def _pair(name: str, value: Any) -> tuple[int, int]:
    if not (isinstance(value, tuple) and len(value) == 2):
        raise LeadTermsError(f"{name} must be a pair (F, S) of counts >= 2, got {value!r}")
    return check_count(name, value[0], minimum=2), check_count(name, value[1], minimum=2)


# per BlockStats, per (BootstrapSpec, exact): what analyses computed from its resamples
_MEMOS: "weakref.WeakKeyDictionary[BlockStats, dict]" = weakref.WeakKeyDictionary()
# per BlockStats, per (seed, R, leave-one-out, exact): the pass-two tables of its resamples
_RESAMPLES: "weakref.WeakKeyDictionary[BlockStats, dict]" = weakref.WeakKeyDictionary()
#: the most bytes of resampled pass-two tables (Q̄ and Δ) kept per set of draws (``k²·8`` bytes a
#: resample in float64: all 50 of a k = 1,000 vocabulary fit in 0.4 GB, k = 4,000 do not)
RESAMPLE_CACHE_BYTES = 1 << 30


@dataclass(frozen=True)
class Bootstrap:
    """What an analyzer needs to add the interval: the blocks, the level and the draws."""

    blocks: BlockStats
    level: float
    spec: BootstrapSpec

    @property
    def exact(self) -> bool:
        """Whether the resamples' pass two is exact (asked for and the blocks have windows)."""
        return self.spec.exact and self.blocks.exact

    @property
    def _extras(self) -> tuple:
        """What the method resamples beyond the ``R`` draws: the leave-one-block-out
        weightings (``"bca"``, ``"calibrated"``) and the second level (``"calibrated"``)."""
        if self.spec.method == "bca":
            return ("leave-one-out",)
        if self.spec.method == "calibrated":
            return ("leave-one-out", self.spec.calibration)
        return ()

    def weights(self) -> list[Tensor]:
        """The block multiplicities ``[B]`` of every resample, in order: the ``R`` seeded draws
        (:meth:`~tl_leadterms.stats.blocks.BlockStats.draw`), then for ``"bca"`` and
        ``"calibrated"`` the ``B`` leave-one-block-out weightings, then for ``"calibrated"``
        the second level: for each of the first ``F`` draws, ``S`` draws of one block fewer
        from the blocks it drew (with their multiplicities), as the first level draws
        ``B − 1`` of ``B``."""
        generator = torch.Generator().manual_seed(self.spec.seed)
        out = [self.blocks.draw(generator) for _ in range(self.spec.resamples)]
        n = self.blocks.n_blocks
        if self._extras:
            for b in range(n):
                weights = torch.ones(n, dtype=torch.long)
                weights[b] = 0
                out.append(weights)
        if self.spec.method == "calibrated":
            first, second = self.spec.calibration
            for w in out[:first]:
                drawn = torch.repeat_interleave(torch.arange(n), w)
                size = max(1, len(drawn) - 1)
                for _ in range(second):
                    picks = drawn[torch.randint(len(drawn), (size,), generator=generator)]
                    out.append(torch.bincount(picks, minlength=n))
        return out

    def resamples(self) -> Iterator[CorpusStats]:
        """The statistics of every resample of :meth:`weights`, one at a time (:meth:`split`
        tells the ``R`` draws and the leave-one-out ones apart), computed on one thread
        (:func:`~tl_leadterms.threads.one_thread`; torch's thread count is restored
        when the iterator is exhausted or closed).

        Pass two (Q̄ and Δ, rerun over the drawn windows with the resample's own Ḡ) is computed at
        most twice per ``BlockStats`` and set of draws (the same seed, ``R``, leave-one-out and pass
        two, whatever the method): the second analysis that asks keeps it with the blocks (while the
        set fits in :data:`RESAMPLE_CACHE_BYTES`), and every later one rebuilds only pass one's sums
        around it, to the same numbers. Why not from the first analysis, and why pass one is never
        kept: docs/guides/performance.md#the-null-and-the-bootstrap."""
        key = (self.spec.seed, self.spec.resamples, self._extras, self.exact)
        kept = _RESAMPLES.setdefault(self.blocks, {})
        weights = self.weights()
        with one_thread():
            if kept.get(key) is not None:
                for w, pass_two in zip(weights, kept[key], strict=True):
                    yield self.blocks.weighted(w, exact=self.exact, pass_two=pass_two)
                return
            keep = key in kept  # asked for before: this time the pass two is kept
            made: list[tuple[Tensor, Tensor]] | None = [] if keep else None
            size = 0
            for w in weights:
                stats = self.blocks.weighted(w, exact=self.exact)
                if made is not None:
                    size += stats.Q_bar.nbytes + stats.Delta.nbytes
                    if size <= RESAMPLE_CACHE_BYTES:
                        made.append((stats.Q_bar, stats.Delta))
                    else:  # too big to keep: each analysis resamples on its own
                        made = None
                yield stats
            # every draw was made (not cut short): the first time, remember that it was asked
            kept[key] = made

    def memo(self) -> dict:
        """A dict kept with the blocks for this spec's resamples (the same draws for every
        analysis that asks for the same :class:`BootstrapSpec`): analyses store what they
        computed from :meth:`resamples` under their own keys and read it back instead of
        resampling again. It lives as long as the ``BlockStats``."""
        per_blocks = _MEMOS.setdefault(self.blocks, {})
        return per_blocks.setdefault((self.spec, self.exact), {})

    def split(self, draws: Tensor) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``(resample scores [R, n], leave-one-out scores [B, n] or None, second-level
        scores [F, S, n] or None)`` of ``draws`` (in the order of :meth:`weights`)."""
        R, B = self.spec.resamples, self.blocks.n_blocks
        jackknife = draws[R : R + B] if self._extras else None
        second = None
        if self.spec.method == "calibrated":
            first, size = self.spec.calibration
            second = draws[R + B :].reshape(first, size, *draws.shape[1:])
        return draws[:R], jackknife, second

    def metadata(self) -> dict[str, Any]:
        pass_two = ("exact: each resample's own G_bar" if self.exact
                    else "block sums with the full-corpus G_bar (first order)")  # fmt: skip
        out = {"level": self.level, "resamples": self.spec.resamples, "seed": self.spec.seed,
               "blocks": self.blocks.n_blocks, "method": self.spec.method,
               "expanded": self.expanded_by, "pass_two": pass_two,
               "block_cuts": self.blocks.metadata.get("block_cuts", "windows")}  # fmt: skip
        if self.spec.method == "calibrated":
            out["calibration"] = list(self.spec.calibration)
        return out

    @property
    def expanded_by(self) -> int | None:
        """The number of blocks the interval's small-sample expansion is for (None: none)."""
        if not self.spec.expand or self.spec.method == "bca" or self.blocks.n_blocks < 2:
            return None
        return self.blocks.n_blocks


def add_interval(rows: list[dict], draws: Tensor, boot: Bootstrap, key: str,
                 resampled: Any = None) -> None:  # fmt: skip
    """Write ``lo``/``hi``/``corrected``/``ci_level`` into ``rows`` from ``draws`` (the scores
    of :meth:`Bootstrap.resamples`, ``[R (+ B), len(rows)]``) around each ``row[key]``.

    ``resampled``: where each row's score is a cosine with a resampled target, where that
    target lay on each resample (its ``star_sq``, ``cross`` and ``target_sq``, as
    :func:`add_noise_share` reads them): the geometry ``"inverted"`` needs; without it that
    method is ``"shifted"`` (:func:`~tl_leadterms.results.intervals.interval`)."""
    estimate = torch.tensor([float(r[key]) for r in rows], dtype=torch.float64)
    scores, jackknife, second = boot.split(draws)
    geometry = None
    if resampled is not None:
        geometry = (boot.split(resampled.star_sq)[0], boot.split(resampled.cross)[0],
                    resampled.target_sq)  # fmt: skip
    lo, hi, mid = interval(scores, boot.level, boot.spec.method, estimate, jackknife,
                           blocks=boot.expanded_by, second=second, geometry=geometry)  # fmt: skip
    for row, a, b, c in zip(rows, lo.tolist(), hi.tolist(), mid.tolist(), strict=True):
        row.update({"lo": a, "hi": b, "corrected": c, "ci_level": boot.level})


def add_noise_share(rows: list[dict], resampled: Any, boot: Bootstrap, key: str) -> None:
    """Write ``noise_share`` into ``rows``: :func:`~tl_leadterms.results.intervals.noise_share`
    of each ``row[key]`` from ``resampled`` (its ``draws``, ``star_sq`` and ``cross`` over
    every resample of :meth:`Bootstrap.resamples`, ``[R (+ B), len(rows)]``, of which the
    ``R`` draws are used, and ``target_sq``)."""
    estimate = torch.tensor([float(r[key]) for r in rows], dtype=torch.float64)
    parts = (boot.split(x)[0] for x in (resampled.draws, resampled.star_sq, resampled.cross))
    shares = noise_share(*parts, resampled.target_sq, estimate)
    for row, share in zip(rows, shares.tolist(), strict=True):
        row["noise_share"] = share


def ci_header(rows: list[dict]) -> str:
    """The column title of :func:`ci_cell`, e.g. ``distrib. est. [95% CI]``: the interval is
    of the distribution-level score, built around its estimate ``corrected``."""
    level = next((r["ci_level"] for r in rows if "ci_level" in r), None)
    return "distrib. est. " + (f"[{level:.0%} CI]" if level is not None else "[CI]")


def ci_note(metadata: dict) -> str | None:
    """The line a table prints under its title about its interval: why there is none (exact
    scores of the model's training windows), or what the one printed covers; None when no
    interval was asked for."""
    ci = metadata.get("ci")
    if not ci:
        return None
    if ci.get("interval", True) is None:
        return f"({ci['why']})"
    answers = (metadata.get("population") or {}).get("answers")
    return (f"({ci['level']:.0%} bootstrap intervals over {ci['blocks']} blocks"
            + (f": {answers})" if answers else ")"))  # fmt: skip


def _num6(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-".rjust(9)
    return f"{value:9.6f}"


def ci_cell(row: dict) -> str:
    """``corrected [lo, hi]`` of a row with an interval, then
    :data:`~tl_leadterms.results.marks.WIDE_MARK` where the sample is about as noisy as what
    the score measures (:func:`~tl_leadterms.results.marks.is_wide`), else a space (33
    characters)."""
    mark = WIDE_MARK if is_wide(row) else " "
    return f"{_num6(row.get('corrected'))} [{_num6(row.get('lo'))}, {_num6(row.get('hi'))}]{mark}"
