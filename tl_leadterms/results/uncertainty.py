"""How sure a number is: one option object, :class:`Uncertainty`, for every analysis.

Three questions about any score (docs/guides/intervals.md): ``null``, would it be this large if
the theory's tokens meant nothing (:class:`NullSpec`: ``null_mean``, ``excess``, ``z``, ``p``,
``q``); ``ci`` and ``bootstrap``, how far would it move under another sample of the corpus
(:class:`BootstrapSpec`, over the blocks of a ``BlockStats``: ``lo``, ``hi``, ``corrected``);
``population``, is it exact for the model's training windows or an estimate of the
distribution-level score. Every analysis, :func:`~tl_leadterms.sweep`, the training monitor, the
explorer and the command line take it as ``uncertainty=``; ``null=99`` and ``ci=0.95`` are
shorthands for its fields on every one of them (the same field given twice, differently, is
refused).

>>> u = Uncertainty(null=99, ci=0.9, seed=3)
>>> u.null, u.bootstrap.seed
(NullSpec(permutations=99, seed=3, reference=None, negligible=0.01), 3)
>>> Uncertainty.of(u, ci=0.9) == u, Uncertainty.of(None, null=20).null.permutations
(True, 20)

``population=None`` (the default) compares the statistics' ``windows_fingerprint`` with the
model's :func:`trained_on` record (docs/guides/intervals.md#which-question-a-score-answers).

>>> import torch
>>> from tl_leadterms.stats.provenance import windows_fingerprint
>>> model = torch.nn.Linear(2, 2)
>>> windows = torch.tensor([[0, 1, 2], [2, 1, 0]])
>>> record_training(model, windows)[:14]
'windows:v1:2x3'
>>> trained_on(model) == [windows_fingerprint(windows)]
True
>>> class Stats:  # anything with the metadata of corpus_stats or block_stats
...     metadata = {"windows_fingerprint": windows_fingerprint(windows.flip(0))}
>>> reading = resolve_population(model, Stats(), None)
>>> reading.population, reading.source
('training', 'fingerprint')
>>> reading.why_no_interval()[:41]
'no corpus-sampling interval: the statisti'
"""

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import torch

from tl_leadterms.checks import check_count, check_level
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.bootstrap import ESTIMATE, Bootstrap, BootstrapSpec
from tl_leadterms.results.null import NullSpec
from tl_leadterms.stats.blocks import BlockStats
from tl_leadterms.stats.provenance import windows_fingerprint
from tl_leadterms.theory import run_shorthands, with_shorthands

__all__ = [
    "POPULATIONS",
    "Population",
    "Reading",
    "Resolved",
    "Uncertainty",
    "interval_metadata",
    "record_training",
    "resolve_population",
    "shorthands",
    "trained_on",
]

#: the plain keywords of an :class:`Uncertainty` field that ``uncertainty=`` replaces
SURE_KEYWORDS = ("bootstrap", "population", "seed")
F = TypeVar("F", bound=Callable[..., Any])


# -- which question a score answers ------------------------------------------------------
#: the values of ``population=`` (besides None: decide from the provenance)
POPULATIONS = ("training", "distribution")
Population = Literal["training", "distribution"] | None
#: where the model keeps the fingerprints of its training windows
_ATTRIBUTE = "tl_leadterms_trained_on"


def record_training(model: Any, windows: Any) -> str:
    """Record on ``model`` that it was trained on ``windows`` ``[n, T + 1]`` (what
    :func:`~tl_leadterms.train` does; call it from a plain training loop) and return their
    fingerprint. Several calls accumulate: a model trained on A and then on B was trained on
    both."""
    fingerprint = windows_fingerprint(torch.as_tensor(windows))
    record = list(getattr(model, _ATTRIBUTE, None) or [])
    if fingerprint not in record:
        record.append(fingerprint)
    object.__setattr__(model, _ATTRIBUTE, record)  # a plain attribute, also on an nn.Module
    return fingerprint


def trained_on(model: Any) -> list[str] | None:
    """The fingerprints of the windows ``model`` was trained on, or None when unknown."""
    record = getattr(model, _ATTRIBUTE, None)
    return list(record) if record else None


@dataclass(frozen=True)
class Reading:
    """What the scores of one call answer.

    Attributes:
        population: ``"training"`` (exact scores for the model's training windows) or
            ``"distribution"`` (estimates of the distribution-level score).
        source: ``"stated"`` (``population=``), ``"fingerprint"`` or ``"assumed"`` (no record).
    """

    population: str
    source: str

    @property
    def exact(self) -> bool:
        """Whether the scores are exact (statistics = the training windows): no interval."""
        return self.population == "training"

    def answers(self) -> str:
        """The question the scores answer, in one sentence."""
        if self.exact:
            return "exact scores against the model's own training windows"
        how = {"stated": "as stated", "fingerprint": "not the model's training windows",
               "assumed": "assumed: no record of the model's training windows; "
                          "population='training' if they are"}[self.source]  # fmt: skip
        return f"estimates of the distribution-level score from a sample of the corpus ({how})"

    def why_no_interval(self) -> str:
        """The one line a table prints in place of the interval of exact scores."""
        return (
            "no corpus-sampling interval: the statistics are the model's training windows, "
            "so each score is exact for that data (held-out statistics give an interval)"
        )

    def null_tests(self) -> str:
        """What the permutation null tests, for these statistics."""
        data = ("the model's training windows" if self.exact
                else "this sample of the corpus")  # fmt: skip
        return (f"whether the weight aligns with the leading term of {data} more than with the "
                "same term with its tokens relabelled: that the training put this data's "
                "token structure into the weight, beyond chance")  # fmt: skip

    def metadata(self) -> dict[str, str]:
        return {"population": self.population, "source": self.source,
                "answers": self.answers()}  # fmt: skip


def resolve_population(model: Any, stats: Any, population: Any) -> Reading:
    """The :class:`Reading` of scores of ``model`` against ``stats`` (see the module).

    Raises:
        LeadTermsError: ``population`` is not None, ``"training"`` or ``"distribution"``, or it is
            ``"distribution"`` for statistics of the model's training windows."""
    if population is not None and population not in POPULATIONS:
        raise LeadTermsError(
            f"population must be None (decide from the provenance), 'training' (the statistics "
            f"are the model's training windows) or 'distribution' (they are another sample of "
            f"the corpus), got {population!r}"
        )
    metadata = getattr(stats, "metadata", None) or {}
    fingerprint = metadata.get("windows_fingerprint")
    record = trained_on(model)
    same = fingerprint is not None and record is not None and fingerprint in record
    if population == "distribution" and same:
        raise LeadTermsError(
            "population='distribution', but these statistics were computed from the windows the "
            f"model was trained on ({fingerprint}): their scores are exact for those windows and "
            "a bootstrap of them does not cover the distribution-level score (the model learned "
            "their noise). Compute the statistics of held-out windows of the same corpus, or "
            "drop population= to read the scores as exact."
        )
    if population is not None:
        return Reading(population, "stated")
    if same:
        return Reading("training", "fingerprint")
    if record is not None and fingerprint is not None:
        return Reading("distribution", "fingerprint")
    return Reading("distribution", "assumed")


# -- how sure: the option object ----------------------------------------------------------
@dataclass(frozen=True)
class Uncertainty:
    """How sure the numbers of one call should be made (see the module docstring).

    Args:
        null: permutations of the null (an int ``R``, or a :class:`NullSpec` with its seed and
            an optional reference model); None: no null.
        ci: a confidence level in (0, 1) for bootstrap intervals (needs a ``BlockStats``);
            None: no interval.
        bootstrap: resamples (an int ``R``, default 50) or a :class:`BootstrapSpec` (seed,
            method, exactness).
        population: ``"training"``, ``"distribution"`` or None (decided from the windows'
            fingerprints).
        seed: the seed of a ``null`` and a ``bootstrap`` given as counts (default: their own,
            0); a spec given with its own seed and ``seed=`` too is refused.
    """

    null: NullSpec | int | None = None
    ci: float | None = None
    bootstrap: BootstrapSpec | int = field(default_factory=BootstrapSpec)
    population: str | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        seed = None if self.seed is None else check_count("seed", self.seed, minimum=0)
        null = NullSpec.of(_seeded(self.null, NullSpec, seed, "null"))
        boot = BootstrapSpec.of(_seeded(self.bootstrap, BootstrapSpec, seed, "bootstrap"))
        if self.population is not None and self.population not in POPULATIONS:
            resolve_population(None, None, self.population)  # its refusal names the choices
        for name, value in (("seed", seed), ("null", null), ("bootstrap", boot),
                            ("ci", check_level("ci", self.ci))):  # fmt: skip
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, uncertainty: Any = None, **shorthands: Any) -> "Uncertainty":
        """``uncertainty`` (None or an :class:`Uncertainty`) with the ``shorthands`` given
        as plain keywords (``null=``, ``ci=``, ``bootstrap=``, ``population=``; None: not
        given) filled in; a field given both ways, differently, is refused."""
        if uncertainty is None:
            uncertainty = cls()
        elif not isinstance(uncertainty, Uncertainty):
            raise LeadTermsError(
                f"uncertainty must be None or an Uncertainty, got {uncertainty!r}; e.g. "
                "uncertainty=Uncertainty(null=99, ci=0.95) (or the shorthands null=99, ci=0.95)"
            )
        given = {k: v for k, v in shorthands.items() if v is not None}
        unknown = set(given) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise LeadTermsError(f"Uncertainty has no field(s) {sorted(unknown)}")
        merged = dataclasses.replace(uncertainty, **given)
        for name in given:
            before, after = getattr(uncertainty, name), getattr(merged, name)
            if before not in (None, getattr(cls(), name)) and before != after:
                raise LeadTermsError(
                    f"{name} is given twice: {name}={given[name]!r} and uncertainty.{name}="
                    f"{before!r}; give it once"
                )
        return merged

    def resolve(self, stats: Any, model: Any = None) -> "Resolved":
        """What one call of an analysis computes: the statistics to score (a ``BlockStats``'s
        whole-corpus ones), the null, the bootstrap (None for exact scores) and the reading."""
        reading = resolve_population(model, stats, self.population)
        if isinstance(stats, BlockStats):
            boot = None
            if self.ci is not None and not reading.exact:
                boot = Bootstrap(stats, self.ci, self.bootstrap)
            return Resolved(self, stats.full(), boot, reading)
        if self.ci is not None and not reading.exact:
            raise LeadTermsError(
                f"ci={self.ci} needs statistics kept per block of windows: pass "
                "stats=tl_leadterms.block_stats(tokens, d_vocab, blocks=20) instead of a "
                f"{type(stats).__name__} (corpus_stats keeps no blocks to resample)."
            )
        return Resolved(self, stats, None, reading)

    def settings(self) -> dict[str, Any]:
        """The fields a results file records (:func:`~tl_leadterms.sweep`'s resume check)."""
        out: dict[str, Any] = {}
        if self.null is not None:
            out["null"] = self.null
        if self.ci is not None:
            out.update(ci=self.ci, bootstrap=self.bootstrap)
        if self.population is not None:
            out["population"] = self.population
        return out


@dataclass(frozen=True)
class Resolved:
    """An :class:`Uncertainty` applied to one call: what to score and how.

    Attributes:
        spec: the :class:`Uncertainty`.
        stats: the statistics to score (a ``BlockStats``'s whole-corpus ones).
        boot: the :class:`~tl_leadterms.results.bootstrap.Bootstrap` of an interval, or None
            (none asked for, or exact scores).
        reading: which question the scores answer.
    """

    spec: Uncertainty
    stats: Any
    boot: Bootstrap | None
    reading: Reading

    @property
    def null(self) -> NullSpec | None:
        return self.spec.null

    def metadata(self, *, cosines: bool = False, tests: bool = True) -> dict[str, Any]:
        """``population``, and ``null`` and ``ci`` where asked for, as a result records them
        (``tests``: the null's record says what it tests; ``cosines``: see
        interval_metadata)."""
        out: dict[str, Any] = {"population": self.reading.metadata()}
        spec = self.spec.null
        if spec is not None:
            out["null"] = {"permutations": spec.permutations, "seed": spec.seed,
                           "negligible": spec.negligible}  # fmt: skip
            if tests:
                out["null"]["tests"] = self.reading.null_tests()
        if self.spec.ci is not None:
            out["ci"] = interval_metadata(self.spec.ci, self.boot, self.reading, cosines=cosines)
        return out


def _seeded(value: Any, spec_type: type, seed: int | None, name: str) -> Any:
    """A count given with ``seed`` as a spec of that seed; a spec with ``seed`` is refused."""
    if seed is None or value is None or isinstance(value, bool):
        return value
    if value == spec_type():  # the default spec: seeded like a count
        return dataclasses.replace(value, seed=seed)
    if isinstance(value, spec_type):
        if value.seed != seed:
            raise LeadTermsError(
                f"{name} is a {spec_type.__name__} with its own seed and seed={seed} was given "
                "too; pass one of them"
            )
        return value
    if isinstance(value, int):
        field_name = "permutations" if spec_type is NullSpec else "resamples"
        return spec_type(**{field_name: value, "seed": seed})
    return value  # left to the spec's own check


def shorthands(fn: F) -> F:
    """Let ``fn`` (which takes ``uncertainty=`` and maybe ``schedule=``) also take the plain
    keywords of earlier releases, listed in its ``shorthands`` (:meth:`Uncertainty.of`,
    :func:`~tl_leadterms.theory.run_shorthands`;
    docs/guides/conventions.md#one-run-one-uncertainty); its signature is ``fn``'s."""
    run = run_shorthands(fn)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        sure = {k: kwargs.pop(k) for k in SURE_KEYWORDS if k in kwargs}
        if sure:
            kwargs["uncertainty"] = Uncertainty.of(kwargs.get("uncertainty"), **sure)
        return run(*args, **kwargs)

    return with_shorthands(call, run, SURE_KEYWORDS)


def interval_metadata(ci: Any, boot: "Bootstrap | None", reading: Reading,
                      cosines: bool = False) -> dict | None:  # fmt: skip
    """``metadata["ci"]`` of a result: the bootstrap's settings and what its estimate is, or,
    for exact scores asked for an interval, ``{"level", "interval": None, "why"}``; None when
    no interval was asked for. ``cosines``: the scores are cosines with resampled targets
    (:func:`add_interval` had their geometry); else ``"inverted"`` is reported as the
    ``"shifted"`` it falls back to."""
    if boot is not None:
        out = {**boot.metadata(), "estimate": ESTIMATE, "population": reading.population}
        if out["method"] == "inverted" and not cosines:
            out["method"] = "shifted"
        return out
    if ci is None:
        return None
    return {"level": ci, "interval": None, "why": reading.why_no_interval()}
