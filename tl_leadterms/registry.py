"""The one registry of analyses: sweeps, the monitor, the report and the CLI all read it.

Each line of :data:`ANALYSES` declares one analysis (:class:`Analysis`: its name, function,
result class, and the hooks its sub-package of :mod:`tl_leadterms.analyses` exports for a
sweep, the monitor and the report). Adding an analysis is one new sub-package and one line here.
Reading the registry imports nothing heavy: a sub-package is imported when first used.

>>> analysis("decompose").result_class().__name__
'Decomposition'
>>> sweepable()
('decompose', 'output', 'covariance')
>>> monitored()
{'cosines': 'decompose', 'output': 'output', 'covariance': 'covariance'}
"""

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tl_leadterms.errors import LeadTermsError

__all__ = ["ANALYSES", "NAMES", "Analysis", "MonitorContext", "analysis", "monitored", "sweepable"]


@dataclass(frozen=True)
class MonitorContext:
    """What the training monitor knows when it scores a model: the step, the run so far (a
    ``Schedule`` of the learning rate and this step; an empty one when the rate is unknown),
    held-out windows (for analyses that need them), the keywords the user gave this analysis
    and how sure its numbers should be (an ``Uncertainty``)."""

    step: int
    schedule: Any
    tokens: Any
    options: dict[str, Any]
    uncertainty: Any = None


@dataclass(frozen=True)
class Analysis:
    """One analysis, as sweeps, the monitor, the report and the CLI see it.

    Args:
        name: its name everywhere (``sweep(analyses=[...])``, ``--analyses``), and the name of
            its sub-package ``tl_leadterms.analyses.<name>``.
        summary: one line for help texts.
        function: the name of the analysis function the sub-package exports,
            ``function(model, stats, **options)``.
        result: the name of the result class it returns.
        sweep: a sweep can run it by name (the sub-package exports ``sweep_rows``).
        monitor: the name the training monitor knows it by (the sub-package exports
            ``monitor_scores(model, stats, context)``, a flat ``{name: value}`` of one training
            step); None: not monitored.
        needs_tokens: it reads held-out windows (``tokens=``) besides the statistics.
        report: the id of the report section its package renders from its result
            (``report_section(result)``, a :class:`~tl_leadterms.results.sections.Section` with
            the findings it writes about it); None: none.
    """

    name: str
    summary: str
    function: str
    result: str
    sweep: bool = False
    monitor: str | None = None
    needs_tokens: bool = False
    report: str | None = None

    def package(self) -> ModuleType:
        """Its sub-package, imported on first use."""
        return importlib.import_module(f"tl_leadterms.analyses.{self.name}")

    def load(self) -> Callable[..., Any]:
        """The analysis function."""
        return getattr(self.package(), self.function)

    def result_class(self) -> type:
        """The class of what :meth:`load` returns."""
        return getattr(self.package(), self.result)

    def accepts(self) -> set[str]:
        """The keywords the function takes besides the model and the statistics (the plain
        shorthands of :func:`~tl_leadterms.results.uncertainty.shorthands` included)."""
        fn = self.load()
        names = set(inspect.signature(inspect.unwrap(fn)).parameters)
        return (names | set(getattr(fn, "shorthands", ()))) - {"model", "stats"}

    def sweep_rows(self, model: Any, stats: Any, **options: Any) -> list[dict[str, Any]]:
        """The rows a sweep records for one checkpoint (``sweep=True`` analyses only)."""
        if not self.sweep:
            raise LeadTermsError(f"the {self.name!r} analysis does not run in a sweep by name")
        return self.package().sweep_rows(model, stats, **options)

    def monitor_scores(self, model: Any, stats: Any, context: MonitorContext) -> dict[str, float]:
        """Flat scores of one training step (analyses with a ``monitor`` name only)."""
        if self.monitor is None:
            raise LeadTermsError(f"the {self.name!r} analysis is not watched by the monitor")
        return self.package().monitor_scores(model, stats, context)

    def report_section(self, result: Any) -> Any:
        """``result``'s section of a report (analyses with a ``report`` name only)."""
        if self.report is None:
            raise LeadTermsError(f"the {self.name!r} analysis has no report section")
        return self.package().report_section(result)


#: every analysis, one line each, in the order tables and menus list them
ANALYSES = (
    Analysis("decompose", "each weight against its leading term (bigram, interchangeability, "
             "context)", "decompose", "Decomposition", sweep=True, monitor="cosines",
             report="decompose"),
    Analysis("attention", "a model's attention on real text against the predicted attention",
             "attention_agreement", "AttentionAgreement", report="attention"),
    Analysis("output", "next-token agreement of the leading-term model with the model's own",
             "output_agreement", "OutputAgreement", sweep=True, monitor="output",
             needs_tokens=True, report="output"),
    Analysis("covariance", "the paper's covariance protocol (its Pythia experiment)",
             "covariance_similarity", "CovarianceSimilarity", sweep=True, monitor="covariance",
             report="covariance"),
    Analysis("atlas", "one row per attention head: what the theory and TransformerLens say of "
             "it", "head_atlas", "HeadAtlas", report="atlas"),
    Analysis("ablation", "remove a weight's projection onto its leading term (Table 3)",
             "ablate", "AblationTable", report="ablation"),
)  # fmt: skip
_BY_NAME = {a.name: a for a in ANALYSES}
#: their names, in the same order
NAMES = tuple(_BY_NAME)


def analysis(name: str) -> Analysis:
    """The analysis called ``name``; an unknown name is refused, naming the known ones."""
    if name not in _BY_NAME:
        raise LeadTermsError(f"unknown analysis {name!r}; the analyses are {list(_BY_NAME)}")
    return _BY_NAME[name]


def sweepable(*, tokens: bool = True) -> tuple[str, ...]:
    """The names a sweep runs by name (without ``tokens``: those that need no held-out windows)."""
    return tuple(a.name for a in ANALYSES if a.sweep and (tokens or not a.needs_tokens))


def monitored() -> dict[str, str]:
    """The training monitor's names, each with the analysis it scores."""
    return {a.monitor: a.name for a in ANALYSES if a.monitor is not None}
