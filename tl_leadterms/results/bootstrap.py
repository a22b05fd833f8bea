"""Bootstrap confidence intervals over corpus blocks, for the scores of the analyzers.

``decompose(model, blocks, ci=0.95)`` (and :func:`~tl_leadterms.covariance_similarity`,
:func:`~tl_leadterms.head_atlas`, :func:`~tl_leadterms.sweep`) take a
:class:`~tl_leadterms.stats.blocks.BlockStats` from :func:`~tl_leadterms.stats.blocks.block_stats`
in place of the statistics: the scores are those of the whole corpus (:meth:`BlockStats.full`),
and ``ci=`` adds three columns from the same score over ``R`` bootstrap resamples of the blocks
(``bootstrap=R`` or a :class:`BootstrapSpec`, default ``R = 50``, seeded, each resample's pass
two exact):

* ``lo``, ``hi``: the interval, inside the score's range ``[−1, 1]``, of non-zero width
  whenever the resamples vary;
* ``corrected``: the estimate of the distribution-level score the interval is built around,
  bias-corrected, always between ``lo`` and ``hi`` (a cosine computed from noisy statistics is
  biased towards 0, often by more than its spread: the raw score can then lie outside a correct
  interval, so tables print the interval beside ``corrected``, not beside the raw score).

What the interval covers: the score of the model against the statistics of the whole
distribution the windows were drawn from, for a model that did not learn these windows. That
holds when the statistics are another sample than the model's training windows (held-out
windows; another corpus of the same text). When they ARE the training windows the scores are
exact for that data and no interval is added: ``metadata["ci"]`` holds ``interval: None`` and the
one-line reason (:mod:`tl_leadterms.results.population` decides which case it is, from the
windows' fingerprints or ``population=``).

Methods (``BootstrapSpec(method=...)``; ``ŝ`` the full-corpus score, ``q`` the quantiles of
the resamples' scores ``s*``):

* ``"shifted"`` (the default): the basic bootstrap on the raw scale, ``[2ŝ − q_hi, 2ŝ − q_lo]``
  with ``corrected = 2ŝ − median(s*)``, translated back into ``[−1, 1]`` with its width kept
  when it passes an end, ``corrected`` then staying at that end. Near a cosine of 1 a
  resample's noise lowers the score by about the amount the sample's noise lowered the truth,
  so the correction is additive on this scale; the boundary is met by moving the interval,
  not by clipping it to nothing;
* ``"calibrated"``: ``"shifted"`` of the scores moved and rescaled, for samples whose own
  noise is large: ``corrected`` is the jackknife's bias-corrected estimate (from the ``B``
  leave-one-block-out scores), and the resamples' spread is scaled by ``sqrt(var₁/var₂)``,
  their variance over the mean variance of a second level of resamples (``S`` resamples of
  each of the first ``F``, one block fewer from the blocks it drew:
  ``BootstrapSpec(calibration=(F, S))``, default (6, 12)), since the sample's noise at the
  centre of the resamples widens their spread beyond the sample's own. ``B + F·S`` more
  evaluations. On held-out samples as small as the training sample it put 7 of 8 cells of
  the population benchmark within 3 points of nominal (``"shifted"``: 5); where the spread
  is nearly right already (the demo's held-out sample, 16 times the training one) it
  over-corrects (4 of 8, ``"shifted"``: 6);
* ``"atanh"``, ``"log1m"``, ``"angle"``: the basic bootstrap on ``atanh(s)``, on ``log(1 − s)``
  and on the angle ``arccos s`` (mapped back; the angle is clipped at 0);
* ``"bca"``: bias-corrected and accelerated percentiles (bias ``z0`` from the share of
  resamples below ``ŝ``, acceleration from the ``B`` leave-one-block-out scores, which cost
  ``B`` more evaluations); ``corrected`` is its median-unbiased point (level 0);
* ``"percentile"``: the resamples' quantiles; ``corrected`` is their median;
* ``"basic"``: the raw basic interval clipped to ``[−1, 1]`` (the former default: near 1 it
  collapses to ``[1, 1]``; kept for comparison).

Why ``"shifted"`` is the default, and how often each method covers the truth, is measured by
the seeded simulation ``benchmarks/bench_coverage.py`` (``benchmarks/results/coverage.json``)
and explained in ``docs/guides/intervals.md``: near 1 it covers a median 97% of the time at a
nominal 90% where the unbounded scales, BCa and the percentiles cover a median 33-68%; away
from 1 every method covers about the same, 77-93% (medians 84-85%; BCa 67-90%), somewhat
short of nominal with 10 blocks. Each resample draws ``B − 1`` of the ``B`` blocks
(:meth:`~tl_leadterms.stats.blocks.BlockStats.draw` says why), and each side of the interval is
then widened about ``corrected`` by ``t_{B−1}/z`` (:func:`expansion`; 1.07 at 90% with 16
blocks), the small-sample expansion of a spread estimated from ``B`` blocks (Hesterberg's
"expanded" bootstrap interval; ``BootstrapSpec(expand=False)`` leaves it out, ``"bca"`` never
has it). With 10-20 blocks it moved the demo-size coverage from 83-92% to 85-92% at a nominal
90% (``docs/guides/intervals.md``).

The model side is computed once; each resample only rebuilds the theory side (its basis maps,
Gram matrices and projections). How a resample's statistics are formed is documented in
:mod:`tl_leadterms.stats.blocks`. The resamples themselves are computed once per
``BlockStats`` and set of draws: from the second analysis on the same blocks and draws (of other
maps) their pass two is kept with the blocks (up to :data:`RESAMPLE_CACHE_BYTES`), and later
analyses rebuild only pass one's sums (:meth:`Bootstrap.resamples`).

>>> draws = torch.linspace(0.0, 0.5, 101, dtype=torch.float64)[:, None]
>>> lo, hi, mid = interval(draws, 0.9, "percentile")
>>> round(float(lo[0]), 3), round(float(mid[0]), 3), round(float(hi[0]), 3)
(0.025, 0.25, 0.475)
>>> estimate = torch.tensor([0.3], dtype=torch.float64)
>>> [round(float(x[0]), 3) for x in interval(draws, 0.9, "shifted", estimate)]
[0.125, 0.575, 0.35]
>>> [round(float(x[0]), 3) for x in interval(draws + 0.5, 0.9, "shifted", estimate + 0.6)]
[0.55, 1.0, 1.0]
"""

import math
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tl_leadterms.checks import check_bool, check_choice, check_count, check_level
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.population import Reading, resolve_population
from tl_leadterms.stats.blocks import BlockStats
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.threads import one_thread

#: the interval methods (see the module docstring); the first is the default
METHODS = ("shifted", "calibrated", "atanh", "log1m", "angle", "bca", "percentile", "basic")
DEFAULT_METHOD = METHODS[0]
#: the columns ``ci=`` adds to a row
CI_COLUMNS = ("lo", "hi", "corrected", "ci_level")
#: what ``corrected`` (the point an interval is built around) estimates
ESTIMATE = "the distribution-level score (bias-corrected estimate; column corrected)"
_EDGE = 1.0 - 1e-15  # |s| is clamped to this before atanh or log(1 − s)

__all__ = [
    "CI_COLUMNS",
    "METHODS",
    "Bootstrap",
    "BootstrapSpec",
    "add_interval",
    "ci_cell",
    "ci_header",
    "ci_note",
    "expansion",
    "interval",
    "interval_metadata",
    "resolve_bootstrap",
]


@dataclass(frozen=True)
class BootstrapSpec:
    """``resamples`` bootstrap resamples of the blocks, drawn from ``seed``; ``method`` one of
    :data:`METHODS` (default ``"shifted"``, see the module docstring); ``exact`` (default True):
    each resample's pass two with its own Ḡ, ``False`` for the first-order shortcut; ``expand``
    (default True): each side of the interval widened by ``t_{B−1}/z`` for ``B`` blocks (the
    small-sample expansion of the module docstring; not for ``"bca"``); ``calibration``
    (``"calibrated"`` only): ``(F, S)``, the bootstrap's own bootstrap of ``S`` resamples of
    each of the first ``F`` resamples (``F ≤ resamples``)."""

    resamples: int = 50
    seed: int = 0
    method: str = DEFAULT_METHOD
    exact: bool = True
    expand: bool = True
    calibration: tuple[int, int] = (6, 12)

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
        check_choice("bootstrap method", spec.method, METHODS)
        check_bool("bootstrap exact", spec.exact)
        check_bool("bootstrap expand", spec.expand)
        first, _ = _pair("bootstrap calibration", spec.calibration)
        if spec.method == "calibrated" and first > spec.resamples:
            raise LeadTermsError(
                f"bootstrap calibration {spec.calibration!r} resamples the first {first} of "
                f"{spec.resamples} resamples; give at most {spec.resamples}, or more resamples."
            )
        return spec


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
        (:func:`~tl_leadterms.threads.one_thread` says why; torch's thread count is restored
        when the iterator is exhausted or closed).

        The expensive part of each, pass two (Q̄ and Δ, rerun over the drawn windows with the
        resample's own Ḡ), is computed at most twice per ``BlockStats`` and set of draws (the
        same seed, ``R``, leave-one-out and pass two, whatever the interval method): the second
        analysis that asks for them keeps it with the blocks (while the whole set fits in
        :data:`RESAMPLE_CACHE_BYTES`), and every later one reads it and rebuilds only pass
        one's sums around it (Φ̄, B̄, B̄Φ̄ and Ḡ: block sums and two sparse products, to the
        same numbers). Not the first: keeping a fresh table costs CPU time in page faults (on
        this project's machine 1.1 ms a resample at k = 500, a fifth of the resample), which
        an analysis run once on its blocks, the usual case, would pay for nothing; and pass
        one's ``[k, k]`` tables are never kept, since keeping them costs about what summing
        them again does (``benchmarks/bench_null_boot.py``)."""
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


def resolve_bootstrap(
    stats: Any, ci: Any, bootstrap: Any, *, model: Any = None, population: Any = None
) -> tuple[Any, "Bootstrap | None", Reading]:
    """``(statistics to score, Bootstrap or None, Reading)`` from ``stats``, ``ci``,
    ``bootstrap`` and which question the scores answer (``model`` and ``population``, see
    :mod:`tl_leadterms.results.population`).

    ``stats`` may be a :class:`BlockStats` (its full-corpus statistics are scored); ``ci`` needs
    one. Statistics that are the model's training windows get no Bootstrap: their scores are
    exact (``interval_metadata`` says why).
    """
    level = check_level("ci", ci)
    spec = BootstrapSpec.of(bootstrap)
    reading = resolve_population(model, stats, population)
    if isinstance(stats, BlockStats):
        full = stats.full()
        if level is None or reading.exact:
            return full, None, reading
        return full, Bootstrap(stats, level, spec), reading
    if level is not None and not reading.exact:
        raise LeadTermsError(
            f"ci={ci} needs statistics kept per block of windows: pass "
            "stats=tl_leadterms.block_stats(tokens, d_vocab, blocks=20) instead of a "
            f"{type(stats).__name__} (corpus_stats keeps no blocks to resample)."
        )
    return stats, None, reading


def interval_metadata(ci: Any, boot: "Bootstrap | None", reading: Reading) -> dict | None:
    """``metadata["ci"]`` of a result: the bootstrap's settings and what its estimate is, or,
    for exact scores asked for an interval, ``{"level", "interval": None, "why"}``; None when
    no interval was asked for."""
    if boot is not None:
        return {**boot.metadata(), "estimate": ESTIMATE, "population": reading.population}
    if ci is None:
        return None
    return {"level": ci, "interval": None, "why": reading.why_no_interval()}


def _to_scale(s: Tensor, method: str) -> Tensor:
    s = s.clamp(-_EDGE, _EDGE)
    if method == "atanh":
        return torch.atanh(s)
    if method == "log1m":
        return torch.log1p(-s)
    if method == "angle":
        return torch.arccos(s)
    return s  # "basic": the raw scale


def _from_scale(z: Tensor, method: str) -> Tensor:
    if method == "atanh":
        return torch.tanh(z)
    if method == "log1m":
        return -torch.expm1(z.clamp(max=math.log(2.0)))
    if method == "angle":
        return torch.cos(z.clamp(0.0, math.pi))
    return z.clamp(-1.0, 1.0)


def _bca(draws: Tensor, level: float, estimate: Tensor, jackknife: Tensor | None):
    """BCa ``(lo, hi, level-0 point)`` per column (acceleration 0 without leave-one-outs)."""
    R = draws.shape[0]
    below = (draws < estimate).sum(0).double() + 0.5 * (draws == estimate).sum(0).double()
    z0 = torch.special.ndtri((below / R).clamp(0.5 / R, 1 - 0.5 / R))
    a = torch.zeros_like(z0)
    if jackknife is not None and jackknife.shape[0] > 1:
        d = jackknife.double().mean(0) - jackknife.double()
        spread = (d**2).sum(0)
        a = torch.where(spread > 0, (d**3).sum(0) / (6 * spread.clamp(min=1e-300) ** 1.5), a)
    ordered = draws.sort(0).values
    tail = torch.tensor((1.0 - level) / 2, dtype=torch.float64)
    out = []
    for zq in (torch.special.ndtri(tail), 0.0, -torch.special.ndtri(tail)):
        shifted = z0 + zq
        alpha = torch.special.ndtr(z0 + shifted / (1 - a * shifted)).clamp(0.0, 1.0)
        pos = alpha.nan_to_num(0.5) * (R - 1)  # each column its own quantile, interpolated
        low = pos.floor().long().clamp(0, R - 1)
        frac = pos - low
        lower = ordered.gather(0, low[None])[0]
        upper = ordered.gather(0, (low + 1).clamp(max=R - 1)[None])[0]
        out.append(lower + frac * (upper - lower))
    return out[0], out[2], out[1]


def expansion(level: float, blocks: int) -> float:
    """``t_{B−1}(1 − α/2) / z(1 − α/2)``: how much wider a ``level`` interval is when the spread
    it is built from is estimated from ``B`` blocks (Student's ``t`` with ``B − 1`` degrees of
    freedom against the normal): 1.11 at 90% and 1.15 at 95% for 10 blocks, 1.05 and 1.07 for
    20, 1.02 and 1.03 for 50.

    >>> round(expansion(0.9, 10), 3), round(expansion(0.95, 20), 3)
    (1.114, 1.068)
    """
    from scipy import special  # a light import (scipy.stats is not)

    if blocks < 2:
        raise LeadTermsError(f"the expansion needs at least 2 blocks, got blocks={blocks}")
    upper = 1.0 - (1.0 - level) / 2
    return float(special.stdtrit(blocks - 1, upper) / special.ndtri(upper))


def _widen(lo: Tensor, mid: Tensor, hi: Tensor, factor: float) -> tuple[Tensor, Tensor]:
    """Each side's distance from ``mid`` scaled by ``factor`` (the interval's asymmetry kept)."""
    if factor == 1.0:
        return lo, hi
    return mid - (mid - lo) * factor, mid + (hi - mid) * factor


def _shifted(draws: Tensor, q: Tensor, estimate: Tensor,
             factor: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """The raw-scale basic interval (widened by ``factor``) translated back into ``[−1, 1]``,
    its width kept."""
    bounds = torch.quantile(draws, q, dim=0)
    lo, mid, hi = 2 * estimate - bounds[2], 2 * estimate - bounds[1], 2 * estimate - bounds[0]
    lo, hi = _widen(lo, mid, hi, factor)
    shift = (hi - 1.0).clamp(min=0.0) - (-1.0 - lo).clamp(min=0.0)  # only one end can be out
    lo, hi = (lo - shift).clamp(min=-1.0), (hi - shift).clamp(max=1.0)
    return lo, hi, torch.minimum(torch.maximum(mid, lo), hi)  # the estimate stays at the edge


def _calibrated(draws: Tensor, estimate: Tensor, jackknife: Tensor | None,
                second: Tensor | None) -> Tensor:  # fmt: skip
    """The draws of ``"calibrated"``: their spread about their mean scaled by
    ``sqrt(var₁/var₂)`` (``var₁`` the draws' variance, ``var₂`` the mean variance of the
    second level's resamples about each first-level draw; the ratio kept within [1/4, 4]),
    then moved so that their median is ``estimate + bias``, ``bias = (B − 1)(mean of the
    leave-one-block-out scores − estimate)`` (the jackknife's), which puts the shifted
    interval's ``corrected`` at ``estimate − bias``."""
    if jackknife is None or second is None:
        raise LeadTermsError(
            "interval method 'calibrated' needs the leave-one-block-out scores (jackknife=) "
            "and the second level's scores (second=, [F, S, n]) of Bootstrap.split"
        )
    blocks = jackknife.shape[0]
    bias = (blocks - 1) * (jackknife.double().mean(0) - estimate)
    var1, var2 = draws.var(0), second.double().var(1).mean(0)
    ratio = torch.where(var1 > 0, var2 / var1.clamp(min=1e-300), torch.ones_like(var1))
    mean = draws.mean(0)
    out = mean + ratio.clamp(0.25, 4.0).rsqrt() * (draws - mean)
    return out - (torch.quantile(out, 0.5, dim=0) - estimate - bias)


def interval(
    draws: Tensor,
    level: float,
    method: str = DEFAULT_METHOD,
    estimate: Tensor | None = None,
    jackknife: Tensor | None = None,
    *,
    blocks: int | None = None,
    second: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(lo, hi, corrected)`` per column of the resample scores ``draws`` ``[R, n]`` (NaN where
    a draw or the estimate is NaN); ``estimate`` ``[n]`` is the full-corpus score (all methods
    but ``"percentile"``), ``jackknife`` ``[B, n]`` the leave-one-block-out scores (``"bca"``,
    ``"calibrated"``), ``second`` ``[F, S, n]`` the second level's scores (``"calibrated"``).

    ``blocks``: the number of blocks the resamples drew from; each side of the interval is then
    widened about ``corrected`` by :func:`expansion` (on the method's scale, before the interval
    is mapped back or translated into ``[−1, 1]``; ``"bca"`` is left as it is). ``None``: no
    expansion.
    """
    draws = draws.double()
    nan = torch.isnan(draws).any(0)
    if method != "percentile":
        if estimate is None:
            raise LeadTermsError(f"interval method {method!r} needs the estimate")
        estimate = estimate.double()
        nan |= torch.isnan(estimate)
    factor = 1.0 if blocks is None or method == "bca" else expansion(level, blocks)
    tail = (1.0 - level) / 2
    q = torch.tensor([tail, 0.5, 1.0 - tail], dtype=torch.float64)
    if method == "percentile":
        lo, mid, hi = torch.quantile(draws, q, dim=0)
        lo, hi = _widen(lo, mid, hi, factor)
    elif method == "bca":
        lo, hi, mid = _bca(draws, level, estimate, jackknife)
    elif method == "shifted":
        lo, hi, mid = _shifted(draws, q, estimate, factor)
    elif method == "calibrated":
        moved = _calibrated(draws, estimate, jackknife, second)
        nan |= torch.isnan(moved).any(0)
        lo, hi, mid = _shifted(moved, q, estimate, factor)
    else:
        z_hat = _to_scale(estimate, method)
        bounds = 2 * z_hat - torch.quantile(_to_scale(draws, method), q, dim=0)
        bounds[0], bounds[2] = _widen(bounds[0], bounds[1], bounds[2], factor)
        ends = _from_scale(bounds, method)  # decreasing in s for log1m and angle
        lo, hi = torch.minimum(ends[0], ends[2]), torch.maximum(ends[0], ends[2])
        mid = ends[1]
    fill = torch.full_like(lo, math.nan)
    return tuple(torch.where(nan, fill, x.clamp(-1.0, 1.0)) for x in (lo, hi, mid))


def add_interval(rows: list[dict], draws: Tensor, boot: Bootstrap, key: str) -> None:
    """Write ``lo``/``hi``/``corrected``/``ci_level`` into ``rows`` from ``draws`` (the scores
    of :meth:`Bootstrap.resamples`, ``[R (+ B), len(rows)]``) around each ``row[key]``."""
    estimate = torch.tensor([float(r[key]) for r in rows], dtype=torch.float64)
    resampled, jackknife, second = boot.split(draws)
    lo, hi, mid = interval(resampled, boot.level, boot.spec.method, estimate, jackknife,
                           blocks=boot.expanded_by, second=second)  # fmt: skip
    for row, a, b, c in zip(rows, lo.tolist(), hi.tolist(), mid.tolist(), strict=True):
        row.update({"lo": a, "hi": b, "corrected": c, "ci_level": boot.level})


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
    """``corrected [lo, hi]`` of a row with an interval (32 characters)."""
    return f"{_num6(row.get('corrected'))} [{_num6(row.get('lo'))}, {_num6(row.get('hi'))}]"
