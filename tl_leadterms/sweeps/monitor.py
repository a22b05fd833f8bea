"""`LeadingTermMonitor`: watch a training run leave the leading-term regime.

One object, three ways in:

* a plain PyTorch loop: ``monitor(model, step, loss)`` after each optimiser step;
* :func:`tl_leadterms.train`: ``train(..., callback=monitor.train_callback)``;
* a Hugging Face ``transformers.Trainer``: ``Trainer(..., callbacks=[monitor.trainer_callback()])``.

Every ``every`` steps it scores the model with the chosen ``analyses`` (``"cosines"``,
``"output"``, ``"covariance"``) into :attr:`history` and flags the first step that leaves the
regime in :attr:`flags`, the theorem's step bound beside it
(docs/guides/next-token.md#a-monitor-for-any-training-run).
"""

import contextlib
import math
import random
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tl_leadterms.checks import check_choice, check_lr, check_stats, positive_int
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.loading.checkpoint import load_model, quiet_transformers
from tl_leadterms.protocols import TokenWindows
from tl_leadterms.registry import MonitorContext, analysis, monitored
from tl_leadterms.results.null import NullSpec
from tl_leadterms.results.uncertainty import Uncertainty
from tl_leadterms.signals import Terminated, terminate_as_interrupt
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import Schedule, step_bound
from tl_leadterms.training import TrainHistory

__all__ = ["ANALYSES", "LeadingTermMonitor"]

#: the monitor's names of the analyses it can score (the registry's, :mod:`tl_leadterms.registry`)
ANALYSES = tuple(monitored())


@contextlib.contextmanager
def _rng_kept():
    """Every global random state (Python's, numpy's, torch's on the CPU and each GPU) as it was
    before: scoring (a model built from a Hugging Face one, a forward pass) draws nothing from
    the run's streams; the analyses' own draws use seeded generators."""
    python, numpy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(range(torch.cuda.device_count())):
        try:
            yield
        finally:
            random.setstate(python)
            np.random.set_state(numpy)


class LeadingTermMonitor:
    """Scores a model every ``every`` steps and flags the first step outside the regime.

    Args:
        stats: corpus statistics over the model's vocabulary (of the training corpus).
        every: score every ``every`` steps (steps not divisible by it are skipped cheaply).
        analyses: names from :data:`ANALYSES` (default ``("cosines",)``).
        tokens: held-out input windows ``[n, T]`` for ``"output"``.
        lr: the constant learning rate, if known: exact coefficients for ``"output"`` and the
            step bound beside each flag.
        min_cosine, min_explained: the thresholds of the regime.
        covariance_kwargs: extra keywords for :func:`~tl_leadterms.covariance_similarity`.
        null: permutations of a null for every scored analysis (shorthand for
            ``uncertainty.null``): ``"cosines"`` then also records ``excess_{weight}``, each
            cosine's excess over its null; ``"output"`` and ``"covariance"`` compute theirs.
        uncertainty: the whole :class:`~tl_leadterms.results.uncertainty.Uncertainty` the
            scored analyses are given.

    It scores in eval mode and leaves every random state as it found them: a seeded run is
    bit-for-bit the same without it. One monitor watches one run (a step at or before the last
    recorded one is refused). A NaN or inf weight stops the run, whatever the analyses, with
    one line naming the step and the weight (docs/guides/reliability.md).

    Example:
        >>> import torch
        >>> from tl_leadterms import corpus_stats, paper_model, train
        >>> from tl_leadterms.sweeps.monitor import LeadingTermMonitor
        >>> tokens = torch.randint(0, 12, (32, 9), generator=torch.Generator().manual_seed(0))
        >>> stats = corpus_stats(tokens, d_vocab=12, progress=False)
        >>> monitor = LeadingTermMonitor(stats, every=2, lr=0.5)
        >>> model = paper_model(d_vocab=12, n_ctx=8, n_layers=1)
        >>> _ = train(model, tokens, lr=0.5, steps=4, progress=False,
        ...           callback=monitor.train_callback)
        >>> monitor.history.steps, monitor.flags
        ([2, 4], [])
    """

    def __init__(
        self,
        stats: CorpusStats,
        *,
        every: int = 8,
        analyses: str | Sequence[str] = ("cosines",),
        tokens: TokenWindows | None = None,
        lr: float | None = None,
        min_cosine: float = 0.9,
        min_explained: float = 0.9,
        covariance_kwargs: dict | None = None,
        null: int | NullSpec | None = None,
        uncertainty: Uncertainty | None = None,
    ) -> None:
        self.stats = check_stats(stats)
        self.every = positive_int("every", every)
        analyses = (analyses,) if isinstance(analyses, str) else tuple(analyses)
        if not analyses:
            raise LeadTermsError(f"analyses must name at least one of {list(ANALYSES)}")
        self.analyses = tuple(check_choice("analysis", a, ANALYSES) for a in analyses)
        for name in self.analyses:
            if analysis(monitored()[name]).needs_tokens and tokens is None:
                raise LeadTermsError(
                    f"the {name!r} analysis needs tokens= (held-out windows [n, T])"
                )
        self.tokens = tokens
        self.lr = None if lr is None else check_lr(lr)
        self.min_cosine, self.min_explained = float(min_cosine), float(min_explained)
        self.covariance_kwargs = dict(covariance_kwargs or {})
        self.uncertainty = Uncertainty.of(uncertainty, null=null)
        self.history = TrainHistory(settings={"every": self.every, "analyses": list(analyses),
                                              "lr": self.lr})  # fmt: skip
        self.flags: list[dict[str, Any]] = []
        self.seconds, self.calls = 0.0, 0

    # -- the three ways in ----------------------------------------------------------------
    def __call__(self, model: Any, step: int, loss: float | None = None) -> dict | None:
        """Score ``model`` after ``step`` updates (None when ``step`` is not a multiple of
        ``every``); returns the scores recorded."""
        if self.history.steps and step <= self.history.steps[-1]:
            raise LeadTermsError(
                f"this LeadingTermMonitor has recorded step {self.history.steps[-1]}, so step "
                f"{step} is another run: give each run a new LeadingTermMonitor"
            )
        if step % self.every:
            return None
        start = time.perf_counter()
        if "n_layers" not in self.history.settings:
            self.watch(model)
        was_training = getattr(model, "training", False)
        try:
            with _rng_kept():
                scores = self.score(model.eval() if was_training else model, step)
        except LeadTermsError as err:
            raise LeadTermsError(f"LeadingTermMonitor at step {step}: {err}") from err
        finally:
            if was_training:
                model.train()
        self._record(step, math.nan if loss is None else float(loss), scores)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return scores

    def train_callback(self, step: int, model: Any, loss: float) -> None:
        """The ``callback(step, model, loss)`` that :func:`tl_leadterms.train` calls."""
        self(model, step, loss)

    def trainer_callback(self):
        """A ``transformers.TrainerCallback`` that scores the Trainer's model."""
        from tl_leadterms.sweeps.monitor_trainer import trainer_callback

        return trainer_callback(self)

    # -- scoring --------------------------------------------------------------------------
    @torch.no_grad()
    def score(self, model: Any, step: int) -> dict[str, float]:
        """The chosen analyses of ``model`` at ``step``, as flat ``name -> value``."""
        lens = model if hasattr(model, "cfg") else _as_lens(model)
        out: dict[str, float] = {}
        for name, registered in monitored().items():  # in the registry's order
            if name in self.analyses:
                options = self.covariance_kwargs if name == "covariance" else {}
                run = Schedule(lr=self.lr, steps=None if self.lr is None else step)
                context = MonitorContext(
                    step=step,
                    schedule=run,
                    tokens=self.tokens,
                    options=options,
                    uncertainty=self.uncertainty,
                )
                out.update(analysis(registered).monitor_scores(lens, self.stats, context))
        return out

    def _record(self, step: int, loss: float, scores: dict[str, float]) -> None:
        cosines = {k[4:]: v for k, v in scores.items() if k.startswith("cos_")}
        others = {k: v for k, v in scores.items() if not k.startswith("cos_")}
        self.history.record(step, loss, cosines, others)
        for name, value, threshold in self._checks(scores):
            if any(f["score"] == name for f in self.flags) or not value < threshold:
                continue
            self.flags.append({"step": step, "score": name, "value": value,
                               "threshold": threshold, "step_bound": self.step_bound})  # fmt: skip

    def _checks(self, scores: dict[str, float]):
        cosines = [v for k, v in scores.items() if k.startswith("cos_") and not math.isnan(v)]
        if cosines:
            yield "cosine", min(cosines), self.min_cosine
        if "output_explained" in scores:
            yield "output_explained", scores["output_explained"], self.min_explained

    @property
    def step_bound(self) -> float:
        """The theorem's largest step count for this run (NaN without ``lr``)."""
        if self.lr is None:
            return math.nan
        n_layers = self.history.settings.get("n_layers", 1)
        return step_bound(lr=self.lr, n_layers=n_layers, n_ctx=self.stats.n_ctx)

    def first_flag(self, score: str | None = None) -> dict[str, Any] | None:
        """The first flag (of ``score``: ``"cosine"`` or ``"output_explained"``), or None."""
        return next((f for f in self.flags if score is None or f["score"] == score), None)

    def __repr__(self) -> str:
        flags = "; ".join(
            f"{f['score']} {f['value']:.4f} < {f['threshold']} at step {f['step']} (step bound "
            f"{f['step_bound']:.3g})"
            for f in self.flags
        )
        per_call = self.seconds / self.calls if self.calls else math.nan
        return (f"LeadingTermMonitor(every={self.every}, analyses={list(self.analyses)}, "
                f"{self.calls} calls, {per_call:.3g} s each; "
                + (f"left the regime: {flags})" if flags else "still in the regime)"))  # fmt: skip

    def watch(self, model: Any) -> "LeadingTermMonitor":
        """Record the model's depth for the step bound (called by the three ways in)."""
        cfg = getattr(model, "cfg", None) or getattr(model, "config", None)
        n_layers = getattr(cfg, "n_layers", None) or getattr(cfg, "num_hidden_layers", None)
        if n_layers:
            self.history.settings["n_layers"] = int(n_layers)
        return self


def _as_lens(hf_model: Any) -> Any:
    """A Hugging Face model as the TransformerLens model :func:`load_model` reads from disk,
    through a temporary copy that SIGTERM does not leave behind: the copy is removed, then the
    signal goes to the handler the process had (by default, it ends the process)."""
    try:
        with (
            terminate_as_interrupt(),
            quiet_transformers(),
            tempfile.TemporaryDirectory(prefix="tl_leadterms_monitor_") as folder,
        ):
            hf_model.save_pretrained(folder, safe_serialization=True)
            return load_model(Path(folder), device=str(next(hf_model.parameters()).device))
    except Terminated:
        signal.raise_signal(signal.SIGTERM)
        raise
