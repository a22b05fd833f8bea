"""Plain SGD on next-token cross-entropy, with optional leading-term tracking.

The theory (docs/math.md#leading-terms) is about full-batch gradient descent from zero
initialisation at a constant learning rate; the paper's experiments use mini-batch SGD.
:func:`train` does both and records, every ``every`` steps, the loss and (with ``track=stats``) the
cosine of each weight with its own leading term
(:func:`tl_leadterms.analyses.decompose.leading_cosines`: training sits above the analyzers in the
package's layers)."""

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tl_leadterms.analyses.decompose import leading_cosines
from tl_leadterms.checks import (
    check_bool,
    check_lr,
    check_stats,
    check_steps,
    check_windows,
    positive_int,
)
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.progress import progress_bar
from tl_leadterms.protocols import ReadableModel, TokenWindows
from tl_leadterms.results.table import ResultTable
from tl_leadterms.results.uncertainty import record_training
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.stats.provenance import windows_fingerprint
from tl_leadterms.theory import WEIGHTS, Schedule, ScoreNames, score_name

__all__ = ["TrainHistory", "train"]

# positions per forward chunk when a (mini-)batch is too big for one pass: bounds the [B, T, V]
# logits and the residual stream of the paper model
_CHUNK_ELEMENTS = 2**26


@dataclass
class TrainHistory(ResultTable):
    """What :func:`train` recorded: one entry per logged step.

    Attributes:
        steps: the step after which each record was taken (1-based; step ``s`` has made ``s``
            updates).
        loss: mean cross-entropy of the batch that step ``s`` trained on, before its update.
        cosines: ``{"W_O": [...], "V.0": [...], "W.0": [...], "P.0": [...], ...}``, the cosine of
            each weight with its leading term at each logged step (empty without ``track``);
            the value path is ``V`` on every model (:func:`~tl_leadterms.theory.score_name`;
            ``cosines["V·W_O.0"]`` reads ``cosines["V.0"]``).
        settings: lr, steps, batch size, number of sequences, seed and
            ``windows_fingerprint``, the digest of the windows trained on
            (:func:`~tl_leadterms.stats.provenance.windows_fingerprint`).
        scores: other scores by name (e.g. ``output_explained`` from
            :class:`~tl_leadterms.sweeps.monitor.LeadingTermMonitor`), one value per
            logged step.
    """

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    cosines: dict[str, list[float]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, list[float]] = field(default_factory=dict)

    KEYS = ("step",)
    COLUMNS = ("step", "loss")
    SCORE = "loss"
    GRID = None

    def __post_init__(self) -> None:  # stable names, also for a history saved before them
        self.cosines = ScoreNames({score_name(k): list(v) for k, v in self.cosines.items()})
        self.scores = ScoreNames({score_name(k): list(v) for k, v in self.scores.items()})

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One row per logged step: ``step``, ``loss``, ``cos_<weight>`` per recorded map and
        one column per other score."""
        return [
            {"step": step, "loss": loss,
             **{f"cos_{n}": v[i] for n, v in self.cosines.items() if i < len(v)},
             **{n: v[i] for n, v in self.scores.items() if i < len(v)}}
            for i, (step, loss) in enumerate(zip(self.steps, self.loss, strict=True))
        ]  # fmt: skip

    @property
    def metadata(self) -> dict[str, Any]:
        """The run's settings (lr, steps, batch size, number of sequences, seed)."""
        return self.settings

    @property
    def schedule(self) -> Schedule:
        """The run as the theory sees it (``lr`` and ``steps`` where they were recorded): pass
        the history itself as ``schedule=`` of an analysis."""
        lr, steps = self.settings.get("lr"), self.settings.get("steps")
        return Schedule(lr=lr, steps=None if lr is None else steps)

    def record(
        self,
        step: int,
        loss: float,
        cosines: dict[str, float] | None,
        scores: dict[str, float] | None = None,
    ) -> None:
        self.steps.append(step)
        self.loss.append(loss)
        for name, value in (cosines or {}).items():
            self.cosines.setdefault(score_name(name), []).append(value)
        for name, value in (scores or {}).items():
            self.scores.setdefault(score_name(name), []).append(value)

    def min_cosine(self, weight: str) -> float:
        """Minimum over logged steps and layers of the cosines of ``weight`` (``"W"``, ``"V"``…;
        ``"V"`` and ``"V·W_O"`` both name the value path)."""
        values = [
            v
            for name, vs in self.cosines.items()
            if name.rsplit(".", 1)[0] == score_name(weight)
            for v in vs
            if not math.isnan(v)  # a weight that is still zero has no cosine
        ]
        if not values:
            raise LeadTermsError(
                f"no cosines recorded for {weight!r}; recorded: {sorted(self.cosines)} "
                "(train with track=stats to record them)"
            )
        return min(values)

    def to_dict(self) -> dict[str, Any]:
        return {"steps": list(self.steps), "loss": list(self.loss),
                "cosines": {k: list(v) for k, v in self.cosines.items()},
                "settings": dict(self.settings),
                "scores": {k: list(v) for k, v in self.scores.items()}}  # fmt: skip

    def to_pandas(self):
        """One row per logged step: ``step``, ``loss``, a ``cos_<weight>`` column per weight and
        one column per other score."""
        import pandas as pd

        columns = {"step": self.steps, "loss": self.loss}
        columns.update({f"cos_{name}": values for name, values in self.cosines.items()})
        columns.update(self.scores)
        return pd.DataFrame(columns)

    def __repr__(self) -> str:
        if not self.steps:
            return "TrainHistory(empty)"
        parts = [f"steps {self.steps[0]}..{self.steps[-1]} ({len(self.steps)} logged)",
                 f"loss {self.loss[0]:.4f} -> {self.loss[-1]:.4f}"]  # fmt: skip
        for weight in WEIGHTS:
            values = [v for n, vs in self.cosines.items() if n.rsplit(".", 1)[0] == weight
                      for v in vs]  # fmt: skip
            if any(not math.isnan(v) for v in values):
                parts.append(f"min cos {weight} {self.min_cosine(weight):.6f}")
            elif values:  # W and P are still exactly zero before step 3
                parts.append(f"min cos {weight} -")
        return "TrainHistory(" + "; ".join(parts) + ")"

    def plot(self, **kwargs: Any) -> Any:
        """:func:`~tl_leadterms.training.figure.plot_history` of this history (its keywords)."""
        from tl_leadterms.training.figure import plot_history

        return plot_history(self, **kwargs)


def _loss_and_grad(model, batch: Tensor, chunk: int) -> float:
    """Mean cross-entropy over all positions of ``batch``; accumulates its gradient."""
    n_positions = batch.shape[0] * (batch.shape[1] - 1)
    total = 0.0
    for start in range(0, batch.shape[0], chunk):
        part = batch[start : start + chunk]
        logits = model(part[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), part[:, 1:].flatten(), reduction="sum")
        (loss / n_positions).backward()
        total += float(loss.detach())
    return total / n_positions


def train(
    model: ReadableModel,
    tokens: TokenWindows,
    *,
    lr: float,
    steps: int,
    batch_size: int | None = None,
    track: CorpusStats | None = None,
    every: int = 1,
    seed: int = 0,
    chunk_size: int | None = None,
    progress: bool = True,
    callback: Callable[[int, Any, float], None] | None = None,
) -> TrainHistory:
    """Train ``model`` in place with plain SGD on the mean next-token cross-entropy.

    Args:
        model: the paper model (:func:`tl_leadterms.paper_model`) or any HookedTransformer; every
            parameter with ``requires_grad`` is trained.
        tokens: ``[n_sequences, T + 1]`` token ids; inputs are ``tokens[:, :-1]`` and targets
            ``tokens[:, 1:]``, every position counts (docs/math.md#model).
        lr: constant learning rate ``η`` (finite, > 0).
        steps: number of SGD updates ``s`` (an integer >= 0; 0 records nothing and leaves the
            model as it is).
        batch_size: ``None`` for full-batch gradient descent (the theory); otherwise mini-batches
            of this many sequences drawn without replacement from a fresh permutation each epoch
            (the paper's experiments); when it does not divide ``n_sequences`` the last,
            incomplete batch of each epoch is skipped.
        track: corpus statistics; when given, the cosine of every weight with its leading term
            is recorded at each logged step (see
            :func:`tl_leadterms.analyses.decompose.leading_cosines`).
        every: log every ``every`` steps (and always the last one).
        seed: seed of the mini-batch order.
        chunk_size: sequences per forward pass; a batch larger than this is processed in chunks
            and their gradients summed (same result, bounded memory). Default: sized so the
            logits of a chunk hold at most ``2**26`` floats.
        progress: show a tqdm bar.
        callback: optional ``callback(step, model, loss)`` called at each logged step.

    Returns:
        A :class:`TrainHistory`. The model also records the fingerprint of its training
        windows (:func:`tl_leadterms.results.uncertainty.trained_on`): scores against statistics
        of those very windows are exact, and ``ci=`` adds no interval to them.

    Example:
        >>> import torch
        >>> from tl_leadterms import paper_model, train
        >>> tokens = torch.randint(0, 12, (16, 9), generator=torch.Generator().manual_seed(0))
        >>> model = paper_model(d_vocab=12, n_ctx=8, n_layers=1)
        >>> history = train(model, tokens, lr=0.5, steps=3, progress=False)
        >>> round(history.loss[0], 4) == round(float(torch.log(torch.tensor(12.0))), 4)
        True
    """
    tokens = check_windows(tokens, model.cfg.d_vocab, model.cfg.n_ctx)
    lr, steps = check_lr(lr), check_steps(steps)
    positive_int("every", every)
    check_bool("progress", progress)
    if batch_size is not None:
        positive_int("batch_size", batch_size)
    if chunk_size is not None:
        positive_int("chunk_size", chunk_size)
    if track is not None:
        check_stats(track)
        leading_cosines(model, track)  # validates vocabulary and weights before any update
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise LeadTermsError("the model has no parameters with requires_grad=True to train")

    device = params[0].device
    tokens = tokens.to(device)
    n_seq = tokens.shape[0]
    batch = n_seq if batch_size is None else min(batch_size, n_seq)
    chunk = chunk_size or max(1, _CHUNK_ELEMENTS // ((tokens.shape[1] - 1) * model.cfg.d_vocab))
    optimiser = torch.optim.SGD(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    # recorded before the first step, so a callback's copy of the model keeps it
    fingerprint = record_training(model, tokens) if steps else windows_fingerprint(tokens)
    history = TrainHistory(settings={"lr": lr, "steps": steps, "batch_size": batch_size,
                                     "n_sequences": n_seq, "n_ctx": tokens.shape[1] - 1,
                                     "seed": seed, "every": every,
                                     "windows_fingerprint": fingerprint})  # fmt: skip
    order, cursor = None, n_seq
    bar = progress_bar(range(1, steps + 1), desc="train", disable=not progress)
    for step in bar:
        if batch_size is None:
            batch_tokens = tokens
        else:
            if cursor + batch > n_seq:
                order, cursor = torch.randperm(n_seq, generator=generator).to(device), 0
            batch_tokens = tokens[order[cursor : cursor + batch]]
            cursor += batch
        optimiser.zero_grad(set_to_none=True)
        loss = _loss_and_grad(model, batch_tokens, chunk)
        if not math.isfinite(loss):
            raise LeadTermsError(
                f"the loss became {loss} at step {step}; lower the learning rate (lr={lr})"
            )
        optimiser.step()
        if step % every == 0 or step == steps:
            cosines = None if track is None else leading_cosines(model, track)
            history.record(step, loss, cosines)
            bar.set_postfix(loss=f"{loss:.4f}")
            if callback is not None:
                callback(step, model, loss)
    return history
