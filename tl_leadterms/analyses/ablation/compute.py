"""Causal test (the paper's Table 3): remove a weight's projection onto its leading term."""

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from tl_leadterms.adapters.convert import weights_for_stats
from tl_leadterms.adapters.support import check_supported
from tl_leadterms.analyses.decompose import leading_map
from tl_leadterms.checks import Layers, check_bool, check_layers, check_windows, positive_int
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.models.paper import PaperModel
from tl_leadterms.progress import progress_bar
from tl_leadterms.protocols import ReadableModel, TokenWindows
from tl_leadterms.results.style import number
from tl_leadterms.results.table import ResultTable
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import Term, Weight, term

__all__ = ["AblationTable", "ablate", "evaluate_loss"]


class AblationTable(ResultTable):
    """Loss after removing each weight's leading-term projection (one row per weight, layer).

    Row fields: ``weight``, ``layer``, ``removed_fraction``, ``loss`` (and any other column of
    the ablation); ``original_loss`` is the loss before any removal.
    """

    KEYS = ("weight", "layer")
    COLUMNS = ("weight", "layer", "removed_fraction", "loss")
    SCORE = "removed_fraction"
    SCORE_RANGE = (0.0, 1.0)
    GRID = None

    def __init__(self, original_loss: float, rows: list[dict[str, Any]] | None = None) -> None:
        super().__init__(rows if rows is not None else [], {"original_loss": original_loss})
        self.original_loss = original_loss

    def loss(self, weight: str, layer: int | None = None) -> float:
        found = self.select(weight, layer)
        if not found:
            raise LeadTermsError(f"no ablation row for weight={weight!r}, layer={layer!r}")
        return found[0]["loss"]

    def to_dict(self) -> dict[str, Any]:
        return {"original_loss": self.original_loss, "rows": [dict(r) for r in self.rows]}

    def title(self) -> str:
        return f"Ablation (original loss {number(self.original_loss, 5)})"

    def plot(self, **kwargs: Any) -> Any:
        """:func:`~tl_leadterms.analyses.ablation.figure.plot_ablation` of this table (its
        keywords)."""
        from tl_leadterms.analyses.ablation.figure import plot_ablation

        return plot_ablation(self, **kwargs)


@torch.no_grad()
def evaluate_loss(
    model: ReadableModel, tokens: TokenWindows, *, batch_size: int | None = None
) -> float:
    """Mean next-token cross-entropy of ``model`` over all positions of ``tokens``.

    Args:
        model: the model to evaluate.
        tokens: token windows ``[N, T + 1]``.
        batch_size: windows per forward pass (default 64).
    """
    view = check_supported(model, caller="evaluate_loss")
    batch_size = positive_int("batch_size", 64 if batch_size is None else batch_size)
    tokens = check_windows(tokens, view.d_vocab, view.n_ctx).to(view.device)
    total, count = 0.0, 0
    for start in range(0, tokens.shape[0], batch_size):
        part = tokens[start : start + batch_size]
        logits = view.run(part[:, :-1])
        total += float(
            F.cross_entropy(logits.flatten(0, 1), part[:, 1:].flatten(), reduction="sum")
        )
        count += part[:, 1:].numel()
    return total / count


# the weights of the theorem that are parameters of the paper model (V·W_O is a product)
_PARAMETERS = ("W_O", "V", "W", "P")


def _parameter(model: PaperModel, weight: str, layer: int | None) -> torch.Tensor:
    if weight == "W_O":
        return model.unembed.W_U
    attn = model.blocks[layer].attn
    return {"V": attn.W_V[0], "W": attn.W_Q[0], "P": attn.P}[weight]


def _embedded_target(stats: CorpusStats, t: Term, like: torch.Tensor) -> torch.Tensor:
    """The leading term as a full-vocabulary tensor shaped like the parameter (0 off ``kept``)."""
    T = leading_map(stats, t.weight).to(like.device, like.dtype)
    if t.vector:
        out = torch.zeros_like(like)
        n = min(like.shape[0], T.shape[0])
        out[:n] = T[:n]
        return out
    if stats.kept is None:
        return T
    out = torch.zeros_like(like)
    kept = stats.kept.to(like.device)
    out[kept[:, None], kept[None, :]] = T
    return out


def _fraction(removed: torch.Tensor, saved: torch.Tensor, stats: CorpusStats, weight: str) -> float:
    """``‖removed‖² / ‖M‖²`` over the tokens the statistics keep (as ``decompose`` measures)."""
    if stats.kept is not None and weight != "P":
        kept = stats.kept.to(saved.device)
        saved = saved[kept][:, kept]
    total = float((saved.double() ** 2).sum())
    return float((removed.double() ** 2).sum()) / total if total > 0 else 0.0


@torch.no_grad()
def ablate(
    model: PaperModel,
    stats: CorpusStats,
    tokens: TokenWindows,
    *,
    weights: Weight | Sequence[Weight] = ("W_O", "V", "W"),
    layers: Layers = None,
    batch_size: int | None = None,
    progress: bool = True,
) -> AblationTable:
    """Remove each weight's projection onto its leading term, one at a time, and re-measure loss.

    ``M ← M − (⟨M, T⟩/‖T‖²)·T`` with ``T`` the weight's leading term (docs/math.md#agreement, paper
    Table 3); the model is restored after each measurement. The weights must be parameters of the
    model, so this runs on the paper model (:func:`tl_leadterms.paper_model`); for other models use
    :func:`tl_leadterms.decompose`, whose maps are products of several parameters.

    Args:
        model: a trained paper model.
        stats: its corpus statistics.
        tokens: ``[N, T+1]`` evaluation windows.
        weights: which of ``"W_O"``, ``"V"``, ``"W"``, ``"P"``.
        layers: which layers (default all).
        batch_size: windows per forward pass (default 64).
        progress: show a tqdm bar.
    """
    if not isinstance(model, PaperModel):
        raise LeadTermsError(
            f"ablate edits the paper's parameters in place, so it needs the paper model "
            f"(tl_leadterms.paper_model), got {type(model).__name__}; decompose() analyses "
            "other models"
        )
    batch_size = positive_int("batch_size", 64 if batch_size is None else batch_size)
    check_bool("progress", progress)
    pw = weights_for_stats(model, stats)
    chosen = check_layers(layers, pw.n_layers)
    if isinstance(weights, str):
        weights = (weights,)
    if not weights or any(w not in _PARAMETERS for w in weights):
        raise LeadTermsError(
            f"weights must be a non-empty list of {', '.join(_PARAMETERS)} (the paper model's "
            f"parameters), got {weights!r}"
        )
    table = AblationTable(original_loss=evaluate_loss(model, tokens, batch_size=batch_size))
    jobs = [(w, layer) for w in weights for layer in ([None] if w == "W_O" else chosen)]
    for weight, layer in progress_bar(jobs, desc="ablate", disable=not progress):
        param = _parameter(model, weight, layer)
        T = _embedded_target(stats, term(weight), param)
        coefficient = float((param.double() * T.double()).sum() / (T.double() ** 2).sum())
        saved = param.detach().clone()
        removed = coefficient * T
        param.sub_(removed)
        try:
            loss = evaluate_loss(model, tokens, batch_size=batch_size)
        finally:
            param.copy_(saved)
        fraction = _fraction(removed, saved, stats, weight)
        row = {"weight": weight, "layer": layer, "coefficient": coefficient}
        table.rows.append(row | {"removed_fraction": fraction, "loss": loss})
    return table
