"""Which question a score answers: the model's training windows, or the corpus distribution.

* ``population="training"``: the statistics are the model's own training windows. The score is the
  exact answer to "does the weight equal the leading term of *its training data*?": ``ci=`` adds no
  interval and no bias-corrected estimate, and says why in one line.
* ``population="distribution"``: the statistics are another sample of the same distribution
  (held-out windows, or a corpus like the training one, as OpenWebText for Pythia). The score
  estimates the *distribution-level* cosine, the one with the statistics of the whole distribution;
  ``ci=`` gives the bootstrap interval over the sample's blocks around ``corrected``, the estimate
  of that cosine.

``population=None`` (the default) decides from the provenance: the statistics' metadata
carries ``windows_fingerprint`` (an order-free digest of their windows,
:func:`~tl_leadterms.stats.provenance.windows_fingerprint`) and a model trained by
:func:`~tl_leadterms.train` carries the fingerprints of its training windows
(:func:`trained_on`; a plain training loop records them with :func:`record_training`). Equal
fingerprints: ``"training"``; a training record without the statistics' fingerprint:
``"distribution"``; no record: assumed ``"distribution"``, and the metadata says so. Statistics of
part of the training windows are neither: say ``population="training"`` to drop the interval. Why,
and how often a bootstrap of the training windows would cover:
docs/guides/intervals.md#which-question-a-score-answers.

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

from dataclasses import dataclass
from typing import Any, Literal

import torch

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.provenance import windows_fingerprint

__all__ = [
    "POPULATIONS",
    "Population",
    "Reading",
    "record_training",
    "resolve_population",
    "trained_on",
]

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
        population: ``"training"`` (the statistics are the model's training windows: each
            score is exact for them) or ``"distribution"`` (the statistics are a sample of the
            distribution: each score estimates the distribution-level score).
        source: ``"stated"`` (``population=``), ``"fingerprint"`` (the statistics' windows
            compared with the model's training record) or ``"assumed"`` (no record).
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
